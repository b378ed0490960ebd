"""The ContractHarness for Slack, shared by the contract and fault tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from backchannel.model import Address
from backchannel.testing import ContractHarness
from backchannel_slack import SlackAdapter
from backchannel_slack.testing import FakeSlack

CHANNEL = "C0GENERAL"


class SlackHarness(ContractHarness):
    """Delivers through FakeSlack (Socket Mode or Events API) to a started SlackAdapter."""

    def __init__(self, adapter: SlackAdapter, fake: FakeSlack, account: str = "test"):
        self.adapter = adapter
        self.fake = fake
        self.address = Address(account, CHANNEL)
        #: normalized event_id -> Slack's envelope event_id
        self.envelope_ids: dict[str, str] = {}

    async def deliver_user_message(self, text: str) -> str:
        payload = self.fake.message(CHANNEL, "U0ALICE", text)
        event = self.adapter.normalize(payload)
        assert event is not None
        self.envelope_ids[event.event_id] = payload["event_id"]
        await self.fake.deliver(payload)
        return event.event_id

    async def deliver_again(self, event_id: str) -> None:
        await self.fake.redeliver(self.envelope_ids[event_id])

    def is_acked(self, event_id: str) -> bool:
        return self.fake.is_acked(self.envelope_ids[event_id])

    async def wait_acked(self, event_id: str, timeout: float = 10.0) -> None:
        await self.fake.wait_acked(self.envelope_ids[event_id], timeout)

    def user_message_payload(self, text: str) -> Mapping[str, Any]:
        return self.fake.message(CHANNEL, "U0ALICE", text)

    def own_message_payload(self, text: str) -> Mapping[str, Any]:
        return self.fake.own_message(CHANNEL, text)

    def thread_message_payload(self, text: str) -> Mapping[str, Any]:
        # a reply in the thread of a channel message: thread_ts is the thread's first ts
        started = self.fake.message(CHANNEL, "U0ALICE", "the thread starts here")
        thread_ts = started["event"]["ts"]
        return self.fake.message(CHANNEL, "U0ALICE", text, thread_ts=thread_ts)

    def unnamed_sender_payloads(self) -> Sequence[Mapping[str, Any]]:
        # message_deleted of a message Slack no longer describes (no previous_message)
        event = {
            "type": "message",
            "subtype": "message_deleted",
            "channel": CHANNEL,
            "deleted_ts": "1700000001.000100",
            "ts": "1700000002.000200",
            "event_ts": "1700000002.000200",
            "hidden": True,
        }
        return [self.fake.event_callback(event)]

    def malformed_payloads(self) -> Sequence[Mapping[str, Any]]:
        good = self.fake.message(CHANNEL, "U0ALICE", "x")
        no_channel = dict(good["event"])
        del no_channel["channel"]
        bad_ts = {**good["event"], "ts": "yesterday"}
        nobody = {k: v for k, v in good["event"].items() if k != "user"}
        files = {**good["event"], "files": "F0123"}
        changed = {"type": "message", "subtype": "message_changed", "channel": CHANNEL}
        return [
            {"type": "event_callback", "event_id": "Ev1"},
            {"type": "event_callback", "event": "hello"},
            self.fake.event_callback(no_channel),
            self.fake.event_callback(bad_ts),
            self.fake.event_callback(nobody),
            self.fake.event_callback(files),
            self.fake.event_callback(changed),
            {"event": good["event"]},
        ]

    def sent_texts(self) -> list[str]:
        return [post["text"] for post in self.fake.posts if post["channel"] == CHANNEL]

    def fail_next_send(self, fault: str, retry_after: float = 2.0) -> None:
        kinds = {"rate_limited": "rate_limited", "timeout": "hang", "rejected": "error"}
        self.fake.fail_next("chat.postMessage", kinds[fault], retry_after=retry_after)

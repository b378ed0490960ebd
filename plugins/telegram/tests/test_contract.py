"""The adapter conformance suite against FakeTelegram, in polling and in webhook mode."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from backchannel.adapter import RouteTable
from backchannel.model import Address
from backchannel.testing import AdapterContract, ContractContext, ContractHarness
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.testing import FakeTelegram, event_id_of, update_id_of


class TelegramHarness(ContractHarness):
    def __init__(self, adapter: TelegramAdapter, fake: FakeTelegram):
        self.adapter = adapter
        self.fake = fake
        self.alice = fake.user("Alice", "Liddell", username="alice")
        self.chat = fake.private_chat(self.alice)
        self.address = Address(adapter.account, str(self.chat["id"]))
        #: a supergroup with topics, for thread_message_payload
        self.forum = fake.supergroup("Ops", forum=True)

    async def deliver_user_message(self, text: str) -> str:
        return event_id_of(self.fake.inject_message(self.chat, self.alice, text))

    # the fake acks and redelivers by update_id: the part of the event id before ':'
    async def deliver_again(self, event_id: str) -> None:
        self.fake.deliver_again(update_id_of(event_id))

    def is_acked(self, event_id: str) -> bool:
        return self.fake.is_acked(update_id_of(event_id))

    async def wait_acked(self, event_id: str, timeout: float = 10.0) -> None:
        await self.fake.wait_for(lambda: self.is_acked(event_id), timeout, f"ack of {event_id}")

    def user_message_payload(self, text: str) -> Mapping[str, Any]:
        return {
            "update_id": 900_000_001,
            "message": {
                "message_id": 77,
                "from": dict(self.alice),
                "chat": dict(self.chat),
                "date": 1_760_000_000,
                "text": text,
            },
        }

    def own_message_payload(self, text: str) -> Mapping[str, Any]:
        payload = self.user_message_payload(text)
        payload["message"]["from"] = dict(self.fake.bot)
        return payload

    def thread_message_payload(self, text: str) -> Mapping[str, Any]:
        # a message in a forum topic: the topic is message_thread_id, the forum the chat
        payload = self.user_message_payload(text)
        payload["message"].update(
            {"chat": dict(self.forum), "message_thread_id": 42, "is_topic_message": True}
        )
        return payload

    @property
    def thread_parent(self) -> str:
        return str(self.forum["id"])

    def unnamed_sender_payloads(self) -> Sequence[Mapping[str, Any]]:
        # an unsigned channel post with no sender_chat: nothing names who wrote it
        channel = {"id": -1001999000001, "type": "channel", "title": "News"}
        post = {"message_id": 5, "chat": channel, "date": 1_760_000_000, "text": "news"}
        return [{"update_id": 900_000_002, "channel_post": post}]

    def malformed_payloads(self) -> Sequence[Mapping[str, Any]]:
        good = self.user_message_payload("x")["message"]
        return [
            {"message": good},  # no update_id
            {"update_id": "twelve", "message": good},  # update_id not a number
            {"update_id": 12.5, "message": good},  # update_id not an integer
            {"update_id": 5, "message": "hello"},  # message not an object
            {"update_id": 6, "message": {**good, "chat": {"type": "private"}}},  # chat without id
            {"update_id": 7, "message": {k: v for k, v in good.items() if k != "date"}},
        ]

    def sent_texts(self) -> list[str]:
        return self.fake.sent_texts(self.chat)

    def fail_next_send(self, fault: str, retry_after: float = 2.0) -> None:
        kind = {"rate_limited": "429", "timeout": "hang_after", "rejected": "forbidden"}[fault]
        self.fake.fail_next("sendMessage", kind, retry_after=retry_after)


class TestPollingContract(AdapterContract):
    @pytest.fixture
    async def harness(
        self, fake: FakeTelegram, contract_context: ContractContext
    ) -> AsyncIterator[TelegramHarness]:
        adapter = TelegramAdapter(contract_context.account, fake.settings(request_timeout=1.5))
        harness = TelegramHarness(adapter, fake)
        await adapter.start(contract_context.bind(adapter))
        yield harness
        await adapter.stop()


class TestWebhookContract(AdapterContract):
    @pytest.fixture
    async def harness(
        self, fake: FakeTelegram, contract_context: ContractContext, routes: RouteTable
    ) -> AsyncIterator[TelegramHarness]:
        contract_context.routes = routes
        adapter = TelegramAdapter(
            contract_context.account, fake.settings(mode="webhook", request_timeout=1.5)
        )
        harness = TelegramHarness(adapter, fake)
        await adapter.start(contract_context.bind(adapter))
        yield harness
        await adapter.stop()

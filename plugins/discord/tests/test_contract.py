"""The adapter conformance suite against FakeDiscord, through discord.py's real HTTP and Gateway code."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from backchannel.model import Address
from backchannel.testing import AdapterContract, ContractContext, ContractHarness
from backchannel_discord import DiscordAdapter
from backchannel_discord.normalize import CONTEXT_KEY
from backchannel_discord.testing import FakeDiscord

from .conftest import FAST


class DiscordHarness(ContractHarness):
    """Discord has no per-event ack: "acked" means the adapter saw the store commit the event."""

    adapter: DiscordAdapter

    def __init__(self, adapter: DiscordAdapter, fake: FakeDiscord):
        self.adapter = adapter
        self.fake = fake
        self.address = Address(adapter.account, fake.general)

    async def deliver_user_message(self, text: str) -> str:
        message = await self.fake.post_message(self.fake.general, self.fake.alice, text)
        return str(message["id"])

    async def deliver_again(self, event_id: str) -> None:
        await self.fake.redeliver(event_id)

    def is_acked(self, event_id: str) -> bool:
        return self.adapter.is_committed(event_id)

    def user_message_payload(self, text: str) -> Mapping[str, Any]:
        data = self.fake.message_payload(self.fake.general, self.fake.alice, text)
        return {"op": 0, "t": "MESSAGE_CREATE", "s": 7, "d": data}

    def own_message_payload(self, text: str) -> Mapping[str, Any]:
        data = self.fake.message_payload(self.fake.general, self.fake.bot_id, text)
        return {"op": 0, "t": "MESSAGE_CREATE", "s": 8, "d": data}

    def thread_message_payload(self, text: str) -> Mapping[str, Any]:
        # off the wire a thread message names only the thread; the adapter adds the
        # parent it knows (discord.py's cache or GET /channels/{id}) before ctx.ingest
        thread = self.fake.new_thread(self.fake.general, "release plan")
        data = self.fake.message_payload(thread["id"], self.fake.alice, text)
        context = {"channel_type": thread["type"], "parent_id": self.fake.general}
        return {"op": 0, "t": "MESSAGE_CREATE", "s": 10, "d": data, CONTEXT_KEY: context}

    def unnamed_sender_payloads(self) -> Sequence[Mapping[str, Any]]:
        # MESSAGE_DELETE names the message and channel, never who deleted it
        data = {"id": "1300000000000000099", "channel_id": self.fake.general}
        return [{"op": 0, "t": "MESSAGE_DELETE", "s": 9, "d": data}]

    def malformed_payloads(self) -> Sequence[Mapping[str, Any]]:
        good = self.fake.message_payload(self.fake.general, self.fake.alice, "x")
        no_author = {k: v for k, v in good.items() if k != "author"}
        return [
            {"op": 0, "t": "MESSAGE_CREATE", "s": 1, "d": None},
            {"op": 0, "t": "MESSAGE_CREATE", "s": 2, "d": no_author},
            {"op": 0, "t": "MESSAGE_CREATE", "s": 3, "d": {**good, "channel_id": "general"}},
            {"op": 0, "t": "MESSAGE_CREATE", "s": 4, "d": {**good, "content": 42}},
            {"op": 0, "t": "MESSAGE_DELETE", "s": 5, "d": {"channel_id": good["channel_id"]}},
        ]

    def sent_texts(self) -> list[str]:
        return [m["content"] for m in self.fake.sent_to(self.fake.general)]

    def fail_next_send(self, fault: str, retry_after: float = 2.0) -> None:
        mapped = {"rate_limited": "rate_limited", "timeout": "hang", "rejected": "forbidden"}[fault]
        self.fake.fail_next(mapped, retry_after=retry_after)


class TestDiscordContract(AdapterContract):
    @pytest.fixture
    async def harness(
        self, fake: FakeDiscord, contract_context: ContractContext
    ) -> AsyncIterator[DiscordHarness]:
        adapter = DiscordAdapter(contract_context.account, {**fake.settings, **FAST})
        await adapter.start(contract_context.bind(adapter))
        yield DiscordHarness(adapter, fake)
        await adapter.stop()

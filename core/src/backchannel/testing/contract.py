"""The adapter conformance kit: subclass `AdapterContract`, provide a `harness` fixture.

A plugin's test module::

    class TestTelegramContract(AdapterContract):
        @pytest.fixture
        async def harness(self, contract_context):
            async with FakeTelegram() as fake:
                adapter = TelegramAdapter("tg", {...fake.settings})
                await adapter.start(contract_context.bind(adapter))
                yield TelegramHarness(adapter, fake)
                await adapter.stop()

`contract_context` (from the backchannel pytest plugin) is a `ContractContext`
over a real temporary store. The harness speaks to the plugin's loopback fake
of the platform; every check below runs the adapter's real code path.
"""

from __future__ import annotations

import asyncio

import pytest

from ..errors import NormalizeError, RateLimited, Rejected, Uncertain
from ..model import Event, Outbound, Sender
from .context import ContractContext
from .harness import ContractHarness

__all__ = ["AdapterContract", "ContractHarness"]


class AdapterContract:
    """The standard checks every adapter passes. Subclass and provide a `harness` fixture."""

    async def test_user_message_normalizes_to_event(
        self, harness: ContractHarness, contract_context: ContractContext
    ) -> None:
        event = harness.adapter.normalize(harness.user_message_payload("hello there"))
        assert isinstance(event, Event)
        assert event.kind == "message"
        assert event.text == "hello there"
        assert event.event_id
        assert event.address.account == contract_context.account
        assert not event.sender.is_bot or event.sender.id
        assert not event.sender.is_unknown, "a user message names its sender"

    async def test_a_sender_the_payload_does_not_name_is_the_unknown_sender(
        self, harness: ContractHarness
    ) -> None:
        # one spelling in every channel: not the channel, not the workspace, not "unknown"
        for payload in harness.unnamed_sender_payloads():
            event = harness.adapter.normalize(payload)
            assert isinstance(event, Event), payload
            assert event.sender == Sender.unknown(), event.sender

    async def test_a_thread_is_addressed_under_its_parent_chat(
        self, harness: ContractHarness, contract_context: ContractContext
    ) -> None:
        # one rule in every channel: chat=<the parent>, thread=<the thread id>, kind "thread"
        payload = harness.thread_message_payload("in a thread")
        if payload is None:
            return  # the channel has no threads
        event = harness.adapter.normalize(payload)
        assert isinstance(event, Event)
        assert event.text == "in a thread"
        assert event.conversation_kind == "thread"
        assert event.address.account == contract_context.account
        assert event.address.chat == harness.thread_parent, "chat must be the thread's parent"
        assert event.address.thread, "a thread's id goes in Address.thread"
        assert event.address.thread != event.address.chat

    async def test_own_messages_normalize_to_none(self, harness: ContractHarness) -> None:
        assert harness.adapter.normalize(harness.own_message_payload("my own words")) is None

    async def test_malformed_payloads_raise_normalize_error(self, harness: ContractHarness) -> None:
        payloads = list(harness.malformed_payloads())
        assert payloads, "the harness must offer at least one malformed payload"
        for payload in payloads:
            with pytest.raises(NormalizeError) as caught:
                harness.adapter.normalize(payload)
            assert str(caught.value).strip(), "a NormalizeError must say what is wrong"

    async def test_delivered_message_is_stored(
        self, harness: ContractHarness, contract_context: ContractContext
    ) -> None:
        event_id = await harness.deliver_user_message("first words")
        await contract_context.wait_ingested(event_id)
        conversation = await contract_context.store.find_conversation(
            contract_context.events[-1].address
        )
        assert conversation is not None
        window = await contract_context.store.window(conversation.id, 10)
        assert [m.text for m in window] == ["first words"]

    async def test_redelivery_adds_no_row(
        self, harness: ContractHarness, contract_context: ContractContext
    ) -> None:
        event_id = await harness.deliver_user_message("only once")
        await contract_context.wait_ingested(event_id)
        await harness.wait_acked(event_id)
        rows_before = await contract_context.rows()
        await harness.deliver_again(event_id)
        await contract_context.wait_ingested(event_id, times=2)
        assert contract_context.results[-1].status == "duplicate"
        assert await contract_context.rows() == rows_before

    async def test_ack_happens_only_after_commit(
        self, harness: ContractHarness, contract_context: ContractContext
    ) -> None:
        contract_context.hold()
        event_id = await harness.deliver_user_message("hold on")
        await contract_context.wait_started(event_id)
        # the adapter is inside ingest and the commit is held: nothing may be acked yet
        await asyncio.sleep(0)
        assert not harness.is_acked(event_id), "acked before the event was committed"
        assert not await contract_context.is_known(event_id)
        contract_context.release()
        await harness.wait_acked(event_id)
        assert await contract_context.is_known(event_id)

    async def test_send_returns_receipt_with_platform_id(self, harness: ContractHarness) -> None:
        receipt = await harness.adapter.send(Outbound(harness.address, "a reply"))
        assert receipt.platform_message_id
        assert harness.sent_texts()[-1] == "a reply"

    async def test_rate_limit_becomes_rate_limited(self, harness: ContractHarness) -> None:
        harness.fail_next_send("rate_limited", retry_after=3)
        with pytest.raises(RateLimited) as caught:
            await harness.adapter.send(Outbound(harness.address, "too fast"))
        assert caught.value.retry_after == pytest.approx(3, abs=1)
        assert "too fast" not in harness.sent_texts()

    async def test_timeout_becomes_uncertain(self, harness: ContractHarness) -> None:
        harness.fail_next_send("timeout")
        with pytest.raises(Uncertain):
            await harness.adapter.send(Outbound(harness.address, "into the void"))

    async def test_refusal_becomes_rejected(self, harness: ContractHarness) -> None:
        harness.fail_next_send("rejected")
        with pytest.raises(Rejected) as caught:
            await harness.adapter.send(Outbound(harness.address, "not allowed"))
        assert caught.value.reason

    async def test_long_text_is_split_in_order(self, harness: ContractHarness) -> None:
        limit = harness.adapter.capabilities.max_text_len
        words = [f"w{n:05d}" for n in range(limit // 3)]
        text = " ".join(words)
        assert len(text) > 2 * limit
        before = len(harness.sent_texts())
        receipt = await harness.adapter.send(Outbound(harness.address, text))
        parts = harness.sent_texts()[before:]
        assert len(parts) >= 3
        assert all(len(part) <= limit for part in parts)
        assert " ".join(parts).split() == words
        assert len(receipt.part_ids) == len(parts)

    async def test_stop_is_idempotent(self, harness: ContractHarness) -> None:
        await harness.adapter.stop()
        await harness.adapter.stop()

"""Catch-up after downtime: per-channel cursors committed with the events, history read on READY."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from backchannel.model import Address
from backchannel.testing import ContractContext
from backchannel_discord import DiscordAdapter
from backchannel_discord import adapter as adapter_module
from backchannel_discord.testing import FakeDiscord

from .conftest import FAST


async def test_cursor_is_committed_with_the_message(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    message = await fake.post_message(fake.general, fake.alice, "hello")
    await contract_context.wait_ingested(message["id"])
    cursor = json.loads(await contract_context.get_state(f"discord.cursor.{fake.general}") or "{}")
    assert cursor == {"id": message["id"], "guild_id": fake.guild_id}
    assert json.loads(await contract_context.get_state("discord.channels") or "[]") == [
        fake.general
    ]


async def test_messages_posted_while_stopped_are_caught_up_in_order_on_the_next_start(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    first = DiscordAdapter("test", {**fake.settings, **FAST})
    await first.start(contract_context.bind(first))
    one = await fake.post_message(fake.general, fake.alice, "one")
    await contract_context.wait_ingested(one["id"])
    await first.stop()

    missed = [await fake.post_message(fake.general, fake.alice, t) for t in ("two", "three")]

    second = DiscordAdapter("test", {**fake.settings, **FAST})
    await second.start(contract_context.bind(second))
    try:
        for message in missed:
            await contract_context.wait_ingested(message["id"])
        four = await fake.post_message(fake.general, fake.alice, "four")
        await contract_context.wait_ingested(four["id"])
    finally:
        await second.stop()
    transcript = await contract_context.transcript(Address("test", fake.general))
    assert [m.text for m in transcript] == ["one", "two", "three", "four"]
    caught = next(e for e in contract_context.events if e.event_id == missed[0]["id"])
    assert caught.conversation_kind == "group"  # REST has no guild_id: restored from the cursor
    assert any(
        method == "GET" and path == f"/channels/{fake.general}/messages"
        for method, path, _ in fake.requests
    )


async def test_messages_missed_in_a_thread_are_caught_up_under_its_parent(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    thread = await fake.add_thread(fake.general, "incident 42")
    first = DiscordAdapter("test", {**fake.settings, **FAST})
    await first.start(contract_context.bind(first))
    one = await fake.post_message(thread, fake.alice, "one")
    await contract_context.wait_ingested(one["id"])
    await first.stop()

    missed = await fake.post_message(thread, fake.alice, "while away")

    second = DiscordAdapter("test", {**fake.settings, **FAST})
    await second.start(contract_context.bind(second))
    try:
        await contract_context.wait_ingested(missed["id"])
    finally:
        await second.stop()
    transcript = await contract_context.transcript(Address("test", fake.general, thread))
    assert [m.text for m in transcript] == ["one", "while away"]
    caught = next(e for e in contract_context.events if e.event_id == missed["id"])
    assert caught.conversation_kind == "thread"
    assert await contract_context.transcript(Address("test", thread)) == []


async def test_catch_up_can_be_turned_off(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    first = DiscordAdapter("test", {**fake.settings, **FAST})
    await first.start(contract_context.bind(first))
    one = await fake.post_message(fake.general, fake.alice, "one")
    await contract_context.wait_ingested(one["id"])
    await first.stop()
    await fake.post_message(fake.general, fake.alice, "while away")
    second = DiscordAdapter("test", {**fake.settings, **FAST, "catch_up": False})
    await second.start(contract_context.bind(second))
    try:
        live = await fake.post_message(fake.general, fake.alice, "live")
        await contract_context.wait_ingested(live["id"])
    finally:
        await second.stop()
    transcript = await contract_context.transcript(Address("test", fake.general))
    assert [m.text for m in transcript] == ["one", "live"]


async def test_edits_and_deletions_made_while_stopped_are_applied_on_the_next_start(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    """Discord never dispatches them again to a new session: the catch-up finds them in the
    newest page of history (edited_timestamp set; a stored message gone from it)."""
    first = DiscordAdapter("test", {**fake.settings, **FAST})
    await first.start(contract_context.bind(first))
    said = ("zero", "one", "two", "three")
    sent = [await fake.post_message(fake.general, fake.alice, t) for t in said]
    for message in sent:
        await contract_context.wait_ingested(message["id"])
    # the bot answered last: its own message (no event) is where the cursor stands
    reply = await fake.post_message(fake.general, fake.bot_id, "the bot's answer")
    await fake.wait_until(lambda: first._cursors.covers(fake.general, reply["id"]), 10)
    await first.stop()

    # while no session listens: nothing reaches the bot (no gateway connection)
    edited = fake.messages[sent[1]["id"]]
    edited["content"], edited["edited_timestamp"] = "one, edited", "2026-12-01T10:00:00+00:00"
    fake.remove_message(sent[2]["id"])
    fake.remove_message(sent[0]["id"])  # the oldest of the channel: before every one left
    missed = await fake.post_message(fake.general, fake.alice, "four")

    second = DiscordAdapter("test", {**fake.settings, **FAST})
    await second.start(contract_context.bind(second))
    try:
        await contract_context.wait_ingested(missed["id"])
        await contract_context.wait_ingested(f"{sent[1]['id']}:edit:{edited['edited_timestamp']}")
        await contract_context.wait_ingested(f"{sent[2]['id']}:delete")
        await contract_context.wait_ingested(f"{sent[0]['id']}:delete")
    finally:
        await second.stop()
    transcript = await contract_context.transcript(Address("test", fake.general))
    assert [(m.text, m.deleted_at is not None) for m in transcript] == [
        ("zero", True),
        ("one, edited", False),
        ("two", True),  # kept, marked deleted (as a live MESSAGE_DELETE leaves it)
        ("three", False),
        ("four", False),
    ]
    # one history request for the channel: the newest page held the cursor
    reads = [p for m, p, _ in fake.requests if m == "GET" and p.endswith("/messages")]
    assert reads == [f"/channels/{fake.general}/messages"]


async def test_messages_still_queued_when_stopping_are_stored_not_refused(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    """A graceful stop while received payloads wait behind a slow commit stores them: the
    client is closed only after the drain. Before, it was closed first, so a queued guild
    message found no one to describe its channel, became a dead letter, and the catch-up
    cursor moved past it: lost."""
    import asyncio

    adapter = DiscordAdapter("test", {**fake.settings, **FAST})
    await adapter.start(contract_context.bind(adapter))
    before = await fake.post_message(fake.general, fake.alice, "before")
    await contract_context.wait_ingested(before["id"])
    contract_context.hold()  # the next commit waits: the message after it stays queued
    await fake.post_message(fake.general, fake.alice, "in the commit")
    queued = await fake.post_message(fake.general, fake.alice, "queued")
    for _ in range(3000):  # discord.py hands it over when the Gateway frame is read
        if adapter._inbox.qsize() == 1:
            break
        await asyncio.sleep(0.01)
    assert adapter._inbox.qsize() == 1, "the second message was never queued"
    draining = asyncio.Event()
    join = adapter._inbox.join

    async def drain() -> None:
        draining.set()
        await join()

    adapter._inbox.join = drain  # type: ignore[method-assign]
    stopping = asyncio.create_task(adapter.stop())
    await asyncio.wait_for(draining.wait(), 30)
    contract_context.release()
    await stopping
    assert contract_context.malformed == []
    await contract_context.wait_ingested(queued["id"])
    transcript = await contract_context.transcript(Address("test", fake.general))
    assert [m.text for m in transcript] == ["before", "in the commit", "queued"]


async def test_a_first_dm_reached_while_the_client_closes_is_still_stored(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    """Past the drain (it timed out behind a slow commit), a payload the ingest loop reaches
    while the client closes is skipped only when the next start's catch-up reads it (a
    guild message in a channel with a cursor): a new user's first DM has no cursor, and
    needs no lookup, so it is stored as before."""
    import asyncio

    adapter = DiscordAdapter("test", {**fake.settings, **FAST, "drain_timeout": 0.2})
    await adapter.start(contract_context.bind(adapter))
    before = await fake.post_message(fake.general, fake.alice, "before")
    await contract_context.wait_ingested(before["id"])
    contract_context.hold()  # the next commit waits past the drain's time
    await fake.post_message(fake.general, fake.alice, "in the commit")
    dm = await fake.post_message(fake.dm_channel(fake.alice), fake.alice, "my first DM")
    for _ in range(3000):
        if adapter._inbox.qsize() == 1:
            break
        await asyncio.sleep(0.01)
    assert adapter._inbox.qsize() == 1, "the DM was never queued"
    client = adapter._client
    assert client is not None
    close = client.close

    async def closing() -> None:  # the commit ends while the client closes
        contract_context.release()
        await contract_context.wait_ingested(dm["id"])
        await close()

    client.close = closing  # type: ignore[method-assign]
    await adapter.stop()
    transcript = await contract_context.transcript(Address("test", fake.dm_channel(fake.alice)))
    assert [m.text for m in transcript] == ["my first DM"]


async def test_a_message_the_store_refuses_for_a_while_is_stored_before_the_next(
    fake: FakeDiscord,
    contract_context: ContractContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a store locked (or away) for longer than a few tries: the Gateway sends each event
    # once, and the next message's commit would move the catch-up cursor past this one
    monkeypatch.setattr(adapter_module, "STORE_RETRY_FIRST", 0.01)
    monkeypatch.setattr(adapter_module, "STORE_RETRY_MAX", 0.05)
    real = contract_context.ingest
    failures: list[str] = []

    async def locked(raw: Any, **kwargs: Any) -> Any:
        data = raw.get("d") or {}
        if data.get("content") == "stop the deploy" and len(failures) < 12:
            failures.append(data["id"])
            raise RuntimeError("database is locked")
        return await real(raw, **kwargs)

    monkeypatch.setattr(contract_context, "ingest", locked)
    adapter = DiscordAdapter("test", {**fake.settings, **FAST})
    await adapter.start(contract_context.bind(adapter))
    try:
        first = await fake.post_message(fake.general, fake.alice, "stop the deploy")
        second = await fake.post_message(fake.general, fake.alice, "ok")
        await contract_context.wait_ingested(second["id"])
    finally:
        await adapter.stop()
    assert failures == [first["id"]] * 12
    transcript = await contract_context.transcript(Address("test", fake.general))
    assert [m.text for m in transcript] == ["stop the deploy", "ok"]
    cursor = json.loads(await contract_context.get_state(f"discord.cursor.{fake.general}") or "{}")
    assert cursor["id"] == second["id"]


async def test_stop_gives_up_on_an_event_the_store_keeps_refusing_and_catch_up_reads_it(
    fake: FakeDiscord,
    contract_context: ContractContext,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(adapter_module, "STORE_RETRY_FIRST", 0.01)
    monkeypatch.setattr(adapter_module, "STORE_RETRY_MAX", 0.05)
    real = contract_context.ingest
    tried = asyncio.Event()

    async def away(raw: Any, **kwargs: Any) -> Any:
        if (raw.get("d") or {}).get("content") == "lost?":
            tried.set()
            raise RuntimeError("server closed the connection")
        return await real(raw, **kwargs)

    monkeypatch.setattr(contract_context, "ingest", away)
    first = DiscordAdapter("test", {**fake.settings, **FAST})
    await first.start(contract_context.bind(first))
    one = await fake.post_message(fake.general, fake.alice, "one")
    await contract_context.wait_ingested(one["id"])
    pending = await fake.post_message(fake.general, fake.alice, "lost?")
    await asyncio.wait_for(tried.wait(), 10)
    await first.stop()  # returns: it does not wait for the store for ever
    assert "gave up storing a Discord MESSAGE_CREATE at stop" in caplog.text
    monkeypatch.setattr(contract_context, "ingest", real)
    second = DiscordAdapter("test", {**fake.settings, **FAST})
    await second.start(contract_context.bind(second))
    try:
        await contract_context.wait_ingested(pending["id"])
    finally:
        await second.stop()
    transcript = await contract_context.transcript(Address("test", fake.general))
    assert [m.text for m in transcript] == ["one", "lost?"]


async def test_a_message_dispatched_after_a_newer_one_and_lost_with_a_crash_is_caught_up(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    # two messages posted together may be dispatched in either order: the newer one was
    # committed (the cursor moved to it), the process died before the older one came, and
    # the next catch-up read only after the cursor: the older one was never stored
    first = DiscordAdapter("test", {**fake.settings, **FAST})
    await first.start(contract_context.bind(first))
    one = await fake.post_message(fake.general, fake.alice, "one")
    await contract_context.wait_ingested(one["id"])
    older = fake.message_payload(fake.general, fake.alice, "posted first, dispatched late")
    newer = fake.message_payload(fake.general, fake.alice, "posted second, dispatched first")
    # history from long before (the bot never listened then): not caught up
    ancient = {**older, "id": str(int(one["id"]) - ((7200 * 1000) << 22)), "content": "ancient"}
    for message in (ancient, older, newer):
        fake.messages[message["id"]] = message
    fake.channels[fake.general]["last_message_id"] = newer["id"]
    await fake.dispatch("MESSAGE_CREATE", newer)
    await contract_context.wait_ingested(newer["id"])
    await first.stop()  # the older one's dispatch never came

    second = DiscordAdapter("test", {**fake.settings, **FAST})
    await second.start(contract_context.bind(second))
    try:
        await contract_context.wait_ingested(older["id"])
        after = await fake.post_message(fake.general, fake.alice, "after")
        await contract_context.wait_ingested(after["id"])
    finally:
        await second.stop()
    transcript = await contract_context.transcript(Address("test", fake.general))
    assert [m.text for m in transcript] == [
        "one",
        "posted second, dispatched first",
        "posted first, dispatched late",
        "after",
    ]

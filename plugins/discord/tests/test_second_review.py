"""Payload classes a second review found mishandled, each through the adapter's real path."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import pytest
from backchannel.framing import format_message
from backchannel.model import Address, Sender
from backchannel.testing import ContractContext
from backchannel_discord import DiscordAdapter
from backchannel_discord.normalize import normalize_payload
from backchannel_discord.testing import FakeDiscord

from .conftest import FAST

BOT = "1180000000000000001"
GUILD = "1180000000000000100"
GENERAL = "1180000000000000200"
THREAD = "1180000000000000300"
ALICE = {"id": "1180000000000000500", "username": "alice", "global_name": "Alice"}
BEN = {"id": "1180000000000000502", "username": "ben", "global_name": "Ben", "discriminator": "0"}


def bound(contract_context: ContractContext) -> ContractContext:
    adapter = DiscordAdapter(contract_context.account, {"token": "x.y.z"})
    adapter.me = Sender(BOT, "backchannel", "backchannel", is_bot=True)
    return contract_context.bind(adapter)


def reply(referenced: dict[str, Any] | None, *, channel_id: str = GENERAL) -> dict[str, Any]:
    """gateway-events.mdx Message Create: a REPLY (19) whose target's whole message comes along."""
    return {
        "op": 0,
        "s": 7,
        "t": "MESSAGE_CREATE",
        "d": {
            "type": 19,
            "id": "1325400000000000100",
            "channel_id": channel_id,
            "guild_id": GUILD,
            "content": "is it still?",
            "timestamp": "2025-01-05T09:00:00.000000+00:00",
            "edited_timestamp": None,
            "author": {**ALICE, "discriminator": "0"},
            "member": {"nick": None, "roles": []},
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "flags": 0,
            "message_reference": {
                "type": 0,
                "message_id": "1325400000000000001",
                "channel_id": GENERAL,
                "guild_id": GUILD,
            },
            "referenced_message": referenced,
        },
    }


OLD = {
    "type": 0,
    "id": "1325400000000000001",
    "channel_id": GENERAL,
    "content": "prod db is at 95%",
    "timestamp": "2025-01-04T09:00:00.000000+00:00",
    "edited_timestamp": None,
    "author": BEN,
    "mentions": [],
    "mention_roles": [],
    "attachments": [],
    "embeds": [],
    "flags": 0,
}


async def test_a_reply_to_a_message_the_store_lacks_says_whose_and_what_it_said(
    contract_context: ContractContext,
) -> None:
    # the target was posted before the bot read the channel: only the reply's
    # referenced_message says what is answered
    ctx = bound(contract_context)
    stored = await ctx.ingest(reply(copy.deepcopy(OLD)))
    assert stored.event is not None
    assert stored.event.meta["reply_from"] == "Ben"
    assert stored.event.meta["reply_quote"] == "prod db is at 95%"
    (row,) = await ctx.transcript(Address(ctx.account, GENERAL))
    line = format_message(row)["content"]
    assert "Ben" in line and "prod db is at 95%" in line
    # a long target is cut; a deleted one (referenced_message null) says nothing
    long = {**OLD, "content": "x" * 1000}
    event = (await ctx.ingest({**reply(long), "s": 8})).event
    assert event is not None and len(event.meta["reply_quote"]) == 300
    gone = reply(None)
    gone["d"]["id"] = "1325400000000000101"
    event = (await ctx.ingest(gone)).event
    assert event is not None and "reply_quote" not in event.meta
    assert event.reply_to == "1325400000000000001"


async def test_a_reply_in_a_thread_to_its_starter_in_the_parent_is_no_reply_to_a_thread_row(
    contract_context: ContractContext,
) -> None:
    # the thread's starter message lives in the parent channel: its id names no row of
    # the thread's conversation, so the reply carries what it quoted instead
    ctx = bound(contract_context)
    payload = reply(copy.deepcopy(OLD), channel_id=THREAD)
    payload["backchannel"] = {"channel_type": 11, "parent_id": GENERAL, "channel_name": "db"}
    event = (await ctx.ingest(payload)).event
    assert event is not None and event.address == Address(ctx.account, GENERAL, THREAD)
    assert event.reply_to is None
    assert (event.meta["reply_from"], event.meta["reply_quote"]) == ("Ben", "prod db is at 95%")


async def test_the_catch_up_waits_for_the_servers_that_come_after_ready(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    # READY lists every server unavailable and discord.py empties its cache on it; the
    # GUILD_CREATEs come after it (on Discord, seconds later for many servers). A catch-up
    # read before them lost the server's name, role names and a mention of the bot's role.
    settings = {**fake.settings, **FAST, "guild_ready_timeout": 1.0}
    first = DiscordAdapter("test", settings)
    await first.start(contract_context.bind(first))
    one = await fake.post_message(fake.general, fake.alice, "one")
    await contract_context.wait_ingested(one["id"])
    await first.stop()
    role = fake.bot_role_id(fake.guild_id)
    missed = await fake.post_message(fake.general, fake.alice, f"<@&{role}> disk full?")

    dispatch = fake.dispatch

    async def later(event: str, data: Any) -> None:
        if event == "GUILD_CREATE":
            await asyncio.sleep(0.3)
        await dispatch(event, data)

    fake.dispatch = later  # type: ignore[method-assign]
    seen = len(fake.requests)
    second = DiscordAdapter("test", settings)
    await second.start(contract_context.bind(second))
    try:
        await contract_context.wait_ingested(missed["id"])
    finally:
        await second.stop()
    caught = next(e for e in contract_context.events if e.event_id == missed["id"])
    assert caught.mentions_me  # the bot's role, known once its server came
    assert caught.conversation_title == "#general (Test Server)"
    assert caught.text.startswith("@")  # the role's name, not bare markup
    # the channel was known from the cache, not asked for one by one
    assert ("GET", f"/channels/{fake.general}") not in [r[:2] for r in fake.requests[seen:]]


async def test_a_deferred_response_answered_while_away_is_filled_in_by_the_catch_up(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    # another app's slash-command answer: posted LOADING ("Dice is thinking..."), stored
    # empty; its answer (no edited_timestamp: no one edited it) came while no session
    # listened, and the history is all that says so
    dice = fake.add_user("Dice", bot=True)
    first = DiscordAdapter("test", {**fake.settings, **FAST})
    await first.start(contract_context.bind(first))
    thinking = fake.message_payload(fake.general, dice, "")
    thinking.update(
        type=20,
        flags=1 << 7,
        application_id=dice,
        interaction_metadata={"id": "1325400000000000999", "type": 2, "user": {"id": fake.alice}},
    )
    fake.messages[thinking["id"]] = thinking
    await fake.dispatch("MESSAGE_CREATE", thinking)
    await contract_context.wait_ingested(thinking["id"])
    await first.stop()
    thinking.update(content="🎲 You rolled a 4.", flags=0)  # answered, not dispatched

    second = DiscordAdapter("test", {**fake.settings, **FAST})
    await second.start(contract_context.bind(second))
    try:
        after = await fake.post_message(fake.general, fake.alice, "thanks")
        await contract_context.wait_ingested(after["id"])  # the catch-up went first
    finally:
        await second.stop()
    rows = await contract_context.transcript(Address("test", fake.general))
    assert [row.text for row in rows] == ["🎲 You rolled a 4.", "thanks"]


async def test_a_reaction_in_a_dm_is_by_the_person_the_bot_talks_with_by_name(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    # a DM reaction names only user_id (no member), and discord.py caches no DM channel
    # (Discord sends bots no CHANNEL_CREATE for one): it read "👍 by <user id>"
    dm = fake.dm_channel(fake.alice)
    message = await fake.post_message(dm, fake.alice, "can you check the backup?")
    await contract_context.wait_ingested(message["id"])
    await fake.react(message["id"], fake.alice, "👍")
    await contract_context.wait_for(
        lambda: any(e.kind == "reaction" for e in contract_context.events), what="the reaction"
    )
    (reaction,) = [e for e in contract_context.events if e.kind == "reaction"]
    assert reaction.sender.name == "Alice"
    (row,) = await contract_context.transcript(Address("test", dm))
    assert row.reactions == (("Alice", "👍"),)


async def test_a_thread_started_from_a_message_opens_with_that_message(
    contract_context: ContractContext,
) -> None:
    # message.mdx: a THREAD_STARTER_MESSAGE (21) has no content of its own; the parent
    # channel's message it was started from is its referenced_message (no guild_id, no
    # member). It was dropped as a system message: the thread's transcript lacked what
    # the thread is about.
    ctx = bound(contract_context)
    opener = {
        **OLD,
        "content": f"<@{BOT}> prod db is at 95%",
        "mentions": [{"id": BOT, "username": "backchannel", "bot": True}],
        "attachments": [{"id": "1", "filename": "df.png", "content_type": "image/png"}],
    }
    starter: dict[str, Any] = {
        "op": 0,
        "s": 9,
        "t": "MESSAGE_CREATE",
        "d": {
            "type": 21,
            "id": "1325400000000000200",
            "channel_id": THREAD,
            "guild_id": GUILD,
            "content": "",
            "timestamp": "2025-01-05T09:30:00.000000+00:00",
            "edited_timestamp": None,
            "author": {**ALICE, "discriminator": "0"},
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "position": 0,
            "message_reference": {
                "message_id": OLD["id"],
                "channel_id": GENERAL,
                "guild_id": GUILD,
            },
            "referenced_message": opener,
        },
        "backchannel": {"channel_type": 11, "parent_id": GENERAL, "channel_name": "db"},
    }
    event = (await ctx.ingest(starter)).event
    assert event is not None
    assert (event.event_id, event.address) == (
        "1325400000000000200",
        Address(ctx.account, GENERAL, THREAD),
    )
    assert (event.sender.id, event.sender.name) == (BEN["id"], "Ben")
    assert event.text.endswith("prod db is at 95%")
    assert [a.name for a in event.attachments] == ["df.png"]
    assert event.reply_to is None
    assert not event.mentions_me  # the parent's message started its own run
    (row,) = await ctx.transcript(Address(ctx.account, GENERAL, THREAD))
    assert "prod db is at 95%" in format_message(row)["content"]
    # its opener deleted (null): nothing to show
    gone = copy.deepcopy(starter)
    gone["d"].update(id="1325400000000000201", referenced_message=None)
    assert (await ctx.ingest(gone)).event is None


def test_a_time_without_an_offset_is_utc_whatever_the_hosts_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Discord writes +00:00; a time without an offset was read in the host's zone
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        payload = reply(copy.deepcopy(OLD))
        payload["d"]["timestamp"] = "2025-01-05T09:00:00"
        event = normalize_payload(payload, account="ops", bot_id=BOT)
        assert event is not None and event.sent_at == 1736067600.0
        payload["d"]["timestamp"] = "2025-01-05T09:00:00.5Z"
        event = normalize_payload(payload, account="ops", bot_id=BOT)
        assert event is not None and event.sent_at == 1736067600.5
    finally:
        monkeypatch.undo()
        time.tzset()

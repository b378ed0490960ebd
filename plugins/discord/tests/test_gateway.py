"""Receiving over the Gateway: conversations, edits, deletes, and discord.py's reconnect/resume
against FakeDiscord's faults. Every check waits on the store or the fake, never on a sleep."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from backchannel.model import Event
from backchannel.testing import ContractContext
from backchannel_discord import DiscordAdapter
from backchannel_discord.testing import FakeDiscord

from .conftest import FAST


async def said(fake: FakeDiscord, ctx: ContractContext, channel: str, text: str) -> str:
    message = await fake.post_message(channel, fake.alice, text)
    await ctx.wait_ingested(message["id"])
    return str(message["id"])


def event_for(ctx: ContractContext, event_id: str) -> Event:
    return next(e for e in ctx.events if e.event_id == event_id)


async def texts(ctx: ContractContext, chat: str, thread: str | None = None) -> list[str]:
    from backchannel.model import Address

    return [m.text for m in await ctx.transcript(Address(ctx.account, chat, thread))]


async def test_guild_channel_message_is_a_titled_group_conversation(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    event = event_for(contract_context, await said(fake, contract_context, fake.general, "hi"))
    assert event.conversation_kind == "group"
    assert event.conversation_title == "#general (Test Server)"
    assert event.sender.name == "Alice"
    assert event.raw is not None and event.raw["t"] == "MESSAGE_CREATE"


async def test_dm_is_a_direct_conversation(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    dm = fake.dm_channel(fake.alice)
    event = event_for(contract_context, await said(fake, contract_context, dm, "psst"))
    assert event.conversation_kind == "direct"
    assert event.address.chat == dm


async def test_a_thread_is_its_own_conversation_under_its_parent(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    thread = await fake.add_thread(fake.general, "release plan")
    await said(fake, contract_context, fake.general, "in the channel")
    event = event_for(contract_context, await said(fake, contract_context, thread, "in the thread"))
    assert event.conversation_kind == "thread"
    assert (event.address.chat, event.address.thread) == (fake.general, thread)
    assert event.conversation_title == "#general › release plan (Test Server)"
    assert "parent_channel_id" not in event.meta
    assert await texts(contract_context, fake.general) == ["in the channel"]
    assert await texts(contract_context, fake.general, thread) == ["in the thread"]
    assert await texts(contract_context, thread) == []


async def test_a_thread_the_client_never_saw_is_looked_up_once_and_gets_one_address(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    # no THREAD_CREATE: discord.py's cache has no such channel when the first message comes
    thread = await fake.add_thread(fake.general, "old thread", announce=False)
    first = await said(fake, contract_context, thread, "back to this")
    second = await said(fake, contract_context, thread, "anyone?")
    await fake.delete_message(first)
    await contract_context.wait_ingested(f"{first}:delete")
    addresses = {
        (e.address.chat, e.address.thread, e.conversation_kind)
        for e in contract_context.events
        if e.platform_message_id in {first, second}
    }
    assert addresses == {(fake.general, thread, "thread")}
    lookups = [r for r in fake.requests if r[:2] == ("GET", f"/channels/{thread}")]
    assert len(lookups) == 1
    # the message, the next one and the delete all landed in one stored conversation
    assert len({r.conversation_id for r in contract_context.results}) == 1
    assert await texts(contract_context, thread) == []


async def test_a_thread_whose_parent_cannot_be_learned_is_refused_in_one_line(
    fake: FakeDiscord,
    adapter: DiscordAdapter,
    contract_context: ContractContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    thread = await fake.add_thread(fake.general, "hidden", announce=False)
    message = fake.message_payload(thread, fake.alice, "lost?")
    del fake.channels[thread]  # so the lookup answers 404 Unknown Channel
    await fake.dispatch("MESSAGE_CREATE", message)
    # a delete names no more than the channel: it must not be guessed into one either
    deleted = {"id": message["id"], "channel_id": thread, "guild_id": fake.guild_id}
    await fake.dispatch("MESSAGE_DELETE", deleted)
    await contract_context.wait_for(
        lambda: len(contract_context.malformed) == 2, what="both refusals"
    )
    for reason in contract_context.malformed:
        assert f"Discord channel {thread} is not in the bot's cache" in reason
        assert "\n" not in reason
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2  # the lookup is tried again for the next payload
    assert all(f"could not look up Discord channel {thread}" in w for w in warnings)
    assert all("Unknown Channel" in w for w in warnings)
    # the adapter keeps serving
    await said(fake, contract_context, fake.general, "still here")
    assert not [e for e in contract_context.events if e.address.chat == thread]


async def test_edits_and_deletes_reach_the_store(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    first = await said(fake, contract_context, fake.general, "teh plan")
    edited = await fake.edit_message(first, "the plan")
    await contract_context.wait_ingested(f"{first}:edit:{edited['edited_timestamp']}")
    await fake.delete_message(first)
    await contract_context.wait_ingested(f"{first}:delete")
    kinds = [(e.kind, e.platform_message_id) for e in contract_context.events]
    assert kinds == [("message", first), ("edit", first), ("delete", first)]
    assert contract_context.events[1].text == "the plan"


async def test_the_bots_own_posts_never_reach_the_store(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    from backchannel.model import Address, Outbound

    await adapter.send(Outbound(Address("test", fake.general), "my own words"))
    await said(fake, contract_context, fake.general, "after the bot")
    assert [e.text for e in contract_context.events] == ["after the bot"]


async def test_abnormal_close_resumes_and_replays_what_was_lost_in_flight(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    await said(fake, contract_context, fake.general, "one")
    fake.drop_next_dispatches(2)
    lost = [await fake.post_message(fake.general, fake.alice, t) for t in ("two", "three")]
    await fake.disconnect()  # no close frame: discord.py sees the socket die
    for message in lost:
        await contract_context.wait_ingested(message["id"])
    await said(fake, contract_context, fake.general, "four")
    assert (fake.identifies, fake.resumes) == (1, 1)
    assert await texts(contract_context, fake.general) == ["one", "two", "three", "four"]


async def test_replayed_events_after_resume_add_no_rows(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    await said(fake, contract_context, fake.general, "one")
    await said(fake, contract_context, fake.general, "two")
    fake.replay_overlap = 5  # the resume also replays dispatches the client already had
    await fake.disconnect(code=4000)
    await fake.wait_until(lambda: fake.resumes == 1, what="a RESUME")
    await said(fake, contract_context, fake.general, "three")
    assert [r.status for r in contract_context.results].count("duplicate") == 2
    assert await texts(contract_context, fake.general) == ["one", "two", "three"]


async def test_op7_reconnect_is_followed_by_a_resume(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    await fake.send_reconnect()
    await fake.wait_until(lambda: fake.resumes == 1 and fake.connected, what="a RESUME")
    await said(fake, contract_context, fake.general, "still listening")
    assert fake.identifies == 1


async def test_op9_invalid_session_is_followed_by_a_new_identify(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    # discord.py waits 5 s before a non-initial IDENTIFY (Discord's identify limit)
    await fake.invalidate_session(resumable=False)
    await fake.wait_until(lambda: fake.identifies == 2, timeout=15, what="a second IDENTIFY")
    await said(fake, contract_context, fake.general, "new session")
    assert fake.resumes == 0


async def test_a_re_add_in_a_new_session_with_the_same_sequence_number_is_not_a_duplicate(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    # each gateway session counts `s` from 1: after a restart, the same dispatches get the same `s`
    bob = fake.add_user("bob", global_name="Bob")
    target = ""
    for session in (1, 2):
        adapter = DiscordAdapter(contract_context.account, {**fake.settings, **FAST})
        await adapter.start(contract_context.bind(adapter))
        try:
            posted = await fake.post_message(fake.general, fake.alice, f"post {session}")
            target = target or posted["id"]
            await fake.react(target, bob, "🎉")
            await fake.react(target, bob, "🎉", remove=True)  # taken back, re-added next session
            await contract_context.wait_for(
                lambda n=2 * session: (
                    sum(e.kind == "reaction" for e in contract_context.events) >= n
                ),
                what=f"the reactions of session {session}",
            )
        finally:
            await adapter.stop()
    assert fake.identifies == 2
    reactions = [r for r in contract_context.results if r.event and r.event.kind == "reaction"]
    adds = [r.event for r in reactions if r.event and "removed" not in r.event.meta]
    sequences = [(event.raw or {}).get("s") for event in adds]
    # the same sequence number in both sessions, and still each add its own event
    assert isinstance(sequences[0], int) and sequences == [sequences[0]] * 2
    assert [r.status for r in reactions] == ["stored"] * 4


@pytest.fixture
async def slow_acks() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(heartbeat_interval=0.25) as server:
        yield server


async def test_missing_heartbeat_acks_make_discord_py_reconnect_and_resume(
    slow_acks: FakeDiscord, contract_context: ContractContext
) -> None:
    fake = slow_acks
    adapter = DiscordAdapter("test", {**fake.settings, **FAST, "heartbeat_timeout": 1.0})
    await adapter.start(contract_context.bind(adapter))
    try:
        fake.stop_heartbeat_acks()
        await fake.wait_until(lambda: fake.resumes == 1, timeout=10, what="a RESUME")
        fake.resume_heartbeat_acks()
        await said(fake, contract_context, fake.general, "back")
        assert fake.identifies == 1
    finally:
        await adapter.stop()


async def test_bulk_delete_becomes_one_delete_per_message(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    ids = [await said(fake, contract_context, fake.general, t) for t in ("a", "b")]
    await fake.dispatch(
        "MESSAGE_DELETE_BULK", {"ids": ids, "channel_id": fake.general, "guild_id": fake.guild_id}
    )
    for message_id in ids:
        await contract_context.wait_ingested(f"{message_id}:delete")


async def test_the_gateway_speaks_the_compression_discord_py_asks_for(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    import discord.utils

    # zlib-stream, or zstd-stream when zstandard / compression.zstd is importable
    wanted = discord.utils._ActiveDecompressionContext.COMPRESSION_TYPE
    assert fake.gateway_queries[0] == {"v": "10", "encoding": "json", "compress": wanted}
    await said(fake, contract_context, fake.general, "compressed and back")


@pytest.mark.parametrize(
    "odd",
    [
        '{"op": 0, "t": "MESSAGE_DELETE_BULK", "s": 90, "d": {"ids": 5, "channel_id": "1"}}',
        '{"op": 0, "t": "MESSAGE_CREATE", "s": 91, "d": ["not", "an", "object"]}',
        '{"op": 0, "t": "READY", "s": 92, "d": ["not", "an", "object"]}',
        "not json at all",
    ],
)
async def test_a_payload_of_an_unexpected_shape_does_not_stop_receiving(
    fake: FakeDiscord,
    adapter: DiscordAdapter,
    contract_context: ContractContext,
    odd: str,
) -> None:
    # as if discord.py had handed it to on_socket_raw_receive
    adapter._on_raw(odd)
    await said(fake, contract_context, fake.general, "still here")
    assert await texts(contract_context, fake.general) == ["still here"]
    if '"MESSAGE_CREATE"' in odd:  # a message event normalize cannot read is a dead letter
        assert contract_context.malformed == ["d: MESSAGE_CREATE without an object in 'd'"]


async def test_a_replayed_edit_adds_nothing_and_a_second_edit_is_new(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    first = await said(fake, contract_context, fake.general, "draft")
    edited = dict(await fake.edit_message(first, "draft 2"))
    edit_id = f"{first}:edit:{edited['edited_timestamp']}"
    await contract_context.wait_ingested(edit_id)
    await fake.dispatch("MESSAGE_UPDATE", edited)  # the same edit delivered again
    await contract_context.wait_ingested(edit_id, times=2)
    statuses = [
        r.status for r in contract_context.results if r.event and r.event.event_id == edit_id
    ]
    assert statuses == ["stored", "duplicate"]
    again = await fake.edit_message(first, "final")
    assert again["edited_timestamp"] != edited["edited_timestamp"]
    await contract_context.wait_ingested(f"{first}:edit:{again['edited_timestamp']}")
    assert await texts(contract_context, fake.general) == ["final"]


async def test_mentioning_the_bots_managed_role_mentions_the_bot(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    # the @ menu offers the bot's role next to the bot; people pick either
    role = fake.bot_role_id(fake.guild_id)
    by_role = await said(fake, contract_context, fake.general, f"<@&{role}> are you there?")
    plain = await said(fake, contract_context, fake.general, "no mention here")
    assert event_for(contract_context, by_role).mentions_me
    assert not event_for(contract_context, plain).mentions_me


async def test_a_dispatch_discord_py_cannot_parse_does_not_end_receiving(
    fake: FakeDiscord,
    adapter: DiscordAdapter,
    contract_context: ContractContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # discord.py's own parser raises on these (a KeyError, a ValueError): unguarded, the
    # exception ends Client.connect and with it all receiving
    broken = fake.message_payload(fake.general, fake.alice, "odd author")
    broken["author"] = {"id": fake.alice}  # no username
    await fake.dispatch("MESSAGE_CREATE", broken)
    await fake.dispatch("THREAD_CREATE", {"id": "not a snowflake", "type": 11})
    await said(fake, contract_context, fake.general, "still listening")
    assert fake.identifies == 1 and fake.resumes == 0
    assert any(
        "MESSAGE_CREATE" in r.getMessage() for r in caplog.records if r.levelname == "WARNING"
    )


async def test_a_thread_lookup_answered_with_a_5xx_is_asked_again(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    thread = await fake.add_thread(fake.general, "quiet thread", announce=False)
    fake.fail_next_read("unavailable")  # 503: says nothing about the channel
    message_id = await said(fake, contract_context, thread, "back again")
    event = event_for(contract_context, message_id)
    assert (event.address.chat, event.address.thread) == (fake.general, thread)
    assert contract_context.malformed == []
    lookups = [r for r in fake.requests if r[:2] == ("GET", f"/channels/{thread}")]
    assert len(lookups) == 2

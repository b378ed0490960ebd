"""End to end: FakeDiscord <-> discord.py <-> DiscordAdapter <-> Switchboard <-> an agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from backchannel.errors import Rejected
from backchannel.model import Address
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel_discord import DiscordAdapter
from backchannel_discord.testing import FakeDiscord

from .conftest import FAST


class AnswerEach:
    """Replies to every inbound message the run has not answered yet (handled_seq < seq <= trigger)."""

    def __init__(self, store: SQLiteStore):
        self.store = store
        self.runs: list[Run] = []

    async def __call__(self, run: Run) -> None:
        self.runs.append(run)
        assert run.trigger is not None
        window = await self.store.window(run.conversation.id, 50, upto_seq=run.trigger.seq)
        for message in window:
            if message.direction == "in" and message.seq > run.conversation.handled_seq:
                await run.call("reply", {"message_id": message.seq, "text": f"re: {message.text}"})


@pytest.fixture
async def board_for(fake: FakeDiscord, store: SQLiteStore) -> AsyncIterator[Any]:
    boards: list[Switchboard] = []

    async def make(agent: Any, **binding: Any) -> Switchboard:
        adapter = DiscordAdapter("main", {**fake.settings, **FAST})
        board = Switchboard(store)
        board.add_account(adapter, Binding(agent, **binding), secrets=[fake.token])
        await board.start()
        boards.append(board)
        return board

    yield make
    for board in boards:
        await board.stop()


def replies_to(fake: FakeDiscord, channel: str, message_id: str) -> list[dict[str, Any]]:
    return [
        m
        for m in fake.sent_to(channel)
        if (m.get("message_reference") or {}).get("message_id") == message_id
    ]


async def test_mention_in_a_guild_channel_and_a_dm_each_get_a_reply_to_that_message(
    fake: FakeDiscord, board_for: Any
) -> None:
    agent = RecordingAgent(lambda run: f"hello {run.trigger.sender.label}" if run.trigger else None)
    board = await board_for(agent, respond="mention")
    chatter = await fake.post_message(fake.general, fake.alice, "just chatting")
    mention = await fake.post_message(fake.general, fake.alice, f"<@{fake.bot_id}> status?")
    dm_channel = fake.dm_channel(fake.alice)
    private = await fake.post_message(dm_channel, fake.alice, "a private question")
    await agent.wait_runs(2)
    await board.wait_idle()
    (in_channel,) = fake.sent_to(fake.general)
    assert in_channel["content"] == "hello Alice"
    assert in_channel["message_reference"]["message_id"] == mention["id"]
    (in_dm,) = fake.sent_to(dm_channel)
    assert in_dm["message_reference"]["message_id"] == private["id"]
    kinds = sorted(run.conversation.kind for run in agent.runs)
    assert kinds == ["direct", "group"]
    group_run = next(run for run in agent.runs if run.conversation.kind == "group")
    # the mention reads as the bot's name, with the markup to mention it back
    assert [m["content"].split(": ", 1)[1] for m in group_run.messages] == [
        chatter["content"],
        f"@backchannel-bot (<@{fake.bot_id}>) status?",
    ]
    assert "Discord" in group_run.instruction
    assert replies_to(fake, fake.general, chatter["id"]) == []


async def test_a_thread_is_its_own_conversation_under_its_parent(
    fake: FakeDiscord, board_for: Any
) -> None:
    agent = RecordingAgent(lambda run: "answered in the thread")
    board = await board_for(agent, respond="mention")
    await fake.post_message(fake.general, fake.alice, "channel talk")
    thread = await fake.add_thread(fake.general, "incident 42")
    await fake.post_message(thread, fake.alice, "thread context")
    asked = await fake.post_message(thread, fake.alice, f"<@{fake.bot_id}> summarize")
    await agent.wait_runs(1)
    await board.wait_idle()
    (run,) = agent.runs
    assert run.conversation.kind == "thread"
    assert (run.conversation.address.chat, run.conversation.address.thread) == (
        fake.general,
        thread,
    )
    assert run.conversation.title == "#general › incident 42 (Test Server)"
    assert [m["content"].split(": ", 1)[1] for m in run.messages] == [
        "thread context",
        f"@backchannel-bot (<@{fake.bot_id}>) summarize",
    ]
    assert fake.sent_to(fake.general) == []
    (reply,) = fake.sent_to(thread)
    assert reply["message_reference"]["message_id"] == asked["id"]


async def test_gateway_drop_mid_stream_resume_and_replay_answer_every_message_once(
    fake: FakeDiscord, store: SQLiteStore, board_for: Any
) -> None:
    agent = AnswerEach(store)
    board = await board_for(agent)
    dm = fake.dm_channel(fake.alice)
    posted = [await fake.post_message(dm, fake.alice, "one")]
    await fake.wait_until(lambda: len(replies_to(fake, dm, posted[0]["id"])) == 1, what="reply 1")

    fake.drop_next_dispatches(2)  # "two" and "three" are lost in flight ...
    fake.replay_overlap = 4  # ... and the resume replays some of what the bot already had
    posted += [await fake.post_message(dm, fake.alice, text) for text in ("two", "three")]
    await fake.disconnect()
    posted.append(await fake.post_message(dm, fake.alice, "four"))  # while reconnecting

    def all_answered() -> bool:
        return all(replies_to(fake, dm, m["id"]) for m in posted)

    await fake.wait_until(all_answered, timeout=15, what="a reply to every message")
    await board.wait_idle()
    assert (fake.identifies, fake.resumes) == (1, 1)
    for message in posted:
        assert len(replies_to(fake, dm, message["id"])) == 1, message["content"]
    assert len(fake.sent_to(dm)) == len(posted)
    conversation = (await store.conversations("main", limit=10))[0]
    transcript = await store.window(conversation.id, 50)
    inbound = [m.text for m in transcript if m.direction == "in"]
    outbound = [m.text for m in transcript if m.direction == "out"]
    assert inbound == ["one", "two", "three", "four"]
    assert sorted(outbound) == sorted(f"re: {m['content']}" for m in posted)
    assert board.counters["duplicate"] >= 1


async def test_the_bot_is_typing_while_the_agent_works(fake: FakeDiscord, board_for: Any) -> None:
    dm = fake.dm_channel(fake.alice)

    async def wait_for_typing(run: Run) -> None:
        await fake.wait_until(lambda: dm in fake.typing, what="POST /channels/{dm}/typing")

    agent = RecordingAgent(lambda run: "done", action=wait_for_typing)
    board = await board_for(agent)
    await fake.post_message(dm, fake.alice, "take your time")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert [m["content"] for m in fake.sent_to(dm)] == ["done"]


async def test_a_first_send_to_a_channel_discord_does_not_know_makes_no_conversation(
    fake: FakeDiscord, store: SQLiteStore, board_for: Any
) -> None:
    board = await board_for(RecordingAgent(lambda run: None))
    thread = await fake.add_thread(fake.general, "incident 42")
    missing = fake.snowflake()
    arabic_indic = fake.general.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    refused = {
        Address("main", missing): "Discord says",
        Address("main", "general"): "must be a Discord id",
        # digits int() reads but inbound events never key a channel by
        Address("main", arabic_indic): "must be a Discord id",
        Address("main", f"0{fake.general}"): "must be a Discord id",
        Address("main", fake.general, f"0{thread}"): "must be a Discord id",
        Address("main", thread): "is a thread: address it under its channel",
        Address("main", fake.general, missing): "Discord says",
    }
    for address, reason in refused.items():
        with pytest.raises(Rejected, match=reason):
            await board.send(address, "hello?")
        assert await store.find_conversation(address) is None
    assert fake.sent_to(fake.general) == [] and fake.sent_to(thread) == []
    for address in (Address("main", fake.general), Address("main", fake.general, thread)):
        assert (await board.send(address, "hello")).startswith("sent")
        assert await store.find_conversation(address) is not None


async def test_a_first_send_goes_ahead_when_discord_cannot_be_asked(
    fake: FakeDiscord, store: SQLiteStore, board_for: Any
) -> None:
    # Get Channel answers 429 (longer than the adapter waits out), resets, or 503 until the
    # request times out: the address is taken as it is, and the send says what became of it
    board = await board_for(RecordingAgent(lambda run: None))

    def got_channel(channel: str) -> bool:
        return any(r[:2] == ("GET", f"/channels/{channel}") for r in fake.requests)

    for fault in ("rate_limited", "reset"):
        dm = fake.dm_channel(fake.add_user(f"carol-{fault}"))  # not in discord.py's cache
        fake.fail_next_read(fault, retry_after=60)
        assert (await board.send(Address("main", dm), f"hello ({fault})")).startswith("sent")
        assert got_channel(dm)  # it was asked, and could not answer
        assert [m["content"] for m in fake.sent_to(dm)] == [f"hello ({fault})"]
    missing = fake.snowflake()
    fake.fail_next_read("hang")
    try:
        outcome = await board.send(Address("main", missing), "anyone there?")
    finally:
        fake.release_hang()
    assert got_channel(missing)
    assert "NOT delivered" in outcome and "Unknown Channel" in outcome, outcome
    assert await store.find_conversation(Address("main", missing)) is not None


async def test_a_moderators_clear_and_a_delete_apply_under_an_owner_only_policy(
    fake: FakeDiscord, store: SQLiteStore, board_for: Any
) -> None:
    """Neither names who made it: a fact about a stored message, never held by the policy
    (a held change is not applied)."""
    agent = RecordingAgent(lambda run: "noted")
    board = await board_for(agent, respond="always", access="owner", owner=fake.alice)
    said = await fake.post_message(fake.general, fake.alice, "deploy went fine")
    gone = await fake.post_message(fake.general, fake.alice, "a secret, deleted")
    await fake.react(said["id"], fake.alice, "🎉")
    await agent.wait_runs(1)
    await board.wait_idle()
    await fake.clear_reactions(said["id"])
    await fake.delete_message(gone["id"])
    await fake.post_message(fake.general, fake.alice, "and now?")
    await agent.wait_runs(2)
    await board.wait_idle()
    conversation = await store.find_conversation(Address("main", fake.general))
    assert conversation is not None
    kept = await store.message_by_platform_id(conversation.id, said["id"])
    deleted = await store.message_by_platform_id(conversation.id, gone["id"])
    assert kept is not None and kept.reactions == ()
    assert deleted is not None and deleted.deleted_at is not None
    assert any(
        "(deleted; it said: a secret, deleted)" in m["content"] for m in agent.runs[-1].messages
    )


async def test_reactions_show_on_their_message_and_come_off_by_user_id(
    fake: FakeDiscord, store: SQLiteStore, board_for: Any
) -> None:
    agent = RecordingAgent(lambda run: "noted")
    board = await board_for(agent, respond="mention")
    said = await fake.post_message(fake.general, fake.alice, "deploy went fine")
    thread = await fake.add_thread(fake.general, "incident 42")
    in_thread = await fake.post_message(thread, fake.alice, "root cause found")
    bob = fake.add_user("bob", global_name="Bob")
    await fake.react(said["id"], bob, "🎉")
    await fake.react(said["id"], fake.alice, "party_parrot:123456789012345678")
    await fake.react(in_thread["id"], bob, "👀")
    await fake.react(said["id"], bob, "🎉", remove=True)  # names only the user id
    # the adapter reads the gateway in order: once this mention's run is done, so is the rest
    await fake.post_message(fake.general, fake.alice, f"<@{fake.bot_id}> thanks")
    await agent.wait_runs(1)
    await board.wait_idle()

    async def reactions_of(channel: str, thread_id: str | None, message_id: str) -> Any:
        conversation = await store.find_conversation(Address("main", channel, thread_id))
        assert conversation is not None
        message = await store.message_by_platform_id(conversation.id, message_id)
        assert message is not None
        return message.reactions

    assert await reactions_of(fake.general, None, said["id"]) == (("Alice", ":party_parrot:"),)
    assert await reactions_of(fake.general, thread, in_thread["id"]) == (("Bob", "👀"),)
    assert len(agent.runs) == 1  # the mention's: reactions never start a run

    # a moderator's clears name no one: everyone's one emoji, then every reaction
    await fake.react(said["id"], bob, "party_parrot:123456789012345678")
    await fake.react(said["id"], bob, "👍")
    await fake.react(in_thread["id"], fake.alice, "👀")
    await fake.react(in_thread["id"], fake.alice, "✅")
    await fake.clear_reactions(said["id"], "party_parrot:123456789012345678")
    await fake.clear_reactions(in_thread["id"])
    await fake.post_message(fake.general, fake.alice, f"<@{fake.bot_id}> and now?")
    await agent.wait_runs(2)
    await board.wait_idle()
    assert await reactions_of(fake.general, None, said["id"]) == (("Bob", "👍"),)
    assert await reactions_of(fake.general, thread, in_thread["id"]) == ()
    # a custom emoji is known by its id: renamed since it was added, it still comes off
    await fake.react(said["id"], bob, "shipit:424242424242424242")
    await fake.react(said["id"], fake.alice, "shipit:424242424242424242")
    await fake.react(said["id"], bob, "ship_it:424242424242424242", remove=True)
    await fake.post_message(fake.general, fake.alice, f"<@{fake.bot_id}> one left?")
    await agent.wait_runs(3)
    await board.wait_idle()
    assert await reactions_of(fake.general, None, said["id"]) == (
        ("Bob", "👍"),
        ("Alice", ":shipit:"),
    )
    await fake.clear_reactions(said["id"], "shipped:424242424242424242")
    await fake.post_message(fake.general, fake.alice, f"<@{fake.bot_id}> none?")
    await agent.wait_runs(4)
    await board.wait_idle()
    assert await reactions_of(fake.general, None, said["id"]) == (("Bob", "👍"),)


async def test_super_reactions_are_kept_apart_from_normal_ones_and_cleared_with_them(
    fake: FakeDiscord, store: SQLiteStore, board_for: Any
) -> None:
    agent = RecordingAgent(lambda run: "noted")
    board = await board_for(agent, respond="mention")
    said = await fake.post_message(fake.general, fake.alice, "ship it?")
    bob = fake.add_user("bob", global_name="Bob")
    await fake.react(said["id"], bob, "🔥")
    await fake.react(said["id"], bob, "🔥", burst=True)
    await fake.react(said["id"], bob, "party_parrot:123456789012345678", burst=True)
    await fake.react(said["id"], bob, "🔥", remove=True, burst=True)  # the super one only

    async def settled(runs: int) -> tuple[tuple[str, str], ...]:
        await fake.post_message(fake.general, fake.alice, f"<@{fake.bot_id}> {runs}?")
        await agent.wait_runs(runs)
        await board.wait_idle()
        conversation = await store.find_conversation(Address("main", fake.general))
        assert conversation is not None
        message = await store.message_by_platform_id(conversation.id, said["id"])
        assert message is not None
        return message.reactions

    assert await settled(1) == (("Bob", "🔥"), ("Bob", ":party_parrot: (super)"))
    # a moderator's clear of one emoji takes its normal and its super reactions
    await fake.react(said["id"], fake.alice, "party_parrot:123456789012345678")
    await fake.clear_reactions(said["id"], "party_parrot:123456789012345678")
    assert await settled(2) == (("Bob", "🔥"),)


async def test_role_and_channel_mentions_are_named_from_discords_cache(
    fake: FakeDiscord, board_for: Any
) -> None:
    agent = RecordingAgent(lambda run: "on it")
    board = await board_for(agent, respond="mention")
    role = fake.bot_role_id(fake.guild_id)
    bob = fake.add_user("bob", global_name="Bob")
    await fake.post_message(
        fake.general, fake.alice, f"<@&{role}> and <@{bob}>: see <#{fake.general}>"
    )
    await agent.wait_runs(1)  # the bot's role mentioned: a mention of the bot
    await board.wait_idle()
    (run,) = agent.runs
    assert run.messages[-1]["content"].split(": ", 1)[1] == (
        f"@backchannel-bot (<@&{role}>) and @Bob (<@{bob}>): see #general (<#{fake.general}>)"
    )

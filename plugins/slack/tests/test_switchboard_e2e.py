"""End to end: FakeSlack <-> slack-sdk <-> SlackAdapter <-> Switchboard <-> an agent."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from backchannel.errors import Rejected
from backchannel.model import Address
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel_slack import SlackAdapter
from backchannel_slack.testing import Delivery, FakeSlack


@pytest.fixture
async def board_for(store: SQLiteStore) -> AsyncIterator[Any]:
    boards: list[Switchboard] = []

    async def make(
        fake: FakeSlack, agent: Any, mode: str = "socket", **binding: Any
    ) -> Switchboard:
        adapter = SlackAdapter("work", fake.settings(mode=mode, lookup_timeout=3.0))
        board = Switchboard(store, port=0 if mode == "events" else None)
        board.add_account(
            adapter,
            Binding(agent, **binding),
            secrets=[fake.bot_token, fake.app_token, fake.signing_secret],
        )
        await board.start()
        boards.append(board)
        if mode == "events":
            assert adapter.events_url is not None
            assert adapter.events_url.startswith(board.url or "?")
            fake.use_events_api(adapter.events_url)
        return board

    yield make
    for board in boards:
        await board.stop()


def greet(run: Any) -> str:
    return f"hello {run.trigger.sender.label}"


@pytest.mark.parametrize("mode", ["socket", "events"])
async def test_mention_in_channel_opens_a_thread_conversation_and_reply_lands_in_it(
    slack: FakeSlack, store: SQLiteStore, board_for: Any, mode: str
) -> None:
    agent = RecordingAgent(greet)
    board = await board_for(slack, agent, mode, respond="mention")
    chatter = slack.message("C0GENERAL", "U0BOB", "just chatting")
    await slack.deliver(chatter)
    asked = slack.user_says("C0GENERAL", "U0ALICE", f"<@{slack.bot_user_id}> status?")
    await slack.deliver_all(asked)
    root = asked[0]["event"]["ts"]
    await agent.wait_runs(1)
    await board.wait_idle()
    (run,) = agent.runs
    assert run.conversation.kind == "thread"
    assert run.conversation.address.thread == root
    assert [m["content"].split(": ", 1)[-1] for m in run.messages] == [
        f"<@{slack.bot_user_id}> status?"
    ]
    assert "Slack" in run.instruction
    assert f"(@{slack.bot_user_id})" in run.instruction  # the agent can tell <@U0FAKEBOT> is itself
    (post,) = await slack.wait_posts(1)
    assert (post["channel"], post["thread_ts"], post["text"]) == ("C0GENERAL", root, "hello Alice")

    # a follow-up in that thread, without a mention, reaches the bot: it takes part there
    follow = slack.message("C0GENERAL", "U0ALICE", "and the logs?", thread_ts=root)
    await slack.deliver(follow)
    await agent.wait_runs(2)
    await board.wait_idle()
    assert agent.runs[1].conversation.id == run.conversation.id
    assert [p["thread_ts"] for p in slack.posts] == [root, root]
    transcript = await store.window(run.conversation.id, 10)
    assert [(m.direction, m.text) for m in transcript] == [
        ("in", f"<@{slack.bot_user_id}> status?"),
        ("out", "hello Alice"),
        ("in", "and the logs?"),
        ("out", "hello Alice"),
    ]
    top = await store.find_conversation(run.conversation.address.__class__("work", "C0GENERAL"))
    assert top is not None and [m.text for m in await store.window(top.id, 10)] == ["just chatting"]


@pytest.mark.parametrize("mode", ["socket", "events"])
async def test_dm_gets_an_answer_at_top_level(
    slack: FakeSlack, store: SQLiteStore, board_for: Any, mode: str
) -> None:
    agent = RecordingAgent(greet)
    board = await board_for(slack, agent, mode, respond="mention")
    await slack.deliver(slack.message("D0ALICE", "U0ALICE", "a private question"))
    await agent.wait_runs(1)
    await board.wait_idle()
    (run,) = agent.runs
    assert run.conversation.kind == "direct"
    assert run.conversation.title == "Alice"
    (post,) = await slack.wait_posts(1)
    assert (post["channel"], post["thread_ts"], post["text"]) == ("D0ALICE", None, "hello Alice")


async def test_own_echoes_never_trigger_a_run(
    slack: FakeSlack, store: SQLiteStore, board_for: Any
) -> None:
    agent = RecordingAgent(greet)
    board = await board_for(slack, agent, "socket", respond="always")
    for text in ("one", "two", "three"):
        delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", text))
        await slack.wait_acked(delivery.event_id)
        await board.wait_idle()
    await slack.wait_posts(3)

    def echoes() -> list[Delivery]:
        return [
            d
            for d in slack.deliveries.values()
            if d.payload["event"].get("user") == slack.bot_user_id
        ]

    await slack.wait_for(
        lambda: len(echoes()) == 3 and all(d.acked.is_set() for d in echoes()),
        what="every echo acked",
    )
    await board.wait_idle()
    assert len(agent.runs) == 3
    assert board.counters["ignored"] >= 3
    conversation = await store.find_conversation(agent.runs[0].conversation.address)
    assert conversation is not None
    rows = await store.window(conversation.id, 20)
    assert [m.direction for m in rows].count("out") == 3
    assert [m.direction for m in rows].count("in") == 3


@pytest.mark.parametrize("mode", ["socket", "events"])
async def test_retry_while_first_delivery_is_processing_is_stored_once_and_answered_once(
    store: SQLiteStore, board_for: Any, mode: str
) -> None:
    # Slack retries every ~0.3-0.8 s; the first delivery is held ~1 s by a slow lookup.
    # Enough retries that a loaded machine still sees one succeed after the commit.
    async with FakeSlack(
        ack_timeout=0.3, http_timeout=0.3, retry_delays=(0.0, 0.2, 0.5), max_retries=8
    ) as slack:
        agent = RecordingAgent(greet)
        board = await board_for(slack, agent, mode)
        slack.fail_next("users.info", "slow", delay=1.0)  # the first delivery takes ~1 s
        payload = slack.message("D0ALICE", "U0ALICE", "are you there?")
        delivery = await slack.deliver(payload)
        await slack.wait_acked(delivery.event_id)
        await agent.wait_runs(1)
        await board.wait_idle()
        adapter = board.accounts["work"].adapter
        assert adapter.counters["joined"] >= 1  # Slack's retry arrived while the first was busy
        assert (mode == "socket" and len(delivery.envelopes) >= 2) or (
            mode == "events" and len(delivery.attempts) >= 2
        )
        assert len(agent.runs) == 1
        assert [p["text"] for p in slack.posts] == ["hello Alice"]
        conversation = await store.find_conversation(agent.runs[0].conversation.address)
        assert conversation is not None
        rows = await store.window(conversation.id, 10)
        assert [(m.direction, m.text) for m in rows] == [
            ("in", "are you there?"),
            ("out", "hello Alice"),
        ]


@pytest.mark.parametrize("mode", ["socket", "events"])
async def test_reactions_show_on_their_message_in_a_thread_and_never_start_a_run(
    slack: FakeSlack, store: SQLiteStore, board_for: Any, mode: str
) -> None:
    agent = RecordingAgent(greet)
    board = await board_for(slack, agent, mode, respond="mention")
    asked = slack.user_says("C0GENERAL", "U0ALICE", f"<@{slack.bot_user_id}> deploy?")
    await slack.deliver_all(asked)
    root = asked[0]["event"]["ts"]
    await agent.wait_runs(1)
    await board.wait_idle()
    thread = agent.runs[0].conversation
    reply = slack.message("C0GENERAL", "U0BOB", "it is green", thread_ts=root)
    reply_ts = reply["event"]["ts"]
    # Slack names the channel and the message, not the thread
    await slack.deliver(reply)
    await agent.wait_runs(2)  # a reply in the bot's thread is for the bot
    await board.wait_idle()
    removal = slack.reaction("C0GENERAL", "U0BOB", "eyes", reply_ts, removed=True)
    for payload in (
        slack.reaction("C0GENERAL", "U0ALICE", "tada", reply_ts),
        slack.reaction("C0GENERAL", "U0BOB", "eyes", reply_ts),
        removal,
    ):
        delivery = await slack.deliver(payload)
        await asyncio.wait_for(delivery.acked.wait(), 10)
    await board.wait_idle()
    shown = await store.message_by_platform_id(thread.id, reply_ts)
    assert shown is not None
    assert shown.reactions == (("Alice", ":tada:"),)
    # nothing was made for the channel's top level, and no reaction started a run
    assert await store.find_conversation(Address("work", "C0GENERAL")) is None
    assert len(agent.runs) == 2


async def test_a_first_send_to_a_conversation_slack_does_not_know_makes_no_conversation(
    slack: FakeSlack, store: SQLiteStore, board_for: Any
) -> None:
    board = await board_for(slack, RecordingAgent(greet))
    refused = {
        Address("work", "C0NOPE"): "channel_not_found",
        Address("work", "general"): "is not a Slack conversation id",
        Address("work", "C0GENERAL", "yesterday"): "is not a Slack message ts",
    }
    for address, reason in refused.items():
        with pytest.raises(Rejected, match=reason):
            await board.send(address, "hello?")
        assert await store.find_conversation(address) is None
    assert slack.posts == []
    general = Address("work", "C0GENERAL")
    assert (await board.send(general, "hello")).startswith("sent")
    assert await store.find_conversation(general) is not None
    # when Slack cannot be asked, the address is taken and the send tells what happened
    slack.fail_next("conversations.info", "server_error", times=2)  # the read retries once
    elsewhere = Address("work", "C0ELSEWHERE")
    outcome = await board.send(elsewhere, "hello?")
    assert "channel_not_found" in outcome
    assert await store.find_conversation(elsewhere) is not None


async def test_a_missing_read_scope_lets_sends_through_and_is_said_once(
    slack: FakeSlack, store: SQLiteStore, board_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    board = await board_for(slack, RecordingAgent(greet))
    slack.fail_next("conversations.info", "error", error="missing_scope", times=2)
    with caplog.at_level(logging.WARNING, logger="backchannel_slack"):
        for chat in ("C0GENERAL", "C0NOPE"):
            await board.send(Address("work", chat), "hello")
    said = [r.getMessage() for r in caplog.records if "cannot check a new address" in r.message]
    assert len(said) == 1 and "channels:read scope" in said[0], said
    assert [post["channel"] for post in slack.posts] == ["C0GENERAL"]  # C0NOPE: failed

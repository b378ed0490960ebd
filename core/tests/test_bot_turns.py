"""Two bots that answer each other stop: `bot_turns` (Policy, binding setting).

Once the agent has answered bots `bot_turns` times in a conversation since a
person last wrote there, a bot's message is stored and shown but starts no run:
a stopped run is recorded instead. A person writing starts the count again.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Literal

import pytest
from attrs import evolve
from backchannel.app import ChatPolicy
from backchannel.config import load_config
from backchannel.errors import ConfigError
from backchannel.model import Address, Outbound, Receipt, Sender
from backchannel.policy import BOT_TURNS, Policy
from backchannel.runlog import failure_line, run_reports
from backchannel.runs import Run, WindowSettings, _BotAnswers, _MessageWindow, _RowWindow
from backchannel.store import Inbound, SQLiteStore, Store
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import FakeChannel, RecordingAgent
from backchannel.testing.store_contract import make_event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ME = Sender("me", "Agent", "agent", True)
PERSON = Sender("alice", "Alice")
BOT = Sender("otherbot", "Other Bot", "otherbot", True)
NOTICE = Sender.unknown()


async def _board(
    store: SQLiteStore, binding: Binding, *, agent_peers: bool = False
) -> tuple[Switchboard, FakeChannel]:
    channel = FakeChannel()
    board = Switchboard(store)
    adapter = channel.adapter("fake")
    if agent_peers:  # a channel whose peers are all agents, as tiny.place
        adapter.capabilities = evolve(adapter.capabilities, agent_peers=True)
    board.add_account(adapter, binding)
    await board.start()
    return board, channel


async def _says(board: Switchboard, channel: FakeChannel, text: str, *, bot: bool) -> None:
    """A message in the group (committed), then everything it started has finished."""
    raw = channel.platform.make_message(
        text,
        chat="g1",
        chat_type="group",
        sender="otherbot" if bot else "alice",
        is_bot=bot,
    )
    result = await board.ingest("fake", raw)
    assert result.status == "stored"
    await board.wait_idle()


async def test_a_bot_answering_every_answer_is_answered_bot_turns_times_then_stops(
    store: SQLiteStore,
) -> None:
    agent = RecordingAgent(lambda run: f"re: {run.trigger.text if run.trigger else '?'}")
    board, channel = await _board(store, Binding(agent, respond="always", bot_turns=3))
    for n in range(6):  # the other bot answers whatever we say
        await _says(board, channel, f"bot {n}", bot=True)
    assert channel.platform.texts("g1") == ["re: bot 0", "re: bot 1", "re: bot 2"]
    assert len(agent.runs) == 3
    assert board.counters["bot_turns_spent"] == 3
    conversation = (await store.conversations())[0]
    assert conversation.handled_seq == conversation.last_seq  # nothing owed, nothing retried
    # what the bot said is kept, and shown to the next run
    window = await store.window(conversation.id, 50)
    assert [m.text for m in window if m.direction == "in"][-1] == "bot 5"

    # a stopped run is on record: `runs` and `show` say why
    reports = await run_reports(store, conversation)
    stopped = [r for r in reports if r.run.status == "stopped"]
    assert len(stopped) == 3
    assert "bot_turns = 3" in stopped[0].error_line
    assert "'otherbot'" in stopped[0].error_line
    assert "run " in failure_line(stopped[0]) and "stopped, nothing sent" in failure_line(
        stopped[0]
    )

    # a person writes: runs start again, and so does the count
    await _says(board, channel, "hello both", bot=False)
    for n in range(6, 10):
        await _says(board, channel, f"bot {n}", bot=True)
    assert channel.platform.texts("g1")[3:] == [
        "re: hello both",
        "re: bot 6",
        "re: bot 7",
        "re: bot 8",
    ]
    assert board.counters["bot_turns_spent"] == 4
    last = agent.runs[-1]
    assert last.trigger is not None and last.trigger.text == "bot 8"
    await board.stop()


async def test_the_default_stops_a_loop_and_zero_lets_it_run(store: SQLiteStore) -> None:
    agent = RecordingAgent(lambda run: "ok")
    board, channel = await _board(store, Binding(agent, respond="always"))
    for n in range(BOT_TURNS + 2):
        await _says(board, channel, f"bot {n}", bot=True)
    assert len(agent.runs) == BOT_TURNS
    await board.stop()


async def test_with_bot_turns_zero_a_bot_is_always_answered(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    agent = RecordingAgent(lambda run: "ok")
    board, channel = await _board(store, Binding(agent, respond="always", bot_turns=0))
    for n in range(BOT_TURNS + 3):
        await _says(board, channel, f"bot {n}", bot=True)
    assert len(agent.runs) == BOT_TURNS + 3
    assert board.counters["bot_turns_spent"] == 0
    await board.stop()
    await store.close()


@pytest.mark.parametrize("bot_turns", [None, 2])
async def test_where_every_peer_is_an_agent_there_is_no_limit_unless_one_is_set(
    store: SQLiteStore, bot_turns: int | None
) -> None:
    """On tiny.place every peer is an agent and no person writing is the norm (an agent
    asked many questions in one session answers each): no default limit there."""
    agent = RecordingAgent(lambda run: "ok")
    board, channel = await _board(
        store, Binding(agent, respond="always", bot_turns=bot_turns), agent_peers=True
    )
    for n in range(BOT_TURNS + 2):
        await _says(board, channel, f"question {n}", bot=True)
    assert len(agent.runs) == (BOT_TURNS + 2 if bot_turns is None else bot_turns)
    await board.stop()


async def test_a_person_is_answered_whatever_the_bots_did(store: SQLiteStore) -> None:
    agent = RecordingAgent(lambda run: "ok")
    board, channel = await _board(store, Binding(agent, respond="always", bot_turns=1))
    await _says(board, channel, "bot 0", bot=True)
    await _says(board, channel, "bot 1", bot=True)  # stopped
    await _says(board, channel, "me now", bot=False)
    await _says(board, channel, "and again", bot=False)
    assert [run.trigger.text for run in agent.runs if run.trigger] == [
        "bot 0",
        "me now",
        "and again",
    ]
    await board.stop()


async def test_a_stopped_run_keeps_the_notes_for_the_next_run(store: SQLiteStore) -> None:
    agent = RecordingAgent(lambda run: "ok")
    board, channel = await _board(store, Binding(agent, respond="always", bot_turns=1))
    await _says(board, channel, "bot 0", bot=True)
    conversation = (await store.conversations())[0]
    board.scheduler.add_note(conversation.id, "a note for the next run")
    await _says(board, channel, "bot 1", bot=True)  # stopped: the note waits
    await _says(board, channel, "a person", bot=False)
    assert "a note for the next run" in agent.runs[-1].instruction
    assert "a note for the next run" not in agent.runs[0].instruction
    await board.stop()


def test_bot_turns_is_a_binding_setting_checked_per_chat(tmp_path: Path) -> None:
    text = """
[agents.a]
kind = "demo"
[accounts.web]
channel = "webchat"
[[bindings]]
agent = "a"
chats = ["loud"]
bot_turns = 0
[[bindings]]
agent = "a"
"""
    path = tmp_path / "b.toml"
    path.write_text(text)
    config = load_config(path)
    assert [b.bot_turns for b in config.bindings] == [0, None]  # None: the channel's default
    assert config.summary()["bindings"][0]["bot_turns"] == 0
    policy = ChatPolicy(by_chat={"loud": Policy(bot_turns=0)}, fallback=Policy(bot_turns=4))
    assert (policy.bot_turns_in("loud"), policy.bot_turns_in("other")) == (0, 4)
    assert ChatPolicy(by_chat={"x": Policy()}).bot_turns_in("unbound") == 0
    for bad, said in (
        ("-1", "expected a whole number from 0 (no limit) to 500"),
        ("501", "got 501"),
        ('"many"', "bot_turns"),
    ):
        path.write_text(text.replace("bot_turns = 0", f"bot_turns = {bad}"))
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert "bindings[0].bot_turns" in str(caught.value) and said in str(caught.value)


# the count, on both shapes of window, against a model of what it means ------------------

#: our messages: sent, failed, uncertain and pending by a run of the conversation;
#: "elsewhere" by a run of another conversation (a cross send, an ask's question);
#: "operator" by no run (an operator's, an MCP client's, a verbatim report); "report" by
#: a reporter run
STEPS = (
    "person",
    "bot",
    "notice",
    "sent",
    "failed",
    "uncertain",
    "pending",
    "elsewhere",
    "operator",
    "report",
)


def _model(steps: list[str]) -> int:
    """Answers to bots since a person last wrote, counted forwards: a stretch of our
    messages right after a bot's message is one answer; failed sends, and what a run of
    another conversation sent, are no answer; a notice that names no one is skipped."""
    answers, last = 0, None
    for step in steps:
        if step == "person":
            answers, last = 0, "person"
        elif step == "bot":
            last = "bot"
        elif step in ("sent", "uncertain", "pending", "operator", "report"):
            if last == "bot":
                answers += 1
            last = "ours"
    return answers


async def _stored(store: Store, steps: list[str]) -> int:
    senders = {"person": PERSON, "bot": BOT, "notice": NOTICE}
    conversation_id = 0
    other = (await store.ensure_conversation(Address("acct", "other"))).id
    for n, step in enumerate(steps):
        if step in senders or not conversation_id:
            sender = senders.get(step, PERSON)
            (appended,) = await store.append_inbound(
                [Inbound(make_event(f"e{n}", f"says {n}", sender=sender, chat="g"))]
            )
            conversation_id = appended.conversation_id
            if step in senders:
                continue
        conversation = await store.conversation(conversation_id)
        run_id = None
        if step != "operator":
            by = other if step == "elsewhere" else conversation_id
            trigger = 0 if step == "report" else max(conversation.last_seq, 1)
            run_id = await store.begin_run(by, trigger, conversation.last_seq)
        origin = "acct/other" if step == "elsewhere" else None
        entry = await store.record_outbound(
            conversation_id,
            Outbound(conversation.address, f"ours {n}", origin=origin),
            ME,
            run_id,
        )
        if step in ("sent", "elsewhere", "operator", "report"):
            await store.mark_sent(entry.id, Receipt(f"p{n}"))
        elif step == "failed":
            await store.mark_failed(entry.id, "refused")
        elif step == "uncertain":
            await store.mark_uncertain(entry.id, "timeout")
    return conversation_id


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(STEPS), min_size=1, max_size=30))
def test_the_count_of_answers_to_bots_follows_its_definition(steps: list[str]) -> None:
    async def check() -> None:
        with tempfile.TemporaryDirectory() as directory:
            store = SQLiteStore(Path(directory) / "s.db")
            try:
                if steps[0] not in ("person", "bot", "notice"):
                    steps.insert(0, "person")  # the conversation starts with someone writing
                conversation_id = await _stored(store, steps)
                rows = await store.window_rows(conversation_id, 100, 10_000)
                messages = await store.window(conversation_id, 100)
                expected = _model(steps)
                for_others = await store.sent_for_others(conversation_id, 0, 10_000)
                for window in (_RowWindow(list(rows)), _MessageWindow(messages)):
                    tally = _BotAnswers(100, for_others)
                    window.tally(tally)
                    assert tally.answers == expected
            finally:
                await store.close()

    asyncio.run(check())


async def test_the_count_reads_past_a_window_too_short_to_hold_it(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Long messages (or a small window) leave fewer answers in the window than the limit:
    the count reads on through the store, so the loop stops all the same, and stays
    stopped however many more messages the bot writes until a person does."""
    agent = RecordingAgent(lambda run: "a long answer " * 20)
    window = WindowSettings(messages=4, chars=24_000)
    binding = Binding(agent, window=window, respond="always", bot_turns=3)
    board, channel = await _board(store, binding)
    for n in range(8):
        await _says(board, channel, f"bot {n}", bot=True)
    assert len(agent.runs) == 3
    for n in range(8, 40):  # unanswered, they push the answers far out of the window
        await _says(board, channel, f"bot {n}", bot=True)
    assert len(agent.runs) == 3
    assert board.counters["bot_turns_spent"] == 37
    # a runaway bot is stopped at each message: one warning, the rest counted
    stops = [r for r in caplog.records if r.levelname == "WARNING" and "bot_turns" in r.message]
    assert len(stops) == 1
    await _says(board, channel, "a person", bot=False)
    await _says(board, channel, "bot 40", bot=True)
    assert len(agent.runs) == 5
    await board.stop()


async def test_an_asks_question_is_no_answer_to_the_bot_before_it(store: SQLiteStore) -> None:
    """The agent asks a peer agent three questions in one session, each answered: the
    questions come right after the peer's answers but answer nothing, so the peer's own
    first request is answered even with bot_turns = 2."""
    from backchannel.asks import AskCoordinator, AskSettings
    from backchannel.asks.asking import ask_peer
    from backchannel.model import Address

    agent = RecordingAgent(lambda run: "sure")
    board, channel = await _board(
        store, Binding(agent, respond="always", bot_turns=2), agent_peers=True
    )
    AskCoordinator(board, AskSettings()).attach()
    await store.ensure_conversation(Address("fake", "peer", "s1"), kind="thread")

    async def peer_says(text: str) -> None:
        raw = channel.platform.make_message(
            text, chat="peer", thread="s1", sender="peer", is_bot=True
        )
        assert (await board.ingest("fake", raw)).status == "stored"
        await board.wait_idle()

    for n in range(3):
        outcome = await ask_peer(
            board,
            AskSettings(),
            origin=None,
            origin_seq=None,
            account="fake",
            peer="peer",
            session="s1",
            question=f"q{n}?",
        )
        assert outcome.state == "pending", outcome
        await peer_says(f"answer {n}")
    assert agent.runs == []  # the answers were the asks'
    await peer_says("could you review my PR?")
    assert [run.trigger.text for run in agent.runs if run.trigger] == ["could you review my PR?"]
    session = await store.find_conversation(Address("fake", "peer", "s1"))
    assert session is not None
    assert [m.text for m in await store.window(session.id, 20)][:2] == ["q0?", "answer 0"]
    await board.stop()


async def _what_spoke_for_others(store: Store) -> None:
    """A run of another conversation's send, and an ask's question whoever asked."""
    conversation_id = await _stored(
        store, ["bot", "sent", "elsewhere", "operator", "report", "elsewhere", "pending"]
    )
    conversation = await store.conversation(conversation_id)
    question = await store.record_outbound(
        conversation_id, Outbound(conversation.address, "an mcp question"), ME
    )
    await store.record_ask(
        origin_conversation_id=0,
        origin_seq=None,
        peer_conversation_id=conversation_id,
        question="an mcp question",
        deadline=4e9,
        message_seq=question.message_seq,
        outbox_id=question.id,
    )
    others = await store.sent_for_others(conversation_id, 0, 100)
    window = await store.window(conversation_id, 20)
    assert sorted(m.text for m in window if m.seq in others) == [
        "an mcp question",
        "ours 2",
        "ours 5",
    ]
    assert await store.sent_for_others(conversation_id, 3, 6) == {
        m.seq for m in window if m.text == "ours 5"
    }


async def test_what_spoke_for_others_on_sqlite(store: SQLiteStore) -> None:
    await _what_spoke_for_others(store)


async def test_what_spoke_for_others_on_postgresql(postgres_url: str) -> None:
    from backchannel.store.postgres import PostgresStore

    store = PostgresStore(postgres_url)
    try:
        await _what_spoke_for_others(store)
    finally:
        await store.close()


@pytest.mark.parametrize("report", ["run", "verbatim"])
async def test_a_bot_answered_by_asking_another_agent_stops_too(
    store: SQLiteStore, report: Literal["run", "verbatim"]
) -> None:
    """A bot's message makes the agent ask a peer agent, and the peer's answer is reported
    to the bot's conversation (by a reporter run, or posted as is): the report is the
    agent answering the bot there, and the bot answering reports would loop for ever."""
    from backchannel.asks import AskCoordinator, AskSettings
    from backchannel.asks.asking import ask_peer

    settings = AskSettings(report=report)
    boards: list[Switchboard] = []

    async def ask(run: Run) -> None:
        if run.trigger is not None and run.trigger.text.startswith("bot"):
            await ask_peer(
                boards[0],
                settings,
                origin=run.conversation,
                origin_seq=run.trigger.seq,
                account="fake",
                peer="peer",
                session="s1",
                question=f"what about {run.trigger.text}?",
                run_id=run.session.run_id,
            )

    agent = RecordingAgent(lambda run: "reported" if run.trigger is None else None, action=ask)
    board, channel = await _board(
        store, Binding(agent, respond="always", bot_turns=2), agent_peers=True
    )
    boards.append(board)
    AskCoordinator(board, settings).attach()
    await store.ensure_conversation(Address("fake", "peer", "s1"), kind="thread")
    for n in range(6):
        await _says(board, channel, f"bot {n}", bot=True)
        raw = channel.platform.make_message(
            f"answer {n}", chat="peer", thread="s1", sender="peer", is_bot=True
        )
        assert (await board.ingest("fake", raw)).status == "stored"
        await board.wait_idle()
    assert len(channel.platform.texts("g1")) == 2  # two answers reported, then stopped
    assert board.counters["bot_turns_spent"] == 4
    await board.stop()

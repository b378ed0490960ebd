"""The switchboard end to end over FakeChannel: ingest, policy, scheduling, delivery, recovery."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backchannel.errors import StoreError
from backchannel.model import Address
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import RESTART_NOTE, Binding, Switchboard
from backchannel.testing import FakeChannel, RecordingAgent


def reply_with(text: str) -> RecordingAgent:
    return RecordingAgent(lambda run: text)


async def started(store: SQLiteStore, channel: FakeChannel, binding: Binding) -> Switchboard:
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), binding)
    await board.start()
    return board


async def test_direct_message_gets_a_reply_to_that_message(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = reply_with("hello Alice")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi bot")
    await agent.wait_runs(1)
    await board.wait_idle()
    (sent,) = channel.platform.sent
    assert sent.text == "hello Alice"
    assert sent.reply_to is not None
    run = agent.runs[0]
    assert run.trigger is not None and run.trigger.text == "hi bot"
    assert run.messages[-1] == {"role": "user", "content": "[#1] Alice: hi bot"}
    window = await store.window(run.conversation.id, 10)
    assert [(m.direction, m.status) for m in window] == [("in", "received"), ("out", "sent")]
    await board.stop()


async def test_own_echo_never_triggers_a_run(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = reply_with("x")
    board = await started(store, channel, Binding(agent))
    channel.platform.bot_echo("my own words")
    channel.platform.user_says("real message")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert len(agent.runs) == 1
    assert board.counters["ignored"] == 1
    await board.stop()


async def test_group_message_without_mention_is_context_not_a_trigger(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = reply_with("on it")
    board = await started(store, channel, Binding(agent, respond="mention"))
    channel.platform.user_says("chatter", chat="g", chat_type="group", title="Ops")
    channel.platform.user_says("@bot help", chat="g", chat_type="group", sender="bob", mention=True)
    await agent.wait_runs(1)
    await board.wait_idle()
    (run,) = agent.runs
    assert [m["content"] for m in run.messages] == ["[#1] Alice: chatter", "[#2] Bob: @bot help"]
    assert 'group conversation called "Ops"' in run.instruction
    await board.stop()


async def test_held_sender_is_stored_counted_and_never_shown(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = reply_with("ok")
    board = await started(store, channel, Binding(agent, access="allowlist", allow=["alice"]))
    channel.platform.user_says("let me in", sender="mallory")
    channel.platform.user_says("hello", sender="alice")
    await agent.wait_runs(1)
    await board.wait_idle()
    (run,) = agent.runs
    assert all("let me in" not in m["content"] for m in run.messages)
    assert "mallory" not in run.instruction.lower()
    conversation = await store.conversation(run.conversation.id)
    assert conversation.held_count == 1
    assert board.counters["held"] == 1
    await board.stop()


async def test_messages_during_a_run_lead_to_one_follow_up_run(store: SQLiteStore) -> None:
    channel = FakeChannel()
    gate = asyncio.Event()
    started_run = asyncio.Event()

    async def slow(run: Run) -> None:
        started_run.set()
        await gate.wait()

    agent = RecordingAgent(action=slow)
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("one")
    await started_run.wait()
    for text in ("two", "three", "four"):
        channel.platform.user_says(text)
    await channel_ingested(board, 4)
    gate.set()
    await agent.wait_runs(2)
    await board.wait_idle()
    assert len(agent.runs) == 2
    assert agent.runs[1].messages[-1]["content"] == "[#4] Alice: four"
    await board.stop()


async def test_messages_taken_mid_run_need_no_follow_up(store: SQLiteStore) -> None:
    channel = FakeChannel()
    more = asyncio.Event()
    taken: list[dict[str, str]] = []

    async def steer(run: Run) -> None:
        await more.wait()
        taken.extend(await run.new_messages())

    agent = RecordingAgent(action=steer)
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("one")
    await channel_ingested(board, 1)
    channel.platform.user_says("two")
    await channel_ingested(board, 2)
    more.set()
    await agent.wait_runs(1)
    await board.wait_idle()
    assert len(agent.runs) == 1
    assert taken == [{"role": "user", "content": "[#2] Alice: two"}]
    conversation = await store.conversation(agent.runs[0].conversation.id)
    assert conversation.handled_seq == 2
    await board.stop()


async def test_debounce_turns_a_burst_into_one_run(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = reply_with("all of it")
    board = await started(store, channel, Binding(agent, debounce=0.2, max_wait=5))
    for n in range(5):
        channel.platform.user_says(f"part {n}")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert len(agent.runs) == 1
    assert len(agent.runs[0].messages) == 5
    await board.stop()


async def test_rate_limited_send_is_retried_after_retry_after(store: SQLiteStore) -> None:
    channel = FakeChannel()
    channel.platform.fail_next_send("rate_limited", 0.05)
    channel.platform.fail_next_send("rate_limited", 0.05)
    agent = reply_with("eventually")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert channel.platform.texts() == ["eventually"]
    assert agent.results[0].startswith("sent as #2")
    await board.stop()


async def test_uncertain_send_is_not_retried_and_the_agent_is_told(store: SQLiteStore) -> None:
    channel = FakeChannel()
    channel.platform.fail_next_send("uncertain")
    agent = reply_with("maybe")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert channel.platform.texts() == []
    assert "do not resend" in agent.results[0]
    (entry,) = await store.outbox()
    assert entry.status == "uncertain"
    await board.stop()


async def test_rejected_send_is_not_retried_and_recorded_failed(store: SQLiteStore) -> None:
    channel = FakeChannel()
    channel.platform.fail_next_send("rejected")
    agent = reply_with("nope")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert "NOT delivered: fake platform: chat not found" in agent.results[0]
    assert [e.status for e in await store.outbox()] == ["failed"]
    await board.stop()


async def test_failing_agent_is_recorded_and_the_board_keeps_serving(store: SQLiteStore) -> None:
    channel = FakeChannel()
    calls = 0

    async def flaky(run: Run) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("model exploded")
        await run.call("send_message", {"text": "recovered"})

    agent = RecordingAgent(action=flaky)
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("first")
    await agent.wait_runs(1)
    channel.platform.user_says("second")
    await agent.wait_runs(2)
    await board.wait_idle()
    runs = await store.runs()
    assert [(r.status, r.error) for r in reversed(runs)] == [
        ("error", "ValueError: model exploded"),
        ("ok", None),
    ]
    assert channel.platform.texts() == ["recovered"]
    await board.stop()


async def test_hanging_agent_times_out_and_is_recorded(store: SQLiteStore) -> None:
    channel = FakeChannel()

    async def hang(run: Run) -> None:
        await asyncio.Event().wait()

    board = await started(store, channel, Binding(hang, run_timeout=0.2))
    channel.platform.user_says("anyone?")
    await channel_ingested(board, 1)
    await board.wait_idle()
    (run,) = await store.runs()
    assert run.status == "timeout"
    conversation = await store.conversation(run.conversation_id)
    assert conversation.handled_seq == 1
    await board.stop()


async def test_malformed_payload_is_counted_and_the_pipeline_goes_on(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = reply_with("fine")
    board = await started(store, channel, Binding(agent))
    channel.platform.push({"type": "message", "chat": {"id": "c1"}})
    channel.platform.user_says("still here")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert board.counters["malformed"] == 1
    (letter,) = await store.dead_letters()
    assert "from" in letter["reason"]
    await board.stop()


async def test_restart_runs_unanswered_conversations_again(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"
    channel = FakeChannel()
    never = asyncio.Event()

    async def stuck(run: Run) -> None:
        await never.wait()

    board = Switchboard(SQLiteStore(path), stop_timeout=0.1)
    board.add_account(channel.adapter("fake"), Binding(stuck))
    await board.start()
    channel.platform.user_says("are you there?")
    await channel_ingested(board, 1)
    await board.stop()  # the run is cancelled: the message stays unanswered

    agent = reply_with("yes, sorry")
    board = Switchboard(SQLiteStore(path))
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    await agent.wait_runs(1)
    await board.wait_idle()
    assert RESTART_NOTE in agent.runs[0].instruction
    assert channel.platform.texts() == ["yes, sorry"]
    await board.stop()


async def test_one_run_per_conversation_and_a_global_limit(store: SQLiteStore) -> None:
    channel = FakeChannel()
    running = 0
    peak = 0
    release = asyncio.Event()

    async def track(run: Run) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    agent = RecordingAgent(action=track)
    board = Switchboard(store, max_concurrent_runs=2)
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    for chat in ("a", "b", "c", "d"):
        channel.platform.user_says("hi", chat=chat)
    await channel_ingested(board, 4)
    await wait_until(lambda: running == 2)
    release.set()
    await agent.wait_runs(4)
    await board.wait_idle()
    assert peak == 2
    await board.stop()


async def test_edit_react_and_history_tools(store: SQLiteStore) -> None:
    channel = FakeChannel()
    results: list[str] = []

    async def act(run: Run) -> None:
        results.append(await run.call("send_message", {"text": "draft"}))
        results.append(await run.call("edit_message", {"message_id": 2, "text": "final"}))
        results.append(await run.call("react", {"message_id": 1, "emoji": "👍"}))
        results.append(await run.call("read_history", {"before_id": 2}))
        results.append(await run.call("edit_message", {"message_id": 1, "text": "hacked"}))
        results.append(await run.call("reply", {"message_id": 99, "text": "?"}))
        results.append(await run.call("reply", {"message_id": "one", "text": "?"}))
        results.append(await run.call("launch_rockets", {}))

    agent = RecordingAgent(action=act)
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hello")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert results[0] == "sent as #2"
    assert results[1] == "edit done" and results[2] == "reaction done"
    assert results[3] == "[#1] Alice: hello"
    assert "only edit your own" in results[4]
    assert results[5] == "error: there is no message #99 in this conversation"
    assert results[6].startswith("error: bad arguments for reply: message_id must be an integer")
    assert results[7].startswith("error: there is no tool called 'launch_rockets'")
    message = await store.message(agent.runs[0].conversation.id, 2)
    assert message is not None and message.text == "final"
    assert [m.kind for m in channel.platform.sent] == ["message", "edit", "reaction"]
    await board.stop()


async def test_operator_send_is_recorded_in_the_transcript(store: SQLiteStore) -> None:
    channel = FakeChannel()
    board = await started(store, channel, Binding(reply_with("x")))
    outcome = await board.send(Address("fake", "c9"), "from the operator")
    assert outcome == "sent as #1"
    conversation = await store.find_conversation(Address("fake", "c9"))
    assert conversation is not None
    (message,) = await store.window(conversation.id, 5)
    assert (message.direction, message.text) == ("out", "from the operator")
    await board.stop()


async def test_typing_is_shown_while_a_run_is_in_progress(store: SQLiteStore) -> None:
    channel = FakeChannel()
    seen: list[int] = []

    async def watch(run: Run) -> None:
        await wait_until(lambda: len(channel.platform.typing) > 0)
        seen.append(len(channel.platform.typing))

    board = await started(store, channel, Binding(RecordingAgent(action=watch)))
    channel.platform.user_says("hi", chat="t")
    await channel_ingested(board, 1)
    await board.wait_idle()
    assert seen and channel.platform.typing[0] == ("t", None)
    await board.stop()


async def test_an_agent_that_answers_without_waiting_shows_no_typing(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = RecordingAgent(lambda run: "at once")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi", chat="t")
    await agent.wait_runs(1)
    await board.wait_idle()
    # a slow agent's run shows it (the test above); one done before the next loop turn not
    assert channel.platform.typing == []
    assert channel.platform.texts("t") == ["at once"]
    await board.stop()


async def channel_ingested(board: Switchboard, count: int) -> None:
    await wait_until(lambda: board.counters["stored"] + board.counters["held"] >= count)


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll a cheap in-memory predicate on each loop turn (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


async def test_preview_knows_the_agent_from_its_last_start(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"
    channel = FakeChannel()
    agent = reply_with("hi")
    board = Switchboard(SQLiteStore(path))
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    channel.platform.user_says("hello")
    await agent.wait_runs(1)
    await board.stop()

    offline = Switchboard(SQLiteStore(path))  # never started, as `backchannel preview` does
    offline.add_account(channel.adapter("fake"), Binding(agent))
    run = await offline.build_run(1)
    assert "You take part in it as Bot (@bot)." in run.instruction
    await offline.stop()


async def test_operator_start_leaves_other_processes_work_alone(store: SQLiteStore) -> None:
    from backchannel.model import Outbound, Sender

    conversation = await store.ensure_conversation(Address("fake", "c1"))
    pending = await store.record_outbound(
        conversation.id, Outbound(conversation.address, "in flight elsewhere"), Sender("bot")
    )
    channel = FakeChannel()
    agent = reply_with("should not run")
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start_accounts(["fake"])
    assert await board.send(Address("fake", "c1"), "from the operator") == "sent as #2"
    assert [e.status for e in await store.outbox(status="pending")] == ["pending"]
    assert pending.id in [e.id for e in await store.outbox(status="pending")]
    assert agent.runs == []
    await board.stop()


async def test_a_plugin_breaking_the_run_build_is_recorded_not_retried_forever(
    store: SQLiteStore,
) -> None:
    from backchannel.hookspecs import hookimpl
    from backchannel.plugins import get_plugin_manager

    class Broken:
        @hookimpl
        def framing(self, conversation, channel, default):
            raise RuntimeError("framing plugin bug")

    pm = get_plugin_manager()
    pm.register(Broken(), name="broken-framing")
    try:
        channel = FakeChannel()
        agent = reply_with("never")
        board = await started(store, channel, Binding(agent))
        channel.platform.user_says("hello")
        await channel_ingested(board, 1)
        await board.wait_idle()
        (run,) = await store.runs()
        assert run.status == "error"
        assert run.error == "building the run failed: RuntimeError: framing plugin bug"
        assert agent.runs == []
        assert await store.unhandled() == []
        await board.stop()
    finally:
        pm.unregister(name="broken-framing")


async def test_one_unstorable_event_does_not_fail_anothers_ingest(store: SQLiteStore) -> None:
    import datetime

    from backchannel.testing.fake_channel import FakeChannelAdapter

    class Careless(FakeChannelAdapter):
        def normalize(self, raw):
            event = super().normalize(raw)
            if event is not None and event.text == "poison":
                import attrs

                return attrs.evolve(event, meta={"when": datetime.datetime.now()})
            return event

    a, b = FakeChannel(), FakeChannel()
    agent = reply_with("ok")
    board = Switchboard(store)
    board.add_account(a.adapter("a"), Binding(agent))
    board.add_account(Careless("b", {}, b.platform), Binding(agent))
    await board.start()
    good = board.ingest("a", {**a.platform.make_message("fine"), "update": 1})
    bad = board.ingest("b", {**b.platform.make_message("poison"), "update": 1})
    results = await asyncio.gather(good, bad)
    assert [r.status for r in results] == ["stored", "malformed"]
    assert "meta cannot be stored as JSON" in (results[1].reason or "")
    await board.wait_idle()
    await board.stop()


async def test_a_cancelled_ingest_still_gets_its_run(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = reply_with("answered anyway")
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    task = asyncio.create_task(
        board.ingest("fake", {**channel.platform.make_message("hi"), "update": 1})
    )
    await asyncio.sleep(0)  # the event is queued for the next commit
    task.cancel()
    await agent.wait_runs(1)
    await board.wait_idle()
    assert channel.platform.texts() == ["answered anyway"]
    await board.stop()


async def test_a_store_that_cannot_record_runs_is_retried_with_backoff(tmp_path: Path) -> None:
    from backchannel.errors import StoreError

    class Flaky(SQLiteStore):
        attempts = 0

        async def begin_run(self, conversation_id: int, trigger_seq: int, upto_seq: int) -> int:
            Flaky.attempts += 1
            if Flaky.attempts <= 2:
                raise StoreError("disk I/O error")
            return await super().begin_run(conversation_id, trigger_seq, upto_seq)

    channel = FakeChannel()
    agent = reply_with("finally")
    board = Switchboard(Flaky(tmp_path / "bc.db"))
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert Flaky.attempts == 3  # two refusals, each retried after a pause, not in a tight loop
    assert board.counters["run_errors"] == 2
    assert channel.platform.texts() == ["finally"]
    await board.stop()


async def test_a_delivered_send_the_store_cannot_record_at_once_is_still_sent(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the database restarting just as the platform took the message: the agent was told
    # "reply failed" (and would send it again), and the row stayed pending for good
    from backchannel import outbound

    monkeypatch.setattr(outbound, "RECORD_SENT_PAUSES", (0.0, 0.01, 0.01, 0.01))
    monkeypatch.setattr(outbound, "RECORD_SENT_LATER_PAUSES", (0.01, 0.01, 0.05))
    real = store.mark_sent
    failures: list[int] = []
    away_for = [2]

    async def away(outbox_id: int, receipt: Any) -> Any:
        if len(failures) < away_for[0]:
            failures.append(outbox_id)
            raise StoreError("connection to the database was lost")
        return await real(outbox_id, receipt)

    monkeypatch.setattr(store, "mark_sent", away)
    channel = FakeChannel()
    agent = reply_with("done")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert channel.platform.texts() == ["done"]
    assert len(failures) == 2 and agent.results[0].startswith("sent as #2")
    (entry,) = await store.outbox()
    assert entry.status == "sent"
    # away for longer than the run waits: told "sent" at once, recorded in the background
    # once the store is back
    failures.clear()
    away_for[0] = 4 + 2
    channel.platform.user_says("again")
    await agent.wait_runs(2)
    await board.wait_idle()
    assert channel.platform.texts() == ["done", "done"]
    assert agent.results[1].startswith("sent as #4") and "failed" not in agent.results[1]
    for _ in range(200):
        if [e.status for e in await store.outbox()] == ["sent", "sent"]:
            break
        await asyncio.sleep(0.02)
    assert [e.status for e in await store.outbox()] == ["sent", "sent"]
    assert len(failures) == 6
    await board.stop()


async def test_a_run_whose_end_cannot_be_recorded_at_once_is_recorded_when_it_can(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backchannel import scheduler

    monkeypatch.setattr(scheduler, "FINISH_RUN_PAUSES", (0.0, 0.01, 0.01))
    real = store.finish_run
    failures: list[int] = []

    async def away(run_id: int, *args: Any, **kwargs: Any) -> Any:
        if len(failures) < 2:
            failures.append(run_id)
            raise StoreError("connection to the database was lost")
        return await real(run_id, *args, **kwargs)

    monkeypatch.setattr(store, "finish_run", away)
    channel = FakeChannel()
    agent = reply_with("done")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert len(failures) == 2
    assert [r.status for r in await store.runs()] == ["ok"]  # not left "running"
    assert channel.platform.texts() == ["done"]
    await board.stop()


async def test_a_send_settled_elsewhere_while_it_waited_out_a_rate_limit_is_not_sent(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a worker stalled in the wait; another one's recovery made the send "never sent" and
    # its conversation is answered again: sent now, it would arrive twice
    channel = FakeChannel()
    channel.platform.fail_next_send("rate_limited", 0.05)
    real = store.note_waiting

    async def recovered_meanwhile(outbox_id: int, waiting: bool) -> bool:
        noted = await real(outbox_id, waiting)
        if waiting:
            await store.mark_failed(outbox_id, "not sent: recovered", never_sent=True)
        return noted

    monkeypatch.setattr(store, "note_waiting", recovered_meanwhile)
    agent = reply_with("late")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert channel.platform.texts() == []
    assert "settled elsewhere" in agent.results[0]
    (entry,) = await store.outbox()
    assert (entry.status, entry.reason) == ("failed", "not sent: recovered")
    await board.stop()


async def test_a_send_still_recorded_in_the_background_at_stop_is_recorded_before_closing(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the store away for longer than the run waits, back just as the process stops: the
    # background recording was dropped with the loop, the row stayed pending, and the
    # restart made a delivered reply uncertain
    from backchannel import outbound

    monkeypatch.setattr(outbound, "RECORD_SENT_PAUSES", (0.0, 0.01))
    monkeypatch.setattr(outbound, "RECORD_SENT_LATER_PAUSES", (3600.0,))
    real = store.mark_sent
    away = asyncio.Event()
    away.set()
    tries: list[int] = []

    async def flaky(outbox_id: int, receipt: Any) -> Any:
        tries.append(outbox_id)
        if away.is_set():
            raise StoreError("connection to the database was lost")
        return await real(outbox_id, receipt)

    monkeypatch.setattr(store, "mark_sent", flaky)
    channel = FakeChannel()
    agent = reply_with("done")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert channel.platform.texts() == ["done"] and len(tries) == 2
    assert [e.status for e in await store.outbox()] == ["pending"]
    away.clear()  # the store is back; the background's next try is an hour away
    with caplog.at_level(logging.INFO, logger="backchannel.outbound"):
        await board.stop()
    assert len(tries) == 3
    assert "is recorded as sent" in caplog.text
    reopened = SQLiteStore(store.path)
    try:
        assert [e.status for e in await reopened.outbox()] == ["sent"]
    finally:
        await reopened.close()


async def test_a_send_the_store_cannot_record_by_the_stop_is_named_and_the_stop_is_bounded(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from backchannel import outbound

    monkeypatch.setattr(outbound, "RECORD_SENT_PAUSES", (0.0,))
    monkeypatch.setattr(outbound, "RECORD_SENT_LATER_PAUSES", (3600.0,))
    monkeypatch.setattr(outbound, "STOP_RECORDING_WAIT", 0.6)

    async def never(outbox_id: int, receipt: Any) -> Any:
        raise StoreError("disk I/O error")

    monkeypatch.setattr(store, "mark_sent", never)
    channel = FakeChannel()
    agent = reply_with("done")
    board = await started(store, channel, Binding(agent))
    channel.platform.user_says("hi")
    await agent.wait_runs(1)
    await board.wait_idle()
    with caplog.at_level(logging.ERROR, logger="backchannel.outbound"):
        await board.stop()
    assert "send #1 was delivered but could not be recorded before stopping" in caplog.text

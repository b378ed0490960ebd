"""After a crash mid-send, a trigger that already has our reply is not offered as unanswered.

Issue 14, item 6: the README's echo agent replied again to a `run.trigger` whose reply
was `uncertain` (killed during the send). The run now has no trigger then, says why,
and marks the uncertain reply in the window; the example agent stays silent.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
from pathlib import Path
from typing import Any

from backchannel.model import Outbound, Sender
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import RESTART_NOTE, Binding, Switchboard
from backchannel.testing import FakeChannel, RecordingAgent

ROOT = Path(__file__).resolve().parents[2]


def example_echo_agent() -> Any:
    spec = importlib.util.spec_from_file_location("echo_agent", ROOT / "examples" / "echo_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.echo


async def crashed_mid_reply(path: Path, channel: FakeChannel, status: str) -> None:
    """Leave a conversation as a kill during the agent's reply does: its run unfinished."""
    never = asyncio.Event()
    replying = asyncio.Event()

    async def killed_while_sending(run: Run) -> None:
        store = board.store
        assert run.trigger is not None
        me = Sender("bot", "Bot", is_bot=True)
        outbound = Outbound(run.conversation.address, f"You said: {run.trigger.text}")
        # as the run's own tools record it: with the run's id
        entry = await store.record_outbound(run.conversation.id, outbound, me, run.session.run_id)
        if status == "sent":
            from backchannel.model import Receipt

            await store.mark_sent(entry.id, Receipt("m-sent"))
        replying.set()
        await never.wait()  # the process dies here: the run is never recorded as finished

    board = Switchboard(SQLiteStore(path), stop_timeout=0.1)
    board.add_account(channel.adapter("fake"), Binding(killed_while_sending))
    await board.start()
    channel.platform.user_says("hello")
    await asyncio.wait_for(replying.wait(), 10)
    await board.stop()


async def restarted_with_echo(
    path: Path, channel: FakeChannel
) -> tuple[Switchboard, RecordingAgent]:
    """Start the store at `path` again with the README's echo agent; return once its first
    run is done and the board is idle."""
    seen = RecordingAgent(action=example_echo_agent())
    board = Switchboard(SQLiteStore(path))
    board.add_account(channel.adapter("fake"), Binding(seen))
    await board.start()
    await seen.wait_runs(1)
    await board.wait_idle()
    return board, seen


async def test_the_example_agent_does_not_reply_twice_to_a_trigger_with_an_uncertain_reply(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bc.db"
    channel = FakeChannel()
    await crashed_mid_reply(path, channel, "pending")  # pending at start becomes uncertain
    board, seen = await restarted_with_echo(path, channel)
    (run,) = seen.runs
    assert run.trigger is None  # answered already: not presented as unanswered
    assert channel.platform.sent == []  # so the example agent sends nothing
    assert RESTART_NOTE in run.instruction and "delivery uncertain" in run.instruction
    assert "Message #1 already has your reply #2" in run.instruction
    assert "delivery uncertain" in run.messages[-1]["content"]  # marked in the window
    await board.stop()


async def test_a_trigger_answered_before_the_crash_is_not_answered_again(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"
    channel = FakeChannel()
    await crashed_mid_reply(path, channel, "sent")
    board, seen = await restarted_with_echo(path, channel)
    assert seen.runs[0].trigger is None and channel.platform.sent == []
    # a new message afterwards is a trigger again, and is answered
    channel.platform.user_says("still there?")
    await seen.wait_runs(2)
    await board.wait_idle()
    assert seen.runs[1].trigger is not None
    assert channel.platform.texts() == ["You said: still there?"]
    await board.stop()


async def test_a_failed_reply_leaves_the_trigger_unanswered(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = RecordingAgent(lambda run: "first try")
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    channel.platform.fail_next_send("rejected")
    channel.platform.user_says("hello")
    await agent.wait_runs(1)
    await board.wait_idle()
    (conversation,) = await store.conversations()
    run = await board.build_run(conversation.id)
    assert run.trigger is not None and run.trigger.text == "hello"  # NOT delivered: answer it
    await board.stop()


async def test_a_message_that_came_during_a_run_is_still_answered_after_that_runs_reply(
    store: SQLiteStore,
) -> None:
    # #1 starts a run; #2 arrives while it runs; the run's reply to #1 lands as #3 after
    # #2. #2 has no answer yet: it must still be the next run's trigger.
    channel = FakeChannel()
    first_run = asyncio.Event()
    release = asyncio.Event()

    async def slow_then_quick(run: Run) -> None:
        assert run.trigger is not None
        if not first_run.is_set():
            first_run.set()
            await release.wait()
        await run.call("reply", {"message_id": run.trigger.seq, "text": f"re {run.trigger.text}"})

    seen = RecordingAgent(action=slow_then_quick)
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(seen))
    await board.start()
    channel.platform.user_says("first")
    await asyncio.wait_for(first_run.wait(), 10)
    second = await board.ingest("fake", {**channel.platform.make_message("second"), "update": 99})
    assert second.status == "stored"  # committed while the first run is still running
    release.set()
    await seen.wait_runs(2)
    await board.wait_idle()
    assert seen.runs[1].trigger is not None and seen.runs[1].trigger.text == "second"
    assert channel.platform.texts() == ["re first", "re second"]
    await board.stop()


async def crashed_after_a_second_message(
    path: Path, channel: FakeChannel, *, tool: str, take_new: bool = False, take_after: bool = False
) -> None:
    """#1 starts a run; #2 is committed while it runs; the run answers #1 with `tool` (taking
    #2 first through new_messages when `take_new`, or right after its answer when
    `take_after`), and the process dies before the run is
    recorded as finished: `path` is left as a SIGKILL at that moment leaves it (a copy of
    the store's files, every commit in them; the live store is then stopped, which would
    record the run as cut short, a record no killed process writes)."""
    never = asyncio.Event()
    started = asyncio.Event()
    answered = asyncio.Event()
    second_in = asyncio.Event()

    async def answers_then_dies(run: Run) -> None:
        assert run.trigger is not None
        started.set()
        await second_in.wait()
        text = f"re {run.trigger.text}"
        if take_new:
            taken = await run.new_messages()
            assert [m["content"] for m in taken] == ["[#2] Alice: second"]
            text += " and second"
        if tool == "reply":
            said = await run.call("reply", {"message_id": run.trigger.seq, "text": text})
        else:
            said = await run.call("send_message", {"text": text})
        assert said.startswith("sent"), said
        if take_after:  # as the openai agent does: new messages right after its tool calls
            assert [m["content"] for m in await run.new_messages()] == ["[#2] Alice: second"]
        answered.set()
        await never.wait()  # killed here

    live = path.with_name(path.name + ".live")
    board = Switchboard(SQLiteStore(live), stop_timeout=0.1)
    board.add_account(channel.adapter("fake"), Binding(answers_then_dies))
    await board.start()
    channel.platform.user_says("first")
    await asyncio.wait_for(started.wait(), 10)
    second = await board.ingest("fake", {**channel.platform.make_message("second"), "update": 99})
    assert second.status == "stored"
    second_in.set()
    await asyncio.wait_for(answered.wait(), 10)
    for suffix in ("", "-wal"):  # the files as the kill leaves them (WAL: commits included)
        if Path(f"{live}{suffix}").exists():
            shutil.copyfile(f"{live}{suffix}", f"{path}{suffix}")
    await board.stop()


async def test_a_message_that_came_during_a_run_cut_short_is_answered_after_the_restart(
    tmp_path: Path,
) -> None:
    # the crash-loop's find: the run's answer to #1 (#3) came after #2, and the restart
    # took it for #2's answer too, so #2 was never answered; with either send tool, and
    # when the run took #2 (new_messages) after it had sent #3: #3 was sent before it
    # saw #2 (the review's find: the run's seen-up-to moved, not what #3 was sent after)
    for tool, take_after in (("reply", False), ("send_message", False), ("send_message", True)):
        path = tmp_path / f"{tool}-{take_after}.db"
        channel = FakeChannel()
        await crashed_after_a_second_message(path, channel, tool=tool, take_after=take_after)
        board, seen = await restarted_with_echo(path, channel)
        (run,) = seen.runs
        assert run.trigger is not None and run.trigger.text == "second", tool
        assert channel.platform.texts() == ["re first", "You said: second"], tool
        await board.stop()


async def test_what_a_run_cut_short_sent_after_seeing_a_trigger_answers_it_with_or_without_the_note(
    tmp_path: Path,
) -> None:
    # a send_message (no reply target) after the run saw #2 (through new_messages) answers
    # #2; and it does so without the restart note too, as when another worker takes the
    # conversation over from a dead one (the note is added only at a process's own start)
    path = tmp_path / "bc.db"
    channel = FakeChannel()
    await crashed_after_a_second_message(path, channel, tool="send_message", take_new=True)
    store = SQLiteStore(path)
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(RecordingAgent()))
    (conversation,) = await store.conversations()
    taken_over = await board.build_run(conversation.id)  # no notes at all
    assert taken_over.trigger is None
    assert "Message #2 already has your reply #3" in taken_over.instruction
    await store.close()
    board, seen = await restarted_with_echo(path, channel)
    assert seen.runs[0].trigger is None
    assert channel.platform.texts() == ["re first and second"]  # nothing answered twice
    await board.stop()


async def test_a_conversation_answered_while_the_adapters_start_is_not_run_again(
    tmp_path: Path,
) -> None:
    # the second crash loop's find (Discord: catch-up and live messages are stored and run
    # before start() returns): the start pokes what was owed before it, and the stale poke
    # ran the conversation again with its already answered trigger, answering it twice
    from backchannel.adapter import AdapterContext
    from backchannel.store import Inbound
    from backchannel.testing.fake_channel import FakeChannelAdapter

    path = tmp_path / "bc.db"
    channel = FakeChannel()
    adapter = channel.adapter("fake")
    owed = adapter.normalize(channel.platform.make_message("before the crash"))
    assert owed is not None
    store = SQLiteStore(path)
    await store.append_inbound([Inbound(owed, triggers=True)])  # never answered: a crash
    await store.close()
    answered = asyncio.Event()

    class CatchesUpWhileStarting(FakeChannelAdapter):
        async def start(self, ctx: AdapterContext) -> None:
            await super().start(ctx)
            await ctx.ingest(channel.platform.make_message("sent while it was down"))
            await answered.wait()  # start() returns only after that run (a slow READY)

    async def answer(run: Run) -> None:
        assert run.trigger is not None
        await run.call("reply", {"message_id": run.trigger.seq, "text": f"re {run.trigger.text}"})
        answered.set()

    seen = RecordingAgent(action=answer)
    board = Switchboard(SQLiteStore(path))
    board.add_account(CatchesUpWhileStarting("fake", {}, channel.platform), Binding(seen))
    await board.start()
    await board.wait_idle()
    assert channel.platform.texts() == ["re sent while it was down"]  # once, not twice
    (run,) = seen.runs
    assert RESTART_NOTE in run.instruction  # the run during the start was told of it
    await board.stop()


async def _asking_board(store: SQLiteStore) -> tuple[Switchboard, Any, Any, Any]:
    """A board whose runs may ask other agents, one stored message asking for it (its
    conversation is the asking one), and a session with peer-b to ask in."""
    from backchannel.asks import AskCoordinator, AskSettings
    from backchannel.model import Address as Addr

    channel = FakeChannel()
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(RecordingAgent()))
    AskCoordinator(board, AskSettings()).attach()  # as orchestration does with agent peers
    stored = await board.ingest("fake", channel.platform.make_message("ask B for the status"))
    assert stored.conversation_id is not None and stored.seq is not None
    session = await store.ensure_conversation(Addr("fake", "peer-b", "s1"), kind="thread")
    return board, channel, stored, session


async def test_a_trigger_a_cut_short_run_asked_another_agent_about_is_not_asked_again(
    store: SQLiteStore,
) -> None:
    # the third crash loop's find: a run killed after its ask went out left its trigger
    # owed; the restarted run was offered it again and asked the other agent a second time
    from backchannel.model import Outbound, Receipt

    board, channel, stored, session = await _asking_board(store)
    origin = stored.conversation_id
    me = Sender("bot", "Bot", is_bot=True)
    entry = await store.record_outbound(session.id, Outbound(session.address, "status?"), me)
    await store.mark_sent(entry.id, Receipt("q1"))
    offered = await board.build_run(origin)
    assert offered.trigger is not None  # no ask yet: the trigger is owed and offered
    await store.record_ask(
        origin_conversation_id=origin,
        origin_seq=stored.seq,
        peer_conversation_id=session.id,
        question="status?",
        deadline=1e12,
        message_seq=entry.message_seq,
        outbox_id=entry.id,
    )
    run = await board.build_run(origin)
    assert run.trigger is None
    assert f"Message #{stored.seq}: you already asked" in run.instruction
    assert '"peer-b"' in run.instruction and "Do not ask again" in run.instruction
    # a message after the ask is a trigger of its own
    later = await board.ingest("fake", channel.platform.make_message("and the weather?"))
    again = await board.build_run(origin)
    assert again.trigger is not None and again.trigger.seq == later.seq


async def test_a_question_cut_off_before_its_ask_was_recorded_leaves_the_trigger_owed(
    store: SQLiteStore,
) -> None:
    # the PostgreSQL asks crash loop's find: ask_agent writes the question's outbox row, then
    # the ask row, then sends. A run killed between the two rows sent nothing, yet its
    # question counted as a send elsewhere: the restarted run was told not to answer, and with
    # no ask row nothing ever expired: the asker heard nothing, ever
    from backchannel.model import Outbound

    board, _channel, stored, session = await _asking_board(store)
    origin = stored.conversation_id
    run_id = await store.begin_run(origin, stored.seq, stored.seq)
    me = Sender("bot", "Bot", is_bot=True)
    await store.record_outbound(
        session.id, Outbound(session.address, "status?"), me, run_id, stored.seq
    )
    await store.recover()  # killed here: the question is uncertain, no ask row was written
    run = await board.build_run(origin)
    assert run.trigger is not None and run.trigger.seq == stored.seq
    assert "already" not in run.instruction

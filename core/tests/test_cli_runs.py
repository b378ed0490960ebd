"""`backchannel runs` and the failed-run marks in `show`: a run that raised is visible where
people look, with its trigger, tools, outcome and one-line error."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from backchannel.cli import main
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import FakeChannel, RecordingAgent
from click.testing import CliRunner, Result


def invoke(*args: str) -> Result:
    # as if typed in a shell with `backchannel` on PATH (pytest itself runs under `uv run`)
    return CliRunner(env={"UV_RUN_RECURSION_DEPTH": None}).invoke(
        main, list(args), catch_exceptions=False
    )


async def answer_then_fail(run: Run) -> None:
    assert run.trigger is not None
    if run.trigger.text == "break please":
        await run.call("reply", {"message_id": run.trigger.seq, "text": "trying..."})
        raise RuntimeError("the model is unreachable\nsecond line of detail")


async def _converse(db: Path) -> None:
    channel = FakeChannel()
    agent = RecordingAgent(lambda run: "fine", action=answer_then_fail)
    board = Switchboard(SQLiteStore(db))
    board.add_account(channel.adapter("ops"), Binding(agent))
    await board.start()
    try:
        channel.platform.user_says("hello")
        await agent.wait_runs(1)
        channel.platform.user_says("break please")
        await agent.wait_runs(2)
        await board.wait_idle()
    finally:
        await board.stop()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("runs") / "bc.db"
    asyncio.run(_converse(db))
    return db


def test_runs_lists_trigger_tools_outcome_and_one_line_error(store_path: Path) -> None:
    result = invoke("runs", "--store", str(store_path))

    assert result.exit_code == 0, result.output
    header, failed, ok, hint = result.stdout.splitlines()
    assert header.split() == [
        "RUN", "CONVERSATION", "TRIGGER", "STARTED", "TOOK", "TOOLS", "OUTCOME", "ERROR"
    ]  # fmt: skip
    assert failed.split()[:3] == ["2", "ops/c1", "#3"]
    assert failed.split()[-7:] == [
        "reply",
        "error",
        *["RuntimeError:", "the", "model", "is", "unreachable"],
    ]
    assert "second line" not in failed
    assert ok.split()[:3] == ["1", "ops/c1", "#1"]
    assert ok.split()[-2:] == ["reply", "ok"]
    assert hint == f"(only the failed ones: `backchannel runs --failed --store {store_path}`)"


def test_runs_failed_json_has_only_the_failures(store_path: Path) -> None:
    result = invoke("runs", "ops/c1", "--failed", "--json", "--store", str(store_path))

    (run,) = json.loads(result.stdout)
    assert run["outcome"] == "error"
    assert run["tools"] == ["reply"]
    assert run["trigger_seq"] == 3
    assert run["error"] == "RuntimeError: the model is unreachable\nsecond line of detail"
    assert run["duration"] >= 0


def test_show_marks_the_failed_run_after_the_messages_it_saw(store_path: Path) -> None:
    result = invoke("show", "ops/c1", "--store", str(store_path))

    lines = result.stdout.splitlines()
    assert lines[2] == (
        f"1 failed run (marked !!; details: `backchannel runs ops/c1 --failed --store {store_path}`)"
    )
    transcript = [line for line in lines[4:]]
    assert [line.split()[0] for line in transcript] == ["#1", "#2", "#3", "#4", "!!"]
    assert transcript[-1] == (
        "   !! run 2 error after reply: RuntimeError: the model is unreachable (answering #3)"
    )
    shown = json.loads(invoke("show", "ops/c1", "--json", "--store", str(store_path)).stdout)
    assert [r["id"] for r in shown["failed_runs"]] == [2]


def test_runs_without_failures_says_so(tmp_path: Path) -> None:
    result = invoke("runs", "--failed", "--store", str(tmp_path / "none.db"))

    assert result.stdout == f"no failed runs yet (store: {tmp_path / 'none.db'})\n"


async def test_a_runs_tools_are_its_own_outbox_rows_wherever_they_are(tmp_path: Path) -> None:
    """Read by run id: a run's sends older than the conversation's latest 1,000 rows are
    still listed, and a send it made into another conversation shows as that tool."""
    from backchannel.model import Address, Outbound, Sender
    from backchannel.runlog import run_reports

    me = Sender("me", "Me", is_bot=True)
    store = SQLiteStore(tmp_path / "bc.db")
    here = await store.ensure_conversation(Address("ops", "here"))
    there = await store.ensure_conversation(Address("ops", "there"))
    early = await store.begin_run(here.id, 1, 1)
    await store.record_outbound(here.id, Outbound(here.address, "first"), me, early)
    await store.record_outbound(
        there.id, Outbound(there.address, "relayed", origin=here.address.key), me, early
    )
    await store.finish_run(early, "ok")
    for _ in range(1001):  # the operator's sends since: no run's
        await store.record_outbound(here.id, Outbound(here.address, "later"), me)
    [report] = await run_reports(store, here)
    assert report.tools == ("send_message", "send_to_conversation")
    await store.close()

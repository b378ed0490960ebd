"""One agent run's framework overhead: poke -> begin, window, framing, tools, agent, finish.

Conversations of `--history` stored messages (real-shaped Telegram updates)
get one run each, one at a time, with a no-op agent and a window of 50
messages; the time from asking for the run (poke) to the moment its last
bookkeeping is done (the switchboard's count of work in flight falls to zero,
in the run's own task) is the framework's cost of a run. The time until
`wait_idle` returns to the bench is printed too: it adds the loop turns the
bench's own waiting takes, which no production run pays. Before each run
(untimed) the conversation's newest message is made its unanswered trigger:
a conversation that owes nothing is not run.

Two kinds of run, because the store keeps the latest window of its 64 most
recently run conversations (store/windows.py):

- not run lately: every conversation in turn, more of them than the store
  keeps windows for, so each run reads its whole window. Beside these, a
  same-run reference: plain apsw reading a 50-row window of another
  conversation (every column, the store's own query and connection:
  store/windows.py's read_window, so the two cannot drift apart) just before
  each run, so the ratio holds on a loaded machine where the absolute figures
  swing.
- run lately: 32 conversations, each getting one new message (untimed)
  before each of its runs, as a conversation in progress does: the run reads
  the row past its kept window. The first round, which keeps the windows, is
  not counted.

Prints min and median over the runs of each kind.

The agent answers without awaiting anything, so the typing indicator the
Telegram adapter would send (to a closed loopback port here) never goes out:
its task is made and cancelled inside the run, as in production for such an
agent. The bench counts typing calls and prints them (0 expected).

`--split` also times the parts of each run (the scheduler's conversation read,
RunBuilder.build, begin_run + finish_run; the rest is the scheduler, the event
loop and the bench's own wait_idle). Off by default: the timers wrapped around
those calls add to the headline figure.

    uv run python bench/runs.py [--conversations N] [--history N] [--split] [--json]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

from backchannel import Binding, Run, Switchboard
from backchannel.model import Address
from backchannel.runs import WindowSettings
from backchannel.runtime import tune_gc
from backchannel.store import SQLiteStore
from backchannel.store.windows import read_window
from figures import bench_parser, emit
from telegram_updates import ACCOUNT, make_adapter, message_shapes, updates

#: the parts --split times
PARTS = ("conversation", "build", "begin_run", "finish_run")
#: conversations in the "run lately" part: fewer than the store keeps windows for
RECENT = 32


def _timed(function: Any, spent: list[float]) -> Any:
    """`function` (async), adding the seconds each call takes to spent[0]."""

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await function(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    return timed


async def measure(
    conversations: int, history: int, rounds: int, split: bool = False
) -> dict[str, Any]:
    window = 50
    took: list[float] = []
    until_idle: list[float] = []
    reference: list[float] = []
    typing_calls = 0
    seen_window: list[int] = []

    async def agent(run: Run) -> None:
        seen_window.append(len(run.messages))

    with tempfile.TemporaryDirectory() as folder:
        board = Switchboard(SQLiteStore(Path(folder) / "runs.db"))
        await board.start()
        adapter = make_adapter()
        binding = Binding(agent, window=WindowSettings(messages=window), respond="never")
        board.add_account(adapter, binding)
        context = board.accounts[ACCOUNT].context
        stream = updates(conversations * history, conversations, shapes=message_shapes())
        while batch := list(islice(stream, 500)):
            await context.ingest_many(batch)
        ids = [c.id for c in await board.store.conversations(limit=conversations)]
        real_typing = adapter.typing

        async def counted_typing(address: Address) -> None:
            nonlocal typing_calls
            typing_calls += 1
            await real_typing(address)

        adapter.typing = counted_typing  # type: ignore[method-assign]
        spent = {part: [0.0] for part in PARTS}
        parts: dict[str, list[float]] = {part: [] for part in PARTS}
        if split:
            store, builder = board.store, board.accounts[ACCOUNT].builder
            for part in ("conversation", "begin_run", "finish_run"):
                setattr(store, part, _timed(getattr(store, part), spent[part]))
            builder.build = _timed(builder.build, spent["build"])  # type: ignore[method-assign]
        # when the work in flight falls to zero: the run's task has done its last bookkeeping
        busy = board._busy
        leave = busy.leave
        finished = [0.0]

        def timed_leave() -> None:
            leave()
            if busy._count == 0:
                finished[0] = time.perf_counter()

        busy.leave = timed_leave  # type: ignore[method-assign]
        db = board.store.db

        def owe(conversation_id: int) -> None:
            # its newest message asks for an answer (respond="never" keeps the ingest from
            # running it): a conversation that owes nothing is not run at all
            db.execute(
                "UPDATE conversations SET trigger_seq = last_seq,"
                " handled_seq = MIN(handled_seq, last_seq - 1) WHERE id = ?",
                (conversation_id,),
            )

        async def timed_run(conversation_id: int) -> None:
            for part in PARTS:
                spent[part][0] = 0.0
            owe(conversation_id)  # untimed
            started = time.perf_counter()
            board.scheduler.poke(conversation_id, ACCOUNT)
            await board.wait_idle()
            until_idle.append(time.perf_counter() - started)
            took.append(finished[0] - started)
            for part in PARTS:
                parts[part].append(spent[part][0])

        # not run lately: more conversations than the store keeps windows for, in turn
        for _ in range(rounds):
            for number, conversation_id in enumerate(ids):
                # another conversation's window: reading this one would warm the caches for
                # the run
                other = ids[(number + len(ids) // 2) % len(ids)]
                started = time.perf_counter()
                read_window(db, other, window, 2**62)
                reference.append(time.perf_counter() - started)
                await timed_run(conversation_id)
        cold = (list(took), list(until_idle), {part: list(parts[part]) for part in PARTS})
        # run lately: a few conversations, each getting a new message before its next run
        recent_count = min(RECENT, conversations)
        recent: list[float] = []
        recent_parts: dict[str, list[float]] = {part: [] for part in PARTS}
        sent = conversations * history
        for round_number in range(rounds * 2 + 1):
            fresh = list(
                updates(
                    recent_count,
                    conversations,
                    first_update=sent + 1,
                    first_message=sent + 1,
                    shapes=message_shapes(),
                )
            )
            sent += recent_count
            results = await context.ingest_many(fresh)
            addresses = [result.event.address for result in results if result.event]
            recent_ids = [
                found.id
                for address in addresses
                if (found := await board.store.find_conversation(address)) is not None
            ]
            took.clear()
            for part in PARTS:
                parts[part].clear()
            for conversation_id in recent_ids:
                await timed_run(conversation_id)
            if round_number:  # the first round is the one that keeps their windows
                recent.extend(took)
                for part in PARTS:
                    recent_parts[part].extend(parts[part])
        took, until_idle, parts = cold
        await board.stop()
        await adapter.stop()
    return {
        "runs": len(took),
        "window": statistics.median(seen_window),
        "min_us": min(took) * 1e6,
        "median_us": statistics.median(took) * 1e6,
        "reference_min_us": min(reference) * 1e6,
        "reference_median_us": statistics.median(reference) * 1e6,
        "idle_min_us": min(until_idle) * 1e6,
        "idle_median_us": statistics.median(until_idle) * 1e6,
        "ratio_min": min(took) / min(reference),
        "ratio_median": statistics.median(took) / statistics.median(reference),
        "typing_calls": typing_calls,
        "recent_runs": len(recent),
        "recent_min_us": min(recent) * 1e6,
        "recent_median_us": statistics.median(recent) * 1e6,
        "recent_ratio_median": statistics.median(recent) / statistics.median(reference),
        "load": os.getloadavg()[0],
        **(
            {
                **{f"{part}_median_us": statistics.median(parts[part]) * 1e6 for part in PARTS},
                **{
                    f"recent_{part}_median_us": statistics.median(recent_parts[part]) * 1e6
                    for part in PARTS
                },
            }
            if split
            else {}
        ),
    }


def report(figures: dict[str, Any]) -> None:
    print(
        f"runs: {figures['runs']:,} runs of a no-op agent, {figures['window']:.0f}-message windows"
        f" (1-minute load {figures['load']:.1f} on {os.cpu_count()} cores)"
    )
    print("  not run lately (the whole window read):")
    print(
        f"    framework overhead per run   min {figures['min_us']:.0f} µs"
        f"   median {figures['median_us']:.0f} µs   (poke -> its bookkeeping done)"
    )
    print(
        f"    until wait_idle returns      min {figures['idle_min_us']:.0f} µs"
        f"   median {figures['idle_median_us']:.0f} µs   (adds the bench's own wake-ups)"
    )
    print(
        f"    reference: apsw reads the window   min {figures['reference_min_us']:.0f} µs"
        f"   median {figures['reference_median_us']:.0f} µs"
    )
    print(
        f"    run / reference   min {figures['ratio_min']:.2f}×   median {figures['ratio_median']:.2f}×"
        f"   (typing indicator calls: {figures['typing_calls']})"
    )
    print(f"  run lately (window kept, a new message since; {figures['recent_runs']} runs):")
    print(
        f"    framework overhead per run   min {figures['recent_min_us']:.0f} µs"
        f"   median {figures['recent_median_us']:.0f} µs"
        f"   ({figures['recent_ratio_median']:.2f}× the reference's median)"
    )
    if "build_median_us" in figures:
        for label, prefix, median in (
            ("not run lately", "", figures["median_us"]),
            ("run lately", "recent_", figures["recent_median_us"]),
        ):
            named = sum(figures[f"{prefix}{part}_median_us"] for part in PARTS)
            print(
                f"  split, {label} (medians): "
                + "   ".join(
                    f"{part} {figures[f'{prefix}{part}_median_us']:.0f} µs" for part in PARTS
                )
                + f"   rest ~{median - named:.0f} µs"
            )


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--history", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--split", action="store_true", help="also time the parts of a run")
    args = parser.parse_args()
    tune_gc()  # as `serve` does once started
    figures = asyncio.run(measure(args.conversations, args.history, args.rounds, args.split))
    emit(figures, args.json, report)


if __name__ == "__main__":
    main()

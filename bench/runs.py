"""One agent run's framework overhead: poke -> begin, window, framing, tools, agent, finish.

Conversations of `--history` stored messages (real-shaped Telegram updates)
get one run each, one at a time, with a no-op agent and a window of 50
messages; the time from asking for the run to the switchboard being idle
again is the framework's cost of a run. Prints min and median over all runs.

    uv run python bench/runs.py [--conversations N] [--history N] [--json]
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
from backchannel.runs import WindowSettings
from backchannel.runtime import tune_gc
from backchannel.store import SQLiteStore
from figures import bench_parser, emit
from telegram_updates import ACCOUNT, make_adapter, message_shapes, updates


async def _noop(run: Run) -> None:
    return None


async def measure(conversations: int, history: int, rounds: int) -> dict[str, Any]:
    window = 50
    took: list[float] = []
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
        for _ in range(rounds):
            for conversation_id in ids:
                started = time.perf_counter()
                board.scheduler.poke(conversation_id, ACCOUNT)
                await board.wait_idle()
                took.append(time.perf_counter() - started)
        await board.stop()
        await adapter.stop()
    return {
        "runs": len(took),
        "window": statistics.median(seen_window),
        "min_us": min(took) * 1e6,
        "median_us": statistics.median(took) * 1e6,
        "load": os.getloadavg()[0],
    }


def report(figures: dict[str, Any]) -> None:
    print(
        f"runs: {figures['runs']:,} runs of a no-op agent, {figures['window']:.0f}-message windows"
        f" (1-minute load {figures['load']:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"  framework overhead per run   min {figures['min_us']:.0f} µs"
        f"   median {figures['median_us']:.0f} µs"
    )


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--history", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tune_gc()  # as `serve` does once started
    figures = asyncio.run(measure(args.conversations, args.history, args.rounds))
    emit(figures, args.json, report)


if __name__ == "__main__":
    main()

"""Tail latency at a steady rate: message -> commit and message -> agent invoked.

Real-shaped Telegram updates arrive at a steady `--rate` per second (default
100) spread over `--conversations` chats (default 50), each handed to
`ingest` as a webhook request would be (nobody waits for the one before).
Every message triggers (respond = "always", debounce 0). Prints p50, p95 and
p99 of the time from the update's arrival to its commit (ingest returned)
and to the agent being invoked with it as the trigger. Never fails for being
slow.

    uv run python bench/latency.py [--seconds N] [--rate N] [--conversations N] [--json]
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from backchannel import Binding, Run, Switchboard
from backchannel.runtime import tune_gc
from backchannel.store import SQLiteStore
from figures import bench_parser, emit
from telegram_updates import ACCOUNT, make_adapter, message_shapes, updates


def percentiles(samples: list[float]) -> dict[str, float]:
    """Return p50, p95 and p99 of `samples` (seconds) in milliseconds."""
    ordered = sorted(samples)

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "count": len(ordered)}


async def measure(seconds: float, rate: int, conversations: int) -> dict[str, Any]:
    events = int(seconds * rate)
    arrived: dict[str, float] = {}
    to_commit: list[float] = []
    to_agent: list[float] = []

    async def agent(run: Run) -> None:
        invoked = time.perf_counter()
        if run.trigger is not None and run.trigger.event_id in arrived:
            to_agent.append(invoked - arrived.pop(run.trigger.event_id))

    with tempfile.TemporaryDirectory() as folder:
        board = Switchboard(SQLiteStore(Path(folder) / "latency.db"))
        await board.start()
        adapter = make_adapter()
        board.add_account(adapter, Binding(agent, respond="always", debounce=0))
        context = board.accounts[ACCOUNT].context
        loop = asyncio.get_running_loop()
        requests: set[asyncio.Task[None]] = set()

        async def request(update: dict[str, Any]) -> None:
            started = time.perf_counter()
            arrived[str(update["update_id"])] = started
            await context.ingest(update)
            to_commit.append(time.perf_counter() - started)

        begin = loop.time()
        stream = updates(events, conversations, shapes=message_shapes())
        for number, update in enumerate(stream):
            # the arrival schedule, not the previous request, sets when the next one comes
            delay = begin + number / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(request(update))
            requests.add(task)
            task.add_done_callback(requests.discard)
        await asyncio.gather(*requests)
        await board.wait_idle(timeout=60)
        await board.stop()
        await adapter.stop()
    return {
        "events": events,
        "rate": rate,
        "conversations": conversations,
        "commit": percentiles(to_commit),
        "agent": percentiles(to_agent),
        "load": os.getloadavg()[0],
    }


def report(figures: dict[str, Any]) -> None:
    print(
        f"latency: {figures['events']:,} updates at {figures['rate']}/s over"
        f" {figures['conversations']} conversations, debounce 0"
        f" (1-minute load {figures['load']:.1f} on {os.cpu_count()} cores)"
    )
    for name, label in (("commit", "message -> commit"), ("agent", "message -> agent invoked")):
        p = figures[name]
        print(
            f"  {label:<26} p50 {p['p50']:6.2f} ms   p95 {p['p95']:6.2f} ms"
            f"   p99 {p['p99']:6.2f} ms   ({p['count']:,} samples)"
        )


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--conversations", type=int, default=50)
    args = parser.parse_args()
    tune_gc()  # as `serve` does once started
    figures = asyncio.run(measure(args.seconds, args.rate, args.conversations))
    emit(figures, args.json, report)


if __name__ == "__main__":
    main()

"""Ingest throughput in production's three shapes, each as a ratio to the SQLite ceiling.

Real Telegram update shapes (the adapter's real-payload fixtures, ids varied,
made lazily) go through the real Telegram adapter's `normalize` and the
switchboard into a durable SQLite store (WAL, synchronous=NORMAL):

- poller: one `ingest_many` of 100 updates at a time, awaited, with the
  offset committed alongside (what the long-polling receiver does);
- webhook: 40 requests in flight (Telegram's default max_connections), each
  one `ingest` per update, a new one starting as soon as one returns;
- in-flight: the same with 1,000 in flight.

Agent runs are not inside the window (their debounce outlasts it; the
runs bench measures them). In each round the ceiling (bench/ceiling.py:
plain apsw, same rows, same schema, 1,000 rows a transaction) runs first, and
each shape is reported as its events/s divided by that round's ceiling.
Plain apsw also runs at 100 and 40 rows a transaction (the most a poll and
40 webhook connections can put in one commit), and each shape prints the
events it averaged per transaction: a shape cannot gather more than its
callers hand over, and a small transaction costs SQLite more per row.
Prints min and median over rounds; never fails for being slow.

    uv run python bench/ingest.py [--events N] [--conversations N] [--rounds N] [--json]
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from backchannel import Binding, Run, Switchboard
from backchannel.runtime import tune_gc
from backchannel.store import SQLiteStore
from ceiling import ceiling_seconds
from figures import bench_parser, emit
from telegram_updates import ACCOUNT, make_adapter, message_shapes, sample_events, updates

SHAPES = ("poller", "webhook", "in-flight")
POLL_LIMIT = 100
WEBHOOK_CONNECTIONS = 40
IN_FLIGHT = 1_000


async def _noop(run: Run) -> None:
    return None


async def shape_seconds(
    shape: str,
    events: int,
    conversations: int,
    shapes: list[dict[str, Any]],
    transactions: list[int] | None = None,
) -> tuple[float, float]:
    """Return the wall and CPU seconds `events` updates take to be committed (fresh store).

    `transactions`, when given, gets the number of append transactions the shape made.
    """
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "bench.db")
        if transactions is not None:
            _count_transactions(store, transactions)
        board = Switchboard(store)
        await board.start()
        # runs wait out a debounce longer than the window: they are measured on their own
        adapter = make_adapter()
        board.add_account(adapter, Binding(_noop, debounce=3600, max_wait=3600))
        context = board.accounts[ACCOUNT].context
        stream = updates(events, conversations, shapes=shapes)
        started, cpu_started = time.perf_counter(), time.process_time()
        if shape == "poller":
            await _poll(context, stream)
        else:
            width = WEBHOOK_CONNECTIONS if shape == "webhook" else IN_FLIGHT
            await asyncio.gather(*(_requests(context, stream) for _ in range(width)))
        elapsed = time.perf_counter() - started, time.process_time() - cpu_started
        stats = await store.stats()
        await board.stop()
        await adapter.stop()
    if stats["messages"] != events:
        raise SystemExit(f"{shape}: stored {stats['messages']} messages, not {events}")
    return elapsed


def _count_transactions(store: SQLiteStore, into: list[int]) -> None:
    """Count the store's append transactions into `into` (one element)."""
    append = store.append_inbound
    into.append(0)

    async def counted(items: Any) -> Any:
        into[-1] += 1
        return await append(items)

    store.append_inbound = counted  # type: ignore[method-assign]


async def _poll(context: Any, stream: Iterator[dict[str, Any]]) -> None:
    while batch := list(islice(stream, POLL_LIMIT)):
        offset = str(batch[-1]["update_id"] + 1)
        await context.ingest_many(batch, state={"offset": offset})


async def _requests(context: Any, stream: Iterator[dict[str, Any]]) -> None:
    # one webhook connection: the next request comes as soon as this one is answered
    for update in stream:
        await context.ingest(update)


def measure(events: int, conversations: int, rounds: int) -> dict[str, Any]:
    """Run the ceiling and every shape `rounds` times, interleaved; return seconds per round."""
    shapes = message_shapes()
    samples = sample_events(conversations, shapes)
    figures: dict[str, Any] = {
        "events": events,
        "conversations": conversations,
        "rounds": rounds,
        **{name: {"wall": [], "cpu": []} for name in ("ceiling", *SHAPES)},
    }
    smaller = {size: {"wall": [], "cpu": []} for size in (POLL_LIMIT, WEBHOOK_CONNECTIONS)}
    for _ in range(rounds):
        gc.collect()
        wall, cpu = ceiling_seconds(events, conversations, 1_000, samples)
        figures["ceiling"]["wall"].append(wall)
        figures["ceiling"]["cpu"].append(cpu)
        # the same rows in the poller's and the webhook's own transaction sizes: what
        # plain apsw reaches when it may not gather more than they can
        for size, one in smaller.items():
            wall, cpu = ceiling_seconds(events, conversations, size, samples)
            one["wall"].append(wall)
            one["cpu"].append(cpu)
        for shape in SHAPES:
            gc.collect()
            transactions: list[int] = []
            wall, cpu = asyncio.run(
                shape_seconds(shape, events, conversations, shapes, transactions)
            )
            figures[shape]["wall"].append(wall)
            figures[shape]["cpu"].append(cpu)
            figures[shape].setdefault("per_transaction", []).append(events / transactions[0])
    for shape in SHAPES:
        figures[shape].update(ratios(figures["ceiling"], figures[shape]))
        figures[shape]["per_transaction"] = statistics.median(figures[shape]["per_transaction"])
    figures["smaller_transactions"] = {
        str(size): statistics.median(
            [c / s for c, s in zip(figures["ceiling"]["wall"], one["wall"], strict=True)]
        )
        for size, one in smaller.items()
    }
    figures["ceiling"]["events_per_second"] = events / statistics.median(figures["ceiling"]["wall"])
    figures["load"] = os.getloadavg()[0]
    return figures


def ratios(ceiling: dict[str, list[float]], shape: dict[str, list[float]]) -> dict[str, float]:
    """Return a shape's speed as a fraction of the ceiling's, several ways.

    min/median: over the rounds, each round's ratio (same minute, same load);
    best: the best round of each (noise only ever slows a run down);
    cpu: the median round's ratio of CPU seconds (blind to other processes'
    load, and to time spent waiting on the disk).
    """
    per_round = [c / s for c, s in zip(ceiling["wall"], shape["wall"], strict=True)]
    per_round_cpu = [c / s for c, s in zip(ceiling["cpu"], shape["cpu"], strict=True)]
    return {
        "min": min(per_round),
        "median": statistics.median(per_round),
        "best": min(ceiling["wall"]) / min(shape["wall"]),
        "cpu": statistics.median(per_round_cpu),
    }


def report(figures: dict[str, Any]) -> None:
    print(
        f"ingest: {figures['events']:,} real-shaped Telegram updates over"
        f" {figures['conversations']:,} conversations, {figures['rounds']} rounds"
        f" (1-minute load {figures['load']:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"  ceiling (plain apsw, 1,000 a transaction):"
        f" {figures['ceiling']['events_per_second']:,.0f} events/s median"
    )
    for size, ratio in figures["smaller_transactions"].items():
        print(
            f"  plain apsw at {size} a transaction, as a ratio to that ceiling: {ratio:.2f} median"
        )
    print(
        f"  {'ratio to the ceiling':<30} {'min':>6} {'median':>7} {'best':>6} {'cpu':>6}"
        f" {'events/transaction':>19}"
    )
    for shape in SHAPES:
        one = figures[shape]
        print(
            f"  {LABELS[shape]:<30} {one['min']:>6.2f} {one['median']:>7.2f}"
            f" {one['best']:>6.2f} {one['cpu']:>6.2f} {one['per_transaction']:>19.0f}"
        )


LABELS = {
    "poller": "poller (ingest_many of 100)",
    "webhook": "webhook (40 in flight)",
    "in-flight": "1,000 in flight",
}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", choices=SHAPES, help="print a cProfile summary of one shape")
    args = parser.parse_args()
    if args.profile:
        import cProfile
        import pstats

        shapes = message_shapes()
        with cProfile.Profile() as profile:
            asyncio.run(shape_seconds(args.profile, args.events, args.conversations, shapes))
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
        return
    tune_gc()  # as `serve` does once started
    figures = measure(args.events, args.conversations, args.rounds)
    emit(figures, args.json, report)


if __name__ == "__main__":
    main()

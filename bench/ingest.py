"""Ingest throughput: events per second through `Switchboard.ingest` into a durable store.

100,000 events over 1,000 conversations, FakeChannel payloads, a no-op agent,
SQLite in WAL mode with synchronous=NORMAL. Events are handed over the way a
poller or a webhook burst does: many in flight at once, so group commit can
share transactions. Prints figures; never fails for being slow.

    uv run python bench/ingest.py [--events N] [--conversations N] [--in-flight N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from backchannel import Binding, Run, Switchboard
from backchannel.store import SQLiteStore
from backchannel.testing import FakeChannel


async def noop(run: Run) -> None:
    return None


async def bench(events: int, conversations: int, in_flight: int, batch: int = 0) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "bench.db")
        channel = FakeChannel()
        board = Switchboard(store, max_concurrent_runs=8)
        board.add_account(channel.adapter("fake"), Binding(noop, debounce=0.05, max_wait=1.0))
        await board.start()
        payloads = [
            {
                **channel.platform.make_message(f"message {n}", chat=f"c{n % conversations}"),
                "update": n + 1,
            }
            for n in range(events)
        ]
        started = time.perf_counter()
        cpu_started = time.process_time()
        if batch:
            # a poller's shape: `in_flight` payloads in flight, handed over `batch` at a time
            for offset in range(0, events, in_flight):
                chunk = payloads[offset : offset + in_flight]
                await asyncio.gather(
                    *(
                        board.ingest_many("fake", chunk[i : i + batch])
                        for i in range(0, len(chunk), batch)
                    )
                )
        else:
            # a webhook burst's shape: one ingest call per event, `in_flight` at once
            for offset in range(0, events, in_flight):
                chunk = payloads[offset : offset + in_flight]
                await asyncio.gather(*(board.ingest("fake", raw) for raw in chunk))
        ingested = time.perf_counter() - started
        cpu_ingest = time.process_time() - cpu_started
        await board.wait_idle(timeout=600)
        drained = time.perf_counter() - started
        cpu_total = time.process_time() - cpu_started
        stats = await store.stats()
        await board.stop()
        size = sum(p.stat().st_size for p in Path(folder).iterdir())
    assert stats["messages"] == events, stats
    print(f"events            {events:,} over {conversations:,} conversations")
    how = f"ingest_many, {batch} per call" if batch else "ingest, one call per event"
    print(f"in flight         {in_flight:,} at a time ({how}; group commit)")
    print(f"ingest (wall)     {ingested:.2f} s  ->  {events / ingested:,.0f} events/s")
    print(
        f"ingest (cpu)      {cpu_ingest:.2f} s  ->  {events / cpu_ingest:,.0f} events per CPU-second"
    )
    print(
        f"ingest + runs     {drained:.2f} s wall, {cpu_total:.2f} s cpu"
        f" ({stats['runs']:,} runs of the no-op agent)"
    )
    print(f"machine load      {os.getloadavg()[0]:.2f} (1-minute average, {os.cpu_count()} cores)")
    print(f"store on disk     {size / 1e6:.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--in-flight", type=int, default=1_000)
    parser.add_argument(
        "--batch", type=int, default=0, help="hand events over with ingest_many, N per call"
    )
    parser.add_argument("--profile", action="store_true", help="print a cProfile summary")
    args = parser.parse_args()
    if args.profile:
        import cProfile
        import pstats

        with cProfile.Profile() as profile:
            asyncio.run(bench(args.events, args.conversations, args.in_flight, args.batch))
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
        return
    asyncio.run(bench(args.events, args.conversations, args.in_flight, args.batch))


if __name__ == "__main__":
    main()

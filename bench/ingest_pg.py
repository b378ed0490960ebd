"""Ingest on PostgreSQL with 1 and 2 workers, beside SQLite in the same run.

The same real-shaped Telegram updates as bench/ingest.py (its shapes and its
poller / webhook code), through the real adapter's `normalize` and the
switchboard, into:

- sqlite: the embedded store (WAL, synchronous=NORMAL): the same-run reference;
- pg x1: a PostgresStore in this process;
- pg x2: two worker processes on one database, each ingesting every other update
  (a load balancer in front of webhooks), started together; wall time from "go"
  until both have committed everything.

Each round runs every configuration on a fresh store (a fresh schema on
PostgreSQL); printed: events/s min and median over rounds, and each
PostgreSQL figure as a ratio to that round's SQLite figure. Never fails for
being slow.

    uv run python bench/ingest_pg.py [--store postgresql://...] [--events N]
        [--conversations N] [--rounds N] [--shape poller|webhook]

Without --store it starts a throwaway cluster from Debian's binaries (as the
tests do, but with PostgreSQL's durable defaults: fsync and synchronous_commit on). With --store the URL's user must be allowed to CREATE SCHEMA; each
round's schema is dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from backchannel import Binding, Switchboard
from backchannel.store import SQLiteStore, Store
from ingest import POLL_LIMIT, WEBHOOK_CONNECTIONS, _noop
from telegram_updates import ACCOUNT, make_adapter, message_shapes, updates

CONFIGS = ("sqlite", "pg x1", "pg x2")


def with_schema(url: str, schema: str) -> str:
    """Return `url` with its search_path set to `schema` (a libpq `options` parameter)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query)
    query.append(("options", f"-csearch_path={schema}"))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def our_updates(events: int, conversations: int, part: int, parts: int) -> Iterator[dict[str, Any]]:
    """This worker's share of the stream: every `parts`-th update, from number `part`."""
    stream = updates(events, conversations, shapes=message_shapes())
    return islice(stream, part, None, parts)


async def ingest(store: Store, shape: str, stream: Iterator[dict[str, Any]]) -> float:
    """Ingest `stream` through a switchboard over `store`; return the wall seconds it took."""
    board = Switchboard(store)
    await board.start()
    adapter = make_adapter()
    board.add_account(adapter, Binding(_noop, debounce=3600, max_wait=3600))
    context = board.accounts[ACCOUNT].context
    started = time.perf_counter()
    if shape == "poller":
        while batch := list(islice(stream, POLL_LIMIT)):
            await context.ingest_many(batch)
    else:

        async def connection() -> None:
            for update in stream:
                await context.ingest(update)

        await asyncio.gather(*(connection() for _ in range(WEBHOOK_CONNECTIONS)))
    elapsed = time.perf_counter() - started
    await board.stop()
    await adapter.stop()
    return elapsed


def child(url: str, shape: str, events: int, conversations: int, part: int, parts: int) -> None:
    """One worker of `pg x2`: connect, say ready, wait for a line, ingest, say done."""
    from backchannel.store.postgres import PostgresStore

    async def go() -> None:
        store = PostgresStore(url, worker=f"bench{part}")
        await store.pool()  # connected and migrated before the clock starts
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        await ingest(store, shape, our_updates(events, conversations, part, parts))
        print("done", flush=True)

    asyncio.run(go())


def two_workers(url: str, shape: str, events: int, conversations: int) -> float:
    workers = [
        subprocess.Popen(
            [
                *(sys.executable, __file__, "--child", url, "--shape", shape),
                *("--events", str(events), "--conversations", str(conversations)),
                *("--part", str(part), "--parts", "2"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for part in range(2)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
    started = time.perf_counter()
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline() == "done\n"
    elapsed = time.perf_counter() - started
    for worker in workers:
        worker.wait(timeout=60)
    return elapsed


async def check_count(store: Store, events: int, label: str) -> None:
    stats = await store.stats()
    if stats["messages"] != events:
        raise SystemExit(f"{label}: stored {stats['messages']} messages, not {events}")


async def pg_single(url: str, shape: str, events: int, conversations: int) -> float:
    from backchannel.store.postgres import PostgresStore

    return await ingest(PostgresStore(url), shape, our_updates(events, conversations, 0, 1))


async def pg_migrate(url: str) -> None:
    from backchannel.store.postgres import PostgresStore

    store = PostgresStore(url)
    await store.pool()
    await store.close()


async def pg_count(url: str, events: int, label: str) -> None:
    from backchannel.store.postgres import PostgresStore

    store = PostgresStore(url)
    await check_count(store, events, label)
    await store.close()


def one_round(
    url: str, shape: str, events: int, conversations: int, serial: int
) -> dict[str, float]:
    import psycopg

    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:

        async def sqlite() -> float:
            store = SQLiteStore(Path(folder) / "bench.db")
            took = await ingest(store, shape, our_updates(events, conversations, 0, 1))
            reopened = SQLiteStore(Path(folder) / "bench.db")
            await check_count(reopened, events, "sqlite")
            await reopened.close()
            return took

        seconds["sqlite"] = asyncio.run(sqlite())
    for config in ("pg x1", "pg x2"):
        schema = f"bench_{os.getpid()}_{serial}_{config[-1]}"
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"CREATE SCHEMA {schema}")
        schema_url = with_schema(url, schema)
        try:
            if config == "pg x1":
                seconds[config] = asyncio.run(pg_single(schema_url, shape, events, conversations))
            else:
                asyncio.run(pg_migrate(schema_url))  # before the two workers race to it
                seconds[config] = two_workers(schema_url, shape, events, conversations)
            asyncio.run(pg_count(schema_url, events, config))
        finally:
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute(f"DROP SCHEMA {schema} CASCADE")
    return seconds


def run(url: str, shape: str, events: int, conversations: int, rounds: int) -> None:
    samples: dict[str, list[float]] = {config: [] for config in CONFIGS}
    for serial in range(rounds):
        for config, took in one_round(url, shape, events, conversations, serial).items():
            samples[config].append(took)
    print(
        f"ingest_pg: {events:,} real-shaped Telegram updates over {conversations:,}"
        f" conversations, shape {shape}, {rounds} rounds"
        f" (1-minute load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"  {'store':<8} {'events/s min':>13} {'median':>8}   {'ratio to sqlite min':>19} {'median':>7}"
    )
    for config in CONFIGS:
        rates = [events / s for s in samples[config]]
        ratios = [ref / s for ref, s in zip(samples["sqlite"], samples[config], strict=True)]
        print(
            f"  {config:<8} {min(rates):>13,.0f} {statistics.median(rates):>8,.0f}"
            f"   {min(ratios):>19.2f} {statistics.median(ratios):>7.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="a postgresql:// URL (default: a throwaway cluster)")
    parser.add_argument("--events", type=int, default=5_000)
    parser.add_argument("--conversations", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shape", choices=("poller", "webhook"), default="webhook")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.shape, args.events, args.conversations, args.part, args.parts)
        return
    if args.store:
        run(args.store, args.shape, args.events, args.conversations, args.rounds)
        return
    from backchannel.testing.postgres import throwaway_cluster

    with throwaway_cluster(durable=True) as cluster:
        # durable like SQLite's WAL + synchronous=NORMAL: each commit reaches the disk
        print("(throwaway cluster, PostgreSQL's defaults: fsync=on, synchronous_commit=on)")
        run(cluster.url(), args.shape, args.events, args.conversations, args.rounds)


if __name__ == "__main__":
    main()

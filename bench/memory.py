"""Resident memory per idle conversation, at 10,000 and 50,000 conversations.

Each size runs in a fresh process: the switchboard starts, warms up on a
few conversations, then each new conversation gets one real-shaped Telegram
message that triggers a run of a no-op agent; once everything is idle (and a
collection has run) the growth of RSS since the warm-up, divided by the
number of conversations, is what an idle conversation costs: the store's
caches, the scheduler, the adapter, SQLite's page cache, the allocator.

    uv run python bench/memory.py [--sizes 10000 50000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
from itertools import islice
from pathlib import Path
from typing import Any

import apsw
from backchannel import Binding, Run, Switchboard
from backchannel.runtime import tune_gc
from backchannel.store import SQLiteStore
from telegram_updates import ACCOUNT, make_adapter, message_shapes, updates

WARM_UP = 1_000


def rss_bytes() -> int:
    """Return this process's resident set size (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _noop(run: Run) -> None:
    return None


async def measure_one(conversations: int, warm_up: int = WARM_UP) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        board = Switchboard(SQLiteStore(Path(folder) / "memory.db"))
        await board.start()
        adapter = make_adapter()
        board.add_account(adapter, Binding(_noop, respond="always", debounce=0))
        context = board.accounts[ACCOUNT].context
        total = warm_up + conversations
        stream = updates(total, total, shapes=message_shapes())

        async def feed(count: int) -> None:
            while count > 0:
                batch = list(islice(stream, min(count, 100)))
                await context.ingest_many(batch)
                count -= len(batch)
            await board.wait_idle(timeout=600)
            gc.collect()

        # the warm-up is the baseline: code paths, statements and buffers a first batch allocates
        await feed(warm_up)
        base = rss_bytes()
        sqlite_base = apsw.status(apsw.SQLITE_STATUS_MEMORY_USED)[0]
        await feed(conversations)
        grown = rss_bytes() - base
        # SQLite's share: its page caches (bounded by PRAGMA cache_size) and statements
        sqlite_grown = apsw.status(apsw.SQLITE_STATUS_MEMORY_USED)[0] - sqlite_base
        stats = await board.store.stats()
        await board.stop()
        await adapter.stop()
    return {
        "conversations": conversations,
        "stored": stats["conversations"] - warm_up,
        "runs": stats["runs"] - warm_up,
        "bytes_per_conversation": grown / conversations,
        "sqlite_bytes_per_conversation": sqlite_grown / conversations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.one:
        tune_gc()  # as `serve` does once started
        json.dump(asyncio.run(measure_one(args.one)), sys.stdout)
        return
    figures = []
    for size in args.sizes:
        child = subprocess.run(
            [sys.executable, __file__, "--one", str(size)],
            capture_output=True,
            text=True,
            check=True,
        )
        figures.append(json.loads(child.stdout))
    if args.json:
        json.dump({"sizes": figures}, sys.stdout)
        print()
        return
    print("memory: RSS growth per idle conversation (each size in a fresh process)")
    for one in figures:
        print(
            f"  {one['conversations']:>7,} conversations   {one['bytes_per_conversation']:,.0f} B each"
            f"   (SQLite {one['sqlite_bytes_per_conversation']:,.0f} B of it; {one['runs']:,} runs)"
        )


if __name__ == "__main__":
    main()

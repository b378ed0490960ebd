"""Run-building latency: time to build a Run of 50 messages as history grows.

Conversations of 1,000, 100,000 and 1,000,000 stored messages; the Run is
built the way the switchboard builds it for an agent (window read, framing,
tools). Target: under 1 ms median at every size, flat as history grows.
Each build reads its window afresh: the windows and lines the store and the
run builder keep from a conversation's last run (store/windows.py) are
dropped before each, or every build after the first would reuse them.

    uv run python bench/window.py [--sizes 1000,100000,1000000] [--repeat 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from backchannel import Binding, Run, Switchboard
from backchannel.store import Inbound, SQLiteStore
from backchannel.testing import FakeChannel


async def noop(run: Run) -> None:
    return None


async def fill(store: SQLiteStore, channel: FakeChannel, chat: str, count: int) -> int:
    adapter = channel.adapter("fake")
    batch = 20_000
    conversation_id = 0
    for start in range(0, count, batch):
        events = []
        for n in range(start, min(start + batch, count)):
            raw = channel.platform.make_message(
                f"message {n}: " + "lorem ipsum dolor sit amet " * 3,
                chat=chat,
                sender=("alice", "bob", "carol")[n % 3],
            )
            event = adapter.normalize({**raw, "update": n})
            assert event is not None
            events.append(Inbound(event, triggers=n == count - 1))
        results = await store.append_inbound(events)
        conversation_id = results[0].conversation_id
    return conversation_id


async def bench(sizes: list[int], repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "bench.db")
        channel = FakeChannel()
        board = Switchboard(store)
        board.add_account(channel.adapter("fake"), Binding(noop))
        print(f"{'stored messages':>16} {'fill':>8} {'median':>9} {'p95':>9} {'messages':>9}")
        for size in sizes:
            began = time.perf_counter()
            conversation_id = await fill(store, channel, f"chat-{size}", size)
            filled = time.perf_counter() - began
            timings = []
            run = None
            builder = board.accounts["fake"].builder
            for _ in range(repeat):
                store._windows.clear()
                builder.kept_lines.clear()
                start = time.perf_counter()
                run = await board.build_run(conversation_id)
                timings.append(time.perf_counter() - start)
            assert run is not None and len(run.messages) == 50
            timings.sort()
            median = statistics.median(timings) * 1000
            p95 = timings[int(len(timings) * 0.95)] * 1000
            print(
                f"{size:>16,} {filled:>7.1f}s {median:>7.3f}ms {p95:>7.3f}ms {len(run.messages):>9}"
            )
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(bench([int(s) for s in args.sizes.split(",")], args.repeat))


if __name__ == "__main__":
    main()

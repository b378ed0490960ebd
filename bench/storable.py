"""Cost of the storability check per event, against the cost of committing the event.

Each event an adapter hands over is checked by `storable_event` before it joins a
shared transaction (issue 14). This prints the check's time per event for four
kinds of event, and as a reference measured in the same run, the time per event
of `SQLiteStore.append_inbound` committing batches of 100 (what the check protects).
Min and median over rounds; the ratio is check / commit.

    uv run python bench/storable.py [--events 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from backchannel.model import Address, Attachment, Event, Sender, evolve
from backchannel.storable import storable_event
from backchannel.store import Inbound, SQLiteStore


def events(kind: str, count: int) -> list[Event]:
    """`count` events of one kind: ascii, unicode, meta (a Slack-like meta), surrogate."""
    made = []
    for n in range(count):
        text = f"message {n}: the deploy of build 41 went out, please check the dashboards"
        meta: dict[str, object] = {}
        attachments: tuple[Attachment, ...] = ()
        if kind == "unicode":
            text = f"сообщение {n}: сборка 41 вышла 🙂, проверьте панели — ✓"
        elif kind == "meta":
            meta = {"update_id": n, "chat_type": "supergroup", "thread_ts": "1700000000.000100"}
            attachments = (Attachment("photo", "IMG_1.jpg", "image/jpeg", 1234, f"file-{n}"),)
        elif kind == "surrogate":
            text = f"half a pair \ud800 in message {n}"
        made.append(
            Event(
                address=Address("bench", f"chat{n % 50}"),
                event_id=f"e{kind}{n}",
                sender=Sender(f"user{n % 7}", "Alice Liddell", "alice"),
                text=text,
                platform_message_id=f"m{n}",
                sent_at=1_700_000_000.0 + n,
                meta=meta,
                attachments=attachments,
            )
        )
    return made


def time_check(batch: list[Event]) -> float:
    start = time.perf_counter()
    for event in batch:
        storable_event(event, "bench")
    return (time.perf_counter() - start) / len(batch)


async def time_commit(store: SQLiteStore, batch: list[Event]) -> float:
    start = time.perf_counter()
    for offset in range(0, len(batch), 100):
        await store.append_inbound([Inbound(e) for e in batch[offset : offset + 100]])
    return (time.perf_counter() - start) / len(batch)


async def main(count: int, rounds: int) -> None:
    kinds = ("ascii", "unicode", "meta", "surrogate")
    checks: dict[str, list[float]] = {kind: [] for kind in kinds}
    commits: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "bench.db")
        for round_number in range(rounds):
            for kind in kinds:
                checks[kind].append(time_check(events(kind, count)))
            fresh = [
                evolve(e, event_id=f"r{round_number}{e.event_id}") for e in events("meta", count)
            ]
            commits.append(await time_commit(store, fresh))
        await store.close()
    commit_median = statistics.median(commits)
    print(f"{count} events per kind, {rounds} rounds (µs per event: min / median)")
    print(
        f"  reference: append_inbound, batches of 100   "
        f"{min(commits) * 1e6:7.2f} / {commit_median * 1e6:7.2f}"
    )
    for kind in kinds:
        values = checks[kind]
        median = statistics.median(values)
        print(
            f"  storable_event, {kind:<10}                "
            f"{min(values) * 1e6:7.2f} / {median * 1e6:7.2f}"
            f"   ({median / commit_median:.1%} of the commit)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.events, arguments.rounds))

"""What the search index (migration m003_orchestration) costs the write path, and what a search costs.

Real Telegram update shapes, normalized by the real adapter, are appended with
`SQLiteStore.append_inbound` in batches of 100 (the poller's shape) into two
fresh stores per round: the reference has the FTS5 triggers dropped, the other
is the store as shipped. Each round runs both, alternating which goes first;
the figure is the indexed store's events/s divided by the reference's, min and
median over rounds. Message text is indexed lazily, at the next search, so the
write path pays only for titles and names; the first search then indexes every
message at once, and is timed too. Then `search_conversations` over the indexed
store: a rare word, a common word, and a name, median time per query. Prints figures; never
fails for being slow.

    uv run python bench/search_index.py [--events N] [--conversations N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from backchannel.model import Event
from backchannel.store import Inbound, SQLiteStore
from telegram_updates import make_adapter, message_shapes, updates

BATCH = 100
TRIGGERS = (
    "messages_fts_update",
    "names_fts_title_insert",
    "names_fts_title_update",
    "names_fts_participant_insert",
    "names_fts_participant_rename",
)


def make_events(events: int, conversations: int) -> list[Event]:
    adapter = make_adapter()
    made = []
    for update in updates(events, conversations, shapes=message_shapes()):
        event = adapter.normalize(update)
        assert event is not None
        made.append(event)
    return made


async def append_seconds(folder: Path, name: str, events: list[Event], *, indexed: bool) -> float:
    store = SQLiteStore(folder / f"{name}.db")
    if not indexed:
        for trigger in TRIGGERS:
            store.db.execute(f"DROP TRIGGER {trigger}")
    started = time.perf_counter()
    for offset in range(0, len(events), BATCH):
        await store.append_inbound([Inbound(e) for e in events[offset : offset + BATCH]])
    elapsed = time.perf_counter() - started
    await store.close()
    return elapsed


async def search_ms(store: SQLiteStore, query: str, repeat: int = 20) -> tuple[float, int]:
    times = []
    found = 0
    for _ in range(repeat):
        started = time.perf_counter()
        found = len(await store.search_conversations(query=query, limit=20))
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), found


async def main(events: int, conversations: int, rounds: int) -> None:
    stream = make_events(events, conversations)
    ratios, plain_rates, indexed_rates = [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for round_number in range(rounds):
            order = [False, True] if round_number % 2 == 0 else [True, False]
            seconds = {}
            for indexed in order:
                name = f"r{round_number}-{'fts' if indexed else 'plain'}"
                seconds[indexed] = await append_seconds(folder, name, stream, indexed=indexed)
            plain_rates.append(events / seconds[False])
            indexed_rates.append(events / seconds[True])
            ratios.append(seconds[False] / seconds[True])
        store = SQLiteStore(folder / f"r{rounds - 1}-fts.db")
        started = time.perf_counter()
        await store.search_conversations(query="warm")  # indexes every message, once
        while not store.search_index_complete:  # a search catches up for 2 s at most
            await store.search_conversations(query="warm")
        catch_up = time.perf_counter() - started
        words = [e.text.split()[0] for e in stream if e.text.split()]
        common = max(set(words), key=words.count)
        rare = next(w for e in reversed(stream) for w in e.text.split() if w.isalpha())
        name = stream[0].sender.name.split()[0] if stream[0].sender.name else "a"
        queries = {"common word": common, "rare word": rare, "a sender's name": name}
        searched = {label: await search_ms(store, q) for label, q in queries.items()}
        await store.close()
    load = os.getloadavg()[0]
    print(
        f"search index: {events:,} real-shaped Telegram messages over {conversations:,}"
        f" conversations, append_inbound {BATCH} a batch, {rounds} rounds"
        f" (1-minute load {load:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"  indexed / unindexed events/s   min {min(ratios):.2f}   median {statistics.median(ratios):.2f}"
    )
    print(
        f"  events/s median                unindexed {statistics.median(plain_rates):,.0f}"
        f"   indexed {statistics.median(indexed_rates):,.0f}"
    )
    print(
        f"  first search (indexes the {events:,} new messages at once)"
        f"   {catch_up:.2f} s = {catch_up / events * 1e6:.1f} µs per message"
    )
    for label, (ms, found) in searched.items():
        print(f"  search, {label:<16} median {ms:6.2f} ms  ({found} conversations)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.conversations, args.rounds))

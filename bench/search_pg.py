"""Search on PostgreSQL: what its indexes (migration pg009) cost the write path, and what a search costs.

The same real Telegram update shapes as bench/search_index.py (the SQLite
figures), normalized by the real adapter, appended with
`PostgresStore.append_inbound` in batches of 100 into two fresh databases per
round on a throwaway cluster with PostgreSQL's durable defaults: the reference
has pg009's write-path parts dropped (the title and name indexes, the edit
trigger), the other is the store as shipped. Message text is indexed lazily,
at the next search, so ingest pays nothing for it; the first search then
indexes every message at once, and is timed too. Then queries over the
indexed store (statistics gathered first, as autovacuum does), each beside
the query the store ran before pg009 (a scan of every visible message).
Prints figures; never fails for being slow.

    uv run python bench/search_pg.py [--events N] [--conversations N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from backchannel.model import Event
from backchannel.store import Inbound
from backchannel.store.postgres import PostgresStore, fold_accents
from backchannel.store.postgres_migrations import ACCENTED, PARTICIPANT_NAME, PLAIN
from backchannel.store.rows import CONVERSATION_COLUMNS
from backchannel.testing.postgres import throwaway_cluster
from search_index import BATCH, make_events

#: pg009's parts that the write path pays for (message text is indexed at search time)
WRITE_PATH = (
    "DROP INDEX conversations_search",
    "DROP INDEX participants_search",
    "DROP TRIGGER messages_reword ON messages",
)


def old_document(column: str) -> str:
    """The document the search used before pg009 (every text translated)."""
    return (
        f"to_tsvector('simple', translate(lower(COALESCE({column}, '')), '{ACCENTED}', '{PLAIN}'))"
    )


#: the query before pg009 (one word): every conversation's visible messages, each folded
SCAN = (
    f"SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE"
    f" ({old_document('title')} @@ to_tsquery('simple', %(q)s)"
    " OR EXISTS (SELECT 1 FROM participants p WHERE p.conversation_id = c.id"
    f" AND {old_document(PARTICIPANT_NAME)} @@ to_tsquery('simple', %(q)s)"
    " AND EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = p.conversation_id"
    " AND m.sender_id = p.sender_id AND m.held = 0))"
    " OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.held = 0"
    f" AND {old_document('m.text')} @@ to_tsquery('simple', %(q)s)))"
    " ORDER BY active_at DESC, id DESC LIMIT 20"
)


async def append_seconds(url: str, events: list[Event], *, indexed: bool) -> float:
    store = PostgresStore(url)
    await store.pool()
    if not indexed:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
            for statement in WRITE_PATH:
                await connection.execute(statement)
    started = time.perf_counter()
    for offset in range(0, len(events), BATCH):
        await store.append_inbound([Inbound(e) for e in events[offset : offset + BATCH]])
    elapsed = time.perf_counter() - started
    await store.close()
    return elapsed


async def median_ms(call: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


async def main(events: int, conversations: int, rounds: int) -> None:
    stream = make_events(events, conversations)
    ratios, plain_rates, indexed_rates = [], [], []
    with throwaway_cluster(durable=True) as cluster:
        last = ""
        for round_number in range(rounds):
            order = [False, True] if round_number % 2 == 0 else [True, False]
            seconds = {}
            for indexed in order:
                url = cluster.fresh_database()
                seconds[indexed] = await append_seconds(url, stream, indexed=indexed)
                if indexed:
                    last = url
            plain_rates.append(events / seconds[False])
            indexed_rates.append(events / seconds[True])
            ratios.append(seconds[False] / seconds[True])
        async with await psycopg.AsyncConnection.connect(last, autocommit=True) as connection:
            await connection.execute("ANALYZE")
            store = PostgresStore(last)
            started = time.perf_counter()
            await store.search_conversations(query="warm")  # indexes every message, once
            while not store.search_index_complete:  # a search catches up for 2 s at most
                await store.search_conversations(query="warm")
            catch_up = time.perf_counter() - started
            words = [e.text.split()[0] for e in stream if e.text.split()]
            common = max((w for w in words if w.isalpha()), key=words.count)
            rare = next(w for e in reversed(stream) for w in e.text.split() if w.isalpha())
            name = stream[0].sender.name.split()[0] if stream[0].sender.name else "a"
            queries = {"common word": common, "rare word": rare, "a sender's name": name}
            searched = {}
            for label, query in queries.items():
                indexed_ms, found = await median_ms(
                    lambda q=query: store.search_conversations(query=q, limit=20), 10
                )
                term = f"{fold_accents(query.lower())}:*"

                async def scan(term: str = term) -> Any:
                    cursor = await connection.execute(SCAN, {"q": term})
                    return await cursor.fetchall()

                scan_ms, scanned = await median_ms(scan, 3)
                searched[label] = (indexed_ms, len(found), scan_ms, len(scanned))
            await store.close()
    load = os.getloadavg()[0]
    print(
        f"search on PostgreSQL: {events:,} real-shaped Telegram messages over"
        f" {conversations:,} conversations, append_inbound {BATCH} a batch, {rounds} rounds"
        f" (1-minute load {load:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"  with / without pg009 events/s   min {min(ratios):.2f}"
        f"   median {statistics.median(ratios):.2f}"
    )
    print(
        f"  events/s median                 without {statistics.median(plain_rates):,.0f}"
        f"   with {statistics.median(indexed_rates):,.0f}"
    )
    print(
        f"  first search (indexes the {events:,} new messages at once)"
        f"   {catch_up:.2f} s = {catch_up / events * 1e6:.1f} µs per message"
    )
    for label, (ms, found, scan_ms, scanned) in searched.items():
        print(
            f"  search, {label:<16} median {ms:7.2f} ms ({found} conversations);"
            f" the scan before pg009 {scan_ms:8.1f} ms ({scanned})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.conversations, args.rounds))

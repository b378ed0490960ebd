"""The SQLite ceiling: plain apsw writing the ingest path's rows into the project's schema.

Same migrated schema and durability as `SQLiteStore` (WAL,
synchronous=NORMAL; a 64 MiB page cache, at least the store's), the same rows (message, event id, conversation counters,
participants), the same work per event (dedupe by event id, per-conversation
seq, reply lookups), `per_transaction` events per transaction. No
normalize, no asyncio, no model objects: what the ingest path could reach
if everything but SQLite cost nothing. `bench/ingest.py` runs it in the same
process and reports each shape as a ratio to it.

    uv run python bench/ceiling.py [--events N] [--conversations N] [--per-transaction N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import apsw
from backchannel.model import Event
from backchannel.policy import Policy
from backchannel.store.migrations import migrate
from backchannel.store.rows import MESSAGE_COLUMNS, dump_attachments
from telegram_updates import message_shapes, sample_events

__all__ = ["ceiling_seconds"]


def ceiling_seconds(
    events: int, conversations: int, per_transaction: int, samples: list[Event]
) -> tuple[float, float]:
    """Return the wall and CPU seconds plain apsw takes to store `events` rows (fresh database)."""
    with tempfile.TemporaryDirectory() as folder:
        db = apsw.Connection(str(Path(folder) / "ceiling.db"))
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-65536")
        migrate(db)
        policy = Policy()
        # what does not vary between a conversation's events, worked out before the clock
        fixed = [
            (
                e.address,
                e.sender,
                e.text,
                e.reply_to,
                int(e.mentions_me),
                dump_attachments(e.attachments),
                e.sent_at,
                int(policy.triggers(e)),
                dict(e.meta),
                e.conversation_kind,
                e.conversation_title,
            )
            for e in samples
        ]
        known = _Known()
        started, cpu_started = time.perf_counter(), time.process_time()
        rows = _numbered(events, conversations)
        while True:
            chunk = list(islice(rows, per_transaction))
            if not chunk:
                break
            _write(db, chunk, fixed, known)
        elapsed = time.perf_counter() - started, time.process_time() - cpu_started
        db.close()
    return elapsed


@dataclass
class _Known:
    """What plain code would keep in memory between transactions."""

    ids: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: conversation id -> [last_seq, trigger_seq]
    counters: dict[int, list[int]] = field(default_factory=dict)
    people: set[tuple[int, str]] = field(default_factory=set)


def _numbered(events: int, conversations: int) -> Iterator[tuple[int, int]]:
    for number in range(events):
        yield number, number % conversations


def _write(
    db: apsw.Connection, chunk: list[tuple[int, int]], fixed: list[Any], known_state: _Known
) -> None:
    db.execute("BEGIN IMMEDIATE")
    # the adapter's event ids: "{update_id}:{date}" (update ids count up from 1, and the
    # date is the conversation's shape's)
    event_ids = [f"{number + 1}:{int(fixed[conversation][6])}" for number, conversation in chunk]
    known: set[str] = set()
    for start in range(0, len(event_ids), 500):
        part = event_ids[start : start + 500]
        marks = ",".join("?" * len(part))
        known.update(
            row[0]
            for row in db.execute(
                f"SELECT event_id FROM events WHERE account = ? AND event_id IN ({marks})",
                ("tg", *part),
            )
        )
    messages: list[tuple[Any, ...]] = []
    event_rows: list[tuple[Any, ...]] = []
    touched: dict[int, list[Any]] = {}
    new_people: list[tuple[Any, ...]] = []
    for (number, conversation), event_id in zip(chunk, event_ids, strict=True):
        if event_id in known:
            continue
        (address, sender, text, reply_to, mentions, attachments, sent_at, triggers, meta, kind,
         title) = fixed[conversation]  # fmt: skip
        key = (address.account, address.chat, address.thread or "")
        conversation_id = known_state.ids.get(key)
        if conversation_id is None:
            conversation_id = db.execute(
                "INSERT INTO conversations (account, chat, thread, kind, title, created_at,"
                " active_at) VALUES (?,?,?,?,?,?,?) RETURNING id",
                (*key, kind, title, sent_at, sent_at),
            ).fetchone()[0]
            known_state.ids[key] = conversation_id
            known_state.counters[conversation_id] = [0, 0]
        counters = known_state.counters[conversation_id]
        counters[0] += 1
        seq = counters[0]
        if triggers:
            counters[1] = seq
        added = touched.get(conversation_id)
        if added is None:
            touched[conversation_id] = added = [0, sent_at]
        added[0] += 1
        reply_to_seq = None
        if reply_to is not None:
            found = db.execute(
                "SELECT seq FROM messages WHERE conversation_id = ? AND platform_message_id = ?",
                (conversation_id, reply_to),
            ).fetchone()
            reply_to_seq = found[0] if found else None
        meta["update_id"] = number + 1
        messages.append(
            (
                conversation_id,
                seq,
                "in",
                event_id,
                sender.id,
                sender.name,
                sender.handle,
                int(sender.is_bot),
                text,
                str(number + 1),
                reply_to,
                reply_to_seq,
                mentions,
                attachments,
                sent_at,
                None,
                None,
                0,
                triggers,
                "received",
                None,
                None,
                json.dumps(meta),
            )
        )
        event_rows.append(("tg", event_id, conversation_id, seq, "message"))
        if (conversation_id, sender.id) not in known_state.people:
            known_state.people.add((conversation_id, sender.id))
            new_people.append(
                (
                    conversation_id,
                    sender.id,
                    sender.name,
                    sender.handle,
                    int(sender.is_bot),
                    1,
                    seq,
                    seq,
                )
            )
    db.executemany(
        f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES ({','.join('?' * 23)})", messages
    )
    db.executemany(
        "INSERT INTO events (account, event_id, conversation_id, seq, kind) VALUES (?,?,?,?,?)",
        event_rows,
    )
    db.executemany(
        "UPDATE conversations SET last_seq = ?, visible_count = visible_count + ?,"
        " held_count = held_count + ?, trigger_seq = ?, active_at = MAX(active_at, ?),"
        " orphan_edits = ? WHERE id = ?",
        [
            (counters[0], added[0], 0, counters[1], added[1], 0, conversation_id)
            for conversation_id, added in touched.items()
            for counters in (known_state.counters[conversation_id],)
        ],
    )
    if new_people:
        db.executemany(
            "INSERT INTO participants (conversation_id, sender_id, name, handle, is_bot,"
            " message_count, first_seq, last_seq) VALUES (?,?,?,?,?,?,?,?)",
            new_people,
        )
    db.execute("COMMIT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--per-transaction", type=int, default=1_000)
    args = parser.parse_args()
    samples = sample_events(args.conversations, message_shapes())
    seconds, _ = ceiling_seconds(args.events, args.conversations, args.per_transaction, samples)
    print(
        f"ceiling: {args.events:,} events over {args.conversations:,} conversations,"
        f" {args.per_transaction:,} a transaction: {args.events / seconds:,.0f} events/s"
    )


if __name__ == "__main__":
    main()

"""The embedded store: one SQLite file through apsw, WAL, synchronous=NORMAL.

WAL with synchronous=NORMAL makes each commit durable against a process crash
(SIGKILL), which is the failure the guarantees speak of; an OS crash or power
loss can lose the last transactions before a checkpoint. Set
``synchronous = "FULL"`` in config to trade speed for that too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import apsw
import attrs

from ..config import KEPT_WINDOWS
from ..errors import StoreError, UnknownConversation
from ..model import (
    ATTACHMENTS_COMPLETE,
    Address,
    Conversation,
    Message,
    Outbound,
    Receipt,
    Sender,
    now,
)
from ..secrets import redact
from .base import (
    DEAD_LETTER_KEYS,
    NEVER_SENT_WAITING,
    WAITING,
    AppendResult,
    Inbound,
    OutboxEntry,
    Participant,
    RunRecord,
    Store,
    dead_letter_digest,
)
from .cache import LRUCache
from .checkpoint import Checkpointer
from .migrations import migrate
from .rows import (
    CHAT_TARGET_SQL,
    CONVERSATION_COLUMNS,
    EARLY_CHANGES_KEPT,
    MESSAGE_COLUMNS,
    OUTBOX_COLUMNS,
    Batch,
    ConversationCounters,
    change_address,
    chat_target_params,
    conversation_row,
    dump_attachments,
    early_reaction,
    early_reactions_column,
    first,
    message_row,
    message_rows,
    outbox_row,
    with_reaction,
)
from .sqlite_asks import SQLiteAsks
from .windows import WindowCache, read_window

__all__ = ["SQLiteStore", "open_store"]

#: conversations whose ids and counters are kept in memory (the most recently active)
CACHED_CONVERSATIONS = 4096
#: SQLite's page cache per connection, in KiB: the pages a batch over thousands of
#: conversations touches; more only grows the process with the database (the OS caches
#: the file anyway, so a page read again costs a copy, not a disk read)
PAGE_CACHE_KIB = 2048
#: the search index's catch-up: rows (by rowid) indexed in one write transaction (50-150
#: ms each: the event loop waits no longer, and the write lock is held no longer)
INDEX_CHUNK_ROWS = 10_000
#: how long the write lock is left free after each chunk: another process's write waiting
#: for it must get it (SQLite's busy handler, once it has waited a while, tries again
#: every 100 ms: back to back, the chunks kept an append waiting 1.9-4.8 s)
INDEX_PAUSE_SECONDS = 0.1
#: and the time one search spends catching up at most (at least one chunk is done): past
#: it the search answers from what is indexed and says so (`search_index_complete`)
INDEX_SECONDS = 2.0
#: seqs beyond what SQLite's 64-bit integers hold are clamped to this (no seq comes near)
SEQ_BOUND = 2**62
#: conversations whose latest window rows are kept between runs (store/windows.py): with
#: 50-row windows of real Telegram shapes about 90 KiB each, RunBuilder's lines included


def open_store(
    path: str | os.PathLike[str], *, synchronous: str = "NORMAL", kept_windows: int = KEPT_WINDOWS
) -> SQLiteStore:
    """Open (creating when needed) the store at `path`; its directory is made 0700."""
    return SQLiteStore(path, synchronous=synchronous, kept_windows=kept_windows)


#: what opening a store can fail with that is the file's or its folder's fault, not ours
_CANNOT_OPEN = (
    apsw.NotADBError,
    apsw.CorruptError,
    apsw.CantOpenError,
    apsw.IOError,
    apsw.ReadOnlyError,
)


def _why(path: Path, error: apsw.Error) -> str:
    """One line on why the store at `path` did not open."""
    if isinstance(error, apsw.NotADBError):
        return "the file is not an SQLite database (is the path right?)"
    folder = path.parent
    if isinstance(error, apsw.CantOpenError | apsw.ReadOnlyError) and not os.access(
        folder, os.W_OK | os.X_OK
    ):
        return f"{error} (this user cannot write to the folder {folder})"
    return str(error)


class SQLiteStore(SQLiteAsks, Store):
    """The apsw implementation of `Store`. One connection, used from one event loop."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        kept_windows: int = KEPT_WINDOWS,
    ):
        self.path = Path(path)
        if str(path) != ":memory:":
            directory = self.path.parent
            if not directory.exists():
                directory.mkdir(parents=True, mode=0o700)
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise StoreError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        if kept_windows < 0:
            raise StoreError(f"kept_windows must be 0 or more, not {kept_windows}")
        #: how many conversations' last windows are kept (0: none, every read is fresh)
        self.kept_windows = kept_windows
        try:
            self._db: apsw.Connection | None = apsw.Connection(str(path))
        except apsw.Error as error:
            raise StoreError(f"cannot open store {self.path}: {error}") from error
        db = self._db
        try:
            self._open(db, path, synchronous)
        except _CANNOT_OPEN as error:
            db.close()
            raise StoreError(f"cannot open store {self.path}: {_why(self.path, error)}") from None
        self._checkpointer = Checkpointer(db, str(path)) if str(path) != ":memory:" else None
        #: (account, chat, thread) -> (conversation id, title, kind as last written)
        self._conversation_ids: LRUCache[tuple[str, str, str], tuple[int, str | None, str]] = (
            LRUCache(CACHED_CONVERSATIONS)
        )
        self._batch: Batch | None = None
        #: last_seq, trigger_seq, active_at per conversation as of our last commit; valid
        #: while PRAGMA data_version says no other connection has written since
        self._known_counters: LRUCache[int, tuple[int, int, float, int]] = LRUCache(
            CACHED_CONVERSATIONS
        )
        self._data_version: int | None = None
        #: (conversation id, sender id) -> (name, handle, is_bot) as last written
        self._known_participants: LRUCache[tuple[int, str], tuple[str, str | None, int]] = LRUCache(
            CACHED_CONVERSATIONS
        )
        self._windows = WindowCache(db, kept_windows) if kept_windows else None

    def _open(self, db: apsw.Connection, path: str | os.PathLike[str], synchronous: str) -> None:
        """Set the connection up and bring the schema up to date."""
        db.set_busy_timeout(5000)
        # One plan per statement, whatever values are bound. Without this, SQLite marks a
        # statement whose planning looked at a bound value (a LIMIT ?, a column = ? held
        # against the partial indexes on messages) and prepares it again every time a new
        # value is bound, so apsw's statement cache saved nothing there: a 50-row window
        # read paid about 20 µs for it, `messages_after` 40 µs of its 45. No query of ours
        # needs a bound value to be planned (the partial indexes' conditions are literals).
        db.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous.upper()}")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
        db.execute("PRAGMA journal_size_limit=16777216")  # a reset WAL shrinks back to 16 MiB
        if str(path) != ":memory:":
            for suffix in ("", "-wal", "-shm"):
                candidate = Path(f"{self.path}{suffix}")
                if candidate.exists():
                    candidate.chmod(0o600)
        migrate(db)

    # lifecycle -------------------------------------------------------------
    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, taking the write lock up front (BEGIN IMMEDIATE).

        Read-then-write methods must not start as readers: another process
        committing in between would make their upgrade fail with BusyError.
        Nested use joins the transaction already open.
        """
        db = self.db
        if not db.getautocommit():
            yield
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if not db.getautocommit():
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @property
    def db(self) -> apsw.Connection:
        if self._db is None:
            raise StoreError("the store is closed")
        return self._db

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        if self._db is not None:
            self._db.close()
            self._db = None

    async def recover(self) -> list[OutboxEntry]:
        db = self.db
        with self._write():
            pending = list(db.execute("SELECT id, reason FROM outbox WHERE status = 'pending'"))
            for outbox_id, reason in pending:
                if reason == WAITING:  # nothing of it was in flight (Store.note_waiting)
                    self._set_outbox_status(outbox_id, "failed", NEVER_SENT_WAITING)
                    self._gave_back(outbox_id, NEVER_SENT_WAITING)
                    continue
                self._set_outbox_status(
                    outbox_id, "uncertain", "interrupted by a restart before the platform answered"
                )
            db.execute(
                "UPDATE runs SET status = 'interrupted', error = 'the process stopped during the run',"
                " finished_at = ? WHERE status = 'running'",
                (now(),),
            )
        return [self._outbox_entry(outbox_id) for outbox_id, _ in pending]

    async def note_waiting(self, outbox_id: int, waiting: bool) -> bool:
        with self._write():
            rows = self.db.execute(
                "UPDATE outbox SET reason = ? WHERE id = ? AND status = 'pending' RETURNING id",
                (WAITING if waiting else None, outbox_id),
            ).fetchall()
        return bool(rows)

    # inbound ---------------------------------------------------------------
    async def append_inbound(self, items: Sequence[Inbound]) -> list[AppendResult]:
        db = self.db
        results: list[AppendResult] = []
        batch = self._batch = Batch()
        # IMMEDIATE takes the write lock now, so data_version read next cannot go stale
        # before we commit: it tells whether another connection wrote since our last batch
        db.execute("BEGIN IMMEDIATE")
        try:
            version = first(db.execute("PRAGMA data_version"))
            if version != self._data_version:
                self._known_counters.clear()
                self._known_participants.clear()
                self._data_version = version
            batch.existing = self._known_events(items)
            for item in items:
                results.append(self._append_one(item))
                if item.state:
                    for key, value in item.state.items():
                        self._write_state(item.event.account, key, value)
            self._flush_rows(batch)
            self._flush_batch(batch)
            db.execute("COMMIT")
        except BaseException:
            if not db.getautocommit():
                db.execute("ROLLBACK")
            self._conversation_ids.clear()
            self._known_counters.clear()
            self._known_participants.clear()
            raise
        finally:
            self._batch = None
        for conversation_id, c in batch.conversations.items():
            self._known_counters.put(
                conversation_id, (c.last_seq, c.trigger_seq, c.active_at, c.orphan_edits)
            )
        return results

    def _known_events(self, items: Sequence[Inbound]) -> dict[tuple[str, str], tuple[int, int]]:
        """Return the already stored (account, event_id) of the batch's messages, in few queries."""
        wanted: dict[str, list[str]] = {}
        for item in items:
            if item.event.kind == "message":
                wanted.setdefault(item.event.account, []).append(item.event.event_id)
        found: dict[tuple[str, str], tuple[int, int]] = {}
        for account, event_ids in wanted.items():
            for start in range(0, len(event_ids), 500):
                chunk = event_ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for event_id, conversation_id, seq in self.db.execute(
                    "SELECT event_id, conversation_id, seq FROM events"
                    f" WHERE account = ? AND event_id IN ({marks})",
                    (account, *chunk),
                ):
                    found[(account, event_id)] = (conversation_id, seq)
        return found

    def _flush_rows(self, batch: Batch) -> None:
        """Insert the new messages and their event ids gathered so far, many rows a statement."""
        if batch.message_rows:
            self.db.executemany(
                f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES"
                " (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                batch.message_rows,
            )
            batch.message_rows = []
        if batch.event_rows:
            self.db.executemany(
                "INSERT INTO events (account, event_id, conversation_id, seq, kind)"
                " VALUES (?,?,?,?,?)",
                batch.event_rows,
            )
            batch.event_rows = []
        batch.new_message_ids.clear()

    def _flush_batch(self, batch: Batch) -> None:
        """Write the per-conversation counters and participants a batch accumulated."""
        db = self.db
        if batch.conversations:
            db.executemany(
                "UPDATE conversations SET last_seq = ?, visible_count = visible_count + ?,"
                " held_count = held_count + ?, trigger_seq = ?, active_at = MAX(active_at, ?),"
                " orphan_edits = ? WHERE id = ?",
                [
                    (
                        c.last_seq,
                        c.visible,
                        c.held,
                        c.trigger_seq,
                        c.active_at,
                        c.orphan_edits,
                        conversation_id,
                    )
                    for conversation_id, c in batch.conversations.items()
                ],
            )
        new_people = []
        for (conversation_id, sender_id), p in batch.participants.items():
            identity = (p.name, p.handle, p.is_bot)
            if self._known_participants.get((conversation_id, sender_id)) == identity:
                continue  # counts are derived from messages when asked; names are unchanged
            new_people.append(
                (
                    conversation_id,
                    sender_id,
                    p.name,
                    p.handle,
                    p.is_bot,
                    p.count,
                    p.first_seq,
                    p.last_seq,
                )
            )
            self._known_participants.put((conversation_id, sender_id), identity)
        if new_people:
            db.executemany(
                "INSERT INTO participants (conversation_id, sender_id, name, handle, is_bot,"
                " message_count, first_seq, last_seq) VALUES (?,?,?,?,?,?,?,?)"
                " ON CONFLICT (conversation_id, sender_id) DO UPDATE SET"
                " name = excluded.name, handle = excluded.handle, is_bot = excluded.is_bot",
                new_people,
            )

    def _counters(self, conversation_id: int) -> ConversationCounters:
        assert self._batch is not None
        counters = self._batch.conversations.get(conversation_id)
        if counters is None:
            row = self._known_counters.get(conversation_id)
            if row is None:
                row = self.db.execute(
                    "SELECT last_seq, trigger_seq, active_at, orphan_edits FROM conversations"
                    " WHERE id = ?",
                    (conversation_id,),
                ).fetchone()
            if row is None:
                raise UnknownConversation(f"no conversation with id {conversation_id}")
            counters = ConversationCounters(*row)
            self._batch.conversations[conversation_id] = counters
        return counters

    def _append_one(self, item: Inbound) -> AppendResult:
        db = self.db
        event = item.event
        batch = self._batch
        assert batch is not None
        if event.kind == "message":
            # new messages are gathered and written many rows a statement (_flush_rows)
            key = (event.account, event.event_id)
            known_at = batch.claimed.get(key) or batch.existing.get(key)
            if known_at is not None:
                return AppendResult("duplicate", known_at[0], known_at[1])
            conversation_id = self._conversation_id(
                event.address, event.conversation_kind, event.conversation_title, event.sent_at
            )
            counters = self._counters(conversation_id)
            deleted_at = reactions = None
            message_id = event.platform_message_id
            if counters.orphan_edits and message_id is not None:
                # the conversation has early changes waiting: this message's, perhaps
                triggers = item.triggers and not item.held
                found = self._orphan_edit_row(conversation_id, counters, message_id, triggers)
                if found is not None:
                    # its edit came first and already made the row (with the newer text);
                    # the edit started no run, the message does: unless a run read that row
                    orphan, triggered = found
                    batch.event_rows.append(
                        (event.account, event.event_id, conversation_id, orphan, "message")
                    )
                    batch.claimed[key] = (conversation_id, orphan)
                    return AppendResult("applied", conversation_id, orphan, triggered)
                deleted_at, reactions = self._early_changes(conversation_id, counters, message_id)
                if deleted_at is None and reactions is None and counters.last_seq % 16 == 0:
                    # now and then, those whose message never came are let go
                    self._let_go_early(conversation_id, counters, event.sent_at)
            if event.address.thread is not None and message_id is not None:
                # a change that names no thread (a Slack reaction, a Telegram one in a
                # topic) waits in its chat's conversation when its target was not there yet
                chat = self._chat_with_early_changes(event.address)
                if chat is not None:
                    chat_deleted_at, chat_reactions = self._early_changes(*chat, message_id)
                    deleted_at = deleted_at if deleted_at is not None else chat_deleted_at
                    reactions = reactions if reactions is not None else chat_reactions
            if deleted_at is not None:
                # deleted before it arrived: its sender took it back, nothing to answer
                item = Inbound(event, item.held, False, item.state)
            result = self._append_message(conversation_id, item, counters)
            batch.event_rows.append(
                (event.account, event.event_id, conversation_id, result.seq, "message")
            )
            batch.claimed[key] = (conversation_id, result.seq or 0)
            if reactions is not None:
                self._flush_rows(batch)
                self._set_reactions(conversation_id, result.seq or 0, reactions)
            if deleted_at is not None:
                self._flush_rows(batch)
                self._delete_row(conversation_id, result.seq or 0, event.text, deleted_at)
            return result
        # edits, deletes and reactions look rows up: write what is gathered first
        self._flush_rows(batch)
        known = db.execute(
            "SELECT conversation_id, seq FROM events WHERE account = ? AND event_id = ?",
            (event.account, event.event_id),
        ).fetchone()
        if known is not None:
            return AppendResult("duplicate", known[0], known[1])
        address = event.address
        if address.thread is None and event.platform_message_id is not None:
            threads = db.execute(
                CHAT_TARGET_SQL.format("?"),
                chat_target_params(address.account, address.chat, event.platform_message_id),
            ).fetchall()
            address = change_address(event, [str(row[0]) for row in threads])
        if address is event.address:
            conversation_id = self._conversation_id(
                address, event.conversation_kind, event.conversation_title, event.sent_at
            )
        else:  # the thread that holds the target: it exists, and the event says nothing of it
            conversation_id = self._conversation_id(address, "thread", None, from_event=False)
        result = self._apply_change(conversation_id, item)
        db.execute(
            "INSERT INTO events (account, event_id, conversation_id, seq, kind) VALUES (?,?,?,?,?)",
            (event.account, event.event_id, conversation_id, result.seq, event.kind),
        )
        # a message later in the batch under this id is this event again (a duplicate):
        # `batch.existing` was read before it was written
        batch.claimed[(event.account, event.event_id)] = (conversation_id, result.seq)  # type: ignore[assignment]
        return result

    def _orphan_edit_row(
        self,
        conversation_id: int,
        counters: ConversationCounters,
        platform_message_id: str,
        triggers: bool,
    ) -> tuple[int, bool] | None:
        """Return the seq of a row an early edit made for this message, if there is one, and
        whether it triggers: it does when the message does (``trigger_seq`` moves up to it),
        unless it was deleted meanwhile."""
        batch = self._batch
        assert batch is not None
        self._flush_rows(batch)
        row = self.db.execute(
            "SELECT seq, deleted_at FROM messages WHERE conversation_id = ?"
            " AND platform_message_id = ? AND json_extract(meta, '$.orphan_edit') = 1",
            (conversation_id, platform_message_id),
        ).fetchone()
        if row is None:
            return None
        seq = int(row[0])
        counters.orphan_edits -= 1
        triggers = triggers and row[1] is None  # deleted meanwhile: nothing to answer
        if triggers and seq > counters.trigger_seq:
            counters.trigger_seq = seq
        self.db.execute(
            "UPDATE messages SET meta = json_remove(meta, '$.orphan_edit'),"
            " triggers = MAX(triggers, ?) WHERE conversation_id = ? AND seq = ?",
            (1 if triggers else 0, conversation_id, seq),
        )
        return seq, triggers

    def _holds(self, table: str, conversation_id: int, platform_message_id: str) -> bool:
        """Whether `table` (message_parts or early_deletes) has this message of the
        conversation."""
        return (
            self.db.execute(
                f"SELECT 1 FROM {table} WHERE conversation_id = ? AND platform_message_id = ?",
                (conversation_id, platform_message_id),
            ).fetchone()
            is not None
        )

    def _early_delete(
        self,
        conversation_id: int,
        counters: ConversationCounters,
        platform_message_id: str,
    ) -> float | None:
        """Return when this message was deleted, if its delete came before it (and forget it)."""
        row = self.db.execute(
            "DELETE FROM early_deletes WHERE conversation_id = ? AND platform_message_id = ?"
            " RETURNING at",
            (conversation_id, platform_message_id),
        ).fetchone()
        if row is None:
            return None
        counters.orphan_edits -= 1
        return float(row[0])

    def _early_changes(
        self, conversation_id: int, counters: ConversationCounters, platform_message_id: str
    ) -> tuple[float | None, str | None]:
        """This message's early delete's time and its early reactions' column, each None
        when none came (and both forgotten)."""
        return (
            self._early_delete(conversation_id, counters, platform_message_id),
            self._early_reactions(conversation_id, counters, platform_message_id),
        )

    def _chat_with_early_changes(self, address: Address) -> tuple[int, ConversationCounters] | None:
        """The conversation of `address`'s whole chat and its counters, when it has early
        changes waiting (a thread's message may be their target); None otherwise."""
        key = (address.account, address.chat, "")
        cached = self._conversation_ids.get(key)
        assert self._batch is not None
        if cached is not None:
            chat_id = cached[0]
            counters = self._batch.conversations.get(chat_id)
            known = self._known_counters.get(chat_id) if counters is None else None
            if counters is not None:
                waiting = counters.orphan_edits
            elif known is not None:
                waiting = known[3]
            else:
                row = self.db.execute(
                    "SELECT orphan_edits FROM conversations WHERE id = ?", (chat_id,)
                ).fetchone()
                waiting = row[0] if row else 0
        else:
            row = self.db.execute(
                "SELECT id, orphan_edits FROM conversations WHERE account = ? AND chat = ?"
                " AND thread = ?",
                key,
            ).fetchone()
            if row is None:
                return None
            chat_id, waiting = row
        if not waiting:
            return None
        return chat_id, self._counters(chat_id)

    def _early_reactions(
        self,
        conversation_id: int,
        counters: ConversationCounters | None,
        platform_message_id: str,
    ) -> str | None:
        """Return this message's `reactions` column made of the reactions that came before
        it, if any did (and forget them)."""
        return early_reactions_column(
            self._take_reactions(conversation_id, counters, [platform_message_id])
        )

    def _take_reactions(
        self,
        conversation_id: int,
        counters: ConversationCounters | None,
        platform_message_ids: Sequence[str],
    ) -> list[tuple[int, str]]:
        """The early reactions waiting in this conversation for any of these platform ids,
        as (arrival number, reaction), forgotten; `counters` None: outside an append, the
        stored count goes down."""
        rows: list[tuple[int, str]] = []
        for platform_message_id in platform_message_ids:
            rows += [
                (int(n), str(text))
                for n, text in self.db.execute(
                    "DELETE FROM early_reactions WHERE conversation_id = ?"
                    " AND platform_message_id = ? RETURNING n, reaction",
                    (conversation_id, platform_message_id),
                )
            ]
        if not rows:
            return rows
        if counters is not None:
            counters.orphan_edits = max(counters.orphan_edits - len(rows), 0)
        else:  # outside an append (a send of ours): no batch holds the counters
            self.db.execute(
                "UPDATE conversations SET orphan_edits = MAX(orphan_edits - ?, 0) WHERE id = ?",
                (len(rows), conversation_id),
            )
            self._known_counters.pop(conversation_id)
        return rows

    def _chat_of_thread(self, conversation_id: int) -> int | None:
        """The conversation of the whole chat, when this one is a thread of it."""
        row = self.db.execute(
            "SELECT c.id FROM conversations t JOIN conversations c ON c.account = t.account"
            " AND c.chat = t.chat AND c.thread = '' WHERE t.id = ? AND t.thread <> ''",
            (conversation_id,),
        ).fetchone()
        return None if row is None else int(row[0])

    def _set_reactions(self, conversation_id: int, seq: int, reactions: str) -> None:
        self.db.execute(
            "UPDATE messages SET reactions = ? WHERE conversation_id = ? AND seq = ?",
            (reactions, conversation_id, seq),
        )

    def _let_go_early(
        self, conversation_id: int, counters: ConversationCounters, at: float
    ) -> None:
        """Forget the conversation's early deletes and reactions a day older than `at`."""
        for table in ("early_deletes", "early_reactions"):
            self.db.execute(
                f"DELETE FROM {table} WHERE conversation_id = ? AND at < ?",
                (conversation_id, at - EARLY_CHANGES_KEPT),
            )
            counters.orphan_edits = max(counters.orphan_edits - self.db.changes(), 0)

    def _delete_row(self, conversation_id: int, seq: int, text: str, at: float) -> None:
        self.db.execute(
            "INSERT INTO revisions (conversation_id, seq, kind, text, at) VALUES (?,?,?,?,?)",
            (conversation_id, seq, "delete", text, at),
        )
        self.db.execute(
            "UPDATE messages SET deleted_at = ? WHERE conversation_id = ? AND seq = ?",
            (at, conversation_id, seq),
        )

    def _append_message(
        self,
        conversation_id: int,
        item: Inbound,
        counters: ConversationCounters | None = None,
    ) -> AppendResult:
        """Count a new inbound message and gather its rows in the batch (see _flush_rows)."""
        event = item.event
        held = 1 if item.held else 0
        triggers = 1 if item.triggers and not held else 0
        if counters is None:
            counters = self._counters(conversation_id)
        seq = counters.last_seq = counters.last_seq + 1
        if held:
            counters.held += 1
        else:
            counters.visible += 1
        if triggers:
            counters.trigger_seq = seq
        sent_at = event.sent_at
        if sent_at > counters.active_at:
            counters.active_at = sent_at
        batch = self._batch
        assert batch is not None
        reply_to = event.reply_to
        reply_to_seq = None
        if reply_to is not None:
            reply_to_seq = batch.new_message_ids.get((conversation_id, reply_to))
            if reply_to_seq is None:
                row = self.db.execute(
                    "SELECT seq FROM messages WHERE conversation_id = ?"
                    " AND platform_message_id = ?",
                    (conversation_id, reply_to),
                ).fetchone()
                if row is None:  # a later part of a message of ours the platform got split
                    row = self.db.execute(
                        "SELECT seq FROM message_parts WHERE conversation_id = ?"
                        " AND platform_message_id = ?",
                        (conversation_id, reply_to),
                    ).fetchone()
                reply_to_seq = row[0] if row else None
        batch.add_inbound(conversation_id, seq, event, reply_to_seq, held, triggers)
        return AppendResult("stored", conversation_id, seq, triggers == 1)

    def _apply_change(self, conversation_id: int, item: Inbound) -> AppendResult:
        db = self.db
        event = item.event
        target = event.platform_message_id
        row = None
        if target is not None:
            row = db.execute(
                "SELECT seq, text, reactions FROM messages"
                " WHERE conversation_id = ? AND platform_message_id = ?",
                (conversation_id, target),
            ).fetchone()
            if row is None and event.kind == "reaction":
                # to a later part of a message of ours the platform got split: the message's
                row = db.execute(
                    "SELECT m.seq, m.text, m.reactions FROM message_parts p JOIN messages m"
                    " ON m.conversation_id = p.conversation_id AND m.seq = p.seq"
                    " WHERE p.conversation_id = ? AND p.platform_message_id = ?",
                    (conversation_id, target),
                ).fetchone()
        if item.held:
            # a sender the policy keeps out may not change what the agent sees
            return AppendResult("recorded", conversation_id, None)
        if row is None:
            if target is not None and self._holds("message_parts", conversation_id, target):
                # a later part of a message of ours the platform got split: the row holds
                # every part's words, so an edit or a delete of one part is only recorded
                # (never a message of its own, nor an early delete waiting for ever)
                return AppendResult("recorded", conversation_id, None)
            counters = self._counters(conversation_id)
            # a thread's changes that named only its chat wait in the chat's conversation
            chat = (
                self._chat_with_early_changes(event.address)
                if event.kind == "edit" and event.address.thread is not None and target
                else None
            )
            if (
                event.kind == "edit"
                and target is not None
                and (
                    (
                        counters.orphan_edits
                        and self._holds("early_deletes", conversation_id, target)
                    )
                    or (chat is not None and self._holds("early_deletes", chat[0], target))
                )
            ):
                # deleted before it arrived: it will arrive deleted, edited or not
                return AppendResult("recorded", conversation_id, None)
            if event.kind == "edit":
                # an edit of a message we have not seen (yet): keep its text as the message,
                # marked so that the original, if it arrives later, lands on this row
                early: list[tuple[int, str]] = []
                if counters.orphan_edits and target is not None:
                    early = self._take_reactions(conversation_id, counters, [target])
                if chat is not None and target is not None:
                    early += self._take_reactions(chat[0], chat[1], [target])
                reactions = early_reactions_column(early)
                counters.orphan_edits += 1
                marked = Inbound(
                    attrs.evolve(event, meta={**event.meta, "orphan_edit": 1}),
                    item.held,
                    item.triggers,
                    item.state,
                )
                result = self._append_message(conversation_id, marked)
                if reactions is not None:
                    assert self._batch is not None
                    self._flush_rows(self._batch)
                    self._set_reactions(conversation_id, result.seq or 0, reactions)
                return result
            if event.kind in ("delete", "reaction") and target is not None:
                # a delete or a reaction of a message we have not seen (yet): if it arrives,
                # it arrives deleted, or with the reaction (deliveries race: a webhook's come
                # over many connections at once). Most such changes are of messages from
                # before the bot (they never come): those a day older are let go
                self._let_go_early(conversation_id, counters, event.sent_at)
                if event.kind == "delete":
                    db.execute(
                        "INSERT OR IGNORE INTO early_deletes (conversation_id,"
                        " platform_message_id, at) VALUES (?,?,?)",
                        (conversation_id, target, event.sent_at),
                    )
                else:
                    db.execute(
                        "INSERT INTO early_reactions (conversation_id, platform_message_id,"
                        " reaction, at) VALUES (?,?,?,?)",
                        (conversation_id, target, early_reaction(event), event.sent_at),
                    )
                if db.changes():
                    counters.orphan_edits += 1
            return AppendResult("recorded", conversation_id, None)
        seq, old_text, reactions_json = row
        at = event.sent_at
        if event.kind == "edit":
            if event.text != old_text:
                db.execute(
                    "INSERT INTO revisions (conversation_id, seq, kind, text, at) VALUES (?,?,?,?,?)",
                    (conversation_id, seq, "edit", old_text, at),
                )
            attachments = dump_attachments(event.attachments)
            if attachments is None and not event.meta.get(ATTACHMENTS_COMPLETE):
                # an edit that says nothing of files leaves them (Slack's, web chat's)
                db.execute(
                    "UPDATE messages SET text = ?, edited_at = ? WHERE conversation_id = ?"
                    " AND seq = ?",
                    (event.text, at, conversation_id, seq),
                )
            else:  # its files, or none when it says its list is complete: the rest were removed
                db.execute(
                    "UPDATE messages SET text = ?, edited_at = ?, attachments = ?"
                    " WHERE conversation_id = ? AND seq = ?",
                    (event.text, at, attachments, conversation_id, seq),
                )
        elif event.kind == "delete":
            self._delete_row(conversation_id, seq, old_text, at)
        elif event.kind == "reaction":
            db.execute(
                "UPDATE messages SET reactions = ? WHERE conversation_id = ? AND seq = ?",
                (with_reaction(reactions_json, event), conversation_id, seq),
            )
        return AppendResult("applied", conversation_id, seq)

    def _conversation_id(
        self,
        address: Address,
        kind: str,
        title: str | None,
        at: float | None = None,
        *,
        from_event: bool = True,
    ) -> int:
        """Return the conversation's id, creating it; events also keep its kind and title current.

        An operator's send to a new chat cannot know its kind; the first event
        from the platform then says what it is.
        """
        key = (address.account, address.chat, address.thread or "")
        cached = self._conversation_ids.get(key)
        fresh = cached is not None and (title is None or title == cached[1])
        if cached is not None and fresh and (not from_event or kind == cached[2]):
            return cached[0]
        db = self.db
        row = db.execute(
            "SELECT id, title, kind FROM conversations WHERE account = ? AND chat = ?"
            " AND thread = ?",
            key,
        ).fetchone()
        if row is None:
            stamp = at or now()
            conversation_id = first(
                db.execute(
                    "INSERT INTO conversations (account, chat, thread, kind, title, created_at,"
                    " active_at) VALUES (?,?,?,?,?,?,?) RETURNING id",
                    (*key, kind, title, stamp, stamp),
                )
            )
            known_title, known_kind = title, kind
        else:
            conversation_id, known_title, known_kind = row
            if title is not None and title != known_title:
                db.execute(
                    "UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id)
                )
                known_title = title
            if from_event and kind != known_kind:
                db.execute(
                    "UPDATE conversations SET kind = ? WHERE id = ?", (kind, conversation_id)
                )
                known_kind = kind
        self._conversation_ids.put(key, (int(conversation_id), known_title, known_kind))
        return int(conversation_id)

    async def is_known(self, account: str, event_id: str) -> bool:
        row = self.db.execute(
            "SELECT 1 FROM events WHERE account = ? AND event_id = ?", (account, str(event_id))
        ).fetchone()
        return row is not None

    # conversations ---------------------------------------------------------
    async def conversation(self, conversation_id: int) -> Conversation:
        row = self.db.execute(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise UnknownConversation(f"no conversation with id {conversation_id}")
        return conversation_row(row)

    async def find_conversation(self, address: Address) -> Conversation | None:
        row = self.db.execute(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations"
            " WHERE account = ? AND chat = ? AND thread = ?",
            (address.account, address.chat, address.thread or ""),
        ).fetchone()
        return conversation_row(row) if row else None

    async def ensure_conversation(
        self, address: Address, kind: str = "direct", title: str | None = None
    ) -> Conversation:
        with self._write():
            conversation_id = self._conversation_id(address, kind, title, from_event=False)
        return await self.conversation(conversation_id)

    async def conversations(
        self, account: str | None = None, limit: int = 100
    ) -> list[Conversation]:
        if account is None:
            rows = self.db.execute(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations"
                " ORDER BY active_at DESC, id DESC LIMIT ?",
                (limit,),
            )
        else:
            rows = self.db.execute(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations"
                # +account: through the (account, chat, thread) index, a busy account's
                # rows are fetched one by one and then sorted (34 ms for the busiest of
                # 50,000 conversations); a scan of the table is bounded (6-8 ms there)
                " WHERE +account = ? ORDER BY active_at DESC, id DESC LIMIT ?",
                (account, limit),
            )
        return [conversation_row(row) for row in rows]

    #: `search_conversations` takes `chats` and `excluded_chats` (orchestration/views.py
    #: passes an agent's chat-limited scope through them when a store says so here)
    searches_chats = True

    async def search_conversations(
        self,
        *,
        accounts: Collection[str] | None = None,
        query: str | None = None,
        limit: int = 20,
        chats: Mapping[str, Collection[str]] | None = None,
        excluded_chats: Mapping[str, Collection[str]] | None = None,
    ) -> list[Conversation]:
        """`Store.search_conversations`, and, per account, only some chats.

        `chats` (account -> chats): of an account named there, only these
        chats; `excluded_chats` (account -> chats): of an account named there,
        every chat but these. Other accounts are not limited (beyond
        `accounts`). With `query`, the text index first catches up with the
        messages written since the last search, for `INDEX_SECONDS` at most:
        `search_index_complete` then says whether it did (False: messages
        newer than what it reached cannot match yet; a later search goes on).
        """
        clauses: list[str] = []
        params: list[Any] = []
        scope = scope_clause(accounts, chats or {}, excluded_chats or {})
        if scope is None:
            return []
        if scope[0]:
            clauses.append(scope[0])
            params.extend(scope[1])
        if query is not None:
            words = _query_words(query)
            if not words:
                return []
            self.search_index_complete = await self._index_new_messages()
            for word in words:
                # one word may match anywhere in the conversation: names, title or messages
                # (UNION ALL: IN drops the duplicates anyway, without a sort of its own)
                clauses.append(
                    "id IN (SELECT conversation_id FROM names_fts WHERE names_fts MATCH ?"
                    " UNION ALL SELECT m.conversation_id FROM messages_fts f"
                    " JOIN messages m ON m.rowid = f.rowid WHERE messages_fts MATCH ?)"
                )
                params.extend([word, word])
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        try:
            rows = self.db.execute(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations {where}"
                " ORDER BY active_at DESC, id DESC LIMIT ?",
                (*params, max(limit, 0)),
            ).fetchall()
        except apsw.SQLError as error:
            # a word FTS5 reads differently from _query_words: one clear error naming the query
            raise StoreError(f"cannot search for {query!r}: {error}") from None
        return [conversation_row(row) for row in rows]

    async def _index_new_messages(self) -> bool:
        """Add the visible messages written since the last search to the text index.

        `INDEX_CHUNK_ROWS` rows (by rowid) a write transaction, the event loop
        and other processes' writes running between two (`INDEX_PAUSE_SECONDS`),
        for `INDEX_SECONDS` at most (one chunk at least).
        Each chunk re-reads the mark inside its transaction, so two searches
        (in this process or another) never index a row twice, and one that
        stops (its time up, or interrupted) leaves the mark where the next
        search takes up. Returns True when the index has caught up.
        """
        db = self.db
        deadline = time.monotonic() + INDEX_SECONDS
        while True:
            top = first(db.execute("SELECT COALESCE(MAX(rowid), 0) FROM messages"))
            if top <= first(db.execute("SELECT indexed_rowid FROM messages_fts_progress")):
                return True
            with self._write():
                mark = first(db.execute("SELECT indexed_rowid FROM messages_fts_progress"))
                top = first(db.execute("SELECT COALESCE(MAX(rowid), 0) FROM messages"))
                upto = min(top, mark + INDEX_CHUNK_ROWS)
                if upto > mark:
                    db.execute(
                        "INSERT INTO messages_fts (rowid, text) SELECT rowid, text FROM messages"
                        " WHERE rowid > ? AND rowid <= ? AND held = 0",
                        (mark, upto),
                    )
                    db.execute("UPDATE messages_fts_progress SET indexed_rowid = ?", (upto,))
            if time.monotonic() + INDEX_PAUSE_SECONDS >= deadline:
                return upto >= top
            if upto < top:
                # whatever else this process does runs in between, and other processes write
                await asyncio.sleep(INDEX_PAUSE_SECONDS)

    #: `participants` counts who wrote the conversation's latest this many visible
    #: inbound messages (the whole history of a 150,000-message group took 280 ms)
    participant_window = 1000

    async def participants(self, conversation_id: int) -> list[Participant]:
        """Return who wrote the latest `participant_window` visible inbound messages.

        Most active among those first (then the earliest in them); each one's
        `message_count`, `first_seq` and `last_seq` are over that window: "who
        is talking here lately", not the whole history.
        """
        rows = self.db.execute(
            "SELECT p.sender_id, p.name, p.handle, p.is_bot, a.n, a.low, a.high FROM"
            " (SELECT sender_id, COUNT(*) AS n, MIN(seq) AS low, MAX(seq) AS high FROM"
            " (SELECT seq, sender_id FROM messages WHERE conversation_id = ? AND held = 0"
            " AND direction = 'in' ORDER BY seq DESC LIMIT ?) r GROUP BY sender_id) a"
            " JOIN participants p ON p.conversation_id = ? AND p.sender_id = a.sender_id"
            " ORDER BY a.n DESC, a.low",
            (conversation_id, max(self.participant_window, 1), conversation_id),
        )
        return [Participant(Sender(r[0], r[1], r[2], bool(r[3])), r[4], r[5], r[6]) for r in rows]

    async def set_conversation_meta(self, conversation_id: int, meta: Mapping[str, Any]) -> None:
        db = self.db
        with self._write():
            row = db.execute(
                "SELECT meta FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            if row is None:
                raise UnknownConversation(f"no conversation with id {conversation_id}")
            merged = {**json.loads(row[0] or "{}"), **meta}
            db.execute(
                "UPDATE conversations SET meta = ? WHERE id = ?",
                (json.dumps(merged), conversation_id),
            )

    @property
    def keeps_window_rows(self) -> bool:
        """Whether `window_rows` hands back the very same tuple for a row unchanged since the
        last read of its window (store/windows.py): RunBuilder keeps lines made from them."""
        return self._windows is not None

    # transcript ------------------------------------------------------------
    async def window(
        self, conversation_id: int, limit: int, upto_seq: int | None = None
    ) -> list[Message]:
        # a fresh read: the kept windows are the runs' own (history, a listing or another
        # conversation's look must not replace a run's window with another range)
        return message_rows(read_window(self.db, conversation_id, limit, clamp_seq(upto_seq)))

    async def window_rows(
        self, conversation_id: int, limit: int, upto_seq: int | None = None
    ) -> list[tuple[Any, ...]]:
        """`window` as the rows themselves (`MESSAGE_COLUMNS`, oldest first), not Messages.

        Not part of `Store`: a run formats its window straight from these
        (RunBuilder uses it where a store has it, and nothing else does),
        building Messages only for the few it hands on. With `upto_seq`, as a
        run asks, the rows come from the window cache (store/windows.py) and
        only rows past them are read.
        """
        if upto_seq is None or self._windows is None:
            return read_window(self.db, conversation_id, limit, clamp_seq(upto_seq))
        return self._windows.rows(conversation_id, limit, clamp_seq(upto_seq))

    async def transcript(self, conversation_id: int, limit: int) -> list[Message]:
        rows = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ?"
            " ORDER BY seq DESC LIMIT ?",
            (conversation_id, limit),
        ).fetchall()
        rows.reverse()
        return message_rows(rows)

    async def history(self, conversation_id: int, before_seq: int, limit: int) -> list[Message]:
        # clamped first: before_seq - 1 of the lowest 64-bit integer is none (OverflowError)
        return await self.window(conversation_id, limit, clamp_seq(before_seq) - 1)

    async def messages_after(
        self, conversation_id: int, after_seq: int, limit: int = 1000
    ) -> list[Message]:
        rows = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND seq > ?"
            " AND held = 0 ORDER BY seq LIMIT ?",
            (conversation_id, clamp_seq(after_seq), limit),
        )
        return message_rows(rows)

    async def count_visible(self, conversation_id: int, before_seq: int | None = None) -> int:
        if before_seq is None:
            row = self.db.execute(
                "SELECT visible_count FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            return int(row[0]) if row else 0
        # visible_count is exactly the number of rows with held = 0: every write that adds
        # a row adds it to one of visible_count and held_count (`_flush_batch`,
        # `record_outbound`), rows are never deleted and no write changes `held`. So the
        # shorter side is counted: the rows at or past before_seq when that is the latest
        # part (paging back from the newest), else those before it. One statement: one
        # snapshot of the counter and the rows.
        before = clamp_seq(before_seq)
        row = self.db.execute(
            "SELECT CASE WHEN ? > c.last_seq / 2 THEN c.visible_count - (SELECT COUNT(*)"
            " FROM messages WHERE conversation_id = c.id AND seq >= ? AND held = 0)"
            " ELSE (SELECT COUNT(*) FROM messages WHERE conversation_id = c.id AND seq < ?"
            " AND held = 0) END FROM conversations c WHERE c.id = ?",
            (before, before, before, conversation_id),
        ).fetchone()
        return max(int(row[0]), 0) if row else 0

    async def message(self, conversation_id: int, seq: int) -> Message | None:
        row = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND seq = ?",
            (conversation_id, seq),
        ).fetchone()
        return message_row(row) if row else None

    async def message_by_platform_id(
        self, conversation_id: int, platform_message_id: str
    ) -> Message | None:
        row = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages"
            # +seq: sorting by seq itself made the planner walk the conversation in seq
            # order instead of searching messages_platform_id (200 µs at 2,000 messages)
            " WHERE conversation_id = ? AND platform_message_id = ? ORDER BY +seq LIMIT 1",
            (conversation_id, str(platform_message_id)),
        ).fetchone()
        return message_row(row) if row else None

    async def revisions(self, conversation_id: int, seq: int) -> list[tuple[str, str, float]]:
        rows = self.db.execute(
            "SELECT kind, text, at FROM revisions WHERE conversation_id = ? AND seq = ?"
            " ORDER BY rowid",
            (conversation_id, seq),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    # outbound --------------------------------------------------------------
    async def record_outbound(
        self,
        conversation_id: int,
        outbound: Outbound,
        sender: Sender,
        run_id: int | None = None,
        seen_seq: int | None = None,
        *,
        hand_to: tuple[str, bool, float, bool] | None = None,
    ) -> OutboxEntry:
        if hand_to is not None:
            raise StoreError("an SQLite store has one process: it hands no send to a worker")
        db = self.db
        stamp = now()
        self._known_counters.pop(conversation_id)
        with self._write():
            seq = None
            if outbound.kind == "message":
                row = db.execute(
                    "UPDATE conversations SET last_seq = last_seq + 1,"
                    " visible_count = visible_count + 1, active_at = ?"
                    " WHERE id = ? RETURNING last_seq",
                    (stamp, conversation_id),
                ).fetchone()
                if row is None:
                    raise UnknownConversation(f"no conversation with id {conversation_id}")
                seq = row[0]
                reply_to_seq = None
                if outbound.reply_to is not None:
                    found = db.execute(
                        "SELECT seq FROM messages WHERE conversation_id = ?"
                        " AND platform_message_id = ?",
                        (conversation_id, outbound.reply_to),
                    ).fetchone()
                    reply_to_seq = found[0] if found else None
                db.execute(
                    f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES"
                    " (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        conversation_id,
                        seq,
                        "out",
                        None,
                        sender.id,
                        sender.name,
                        sender.handle,
                        int(sender.is_bot),
                        outbound.text,
                        None,
                        outbound.reply_to,
                        reply_to_seq,
                        0,
                        None,
                        stamp,
                        None,
                        None,
                        0,
                        0,
                        "pending",
                        None,
                        None,
                        json.dumps({"origin": outbound.origin}) if outbound.origin else None,
                    ),
                )
            elif not db.execute(
                "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone():
                raise UnknownConversation(f"no conversation with id {conversation_id}")
            outbox_id = first(
                db.execute(
                    "INSERT INTO outbox (conversation_id, run_id, seen_seq, kind, text, reply_to,"
                    " target, message_seq, status, created_at, updated_at, origin)"
                    " VALUES (?,?,?,?,?,?,?,?,'pending',?,?,?) RETURNING id",
                    (
                        conversation_id,
                        run_id,
                        seen_seq,
                        outbound.kind,
                        outbound.text,
                        outbound.reply_to,
                        outbound.target,
                        seq,
                        stamp,
                        stamp,
                        outbound.origin,
                    ),
                )
            )
        return self._outbox_entry(outbox_id)

    async def mark_sent(self, outbox_id: int, receipt: Receipt) -> OutboxEntry:
        db = self.db
        ids = receipt.part_ids or (
            (receipt.platform_message_id,) if receipt.platform_message_id else ()
        )
        with self._write():
            entry = self._outbox_entry(outbox_id)
            db.execute(
                "UPDATE outbox SET status = 'sent', reason = NULL, platform_ids = ?,"
                " updated_at = ? WHERE id = ?",
                (json.dumps(list(ids)), now(), outbox_id),
            )
            if entry.message_seq is not None:
                meta: dict[str, Any] = {"part_ids": list(ids)} if len(ids) > 1 else {}
                if entry.origin:
                    meta["origin"] = entry.origin
                db.execute(
                    "UPDATE messages SET status = 'sent', status_reason = NULL,"
                    " platform_message_id = ?, meta = ? WHERE conversation_id = ? AND seq = ?",
                    (
                        receipt.platform_message_id,
                        json.dumps(meta) if meta else None,
                        entry.conversation_id,
                        entry.message_seq,
                    ),
                )
                # reactions to it (to any of its parts) may have come before this, a
                # webhook's race: in its conversation, or its chat's when it is in a thread
                # (a Slack reaction names the chat)
                early = self._take_reactions(entry.conversation_id, None, ids)
                chat_id = self._chat_of_thread(entry.conversation_id)
                if chat_id is not None:
                    early += self._take_reactions(chat_id, None, ids)
                reactions = early_reactions_column(early)
                if reactions is not None:
                    self._set_reactions(entry.conversation_id, entry.message_seq, reactions)
                parts = [part for part in ids if part != receipt.platform_message_id]
                if parts:
                    # a reply or a reaction to a later part finds the message (m013)
                    db.executemany(
                        "INSERT OR IGNORE INTO message_parts (conversation_id,"
                        " platform_message_id, seq) VALUES (?,?,?)",
                        [(entry.conversation_id, part, entry.message_seq) for part in parts],
                    )
            elif entry.kind == "edit" and entry.target is not None:
                row = db.execute(
                    "SELECT seq, text FROM messages WHERE conversation_id = ?"
                    " AND platform_message_id = ?",
                    (entry.conversation_id, entry.target),
                ).fetchone()
                # the platform's echo of the edit may have landed first (Telegram Business):
                # the row has the words already, and no second revision is made of them
                if row is not None and row[1] != entry.text:
                    stamp = now()
                    db.execute(
                        "INSERT INTO revisions (conversation_id, seq, kind, text, at)"
                        " VALUES (?,?,?,?,?)",
                        (entry.conversation_id, row[0], "edit", row[1], stamp),
                    )
                    db.execute(
                        "UPDATE messages SET text = ?, edited_at = ?"
                        " WHERE conversation_id = ? AND seq = ?",
                        (entry.text, stamp, entry.conversation_id, row[0]),
                    )
        return self._outbox_entry(outbox_id)

    async def mark_failed(
        self, outbox_id: int, reason: str, *, never_sent: bool = False
    ) -> OutboxEntry:
        with self._write():
            self._set_outbox_status(outbox_id, "failed", reason)
            if never_sent:
                self._gave_back(outbox_id, reason)
            entry = self._outbox_entry(outbox_id)
            if entry.platform_ids and entry.kind == "message":
                # an id noted before sending (note_platform_id) names nothing that arrived
                self._set_platform_id(entry, None)
        return self._outbox_entry(outbox_id)

    async def mark_uncertain(
        self, outbox_id: int, reason: str, *, platform_message_id: str | None = None
    ) -> OutboxEntry:
        with self._write():
            self._set_outbox_status(outbox_id, "uncertain", reason)
            if platform_message_id is not None:
                self._set_platform_id(self._outbox_entry(outbox_id), platform_message_id)
        return self._outbox_entry(outbox_id)

    async def note_platform_id(self, outbox_id: int, platform_message_id: str) -> None:
        with self._write():
            entry = self._outbox_entry(outbox_id)
            if entry.status == "pending" and entry.kind == "message":
                self._set_platform_id(entry, platform_message_id)

    def _set_platform_id(self, entry: OutboxEntry, platform_message_id: str | None) -> None:
        """Give a message send's outbox row and transcript row this platform id (None: none)."""
        if entry.message_seq is None:
            return
        ids = None if platform_message_id is None else json.dumps([platform_message_id])
        self.db.execute("UPDATE outbox SET platform_ids = ? WHERE id = ?", (ids, entry.id))
        self.db.execute(
            "UPDATE messages SET platform_message_id = ? WHERE conversation_id = ? AND seq = ?",
            (platform_message_id, entry.conversation_id, entry.message_seq),
        )

    def _set_outbox_status(self, outbox_id: int, status: str, reason: str) -> None:
        db = self.db
        reason = redact(reason)  # adapters' reasons may quote what a library said
        entry = self._outbox_entry(outbox_id)
        db.execute(
            "UPDATE outbox SET status = ?, reason = ?, updated_at = ? WHERE id = ?",
            (status, reason, now(), outbox_id),
        )
        if entry.message_seq is not None:
            db.execute(
                "UPDATE messages SET status = ?, status_reason = ?"
                " WHERE conversation_id = ? AND seq = ?",
                (status, reason, entry.conversation_id, entry.message_seq),
            )

    def _outbox_entry(self, outbox_id: int) -> OutboxEntry:
        row = self.db.execute(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE id = ?", (outbox_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"no outbox entry with id {outbox_id}")
        return outbox_row(row)

    async def outbox(
        self,
        status: str | None = None,
        conversation_id: int | None = None,
        limit: int = 100,
        *,
        run_ids: Collection[int] | None = None,
    ) -> list[OutboxEntry]:
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if conversation_id is not None:
            clauses.append("conversation_id = ?")
            params.append(conversation_id)
        if run_ids is not None:
            ids = sorted({int(run_id) for run_id in run_ids})
            if not ids:
                return []
            clauses.append(f"run_id IN ({','.join(['?'] * len(ids))})")  # outbox_run
            params.extend(ids)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.db.execute(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox {where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [outbox_row(row) for row in rows]

    # handling --------------------------------------------------------------
    async def mark_handled(self, conversation_id: int, seq: int) -> None:
        with self._write():
            self.db.execute(
                "UPDATE conversations SET handled_seq = MAX(handled_seq, ?) WHERE id = ?",
                (seq, conversation_id),
            )

    async def unhandled(self) -> list[Conversation]:
        rows = self.db.execute(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations"
            " WHERE trigger_seq > handled_seq ORDER BY active_at"
        )
        return [conversation_row(row) for row in rows]

    async def begin_run(self, conversation_id: int, trigger_seq: int, upto_seq: int) -> int:
        # one statement, so its own transaction (or part of the one already open): no
        # BEGIN/COMMIT round around it
        row = self.db.execute(
            "INSERT INTO runs (conversation_id, trigger_seq, upto_seq, started_at)"
            " VALUES (?,?,?,?) RETURNING id",
            (conversation_id, trigger_seq, upto_seq, now()),
        )
        return int(first(row))

    async def answers_after(self, conversation_id: int, trigger_seq: int) -> set[int]:
        rows = self.db.execute(
            "SELECT o.message_seq FROM outbox o JOIN runs r ON r.id = o.run_id"
            " WHERE o.conversation_id = ? AND o.message_seq > ? AND r.conversation_id = ?"
            " AND COALESCE(o.seen_seq, r.upto_seq) >= ? AND r.trigger_seq > 0",
            (conversation_id, trigger_seq, conversation_id, trigger_seq),
        )
        return {seq for (seq,) in rows}

    async def sent_for_others(
        self, conversation_id: int, after_seq: int, upto_seq: int
    ) -> set[int]:
        rows = self.db.execute(
            "SELECT o.message_seq FROM outbox o LEFT JOIN runs r ON r.id = o.run_id"
            " WHERE o.conversation_id = ? AND o.message_seq > ? AND o.message_seq <= ?"
            " AND (r.conversation_id != ? OR o.id IN"
            " (SELECT a.outbox_id FROM asks a WHERE a.peer_conversation_id = ?))",
            (
                conversation_id,
                clamp_seq(after_seq),
                clamp_seq(upto_seq),
                conversation_id,
                conversation_id,
            ),
        )
        return {seq for (seq,) in rows}

    async def sent_elsewhere_after(
        self, conversation_id: int, trigger_seq: int
    ) -> OutboxEntry | None:
        row = self.db.execute(
            "WITH recent AS (SELECT id, upto_seq FROM runs"
            # runs that answered a message: the reporter runs of asks (trigger 0), which
            # a restart may run first, must not push the cut-short run out of the five
            " WHERE conversation_id = ? AND trigger_seq > 0 ORDER BY id DESC LIMIT 5)"
            " SELECT o.id FROM recent r JOIN outbox o ON o.run_id = r.id"
            " WHERE o.conversation_id != ? AND o.kind = 'message' AND o.status != 'failed'"
            " AND COALESCE(o.seen_seq, r.upto_seq) >= ?"
            # a send_to_conversation (it names its origin), or a question whose ask was
            # recorded: a question is sent only once its ask row is written, so one whose run
            # died between its outbox row and its ask row never went out and acted on nothing
            " AND (o.origin IS NOT NULL OR EXISTS (SELECT 1 FROM asks a"
            " WHERE a.origin_conversation_id = ? AND a.outbox_id = o.id))"
            " ORDER BY o.id DESC LIMIT 1",
            (conversation_id, conversation_id, trigger_seq, conversation_id),
        ).fetchone()
        return None if row is None else self._outbox_entry(row[0])

    async def finish_run(
        self,
        run_id: int,
        status: str,
        error: str | None = None,
        upto_seq: int | None = None,
        *,
        handled_seq: int | None = None,
    ) -> None:
        db = self.db
        with self._write():
            finished = db.execute(
                "UPDATE runs SET status = ?, error = ?, finished_at = ?,"
                " upto_seq = COALESCE(?, upto_seq) WHERE id = ? RETURNING conversation_id",
                (status, redact(error) if error else error, now(), upto_seq, run_id),
            ).fetchall()
            if handled_seq is not None and finished:
                db.execute(
                    "UPDATE conversations SET handled_seq = MAX(handled_seq, ?) WHERE id = ?",
                    (handled_seq, finished[0][0]),
                )

    async def runs(self, conversation_id: int | None = None, limit: int = 50) -> list[RunRecord]:
        sql = (
            "SELECT id, conversation_id, trigger_seq, upto_seq, started_at, finished_at,"
            " status, error FROM runs"
        )
        if conversation_id is None:
            rows = self.db.execute(sql + " ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self.db.execute(
                sql + " WHERE conversation_id = ? ORDER BY id DESC LIMIT ?",
                (conversation_id, limit),
            )
        return [RunRecord(*row) for row in rows]

    # adapter state and dead letters ----------------------------------------
    async def get_state(self, account: str, key: str) -> str | None:
        row = self.db.execute(
            "SELECT value FROM state WHERE account = ? AND key = ?", (account, key)
        ).fetchone()
        return None if row is None else str(row[0])

    async def set_state(self, account: str, key: str, value: str | None) -> None:
        with self._write():
            self._write_state(account, key, value)

    def _write_state(self, account: str, key: str, value: str | None) -> None:
        if value is None:
            self.db.execute("DELETE FROM state WHERE account = ? AND key = ?", (account, key))
        else:
            self.db.execute(
                "INSERT INTO state (account, key, value, updated_at) VALUES (?,?,?,?)"
                " ON CONFLICT (account, key) DO UPDATE SET value = excluded.value,"
                " updated_at = excluded.updated_at",
                (account, key, str(value), now()),
            )

    async def add_dead_letter(
        self,
        account: str,
        ref: str,
        reason: str,
        payload: str,
        *,
        state: Mapping[str, str | None] | None = None,
    ) -> None:
        db = self.db
        payload = redact(payload)[:65536]
        digest = dead_letter_digest(ref, payload)
        stamp = now()
        with self._write():
            # the next id before the old row goes: a repeat gets a newer id than its letter had
            next_id = int(first(db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM dead_letters")))
            old = db.execute(
                "DELETE FROM dead_letters WHERE account = ? AND digest = ?"
                " RETURNING deliveries, COALESCE(first_at, at)",
                (account, digest),
            ).fetchone()
            deliveries, first_at = (old[0] + 1, old[1]) if old else (1, stamp)
            db.execute(
                "INSERT INTO dead_letters"
                " (id, account, ref, reason, payload, at, digest, deliveries, first_at)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    next_id,
                    account,
                    ref,
                    redact(reason),
                    payload,
                    stamp,
                    digest,
                    deliveries,
                    first_at,
                ),
            )
            for key, value in (state or {}).items():
                self._write_state(account, key, value)

    async def dead_letters(
        self, account: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        sql = (
            "SELECT id, account, ref, reason, payload, at, deliveries, COALESCE(first_at, at)"
            " FROM dead_letters"
        )
        params: tuple[Any, ...] = (limit,)
        if account is not None:
            sql += " WHERE account = ?"
            params = (account, limit)
        rows = self.db.execute(sql + " ORDER BY id DESC LIMIT ?", params)
        return [dict(zip(DEAD_LETTER_KEYS, row, strict=True)) for row in rows]

    async def stats(self) -> dict[str, int]:
        db = self.db

        def count(sql: str) -> int:
            return int(first(db.execute(sql)) or 0)

        figures = {
            "conversations": count("SELECT COUNT(*) FROM conversations"),
            "messages": count("SELECT COALESCE(SUM(last_seq), 0) FROM conversations"),
            "held": count("SELECT COALESCE(SUM(held_count), 0) FROM conversations"),
            "unhandled_conversations": count(
                "SELECT COUNT(*) FROM conversations WHERE trigger_seq > handled_seq"
            ),
            "runs": count("SELECT COUNT(*) FROM runs"),
            "dead_letters": count("SELECT COUNT(*) FROM dead_letters"),
        }
        for status, number in db.execute("SELECT status, COUNT(*) FROM outbox GROUP BY status"):
            figures[f"outbox_{status}"] = int(number)
        return figures


#: letters and digits: what the unicode61 tokenizer keeps as one token (so each quoted
#: term is one token, as an index without positions requires)
_WORD = re.compile(r"[^\W_]+")


def _query_words(query: str) -> list[str]:
    """Return FTS5 prefix terms for the words of `query`: each quoted, so no syntax gets through.

    The first `QUERY_WORDS` distinct words (case ignored for ASCII ones: FTS5
    folds it), a word another one extends left out (``the`` with ``then``:
    what has the longer prefix has the shorter): every word is a subquery
    over the index, and a repeated common word cost seconds for nothing.
    """
    return [f'"{word}"*' for word in distinct_words(_WORD.findall(query))]


def clamp_seq(value: int | None) -> int:
    """Return a seq bound SQLite can take: None is "no bound", and none past +-`SEQ_BOUND`."""
    if value is None:
        return SEQ_BOUND
    return max(-SEQ_BOUND, min(value, SEQ_BOUND))


#: how many (distinct) words of a query a search looks for, at most
QUERY_WORDS = 8


def distinct_words(words: Sequence[str]) -> list[str]:
    """Return the first `QUERY_WORDS` distinct `words`, in order, without implied prefixes.

    ASCII words compare case-insensitively, others exactly (both stores' indexes fold
    case and accents; these are left to them). An ASCII word that another one
    starts with is dropped: every conversation with a word starting with the
    longer one has one starting with the shorter.
    """
    seen: dict[str, str] = {}
    for word in words:
        key = word.lower() if word.isascii() else word
        if key not in seen:
            seen[key] = word
            if len(seen) == QUERY_WORDS:
                break
    return [
        word
        for key, word in seen.items()
        if not (
            key.isascii()
            and any(other != key and other.isascii() and other.startswith(key) for other in seen)
        )
    ]


def scope_clause(
    accounts: Collection[str] | None,
    chats: Mapping[str, Collection[str]],
    excluded: Mapping[str, Collection[str]],
    *,
    mark: str = "?",
    prefix: str = "",
    free: str = "+account",
) -> tuple[str, list[Any]] | None:
    """Return the WHERE part (and parameters) limiting a search to accounts and chats.

    None: nothing can match; an empty part: no limit. `mark` is the driver's
    placeholder, `prefix` the conversations table's alias ("c."), `free` how the
    accounts without a chat limit are named (SQLite: ``+account``, see
    `SQLiteStore.conversations`; the chat-limited parts use the index).
    """
    names = None if accounts is None else sorted(set(accounts))
    if names is not None and not names:
        return None
    excluded = {name: left_out for name, left_out in excluded.items() if left_out}
    limited = sorted(name for name in {*chats, *excluded} if names is None or name in names)

    def marks(count: int) -> str:
        return ",".join([mark] * count)

    parts: list[str] = []
    params: list[Any] = []
    if names is None:
        if not limited:
            return "", []
        parts.append(f"{free} NOT IN ({marks(len(limited))})")
        params.extend(limited)
    else:
        unlimited = [name for name in names if name not in limited]
        if unlimited:
            parts.append(f"{free} IN ({marks(len(unlimited))})")
            params.extend(unlimited)
    for name in limited:
        if name in chats:
            allowed = sorted(set(chats[name]) - set(excluded.get(name, ())))
            if allowed:
                parts.append(
                    f"({prefix}account = {mark} AND {prefix}chat IN ({marks(len(allowed))}))"
                )
                params.extend([name, *allowed])
        else:
            left_out = sorted(set(excluded[name]))
            parts.append(
                f"({prefix}account = {mark} AND {prefix}chat NOT IN ({marks(len(left_out))}))"
            )
            params.extend([name, *left_out])
    if not parts:
        return None
    return f"({' OR '.join(parts)})", params

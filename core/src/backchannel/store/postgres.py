"""The networked store: PostgreSQL through psycopg 3 (async) and psycopg-pool.

Selected with ``[store] url = "postgresql://..."``; several `serve` workers can
share one database. Installed with the ``backchannel[postgres]`` extra; this
module (and psycopg) is imported only when such a URL is configured.

How the guarantees hold with several writers:

- one row per ``(account, event_id)``: the ``events`` primary key; a batch that
  races another writer for the same event rolls back and is retried, and then
  sees the event as a duplicate;
- gapless per-conversation seq: every writer locks the conversation rows it
  touches (``SELECT ... FOR UPDATE``, in one order) before numbering, and
  ``record_outbound`` numbers with ``UPDATE ... RETURNING`` on the same row, so
  two transactions never number one conversation at once;
- group commit: `append_inbound` writes a whole batch in one transaction;
- recovery is per worker: with a worker name, `recover()` touches only the
  pending sends and running runs that worker recorded (`recover_worker` does it
  for a dead one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs
import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..config import display_url
from ..errors import ClaimLost, LeaseLost, StoreError, UnknownConversation
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
from .postgres_asks import PostgresAsks
from .postgres_migrations import (
    ACCENTED,
    CATCH_UP_SECONDS,
    PARTICIPANT_NAME,
    PLAIN,
    catch_up,
    migrate,
    search_document,
)
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
    message_row,
    outbox_row,
    with_reaction,
)
from .sqlite import clamp_seq, distinct_words, scope_clause

__all__ = ["WAKE_CHANNEL", "PostgresStore"]

log = logging.getLogger("backchannel.store")

MESSAGE_MARKS = ", ".join(["%s"] * 23)
#: errors after which a whole write transaction is simply run again
RETRYABLE = (
    pg_errors.DeadlockDetected,
    pg_errors.SerializationFailure,
    pg_errors.UniqueViolation,
)
RETRIES = 8
#: seconds the pool tries to reconnect before it gives up and grows again on demand with a
#: fresh backoff (its default, 5 minutes of doubling waits, kept a worker stalled for about
#: as long as an outage after the server was back)
RECONNECT_TIMEOUT = 10.0
#: seconds an operation waits for a pooled connection (psycopg_pool's default, 30, kept
#: every request queued through an outage longer than RECONNECT_TIMEOUT waiting that long
#: after the server was back: only a new request makes the pool connect again)
CONNECTION_WAIT = 8.0
#: the database server's clock in seconds (workers on several machines agree on it)
DB_NOW = "EXTRACT(EPOCH FROM clock_timestamp())::double precision"
#: LISTEN/NOTIFY channel of cross-worker wake-ups
WAKE_CHANNEL = "backchannel_wake"


class PostgresStore(PostgresAsks, Store):
    """The psycopg implementation of `Store`: a connection pool, opened on first use."""

    def __init__(self, url: str, *, worker: str | None = None, pool_size: int = 8):
        if not url.startswith(("postgresql://", "postgres://")):
            raise StoreError(f"[store] url must start with postgresql://, got {display_url(url)!r}")
        self.url = url
        self.worker = worker
        self._pool_size = pool_size
        self._pool: AsyncConnectionPool | None = None
        self._opening: asyncio.Lock | None = None
        self._closed = False
        #: a check of the pool's connections under way (after one was found broken)
        self._checking: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({display_url(self.url)!r}, worker={self.worker!r})"

    # lifecycle -------------------------------------------------------------
    async def pool(self) -> AsyncConnectionPool:
        """Return the open pool, connecting and migrating on first use."""
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise StoreError("the store is closed")
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is not None:
                return self._pool
            try:
                # one plain connection first: a wrong URL or a stopped server fails at once
                # (a pool would keep retrying until its timeout), and it migrates
                async with await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=10
                ) as connection:
                    await migrate(connection)
                pool = AsyncConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=self._pool_size,
                    open=False,
                    kwargs={"autocommit": True},
                    name="backchannel-store",
                    reconnect_timeout=RECONNECT_TIMEOUT,
                    timeout=CONNECTION_WAIT,
                )
                await pool.open(wait=True, timeout=15)
            except Exception as error:
                reason = redact(str(error).strip().splitlines()[0] if str(error) else repr(error))
                raise StoreError(
                    f"cannot use the PostgreSQL store at {display_url(self.url)}: {reason}"
                    " (check [store] url, and that the server is running and reachable)"
                ) from error
            self._pool = pool
            return pool

    async def close(self) -> None:
        self._closed = True
        if self._checking is not None:
            self._checking.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._checking
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def _fetchall(
        self, sql: str, params: Sequence[Any] = (), *, prepare: bool | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows.

        `prepare=False` for a statement whose best plan depends on the values
        bound: psycopg prepares a statement run 5 times on a connection, and
        after 5 more runs PostgreSQL may settle on a generic plan for it, one
        for any value (`participants` went from 60 ms to over a minute so).
        """

        async def read(connection: Any) -> list[tuple[Any, ...]]:
            cursor = await connection.execute(sql, params, prepare=prepare)
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
            return rows

        result: list[tuple[Any, ...]] = await self._read(read)
        return result

    async def _read(self, work: Any) -> Any:
        """Run `work(connection)`, which only reads, on a pooled connection."""
        pool = await self.pool()
        for attempt in range(self._pool_size + 1):
            try:
                async with pool.connection() as connection:
                    return await work(connection)
            except psycopg.OperationalError as error:
                # a connection the server dropped (a restart): a read is asked again, on
                # another connection, while the pool sheds the broken ones
                if not _dropped(error):
                    raise
                self._check_pool(pool)
                if attempt == self._pool_size:
                    raise
                await asyncio.sleep(0.05 * attempt)
        raise AssertionError("unreachable")

    def _check_pool(self, pool: AsyncConnectionPool) -> None:
        """Have the pool test its idle connections and replace the broken ones, once at a
        time: after a server restart every one of them is broken, and each would fail one
        operation in turn."""
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(pool.check())
            self._checking.add_done_callback(_checked)

    async def _fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = await self._fetchall(sql, params)
        return rows[0] if rows else None

    async def _write(self, work: Any, *, settle: bool = True) -> Any:
        """Run `work(connection)` in one transaction, again from the start when it races.

        A connection lost while its COMMIT was on the way leaves the write's outcome
        unknown. With `settle` (every write but an ingest, which a platform delivers again
        and dedupe makes whole), the transaction's id is read before the COMMIT, and the
        server is asked afterwards what became of it: committed, the result stands;
        rolled back, the write is done again; unknown, the error is raised."""
        pool = await self.pool()
        dropped = 0
        for attempt in range(RETRIES + self._pool_size):
            committing = False
            xid: int | None = None
            try:
                async with pool.connection() as connection, connection.transaction():
                    result = await work(connection)
                    if settle:
                        cursor = await connection.execute("SELECT txid_current()")
                        xid = ((await cursor.fetchone()) or (None,))[0]
                    committing = True
                return result
            except RETRYABLE:
                if attempt >= RETRIES - 1:
                    raise
                await asyncio.sleep(0.005 * (attempt + 1))
            except psycopg.OperationalError as error:
                if not _dropped(error):
                    raise  # a pool with no free connection, a statement or lock timeout
                # the connection broke. Before the COMMIT was sent the server rolled the
                # transaction back: done again, on another connection (a restart leaves
                # every pooled one broken). A COMMIT whose answer was lost may have taken
                # effect: the server is asked (settle), never done twice here
                self._check_pool(pool)
                dropped += 1
                if committing:
                    outcome = None if xid is None else await self._outcome(xid)
                    if outcome == "committed":
                        log.info("a write's COMMIT answer was lost; the server says it committed")
                        return result
                    if outcome != "aborted":
                        raise
                if dropped > self._pool_size:
                    raise
                await asyncio.sleep(0.05 * dropped)
        raise AssertionError("unreachable")

    async def _outcome(self, xid: int) -> str | None:
        """What became of transaction `xid` whose COMMIT answer was lost: "committed",
        "aborted", or None when the server cannot say (unreachable, or the transaction
        still in progress after CONNECTION_WAIT: its backend has not seen the loss)."""
        deadline = asyncio.get_running_loop().time() + CONNECTION_WAIT
        while True:
            try:
                status = await self._read(lambda connection: _xact_status(connection, xid))
            except psycopg.Error:
                return None
            if status != "in progress":
                return status if status in ("committed", "aborted") else None
            if asyncio.get_running_loop().time() > deadline:
                return None
            await asyncio.sleep(0.05)

    async def recover(self) -> list[OutboxEntry]:
        return await self.recover_worker(self.worker)

    async def recover_worker(self, worker: str | None) -> list[OutboxEntry]:
        """Mark a worker's pending sends uncertain and its running runs interrupted.

        None means every worker's (a single process that owns the whole database).
        """

        async def work(connection: Any) -> list[int]:
            return await self._recover_in(connection, worker)

        pending = await self._write(work)
        return await self._outbox_entries_now(pending)

    async def _recover_in(self, connection: Any, worker: str | None) -> list[int]:
        mine = "" if worker is None else " AND worker = %s"
        params: tuple[Any, ...] = () if worker is None else (worker,)
        cursor = await connection.execute(
            f"SELECT id, reason FROM outbox WHERE status = 'pending'{mine} ORDER BY id FOR UPDATE",
            params,
        )
        rows = await cursor.fetchall()
        pending = [row[0] for row in rows]
        waiting = {row[0] for row in rows if row[1] == WAITING}
        # a send it handed over that the account's holder has not taken was never tried:
        # not sent (the holder takes only pending rows, under the same row locks)
        untried: set[int] = set()
        if pending:
            cursor = await connection.execute(
                "SELECT outbox_id FROM handoffs WHERE taken_by IS NULL AND outbox_id = ANY(%s)",
                (pending,),
            )
            untried = {row[0] for row in await cursor.fetchall()}
        for outbox_id in pending:
            if outbox_id in untried:
                await self._never_tried(
                    connection,
                    outbox_id,
                    "not sent: the process that asked for it stopped before the worker"
                    " holding the account took it",
                )
                continue
            if outbox_id in waiting:  # nothing of it was in flight (Store.note_waiting)
                await self._never_tried(connection, outbox_id, NEVER_SENT_WAITING)
        # the rest may have reached the platform: uncertain, set-wise (one statement per
        # table, not three per row: a dead worker's recovery is one transaction, cut short
        # by a heartbeat's budget, and thousands of rows must still fit in it)
        doubtful = [i for i in pending if i not in untried and i not in waiting]
        if doubtful:
            reason = "interrupted by a restart before the platform answered"
            await connection.execute(
                "UPDATE outbox SET status = 'uncertain', reason = %s, updated_at = %s"
                " WHERE id = ANY(%s)",
                (reason, now(), doubtful),
            )
            await connection.execute(
                "UPDATE messages m SET status = 'uncertain', status_reason = %s FROM outbox o"
                " WHERE o.id = ANY(%s) AND o.message_seq IS NOT NULL"
                " AND m.conversation_id = o.conversation_id AND m.seq = o.message_seq",
                (reason, doubtful),
            )
        await connection.execute(
            "UPDATE runs SET status = 'interrupted', error = 'the process stopped during the run',"
            f" finished_at = %s WHERE status = 'running'{mine}",
            (now(), *params),
        )
        return pending

    # inbound ---------------------------------------------------------------
    async def append_inbound(self, items: Sequence[Inbound]) -> list[AppendResult]:
        if not items:
            return []

        async def work(connection: Any) -> list[AppendResult]:
            return await _Append(connection, items, self.worker).run()

        # no settle: an ingest whose COMMIT answer was lost fails, and the platform's
        # delivery again is deduped (the hot path spares the round trip)
        result: list[AppendResult] = await self._write(work, settle=False)
        return result

    async def is_known(self, account: str, event_id: str) -> bool:
        row = await self._fetchone(
            "SELECT 1 FROM events WHERE account = %s AND event_id = %s", (account, str(event_id))
        )
        return row is not None

    # conversations ---------------------------------------------------------
    async def conversation(self, conversation_id: int) -> Conversation:
        row = await self._fetchone(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = %s", (conversation_id,)
        )
        if row is None:
            raise UnknownConversation(f"no conversation with id {conversation_id}")
        return conversation_row(row)

    async def find_conversation(self, address: Address) -> Conversation | None:
        row = await self._fetchone(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations"
            " WHERE account = %s AND chat = %s AND thread = %s",
            (address.account, address.chat, address.thread or ""),
        )
        return conversation_row(row) if row else None

    async def ensure_conversation(
        self, address: Address, kind: str = "direct", title: str | None = None
    ) -> Conversation:
        key = (address.account, address.chat, address.thread or "")
        stamp = now()

        async def work(connection: Any) -> None:
            await connection.execute(
                "INSERT INTO conversations (account, chat, thread, kind, title, created_at,"
                " active_at) VALUES (%s,%s,%s,%s,%s,%s,%s)"
                " ON CONFLICT (account, chat, thread) DO NOTHING",
                (*key, kind, title, stamp, stamp),
            )
            if title is not None:
                await connection.execute(
                    "UPDATE conversations SET title = %s WHERE account = %s AND chat = %s"
                    " AND thread = %s AND title IS DISTINCT FROM %s",
                    (title, *key, title),
                )

        await self._write(work)
        found = await self.find_conversation(address)
        assert found is not None
        return found

    async def conversations(
        self, account: str | None = None, limit: int = 100
    ) -> list[Conversation]:
        if account is None:
            rows = await self._fetchall(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations"
                " ORDER BY active_at DESC, id DESC LIMIT %s",
                (limit,),
            )
        else:
            rows = await self._fetchall(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE account = %s"
                " ORDER BY active_at DESC, id DESC LIMIT %s",
                (account, limit),
            )
        return [conversation_row(row) for row in rows]

    #: `search_conversations` takes `chats` and `excluded_chats` (see SQLiteStore's)
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

        As `SQLiteStore.search_conversations`: `chats` and `excluded_chats`
        limit the accounts they name; the catch-up of the text index runs for
        `CATCH_UP_SECONDS` at most, and `search_index_complete` says whether it
        caught up.
        """
        # PostgreSQL's own text search ('simple': no stemming), folded like the SQLite
        # index (lower case, Latin accents dropped), each part answered from its index
        clauses: list[str] = []
        params: list[Any] = []
        scope = scope_clause(
            accounts, chats or {}, excluded_chats or {}, mark="%s", prefix="c.", free="c.account"
        )
        if scope is None:
            return []
        if scope[0]:
            clauses.append(scope[0])
            params.extend(scope[1])
        if query is not None:
            words = distinct_words([fold_accents(w.lower()) for w in _WORD.findall(query)])
            if not words:
                return []
            pool = await self.pool()
            async with pool.connection() as connection:
                # message text is indexed lazily (pg009)
                self.search_index_complete = await catch_up(connection, seconds=CATCH_UP_SECONDS)
            for word in words:
                # one word may match anywhere in the conversation: its title, the name or
                # handle of someone with a visible message in it, or a visible message.
                # Visible as SQLite's names_fts has it: the participant's first message
                # is, found by its key (an EXISTS over any message of theirs had no index
                # to use: a hash join over every message, 2 s at a million)
                clauses.append(
                    "c.id IN (SELECT t.id FROM conversations t"
                    f" WHERE {search_document('t.title')} @@ to_tsquery('simple', %s)"
                    " UNION ALL SELECT p.conversation_id FROM participants p"
                    f" WHERE {search_document(PARTICIPANT_NAME)} @@ to_tsquery('simple', %s)"
                    " AND EXISTS (SELECT 1 FROM messages m"
                    " WHERE m.conversation_id = p.conversation_id AND m.seq = p.first_seq"
                    " AND m.held = 0)"
                    " UNION ALL SELECT w.conversation_id FROM message_words w"
                    " WHERE w.words @@ to_tsquery('simple', %s))"
                )
                params.extend([f"{word}:*"] * 3)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = await self._fetchall(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations c {where}"
            " ORDER BY active_at DESC, id DESC LIMIT %s",
            (*params, max(limit, 0)),
            prepare=False,  # how common each word is decides the plan
        )
        return [conversation_row(row) for row in rows]

    async def count_visible(self, conversation_id: int, before_seq: int | None = None) -> int:
        if before_seq is None:
            row = await self._fetchone(
                "SELECT visible_count FROM conversations WHERE id = %s", (conversation_id,)
            )
            return int(row[0]) if row else 0
        # the shorter side is counted, as SQLiteStore.count_visible explains (visible_count
        # is exactly the rows with held = 0); one statement, one snapshot
        before = clamp_seq(before_seq)
        rows = await self._fetchall(
            "SELECT CASE WHEN %s > c.last_seq / 2 THEN c.visible_count - (SELECT COUNT(*)"
            " FROM messages WHERE conversation_id = c.id AND seq >= %s AND held = 0)"
            " ELSE (SELECT COUNT(*) FROM messages WHERE conversation_id = c.id AND seq < %s"
            " AND held = 0) END FROM conversations c WHERE c.id = %s",
            (before, before, before, conversation_id),
            prepare=False,
        )
        return max(int(rows[0][0]), 0) if rows else 0

    #: `participants` counts who wrote the latest this many visible inbound messages
    participant_window = 1000

    async def participants(self, conversation_id: int) -> list[Participant]:
        """Return who wrote the latest `participant_window` visible inbound messages.

        As `SQLiteStore.participants`: most active among those first, counts and
        seqs over that window. Not prepared (see `_fetchall`): a generic plan
        read the whole conversation per participant.
        """
        rows = await self._fetchall(
            "SELECT p.sender_id, p.name, p.handle, p.is_bot, a.n, a.low, a.high FROM"
            " (SELECT sender_id, COUNT(*) AS n, MIN(seq) AS low, MAX(seq) AS high FROM"
            " (SELECT seq, sender_id FROM messages WHERE conversation_id = %s AND held = 0"
            " AND direction = 'in' ORDER BY seq DESC LIMIT %s) r GROUP BY sender_id) a"
            " JOIN participants p ON p.conversation_id = %s AND p.sender_id = a.sender_id"
            " ORDER BY a.n DESC, a.low",
            (conversation_id, max(self.participant_window, 1), conversation_id),
            prepare=False,
        )
        return [Participant(Sender(r[0], r[1], r[2], bool(r[3])), r[4], r[5], r[6]) for r in rows]

    async def set_conversation_meta(self, conversation_id: int, meta: Mapping[str, Any]) -> None:
        async def work(connection: Any) -> None:
            cursor = await connection.execute(
                "SELECT meta FROM conversations WHERE id = %s FOR UPDATE", (conversation_id,)
            )
            row = await cursor.fetchone()
            if row is None:
                raise UnknownConversation(f"no conversation with id {conversation_id}")
            merged = {**json.loads(row[0] or "{}"), **meta}
            await connection.execute(
                "UPDATE conversations SET meta = %s WHERE id = %s",
                (json.dumps(merged), conversation_id),
            )

        await self._write(work)

    # transcript ------------------------------------------------------------
    async def window(
        self, conversation_id: int, limit: int, upto_seq: int | None = None
    ) -> list[Message]:
        return [
            message_row(row) for row in await self.window_rows(conversation_id, limit, upto_seq)
        ]

    async def window_rows(
        self, conversation_id: int, limit: int, upto_seq: int | None = None
    ) -> list[tuple[Any, ...]]:
        """`window` as the rows themselves (`MESSAGE_COLUMNS`, oldest first), not Messages.

        As `SQLiteStore.window_rows`, which RunBuilder formats runs from, but
        always read afresh: the workers are separate processes writing to one
        database, so no process can keep a window and know when it went stale.
        """
        rows = await self._fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = %s AND seq <= %s"
            " AND held = 0 ORDER BY seq DESC LIMIT %s",
            (conversation_id, clamp_seq(upto_seq), limit),
        )
        rows.reverse()
        return rows

    async def transcript(self, conversation_id: int, limit: int) -> list[Message]:
        rows = await self._fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = %s"
            " ORDER BY seq DESC LIMIT %s",
            (conversation_id, limit),
        )
        rows.reverse()
        return [message_row(row) for row in rows]

    async def history(self, conversation_id: int, before_seq: int, limit: int) -> list[Message]:
        return await self.window(conversation_id, limit, clamp_seq(before_seq) - 1)

    async def messages_after(
        self, conversation_id: int, after_seq: int, limit: int = 1000
    ) -> list[Message]:
        rows = await self._fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = %s AND seq > %s"
            " AND held = 0 ORDER BY seq LIMIT %s",
            (conversation_id, clamp_seq(after_seq), limit),
        )
        return [message_row(row) for row in rows]

    async def message(self, conversation_id: int, seq: int) -> Message | None:
        row = await self._fetchone(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = %s AND seq = %s",
            (conversation_id, seq),
        )
        return message_row(row) if row else None

    async def message_by_platform_id(
        self, conversation_id: int, platform_message_id: str
    ) -> Message | None:
        row = await self._fetchone(
            f"SELECT {MESSAGE_COLUMNS} FROM messages"
            " WHERE conversation_id = %s AND platform_message_id = %s ORDER BY seq LIMIT 1",
            (conversation_id, str(platform_message_id)),
        )
        return message_row(row) if row else None

    async def revisions(self, conversation_id: int, seq: int) -> list[tuple[str, str, float]]:
        rows = await self._fetchall(
            "SELECT kind, text, at FROM revisions WHERE conversation_id = %s AND seq = %s"
            " ORDER BY id",
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
        stamp = now()

        async def work(connection: Any) -> int:
            if self.worker is not None and run_id is not None:
                await self._check_claim(connection, run_id)
            outbox_id = await record(connection)
            if hand_to is not None:  # one transaction: no crash leaves it recorded, not handed
                await self._hand_off_in(connection, outbox_id, *hand_to)
            return outbox_id

        async def record(connection: Any) -> int:
            seq = None
            if outbound.kind == "message":
                # the row lock this UPDATE takes is what keeps seqs gapless across writers
                cursor = await connection.execute(
                    "UPDATE conversations SET last_seq = last_seq + 1,"
                    " visible_count = visible_count + 1, active_at = GREATEST(active_at, %s)"
                    " WHERE id = %s RETURNING last_seq",
                    (stamp, conversation_id),
                )
                row = await cursor.fetchone()
                if row is None:
                    raise UnknownConversation(f"no conversation with id {conversation_id}")
                seq = row[0]
                reply_to_seq = None
                if outbound.reply_to is not None:
                    cursor = await connection.execute(
                        "SELECT seq FROM messages WHERE conversation_id = %s"
                        " AND platform_message_id = %s ORDER BY seq LIMIT 1",
                        (conversation_id, outbound.reply_to),
                    )
                    found = await cursor.fetchone()
                    reply_to_seq = found[0] if found else None
                await connection.execute(
                    f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES ({MESSAGE_MARKS})",
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
            else:
                cursor = await connection.execute(
                    "SELECT 1 FROM conversations WHERE id = %s", (conversation_id,)
                )
                if await cursor.fetchone() is None:
                    raise UnknownConversation(f"no conversation with id {conversation_id}")
            cursor = await connection.execute(
                "INSERT INTO outbox (conversation_id, run_id, seen_seq, kind, text, reply_to,"
                " target, message_seq, status, worker, created_at, updated_at, origin)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,'pending',%s,%s,%s,%s) RETURNING id",
                (
                    conversation_id,
                    run_id,
                    seen_seq,
                    outbound.kind,
                    outbound.text,
                    outbound.reply_to,
                    outbound.target,
                    seq,
                    self.worker,
                    stamp,
                    stamp,
                    outbound.origin,
                ),
            )
            row = await cursor.fetchone()
            return int(row[0])

        outbox_id = await self._write(work)
        return await self._outbox_entry_now(outbox_id)

    async def _check_claim(self, connection: Any, run_id: int) -> None:
        """Fence a run's send: only while the run holds its conversation's claim.

        The run's own conversation, whatever the send's target (a cross-conversation
        send or an ask goes elsewhere). A worker that stalled past its claim's ttl may
        find another worker running that conversation, or done with it (the claim
        released), or itself restarted and running it again: in each case its send is
        refused. The claim row is locked, so the other run's window, built after it
        claims, shows every send recorded before.
        """
        cursor = await connection.execute(
            "SELECT conversation_id FROM runs WHERE id = %s", (run_id,)
        )
        found = await cursor.fetchone()
        if found is None:
            raise StoreError(f"there is no run {run_id}: its send was not made")
        conversation_id = found[0]
        cursor = await connection.execute(
            "SELECT worker, run_id FROM run_claims WHERE conversation_id = %s FOR UPDATE",
            (conversation_id,),
        )
        row = await cursor.fetchone()
        if row is not None and row[0] == self.worker and row[1] == run_id:
            return
        if row is None:
            now_held = "another run has answered it and released it meanwhile"
        elif row[0] != self.worker:
            now_held = f"worker {row[0]} took it over"
        else:
            now_held = "this worker (restarted, or running it again) holds it for another run"
        raise ClaimLost(
            f"run {run_id} of worker {self.worker} no longer holds conversation"
            f" {conversation_id}: its claim lapsed (missed heartbeats) and {now_held};"
            " this send was not made"
        )

    async def mark_sent(self, outbox_id: int, receipt: Receipt) -> OutboxEntry:
        ids = receipt.part_ids or (
            (receipt.platform_message_id,) if receipt.platform_message_id else ()
        )

        async def work(connection: Any) -> None:
            entry = await self._outbox_entry(connection, outbox_id)
            reactions = None
            if entry.message_seq is not None and ids:
                # reactions to it (any of its parts) may have come before this, a webhook's
                # race: in its conversation, or its chat's when it is in a thread (a Slack
                # reaction names the chat). First, as it locks those conversations' rows,
                # which appends take before messages'
                cursor = await connection.execute(
                    "SELECT c.id FROM conversations t JOIN conversations c"
                    " ON c.account = t.account AND c.chat = t.chat AND c.thread = ''"
                    " WHERE t.id = %s AND t.thread <> ''",
                    (entry.conversation_id,),
                )
                chat = await cursor.fetchone()
                # the chat's first, as appends lock them in key order (its thread is "")
                places = [*([chat[0]] if chat else []), entry.conversation_id]
                early: list[tuple[int, str]] = []
                for place in places:
                    early += await _take_reactions(connection, place, None, ids)
                reactions = early_reactions_column(early)
            await connection.execute(
                "UPDATE outbox SET status = 'sent', reason = NULL, platform_ids = %s,"
                " updated_at = %s WHERE id = %s",
                (json.dumps(list(ids)), now(), outbox_id),
            )
            if entry.message_seq is not None:
                meta: dict[str, Any] = {"part_ids": list(ids)} if len(ids) > 1 else {}
                if entry.origin:
                    meta["origin"] = entry.origin
                await connection.execute(
                    "UPDATE messages SET status = 'sent', status_reason = NULL,"
                    " platform_message_id = %s, meta = %s WHERE conversation_id = %s AND seq = %s",
                    (
                        receipt.platform_message_id,
                        json.dumps(meta) if meta else None,
                        entry.conversation_id,
                        entry.message_seq,
                    ),
                )
                if reactions is not None:
                    await _set_reactions(
                        connection, entry.conversation_id, entry.message_seq, reactions
                    )
                parts = [part for part in ids if part != receipt.platform_message_id]
                if parts:
                    # a reply or a reaction to a later part finds the message (m013)
                    async with connection.cursor() as cursor:
                        await cursor.executemany(
                            "INSERT INTO message_parts (conversation_id, platform_message_id,"
                            " seq) VALUES (%s,%s,%s) ON CONFLICT DO NOTHING",
                            [(entry.conversation_id, part, entry.message_seq) for part in parts],
                        )
            elif entry.kind == "edit" and entry.target is not None:
                cursor = await connection.execute(
                    "SELECT seq, text FROM messages WHERE conversation_id = %s"
                    " AND platform_message_id = %s ORDER BY seq LIMIT 1",
                    (entry.conversation_id, entry.target),
                )
                row = await cursor.fetchone()
                # the platform's echo of the edit may have landed first: no second revision
                if row is not None and row[1] != entry.text:
                    stamp = now()
                    await connection.execute(
                        "INSERT INTO revisions (conversation_id, seq, kind, text, at)"
                        " VALUES (%s,%s,%s,%s,%s)",
                        (entry.conversation_id, row[0], "edit", row[1], stamp),
                    )
                    await connection.execute(
                        "UPDATE messages SET text = %s, edited_at = %s"
                        " WHERE conversation_id = %s AND seq = %s",
                        (entry.text, stamp, entry.conversation_id, row[0]),
                    )

        await self._write(work)
        return await self._outbox_entry_now(outbox_id)

    async def mark_failed(
        self, outbox_id: int, reason: str, *, never_sent: bool = False
    ) -> OutboxEntry:
        async def work(connection: Any) -> None:
            await self._set_outbox_status(connection, outbox_id, "failed", reason)
            if never_sent:
                await _gave_back(connection, outbox_id, reason)
            entry = await self._outbox_entry(connection, outbox_id)
            if entry.platform_ids and entry.kind == "message":
                # an id noted before sending (note_platform_id) names nothing that arrived
                await _set_platform_id(connection, entry, None)

        await self._write(work)
        return await self._outbox_entry_now(outbox_id)

    async def mark_uncertain(
        self, outbox_id: int, reason: str, *, platform_message_id: str | None = None
    ) -> OutboxEntry:
        async def work(connection: Any) -> None:
            await self._set_outbox_status(connection, outbox_id, "uncertain", reason)
            if platform_message_id is not None:
                entry = await self._outbox_entry(connection, outbox_id)
                await _set_platform_id(connection, entry, platform_message_id)

        await self._write(work)
        return await self._outbox_entry_now(outbox_id)

    async def note_platform_id(self, outbox_id: int, platform_message_id: str) -> None:
        async def work(connection: Any) -> None:
            entry = await self._outbox_entry(connection, outbox_id)
            if entry.status == "pending" and entry.kind == "message":
                await _set_platform_id(connection, entry, platform_message_id)

        await self._write(work)

    async def _never_tried(self, connection: Any, outbox_id: int, reason: str) -> None:
        """Fail a handed-over send no worker took: it was never tried, so what an ask
        staked on it is given back (`_gave_back`)."""
        await self._set_outbox_status(connection, outbox_id, "failed", reason)
        await _gave_back(connection, outbox_id, reason)

    async def _set_outbox_status(
        self, connection: Any, outbox_id: int, status: str, reason: str
    ) -> None:
        reason = redact(reason)  # adapters' reasons may quote what a library said
        entry = await self._outbox_entry(connection, outbox_id)
        await connection.execute(
            "UPDATE outbox SET status = %s, reason = %s, updated_at = %s WHERE id = %s",
            (status, reason, now(), outbox_id),
        )
        if entry.message_seq is not None:
            await connection.execute(
                "UPDATE messages SET status = %s, status_reason = %s"
                " WHERE conversation_id = %s AND seq = %s",
                (status, reason, entry.conversation_id, entry.message_seq),
            )

    async def _outbox_entry(self, connection: Any, outbox_id: int) -> OutboxEntry:
        cursor = await connection.execute(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE id = %s", (outbox_id,)
        )
        row = await cursor.fetchone()
        if row is None:
            raise StoreError(f"no outbox entry with id {outbox_id}")
        return outbox_row(row)

    async def _outbox_entry_now(self, outbox_id: int) -> OutboxEntry:
        entry: OutboxEntry = await self._read(
            lambda connection: self._outbox_entry(connection, outbox_id)
        )
        return entry

    async def _outbox_entries_now(self, outbox_ids: Sequence[int]) -> list[OutboxEntry]:
        """The outbox rows `outbox_ids`, in that order, in one read."""
        if not outbox_ids:
            return []
        rows = await self._fetchall(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE id = ANY(%s)", (list(outbox_ids),)
        )
        entries = {entry.id: entry for entry in map(outbox_row, rows)}
        return [entries[outbox_id] for outbox_id in outbox_ids]

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
            clauses.append("status = %s")
            params.append(status)
        if conversation_id is not None:
            clauses.append("conversation_id = %s")
            params.append(conversation_id)
        if run_ids is not None:
            ids = sorted({int(run_id) for run_id in run_ids})
            if not ids:
                return []
            clauses.append(f"run_id IN ({','.join(['%s'] * len(ids))})")  # outbox_run
            params.extend(ids)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = await self._fetchall(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox {where} ORDER BY id DESC LIMIT %s",
            (*params, limit),
        )
        return [outbox_row(row) for row in rows]

    # handling --------------------------------------------------------------
    async def mark_handled(self, conversation_id: int, seq: int) -> None:
        async def work(connection: Any) -> None:
            await connection.execute(
                "UPDATE conversations SET handled_seq = GREATEST(handled_seq, %s) WHERE id = %s",
                (seq, conversation_id),
            )

        await self._write(work)

    async def unhandled(self) -> list[Conversation]:
        rows = await self._fetchall(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations"
            " WHERE trigger_seq > handled_seq ORDER BY active_at"
        )
        return [conversation_row(row) for row in rows]

    async def begin_run(self, conversation_id: int, trigger_seq: int, upto_seq: int) -> int:
        async def work(connection: Any) -> int:
            cursor = await connection.execute(
                "INSERT INTO runs (conversation_id, trigger_seq, upto_seq, started_at, worker)"
                " VALUES (%s,%s,%s,%s,%s) RETURNING id",
                (conversation_id, trigger_seq, upto_seq, now(), self.worker),
            )
            row = await cursor.fetchone()
            if self.worker is not None:
                # the claim this worker took for the conversation is now this run's: only
                # its sends are recorded (_check_claim)
                await connection.execute(
                    "UPDATE run_claims SET run_id = %s WHERE conversation_id = %s AND worker = %s",
                    (row[0], conversation_id, self.worker),
                )
            return int(row[0])

        run_id: int = await self._write(work)
        return run_id

    async def answers_after(self, conversation_id: int, trigger_seq: int) -> set[int]:
        rows = await self._fetchall(
            "SELECT o.message_seq FROM outbox o JOIN runs r ON r.id = o.run_id"
            " WHERE o.conversation_id = %s AND o.message_seq > %s AND r.conversation_id = %s"
            " AND COALESCE(o.seen_seq, r.upto_seq) >= %s AND r.trigger_seq > 0",
            (conversation_id, trigger_seq, conversation_id, trigger_seq),
        )
        return {int(seq) for (seq,) in rows}

    async def sent_for_others(
        self, conversation_id: int, after_seq: int, upto_seq: int
    ) -> set[int]:
        rows = await self._fetchall(
            "SELECT o.message_seq FROM outbox o LEFT JOIN runs r ON r.id = o.run_id"
            " WHERE o.conversation_id = %s AND o.message_seq > %s AND o.message_seq <= %s"
            " AND (r.conversation_id <> %s OR o.id IN"
            " (SELECT a.outbox_id FROM asks a WHERE a.peer_conversation_id = %s))",
            (conversation_id, after_seq, upto_seq, conversation_id, conversation_id),
        )
        return {int(seq) for (seq,) in rows}

    async def sent_elsewhere_after(
        self, conversation_id: int, trigger_seq: int
    ) -> OutboxEntry | None:
        row = await self._fetchone(
            "WITH recent AS (SELECT id, upto_seq FROM runs"
            # runs that answered a message: the reporter runs of asks (trigger 0), which
            # a restart may run first, must not push the cut-short run out of the five
            " WHERE conversation_id = %s AND trigger_seq > 0 ORDER BY id DESC LIMIT 5)"
            " SELECT o.id FROM recent r JOIN outbox o ON o.run_id = r.id"
            " WHERE o.conversation_id != %s AND o.kind = 'message' AND o.status != 'failed'"
            " AND COALESCE(o.seen_seq, r.upto_seq) >= %s"
            # a send_to_conversation (it names its origin), or a question whose ask was
            # recorded: a question is sent only once its ask row is written, so one whose run
            # died between its outbox row and its ask row never went out and acted on nothing
            " AND (o.origin IS NOT NULL OR EXISTS (SELECT 1 FROM asks a"
            " WHERE a.origin_conversation_id = %s AND a.outbox_id = o.id))"
            " ORDER BY o.id DESC LIMIT 1",
            (conversation_id, conversation_id, trigger_seq, conversation_id),
        )
        return None if row is None else await self._outbox_entry_now(int(row[0]))

    async def finish_run(
        self,
        run_id: int,
        status: str,
        error: str | None = None,
        upto_seq: int | None = None,
        *,
        handled_seq: int | None = None,
    ) -> None:
        async def work(connection: Any) -> None:
            await connection.execute(
                "UPDATE runs SET status = %s, error = %s, finished_at = %s,"
                " upto_seq = COALESCE(%s, upto_seq) WHERE id = %s",
                (status, redact(error) if error else error, now(), upto_seq, run_id),
            )
            if handled_seq is not None:
                await connection.execute(
                    "UPDATE conversations SET handled_seq = GREATEST(handled_seq, %s)"
                    " WHERE id = (SELECT conversation_id FROM runs WHERE id = %s)",
                    (handled_seq, run_id),
                )

        await self._write(work)

    async def runs(self, conversation_id: int | None = None, limit: int = 50) -> list[RunRecord]:
        sql = (
            "SELECT id, conversation_id, trigger_seq, upto_seq, started_at, finished_at,"
            " status, error FROM runs"
        )
        if conversation_id is None:
            rows = await self._fetchall(sql + " ORDER BY id DESC LIMIT %s", (limit,))
        else:
            rows = await self._fetchall(
                sql + " WHERE conversation_id = %s ORDER BY id DESC LIMIT %s",
                (conversation_id, limit),
            )
        return [RunRecord(*row) for row in rows]

    # adapter state and dead letters ----------------------------------------
    async def get_state(self, account: str, key: str) -> str | None:
        row = await self._fetchone(
            "SELECT value FROM state WHERE account = %s AND key = %s", (account, key)
        )
        return None if row is None else str(row[0])

    async def set_state(self, account: str, key: str, value: str | None) -> None:
        async def work(connection: Any) -> None:
            await _write_state(connection, account, key, value, self.worker)

        await self._write(work)

    async def add_dead_letter(
        self,
        account: str,
        ref: str,
        reason: str,
        payload: str,
        *,
        state: Mapping[str, str | None] | None = None,
    ) -> None:
        payload = redact(payload)[:65536]
        digest = dead_letter_digest(ref, payload)

        async def work(connection: Any) -> None:
            stamp = now()
            cursor = await connection.execute(
                "DELETE FROM dead_letters WHERE account = %s AND digest = %s"
                " RETURNING deliveries, COALESCE(first_at, at)",
                (account, digest),
            )
            old = await cursor.fetchone()
            deliveries, first_at = (old[0] + 1, old[1]) if old else (1, stamp)
            # a worker adding the same letter at the same moment: counted into its row
            await connection.execute(
                "INSERT INTO dead_letters"
                " (account, ref, reason, payload, at, digest, deliveries, first_at)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s)"
                " ON CONFLICT (account, digest) DO UPDATE SET id = excluded.id,"
                " reason = excluded.reason, at = excluded.at,"
                " deliveries = dead_letters.deliveries + excluded.deliveries",
                (account, ref, redact(reason), payload, stamp, digest, deliveries, first_at),
            )
            for key, value in (state or {}).items():
                await _write_state(connection, account, key, value, self.worker)

        await self._write(work)

    async def dead_letters(
        self, account: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        sql = (
            "SELECT id, account, ref, reason, payload, at, deliveries, COALESCE(first_at, at)"
            " FROM dead_letters"
        )
        params: tuple[Any, ...] = (limit,)
        if account is not None:
            sql += " WHERE account = %s"
            params = (account, limit)
        rows = await self._fetchall(sql + " ORDER BY id DESC LIMIT %s", params)
        return [dict(zip(DEAD_LETTER_KEYS, row, strict=True)) for row in rows]

    async def stats(self) -> dict[str, int]:
        async def count(sql: str) -> int:
            row = await self._fetchone(sql)
            return int(row[0] or 0) if row else 0

        figures = {
            "conversations": await count("SELECT COUNT(*) FROM conversations"),
            "messages": await count("SELECT COALESCE(SUM(last_seq), 0) FROM conversations"),
            "held": await count("SELECT COALESCE(SUM(held_count), 0) FROM conversations"),
            "unhandled_conversations": await count(
                "SELECT COUNT(*) FROM conversations WHERE trigger_seq > handled_seq"
            ),
            "runs": await count("SELECT COUNT(*) FROM runs"),
            "dead_letters": await count("SELECT COUNT(*) FROM dead_letters"),
        }
        for status, number in await self._fetchall(
            "SELECT status, COUNT(*) FROM outbox GROUP BY status"
        ):
            figures[f"outbox_{status}"] = int(number)
        return figures

    # workers: heartbeats, account leases, run claims (PostgreSQL only) -------
    # Times are the database server's clock, so workers on several machines agree.

    async def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        async def work(connection: Any) -> Any:
            cursor = await connection.execute(sql, params)
            return await cursor.fetchall() if cursor.description else None

        return await self._write(work)

    async def register_worker(self, host: str, pid: int) -> None:
        """Record this worker as alive (a restart under the same name starts afresh).

        A new life holds no run claim: those left by a previous life under this name
        (killed mid-run) are dropped, or its heartbeats would renew them for good and
        keep every other worker from running those conversations.
        """
        me = self._me()

        async def work(connection: Any) -> None:
            await connection.execute(
                "INSERT INTO workers (name, host, pid, started_at, heartbeat_at)"
                f" VALUES (%s, %s, %s, {DB_NOW}, {DB_NOW}) ON CONFLICT (name) DO UPDATE SET"
                " host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,"
                " heartbeat_at = excluded.heartbeat_at, stopped_at = NULL",
                (me, host, pid),
            )
            await connection.execute("DELETE FROM run_claims WHERE worker = %s", (me,))

        await self._write(work)

    def _me(self) -> str:
        if self.worker is None:
            raise StoreError("this store was opened without a worker name")
        return self.worker

    async def heartbeat(self, ttl: float) -> set[str]:
        """Say this worker is alive; extend its leases and run claims; return the accounts held."""
        me = self._me()

        async def work(connection: Any) -> set[str]:
            # alive again after another worker took it for dead (a long pause): it counts
            # as running again, so that a real death later is recovered too
            await connection.execute(
                f"UPDATE workers SET heartbeat_at = {DB_NOW}, stopped_at = NULL WHERE name = %s",
                (me,),
            )
            # its leases, lapsed ones too while still its own: no other worker took them
            # (one that did renamed the row); an outage longer than the lease then leaves
            # each account where it was, instead of idle until a takeover
            cursor = await connection.execute(
                f"UPDATE leases SET expires_at = {DB_NOW} + %s WHERE worker = %s RETURNING account",
                (ttl, me),
            )
            return {row[0] for row in await cursor.fetchall()}

        async def claims(connection: Any) -> None:
            # live claims only, as leases: a lapsed one may be another worker's already.
            # Those a send of this worker holds locked (its claim checked, its outbox row
            # waiting on a lock) are skipped: this worker's own transaction holds them,
            # and they are renewed at the next beat
            await connection.execute(
                f"UPDATE run_claims SET expires_at = {DB_NOW} + %s WHERE conversation_id IN"
                " (SELECT conversation_id FROM run_claims WHERE worker = %s"
                f" AND expires_at > {DB_NOW} FOR UPDATE SKIP LOCKED)",
                (ttl, me),
            )

        # the leases first, in a transaction of their own: a claim row waited on (a send
        # stuck behind a locked table) held the whole heartbeat, the leases lapsed, and
        # live workers took each other for dead. Not settled: a beat whose COMMIT answer
        # was lost fails, and the next beat renews them again
        held: set[str] = await self._write(work, settle=False)
        await self._write(claims, settle=False)
        return held

    async def acquire_lease(self, account: str, ttl: float) -> str | None:
        """Take (or keep) the account's lease when it is free or expired.

        Return the worker whose lease lapsed when this took it over ("" when the
        account was free or already ours), None when another live worker holds it.
        """
        me = self._me()

        async def work(connection: Any) -> str | None:
            cursor = await connection.execute(
                "SELECT worker, expires_at > " + DB_NOW + " FROM leases WHERE account = %s"
                " FOR UPDATE",
                (account,),
            )
            row = await cursor.fetchone()
            if row is not None and row[0] != me and row[1]:
                return None
            # conditional: when no row existed, FOR UPDATE locked nothing, and another
            # worker may have inserted one since: then this takes nothing
            cursor = await connection.execute(
                "INSERT INTO leases (account, worker, acquired_at, expires_at)"
                f" VALUES (%s, %s, {DB_NOW}, {DB_NOW} + %s) ON CONFLICT (account) DO UPDATE SET"
                " worker = excluded.worker, expires_at = excluded.expires_at,"
                " acquired_at = CASE WHEN leases.worker = excluded.worker"
                " THEN leases.acquired_at ELSE excluded.acquired_at END"
                f" WHERE leases.worker = excluded.worker OR leases.expires_at <= {DB_NOW}"
                " RETURNING worker",
                (account, me, ttl),
            )
            if await cursor.fetchone() is None:
                return None
            return "" if row is None or row[0] == me else str(row[0])

        previous: str | None = await self._write(work)
        return previous

    async def release_leases(self, accounts: Sequence[str] | None = None) -> None:
        """Give up this worker's leases (all, or these accounts) and tell the others."""
        me = self._me()

        async def work(connection: Any) -> None:
            if accounts is None:
                await connection.execute("DELETE FROM leases WHERE worker = %s", (me,))
            else:
                await connection.execute(
                    "DELETE FROM leases WHERE worker = %s AND account = ANY(%s)",
                    (me, list(accounts)),
                )
            await connection.execute("SELECT pg_notify(%s, 'lease')", (WAKE_CHANNEL,))

        await self._write(work)

    async def stop_worker(self) -> None:
        """A clean stop: release every lease and claim, and record the stop."""
        me = self._me()

        async def work(connection: Any) -> None:
            await connection.execute("DELETE FROM leases WHERE worker = %s", (me,))
            await connection.execute("DELETE FROM run_claims WHERE worker = %s", (me,))
            await connection.execute(
                f"UPDATE workers SET stopped_at = {DB_NOW} WHERE name = %s", (me,)
            )
            await connection.execute("SELECT pg_notify(%s, 'lease')", (WAKE_CHANNEL,))

        await self._write(work)

    async def claim_run(self, conversation_id: int, ttl: float) -> bool:
        """Claim the right to run this conversation's agent; False when a live worker has it."""
        me = self._me()
        rows = await self._one(
            # no run holds a fresh claim until begin_run binds its own
            "INSERT INTO run_claims (conversation_id, worker, expires_at)"
            f" VALUES (%s, %s, {DB_NOW} + %s) ON CONFLICT (conversation_id) DO UPDATE SET"
            " worker = excluded.worker, expires_at = excluded.expires_at, run_id = NULL"
            f" WHERE run_claims.worker = excluded.worker OR run_claims.expires_at < {DB_NOW}"
            " RETURNING worker",
            (conversation_id, me, ttl),
        )
        return bool(rows)

    async def release_run(self, conversation_id: int) -> None:
        await self._one(
            "DELETE FROM run_claims WHERE conversation_id = %s AND worker = %s",
            (conversation_id, self._me()),
        )

    async def recover_dead_workers(self, ttl: float) -> dict[str, list[OutboxEntry]]:
        """Recover every worker whose heartbeat is older than `ttl` and that did not stop cleanly.

        Its pending sends become uncertain and its running runs interrupted, once:
        it is then recorded as stopped (a restart under its name registers again).
        """

        async def work(connection: Any) -> dict[str, list[int]]:
            # one transaction: the workers rows stay locked while their sends and runs are
            # recovered, so a restart under one of these names (which registers on that
            # row) cannot start a send or a run that this would then mark as interrupted
            cursor = await connection.execute(
                "UPDATE workers SET stopped_at = " + DB_NOW + " WHERE stopped_at IS NULL"
                f" AND heartbeat_at < {DB_NOW} - %s AND name IS DISTINCT FROM %s RETURNING name",
                (ttl, self.worker),
            )
            names = [row[0] for row in await cursor.fetchall()]
            return {name: await self._recover_in(connection, name) for name in names}

        found: dict[str, list[int]] = await self._write(work)
        return {name: await self._outbox_entries_now(pending) for name, pending in found.items()}

    async def workers_report(self) -> list[dict[str, Any]]:
        """Every worker with its heartbeat age, state and the accounts it leases."""
        rows = await self._fetchall(
            f"SELECT w.name, w.host, w.pid, w.started_at, {DB_NOW} - w.heartbeat_at,"
            " w.stopped_at, COALESCE(array_agg(l.account ORDER BY l.account)"
            f" FILTER (WHERE l.account IS NOT NULL AND l.expires_at > {DB_NOW}), '{{}}'),"
            " (SELECT COUNT(*) FROM run_claims c WHERE c.worker = w.name)"
            " FROM workers w LEFT JOIN leases l ON l.worker = w.name"
            " GROUP BY w.name ORDER BY w.name"
        )
        keys = ("name", "host", "pid", "started_at", "heartbeat_age", "stopped_at", "accounts")
        return [
            {**dict(zip(keys, row[:7], strict=True)), "accounts": list(row[6]), "runs": row[7]}
            for row in rows
        ]

    async def leases(self) -> dict[str, tuple[str, float]]:
        """account -> (worker, seconds left) for every unexpired lease."""
        rows = await self._fetchall(
            f"SELECT account, worker, expires_at - {DB_NOW} FROM leases WHERE expires_at > {DB_NOW}"
        )
        return {row[0]: (row[1], float(row[2])) for row in rows}

    async def note_waiting(self, outbox_id: int, waiting: bool) -> bool:
        async def work(connection: Any) -> bool:
            cursor = await connection.execute(
                "UPDATE outbox SET reason = %s WHERE id = %s AND status = 'pending' RETURNING id",
                (WAITING if waiting else None, outbox_id),
            )
            return await cursor.fetchone() is not None

        still: bool = await self._write(work)
        return still

    async def notify(self, payload: str) -> None:
        await self._one("SELECT pg_notify(%s, %s)", (WAKE_CHANNEL, payload))

    # sends handed to the worker holding an account (pg015) ----------------------
    async def hand_off(
        self, outbox_id: int, account: str, *, within: float, quiet: bool = False
    ) -> None:
        """Hand the recorded pending send `outbox_id` to the worker holding `account`.

        It is woken at once (a NOTIFY ``sends`` when this commits); its heartbeats
        look for waiting sends too. Not taken within `within` seconds (by the
        database's clock), it is never taken: the asker withdraws it, or, if the
        asker is gone, the next holder to look marks it failed.
        """

        async def work(connection: Any) -> None:
            await self._hand_off_in(connection, outbox_id, account, quiet, within)

        await self._write(work)

    async def _hand_off_in(
        self,
        connection: Any,
        outbox_id: int,
        account: str,
        quiet: bool,
        within: float,
        ready: bool = True,
    ) -> None:
        await connection.execute(
            "INSERT INTO handoffs (outbox_id, account, quiet, asked_by, created_at,"
            f" deadline, ready) VALUES (%s, %s, %s, %s, %s, {DB_NOW} + %s, %s)",
            (outbox_id, account, int(quiet), self.worker, now(), within, int(ready)),
        )
        if ready:
            await connection.execute("SELECT pg_notify(%s, 'sends')", (WAKE_CHANNEL,))

    async def release_handoff(self, outbox_id: int) -> None:
        """Let the holder take a send handed over not ready (`record_outbound`'s
        `hand_to`), now that what had to be written first is."""

        async def work(connection: Any) -> None:
            await connection.execute(
                "UPDATE handoffs SET ready = 1 WHERE outbox_id = %s AND taken_by IS NULL",
                (outbox_id,),
            )
            await connection.execute("SELECT pg_notify(%s, 'sends')", (WAKE_CHANNEL,))

        await self._write(work)

    async def take_handoffs(
        self, accounts: Collection[str], limit: int = 50
    ) -> list[tuple[OutboxEntry, bool]]:
        """Take waiting sends handed over for `accounts` (held here): (entry, quiet) each.

        A taken send is this worker's: its outbox row names it, so if this worker dies
        before it is sent, recovery makes it uncertain. Only pending rows are taken; a
        row its asker withdrew, or that was recovered, is not. At most one send per
        conversation is out at a time, the oldest first: a conversation's sends go out
        in the order they were handed over, and a death leaves no more of them
        uncertain than one (the rest, never tried, wait for the next holder).
        """
        if not accounts:
            return []
        me = self._me()

        async def work(connection: Any) -> list[tuple[int, bool]]:
            # past its deadline: its asker has stopped waiting (or died), never sent now
            cursor = await connection.execute(
                "SELECT h.outbox_id FROM handoffs h JOIN outbox o ON o.id = h.outbox_id"
                " WHERE h.taken_by IS NULL AND h.account = ANY(%s) AND o.status = 'pending'"
                f" AND h.deadline <= {DB_NOW} ORDER BY h.outbox_id FOR UPDATE OF h, o SKIP LOCKED",
                (sorted(accounts),),
            )
            for (late,) in await cursor.fetchall():
                await self._never_tried(
                    connection,
                    late,
                    "not sent: no worker holding the account took it before its asker"
                    " stopped waiting",
                )
            # hand-overs settled without a taker (withdrawn, late, recovered) are no longer
            # waiting: out of the table, and of the index every take walks
            await connection.execute(
                "DELETE FROM handoffs h USING outbox o WHERE h.taken_by IS NULL"
                " AND h.account = ANY(%s) AND o.id = h.outbox_id AND o.status <> 'pending'",
                (sorted(accounts),),
            )
            # the oldest waiting send of each conversation with none out: a send out, or an
            # older one waiting (not ready yet, or locked by another taker), holds it back
            cursor = await connection.execute(
                "SELECT h.outbox_id, h.quiet FROM handoffs h JOIN outbox o ON o.id = h.outbox_id"
                " WHERE h.taken_by IS NULL AND h.account = ANY(%s) AND o.status = 'pending'"
                f" AND h.ready = 1 AND h.deadline > {DB_NOW} AND NOT EXISTS ("
                " SELECT 1 FROM outbox o2 JOIN handoffs h2 ON h2.outbox_id = o2.id"
                " WHERE o2.conversation_id = o.conversation_id AND o2.status = 'pending'"
                " AND (h2.taken_by IS NOT NULL OR o2.id < o.id))"
                " ORDER BY h.outbox_id LIMIT %s FOR UPDATE OF h, o SKIP LOCKED",
                (sorted(accounts), limit),
            )
            rows = [(row[0], bool(row[1])) for row in await cursor.fetchall()]
            if rows:
                ids = [outbox_id for outbox_id, _ in rows]
                await connection.execute(
                    "UPDATE handoffs SET taken_by = %s WHERE outbox_id = ANY(%s)", (me, ids)
                )
                await connection.execute(
                    "UPDATE outbox SET worker = %s, updated_at = %s WHERE id = ANY(%s)",
                    (me, now(), ids),
                )
            return rows

        taken: list[tuple[int, bool]] = await self._write(work)
        return [(await self._outbox_entry_now(outbox_id), quiet) for outbox_id, quiet in taken]

    async def keep_handoffs_waiting(self, accounts: Collection[str], within: float) -> None:
        """Move the deadline of the ready hand-overs waiting for `accounts` (held here, and
        alive: called at each heartbeat) to `within` seconds from now: they wait for a
        send of their conversation still out, or for a free place, not for a holder.
        One already past its deadline stays late (it is failed, never sent)."""
        if not accounts:
            return

        async def work(connection: Any) -> None:
            await connection.execute(
                f"UPDATE handoffs SET deadline = GREATEST(deadline, {DB_NOW} + %s)"
                " WHERE taken_by IS NULL AND ready = 1 AND account = ANY(%s)"
                f" AND deadline > {DB_NOW}",
                (within, sorted(accounts)),
            )

        await self._write(work)

    async def handoff_state(self, outbox_id: int) -> tuple[OutboxEntry, str | None]:
        """The handed-over send's outbox entry now, and the worker that took it (None: not yet)."""
        row = await self._fetchone(
            "SELECT taken_by FROM handoffs WHERE outbox_id = %s", (outbox_id,)
        )
        return await self._outbox_entry_now(outbox_id), (row[0] if row else None)

    async def withdraw_handoff(
        self, outbox_id: int, reason: str, *, only_late: bool = False
    ) -> OutboxEntry | None:
        """Mark a handed-over send no worker has taken yet failed with `reason`; return it.

        None when it was taken meanwhile (or is no longer pending): then it is the
        taker's to finish, and nothing is changed. With `only_late`, also None while its
        deadline has not passed (a live holder keeps moving it: `keep_handoffs_waiting`).
        """

        async def work(connection: Any) -> bool:
            cursor = await connection.execute(
                f"SELECT h.taken_by, o.status, h.deadline <= {DB_NOW}"
                " FROM handoffs h JOIN outbox o ON o.id = h.outbox_id"
                " WHERE h.outbox_id = %s FOR UPDATE OF h, o",
                (outbox_id,),
            )
            row = await cursor.fetchone()
            if row is None or row[0] is not None or row[1] != "pending":
                return False
            if only_late and not row[2]:
                return False
            await self._never_tried(connection, outbox_id, reason)
            return True

        if not await self._write(work):
            return None
        return await self._outbox_entry_now(outbox_id)


def _dropped(error: psycopg.OperationalError) -> bool:
    """Whether `error` is a connection the server dropped or lost (a restart, a terminated
    backend), which another connection may not meet; not a pool with no free connection,
    nor a statement or lock timeout, which would only be met again."""
    if isinstance(error, PoolTimeout):
        return False
    state = error.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


async def _xact_status(connection: Any, xid: int) -> str | None:
    cursor = await connection.execute("SELECT txid_status(%s)", (xid,))
    row = await cursor.fetchone()
    return row[0] if row else None


def _checked(task: asyncio.Task[None]) -> None:
    """Read a pool check's outcome (a failed one is logged, never left unread)."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.debug("checking the pool failed: %s", error)


async def _gave_back(connection: Any, outbox_id: int, reason: str) -> None:
    """What an ask staked on a send that failed without ever being tried, given back: a
    report's or an expiry notice's claim (the sweep makes it again), or the ask of a
    question never sent, failed (no answer can come; it takes no other's answer)."""
    owed = 0
    for stamp, send in (
        ("reported_at", "report_outbox_id"),
        ("expiry_reported_at", "expiry_outbox_id"),
    ):
        cursor = await connection.execute(
            f"UPDATE asks SET {stamp} = NULL, {send} = NULL WHERE {send} = %s", (outbox_id,)
        )
        owed += max(cursor.rowcount, 0)
    if owed:  # the workers' ask sweeps, woken when this commits, make it again
        await connection.execute("SELECT pg_notify(%s, %s)", (WAKE_CHANNEL, "asks"))
    await connection.execute(
        "UPDATE asks SET state = 'failed', reason = %s"
        " WHERE outbox_id = %s AND state IN ('pending', 'expired') AND answer_seq IS NULL"
        " AND reported_at IS NULL",
        (f"the question was never sent ({reason})", outbox_id),
    )


async def _set_platform_id(
    connection: Any, entry: OutboxEntry, platform_message_id: str | None
) -> None:
    """Give a message send's outbox row and transcript row this platform id (None: none)."""
    if entry.message_seq is None:
        return
    ids = None if platform_message_id is None else json.dumps([platform_message_id])
    await connection.execute("UPDATE outbox SET platform_ids = %s WHERE id = %s", (ids, entry.id))
    await connection.execute(
        "UPDATE messages SET platform_message_id = %s WHERE conversation_id = %s AND seq = %s",
        (platform_message_id, entry.conversation_id, entry.message_seq),
    )


async def _write_state(
    connection: Any, account: str, key: str, value: str | None, worker: str | None
) -> None:
    """Write an account's adapter state, unless another worker holds its lease live: a
    worker that stalled past its lease (and the process its successor replaced) must not
    overwrite what the holder wrote since (LeaseLost; its transaction rolls back). The
    lease row is read FOR SHARE whatever its expiry: a take-over (which locks it FOR
    UPDATE) waits for this write and then reads it, or this waits for the take-over and
    is refused."""
    cursor = await connection.execute(
        f"SELECT worker, expires_at > {DB_NOW} FROM leases WHERE account = %s FOR SHARE",
        (account,),
    )
    row = await cursor.fetchone()
    if row is not None and row[0] != worker and row[1]:
        raise LeaseLost(
            f"account {account!r} is held by worker {row[0]!r} now: its state is not written"
            f" from {'worker ' + repr(worker) if worker else 'this process'}"
        )
    if value is None:
        await connection.execute(
            "DELETE FROM state WHERE account = %s AND key = %s", (account, key)
        )
    else:
        await connection.execute(
            "INSERT INTO state (account, key, value, updated_at) VALUES (%s,%s,%s,%s)"
            " ON CONFLICT (account, key) DO UPDATE SET value = excluded.value,"
            " updated_at = excluded.updated_at",
            (account, key, str(value), now()),
        )


async def _take_early_reactions(
    connection: Any,
    conversation_id: int,
    counters: ConversationCounters | None,
    platform_message_id: str,
) -> str | None:
    """Return this message's `reactions` column made of the reactions that came before
    it, if any did (and forget them); see `_take_reactions`."""
    return early_reactions_column(
        await _take_reactions(connection, conversation_id, counters, [platform_message_id])
    )


async def _take_reactions(
    connection: Any,
    conversation_id: int,
    counters: ConversationCounters | None,
    platform_message_ids: Sequence[str],
) -> list[tuple[int, str]]:
    """The early reactions waiting in this conversation for any of these platform ids, as
    (arrival number, reaction), forgotten. `counters` None: outside an append (a send's
    outcome), the conversation's row is locked first, as appends take it before anything
    else (a reaction appended meanwhile waits, then sees the message's id; one appended
    before is seen here), and the stored count goes down."""
    if counters is None:
        await connection.execute(
            "SELECT 1 FROM conversations WHERE id = %s FOR UPDATE", (conversation_id,)
        )
    cursor = await connection.execute(
        "DELETE FROM early_reactions WHERE conversation_id = %s"
        " AND platform_message_id = ANY(%s) RETURNING n, reaction",
        (conversation_id, list(platform_message_ids)),
    )
    rows = [(int(n), str(text)) for n, text in await cursor.fetchall()]
    if not rows:
        return rows
    if counters is not None:
        counters.orphan_edits = max(counters.orphan_edits - len(rows), 0)
    else:
        await connection.execute(
            "UPDATE conversations SET orphan_edits = GREATEST(orphan_edits - %s, 0) WHERE id = %s",
            (len(rows), conversation_id),
        )
    return rows


async def _set_reactions(connection: Any, conversation_id: int, seq: int, reactions: str) -> None:
    await connection.execute(
        "UPDATE messages SET reactions = %s WHERE conversation_id = %s AND seq = %s",
        (reactions, conversation_id, seq),
    )


class _Append:
    """One append_inbound transaction: lock the conversations, number, write in bulk."""

    def __init__(self, connection: Any, items: Sequence[Inbound], worker: str | None):
        self.connection = connection
        self.items = items
        #: the worker appending (its account's state is written only while no other holds it)
        self.worker = worker
        self.batch = Batch()
        #: (account, chat, thread) -> conversation id
        self.ids: dict[tuple[str, str, str], int] = {}
        #: conversation id -> (kind, title) events said last (written with the counters)
        self.described: dict[int, tuple[str, str | None]] = {}
        #: id(item) -> the thread address a change addressed to its whole chat goes to
        self.rerouted: dict[int, Address] = {}

    async def run(self) -> list[AppendResult]:
        await self._lock_conversations()
        self.batch.existing = await self._known_events()
        results = []
        for item in self.items:
            results.append(await self._append_one(item))
            if item.state:
                for key, value in item.state.items():
                    await _write_state(self.connection, item.event.account, key, value, self.worker)
        await self._flush_rows()
        await self._flush_counters()
        return results

    async def _lock_conversations(self) -> None:
        """Create missing conversations, then lock every one the batch touches, in key order."""
        firsts: dict[tuple[str, str, str], Inbound] = {}
        #: (account, chat, platform message id) -> thread of the batch's own messages
        earlier: dict[tuple[str, str, str], str] = {}
        chats: set[tuple[str, str, str]] = set()
        for item in self.items:
            address = await self._address_of(item, earlier)
            firsts.setdefault((address.account, address.chat, address.thread or ""), item)
            if (
                address.thread is not None
                and item.event.kind in ("message", "edit")
                and item.event.platform_message_id is not None
            ):
                chats.add((address.account, address.chat, ""))
        # a thread's message may be the target of a change that named only its chat and
        # waits in the chat's conversation: that one is locked too, whenever it exists (a
        # change appended at the same moment waits for this batch, then finds the message;
        # one appended before is seen here)
        waiting = await self._existing(sorted(chats - firsts.keys()))
        keys = sorted([*firsts, *waiting])
        rows = await self._select_for_update(keys)
        missing = [key for key in firsts if key not in rows]
        if missing:
            stamp = now()
            async with self.connection.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO conversations (account, chat, thread, kind, title, created_at,"
                    " active_at) VALUES (%s,%s,%s,%s,%s,%s,%s)"
                    " ON CONFLICT (account, chat, thread) DO NOTHING",
                    [
                        (
                            *key,
                            firsts[key].event.conversation_kind,
                            firsts[key].event.conversation_title,
                            firsts[key].event.sent_at or stamp,
                            firsts[key].event.sent_at or stamp,
                        )
                        for key in missing
                    ],
                )
            rows.update(await self._select_for_update(missing))
        for key, row in rows.items():
            conversation_id, last_seq, trigger_seq, active_at, orphan_edits, kind, title = row
            self.ids[key] = conversation_id
            self.batch.conversations[conversation_id] = ConversationCounters(
                last_seq, trigger_seq, active_at, orphan_edits
            )
            self.described[conversation_id] = (kind, title)

    async def _existing(self, keys: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Those of `keys` that have a conversation (none is made for them)."""
        if not keys:
            return []
        cursor = await self.connection.execute(
            "SELECT c.account, c.chat, c.thread FROM conversations c"
            " JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(account, chat, thread)"
            " ON c.account = k.account AND c.chat = k.chat AND c.thread = k.thread",
            ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
        )
        return [(r[0], r[1], r[2]) for r in await cursor.fetchall()]

    async def _address_of(self, item: Inbound, earlier: dict[tuple[str, str, str], str]) -> Address:
        """The address whose conversation `item` goes to (see rows.change_address).

        Worked out before any lock is taken, so that a thread a change goes to is
        locked in key order with the rest.
        """
        event = item.event
        address, target = event.address, event.platform_message_id
        if target is None:
            return address
        if event.kind == "message":
            earlier[(address.account, address.chat, target)] = address.thread or ""
            return address
        if address.thread is not None:
            return address
        thread = earlier.get((address.account, address.chat, target))
        if thread is not None:
            threads = [thread]
        else:
            cursor = await self.connection.execute(
                CHAT_TARGET_SQL.format("%s"),
                chat_target_params(address.account, address.chat, target),
            )
            threads = [row[0] for row in await cursor.fetchall()]
        routed = change_address(event, threads)
        if routed is not address:
            self.rerouted[id(item)] = routed
        return routed

    async def _select_for_update(
        self, keys: list[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], tuple[Any, ...]]:
        cursor = await self.connection.execute(
            "SELECT c.account, c.chat, c.thread, c.id, c.last_seq, c.trigger_seq, c.active_at,"
            " c.orphan_edits, c.kind, c.title FROM conversations c"
            " JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(account, chat, thread)"
            " ON c.account = k.account AND c.chat = k.chat AND c.thread = k.thread"
            " ORDER BY c.account, c.chat, c.thread FOR UPDATE OF c",
            ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
        )
        return {(r[0], r[1], r[2]): tuple(r[3:]) for r in await cursor.fetchall()}

    async def _known_events(self) -> dict[tuple[str, str], tuple[int, int]]:
        accounts = [item.event.account for item in self.items]
        event_ids = [str(item.event.event_id) for item in self.items]
        cursor = await self.connection.execute(
            "SELECT e.account, e.event_id, e.conversation_id, e.seq FROM events e"
            " JOIN unnest(%s::text[], %s::text[]) AS k(account, event_id)"
            " ON e.account = k.account AND e.event_id = k.event_id",
            (accounts, event_ids),
        )
        return {(r[0], r[1]): (r[2], r[3]) for r in await cursor.fetchall()}

    def _conversation_id(self, item: Inbound) -> int:
        event = item.event
        rerouted = self.rerouted.get(id(item))
        if rerouted is not None:  # a thread the event says nothing of: its kind and title stay
            return self.ids[(rerouted.account, rerouted.chat, rerouted.thread or "")]
        address = event.address
        conversation_id = self.ids[(address.account, address.chat, address.thread or "")]
        title = self.described[conversation_id][1]
        if event.conversation_title is not None:
            title = event.conversation_title
        self.described[conversation_id] = (event.conversation_kind, title)
        return conversation_id

    async def _flush_rows(self) -> None:
        batch = self.batch
        async with self.connection.cursor() as cursor:
            if batch.message_rows:
                await cursor.executemany(
                    f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES ({MESSAGE_MARKS})",
                    batch.message_rows,
                )
                batch.message_rows = []
            if batch.event_rows:
                await cursor.executemany(
                    "INSERT INTO events (account, event_id, conversation_id, seq, kind)"
                    " VALUES (%s,%s,%s,%s,%s)",
                    batch.event_rows,
                )
                batch.event_rows = []
        batch.new_message_ids.clear()

    async def _flush_counters(self) -> None:
        batch = self.batch
        changed = [
            (
                c.last_seq,
                c.visible,
                c.held,
                c.trigger_seq,
                c.active_at,
                c.orphan_edits,
                self.described[conversation_id][0],
                self.described[conversation_id][1],
                conversation_id,
            )
            for conversation_id, c in batch.conversations.items()
        ]
        async with self.connection.cursor() as cursor:
            await cursor.executemany(
                "UPDATE conversations SET last_seq = %s, visible_count = visible_count + %s,"
                " held_count = held_count + %s, trigger_seq = %s,"
                " active_at = GREATEST(active_at, %s), orphan_edits = %s, kind = %s, title = %s"
                " WHERE id = %s",
                changed,
            )
            people = [
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
                for (conversation_id, sender_id), p in batch.participants.items()
            ]
            if people:
                await cursor.executemany(
                    "INSERT INTO participants (conversation_id, sender_id, name, handle, is_bot,"
                    " message_count, first_seq, last_seq) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)"
                    " ON CONFLICT (conversation_id, sender_id) DO UPDATE SET"
                    " name = excluded.name, handle = excluded.handle, is_bot = excluded.is_bot",
                    people,
                )

    async def _append_one(self, item: Inbound) -> AppendResult:
        event = item.event
        batch = self.batch
        key = (event.account, str(event.event_id))
        known_at = batch.claimed.get(key) or batch.existing.get(key)
        if known_at is not None:
            return AppendResult("duplicate", known_at[0], known_at[1])
        if event.kind == "message":
            conversation_id = self._conversation_id(item)
            deleted_at = None
            message_id = event.platform_message_id
            if batch.conversations[conversation_id].orphan_edits and message_id is not None:
                # the conversation has early changes waiting: this message's, perhaps
                triggers = item.triggers and not item.held
                found = await self._orphan_edit_row(conversation_id, message_id, triggers)
                if found is not None:
                    # its edit came first and made the row; it triggers as the message would
                    orphan, triggered = found
                    batch.event_rows.append((*key, conversation_id, orphan, "message"))
                    batch.claimed[key] = (conversation_id, orphan)
                    return AppendResult("applied", conversation_id, orphan, triggered)
                deleted_at = await self._early_delete(conversation_id, message_id)
                if deleted_at is not None:
                    # deleted before it arrived: its sender took it back, nothing to answer
                    item = Inbound(event, item.held, False, item.state)
                counters = batch.conversations[conversation_id]
                reactions = await _take_early_reactions(
                    self.connection, conversation_id, counters, message_id
                )
                if deleted_at is None and reactions is None and counters.last_seq % 16 == 0:
                    # now and then, those whose message never came are let go
                    await self._let_go_early(conversation_id, event.sent_at)
            else:
                reactions = None
            address = event.address
            chat_id = None
            if address.thread is not None and message_id is not None:
                # a change that names no thread waits in its chat's conversation (see the
                # SQLite store); locked with the batch's when it has any waiting
                chat_id = self.ids.get((address.account, address.chat, ""))
            if chat_id is not None and batch.conversations[chat_id].orphan_edits:
                assert message_id is not None
                chat_deleted_at = await self._early_delete(chat_id, message_id)
                chat_reactions = await _take_early_reactions(
                    self.connection, chat_id, batch.conversations[chat_id], message_id
                )
                if deleted_at is None and chat_deleted_at is not None:
                    deleted_at = chat_deleted_at
                    item = Inbound(event, item.held, False, item.state)
                reactions = reactions if reactions is not None else chat_reactions
            result = await self._append_message(conversation_id, item)
            batch.event_rows.append((*key, conversation_id, result.seq, "message"))
            batch.claimed[key] = (conversation_id, result.seq or 0)
            if reactions is not None:
                await self._flush_rows()
                await _set_reactions(self.connection, conversation_id, result.seq or 0, reactions)
            if deleted_at is not None:
                await self._flush_rows()
                await self._delete_row(conversation_id, result.seq or 0, event.text, deleted_at)
            return result
        # edits, deletes and reactions look rows up: write what is gathered first
        await self._flush_rows()
        result = await self._apply_change(self._conversation_id(item), item)
        # (the conversation it applied to: a thread found under the locks, see _apply_change)
        conversation_id = result.conversation_id
        batch.event_rows.append((*key, conversation_id, result.seq, event.kind))
        batch.claimed[key] = (conversation_id, result.seq)  # type: ignore[assignment]
        return result

    async def _orphan_edit_row(
        self, conversation_id: int, platform_message_id: str, triggers: bool
    ) -> tuple[int, bool] | None:
        """Return the seq of a row an early edit made for this message, if there is one, and
        whether it triggers: it does when the message does (``trigger_seq`` moves up to it),
        unless it was deleted meanwhile."""
        counters = self.batch.conversations[conversation_id]
        await self._flush_rows()
        cursor = await self.connection.execute(
            "SELECT seq, deleted_at FROM messages WHERE conversation_id = %s"
            " AND platform_message_id = %s AND meta IS NOT NULL"
            " AND (meta::jsonb ->> 'orphan_edit') = '1' LIMIT 1",
            (conversation_id, platform_message_id),
        )
        row = await cursor.fetchone()
        if row is None:
            return None
        seq = int(row[0])
        counters.orphan_edits -= 1
        triggers = triggers and row[1] is None  # deleted meanwhile: nothing to answer
        if triggers and seq > counters.trigger_seq:
            counters.trigger_seq = seq
        await self.connection.execute(
            "UPDATE messages SET meta = (meta::jsonb - 'orphan_edit')::text,"
            " triggers = GREATEST(triggers, %s) WHERE conversation_id = %s AND seq = %s",
            (1 if triggers else 0, conversation_id, seq),
        )
        return seq, triggers

    async def _holds(self, table: str, conversation_id: int, platform_message_id: str) -> bool:
        """Whether `table` (message_parts or early_deletes) has this message of the
        conversation."""
        cursor = await self.connection.execute(
            f"SELECT 1 FROM {table} WHERE conversation_id = %s AND platform_message_id = %s",
            (conversation_id, platform_message_id),
        )
        return await cursor.fetchone() is not None

    async def _early_delete(self, conversation_id: int, platform_message_id: str) -> float | None:
        """Return when this message was deleted, if its delete came before it (and forget it)."""
        counters = self.batch.conversations[conversation_id]
        cursor = await self.connection.execute(
            "DELETE FROM early_deletes WHERE conversation_id = %s AND platform_message_id = %s"
            " RETURNING at",
            (conversation_id, platform_message_id),
        )
        row = await cursor.fetchone()
        if row is None:
            return None
        counters.orphan_edits -= 1
        return float(row[0])

    async def _let_go_early(self, conversation_id: int, at: float) -> None:
        """Forget the conversation's early deletes and reactions a day older than `at`."""
        counters = self.batch.conversations[conversation_id]
        for table in ("early_deletes", "early_reactions"):
            cursor = await self.connection.execute(
                f"DELETE FROM {table} WHERE conversation_id = %s AND at < %s",
                (conversation_id, at - EARLY_CHANGES_KEPT),
            )
            counters.orphan_edits = max(counters.orphan_edits - max(cursor.rowcount, 0), 0)

    async def _delete_row(self, conversation_id: int, seq: int, text: str, at: float) -> None:
        await self.connection.execute(
            "INSERT INTO revisions (conversation_id, seq, kind, text, at) VALUES (%s,%s,%s,%s,%s)",
            (conversation_id, seq, "delete", text, at),
        )
        await self.connection.execute(
            "UPDATE messages SET deleted_at = %s WHERE conversation_id = %s AND seq = %s",
            (at, conversation_id, seq),
        )

    async def _append_message(self, conversation_id: int, item: Inbound) -> AppendResult:
        event = item.event
        held = 1 if item.held else 0
        triggers = 1 if item.triggers and not item.held else 0
        batch = self.batch
        counters = batch.conversations[conversation_id]
        counters.last_seq += 1
        seq = counters.last_seq
        counters.visible += 1 - held
        counters.held += held
        if triggers:
            counters.trigger_seq = seq
        counters.active_at = max(counters.active_at, event.sent_at)
        reply_to_seq = None
        if event.reply_to is not None:
            reply_to_seq = batch.new_message_ids.get((conversation_id, event.reply_to))
            if reply_to_seq is None:
                cursor = await self.connection.execute(
                    "SELECT seq FROM messages WHERE conversation_id = %s"
                    " AND platform_message_id = %s ORDER BY seq LIMIT 1",
                    (conversation_id, event.reply_to),
                )
                row = await cursor.fetchone()
                if row is None:  # a later part of a message of ours the platform got split
                    cursor = await self.connection.execute(
                        "SELECT seq FROM message_parts WHERE conversation_id = %s"
                        " AND platform_message_id = %s",
                        (conversation_id, event.reply_to),
                    )
                    row = await cursor.fetchone()
                reply_to_seq = row[0] if row else None
        batch.add_inbound(conversation_id, seq, event, reply_to_seq, held, triggers)
        return AppendResult("stored", conversation_id, seq, bool(triggers))

    async def _apply_change(self, conversation_id: int, item: Inbound) -> AppendResult:
        connection = self.connection
        event = item.event
        target = event.platform_message_id
        row = None
        if target is not None:
            cursor = await connection.execute(
                "SELECT seq, text, reactions FROM messages"
                " WHERE conversation_id = %s AND platform_message_id = %s ORDER BY seq LIMIT 1",
                (conversation_id, target),
            )
            row = await cursor.fetchone()
            if row is None and event.kind == "reaction":
                # to a later part of a message of ours the platform got split: the message's
                cursor = await connection.execute(
                    "SELECT m.seq, m.text, m.reactions FROM message_parts p JOIN messages m"
                    " ON m.conversation_id = p.conversation_id AND m.seq = p.seq"
                    " WHERE p.conversation_id = %s AND p.platform_message_id = %s",
                    (conversation_id, target),
                )
                row = await cursor.fetchone()
        if row is None and target is not None and event.address.thread is None:
            # named only its chat, and its target was in no thread when this batch looked
            # (before its locks): another batch may have committed that thread's message
            # since, waiting for the chat's lock this one held; found now, under the locks
            cursor = await connection.execute(
                "SELECT m.conversation_id, m.seq, m.text, m.reactions FROM messages m"
                " JOIN conversations c ON c.id = m.conversation_id WHERE c.account = %s"
                " AND c.chat = %s AND c.thread <> '' AND m.platform_message_id = %s"
                " ORDER BY m.seq LIMIT 1",
                (event.address.account, event.address.chat, target),
            )
            found = await cursor.fetchone()
            if found is None and event.kind == "reaction":
                # a reaction to a later part of a split message of ours: the message's
                # (two lookups, each by its index: one OR over both would scan the threads)
                cursor = await connection.execute(
                    "SELECT m.conversation_id, m.seq, m.text, m.reactions"
                    " FROM message_parts p JOIN conversations c ON c.id = p.conversation_id"
                    " JOIN messages m ON m.conversation_id = p.conversation_id AND m.seq = p.seq"
                    " WHERE c.account = %s AND c.chat = %s AND c.thread <> ''"
                    " AND p.platform_message_id = %s",
                    (event.address.account, event.address.chat, target),
                )
                found = await cursor.fetchone()
            if found is not None and id(item) not in self.rerouted:
                conversation_id, row = int(found[0]), tuple(found[1:])
        if item.held:
            # a sender the policy keeps out may not change what the agent sees
            return AppendResult("recorded", conversation_id, None)
        if row is None:
            if (
                target is not None
                and event.kind != "reaction"
                and await self._holds("message_parts", conversation_id, target)
            ):
                # a later part of a message of ours (see the SQLite store): recorded
                return AppendResult("recorded", conversation_id, None)
            counters = self.batch.conversations[conversation_id]
            # a thread's changes that named only its chat wait in the chat's conversation
            # (locked with the batch's when the batch holds a thread's message or edit)
            chat_id = None
            if event.kind == "edit" and event.address.thread is not None:
                chat_id = self.ids.get((event.address.account, event.address.chat, ""))
            if chat_id is not None and not self.batch.conversations[chat_id].orphan_edits:
                chat_id = None
            if (
                event.kind == "edit"
                and target is not None
                and (
                    (
                        counters.orphan_edits
                        and await self._holds("early_deletes", conversation_id, target)
                    )
                    or (chat_id is not None and await self._holds("early_deletes", chat_id, target))
                )
            ):
                # deleted before it arrived: it will arrive deleted, edited or not
                return AppendResult("recorded", conversation_id, None)
            if event.kind == "edit":
                # an edit of a message we have not seen (yet): keep its text as the message,
                # marked so that the original, if it arrives later, lands on this row
                reactions = None
                early: list[tuple[int, str]] = []
                if counters.orphan_edits and target is not None:
                    early = await _take_reactions(connection, conversation_id, counters, [target])
                if chat_id is not None and target is not None:
                    early += await _take_reactions(
                        connection, chat_id, self.batch.conversations[chat_id], [target]
                    )
                reactions = early_reactions_column(early)
                counters.orphan_edits += 1
                marked = Inbound(
                    attrs.evolve(event, meta={**event.meta, "orphan_edit": 1}),
                    item.held,
                    item.triggers,
                    item.state,
                )
                result = await self._append_message(conversation_id, marked)
                await self._flush_rows()
                if reactions is not None:
                    await _set_reactions(connection, conversation_id, result.seq or 0, reactions)
                return result
            if event.kind in ("delete", "reaction") and target is not None:
                # a delete or a reaction of a message we have not seen (yet): it arrives
                # deleted, or with it, if it does (see the SQLite store)
                await self._let_go_early(conversation_id, event.sent_at)
                if event.kind == "delete":
                    cursor = await connection.execute(
                        "INSERT INTO early_deletes (conversation_id, platform_message_id, at)"
                        " VALUES (%s,%s,%s) ON CONFLICT DO NOTHING",
                        (conversation_id, target, event.sent_at),
                    )
                else:
                    cursor = await connection.execute(
                        "INSERT INTO early_reactions (conversation_id, platform_message_id,"
                        " reaction, at) VALUES (%s,%s,%s,%s)",
                        (conversation_id, target, early_reaction(event), event.sent_at),
                    )
                if cursor.rowcount:
                    counters.orphan_edits += 1
            return AppendResult("recorded", conversation_id, None)
        seq, old_text, reactions_json = row
        at = event.sent_at
        if event.kind == "edit":
            if event.text != old_text:
                await connection.execute(
                    "INSERT INTO revisions (conversation_id, seq, kind, text, at)"
                    " VALUES (%s,%s,%s,%s,%s)",
                    (conversation_id, seq, "edit", old_text, at),
                )
            attachments = dump_attachments(event.attachments)
            if attachments is None and not event.meta.get(ATTACHMENTS_COMPLETE):
                # an edit that says nothing of files leaves them (see the SQLite store)
                await connection.execute(
                    "UPDATE messages SET text = %s, edited_at = %s"
                    " WHERE conversation_id = %s AND seq = %s",
                    (event.text, at, conversation_id, seq),
                )
            else:
                await connection.execute(
                    "UPDATE messages SET text = %s, edited_at = %s, attachments = %s"
                    " WHERE conversation_id = %s AND seq = %s",
                    (event.text, at, attachments, conversation_id, seq),
                )
        elif event.kind == "delete":
            await self._delete_row(conversation_id, seq, old_text, at)
        elif event.kind == "reaction":
            await connection.execute(
                "UPDATE messages SET reactions = %s WHERE conversation_id = %s AND seq = %s",
                (with_reaction(reactions_json, event), conversation_id, seq),
            )
        return AppendResult("applied", conversation_id, seq)


_WORD = re.compile(r"[^\W_]+")
_FOLD_TABLE = str.maketrans(ACCENTED, PLAIN)


def fold_accents(text: str) -> str:
    """Drop the Latin accents the search folds (the same map as the SQL side)."""
    return text.translate(_FOLD_TABLE)

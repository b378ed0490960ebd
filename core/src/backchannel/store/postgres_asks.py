"""The PostgreSQL side of asks to other agents: pending-ask rows and reply correlation.

A mixin of `PostgresStore`, like `sqlite_asks.SQLiteAsks` for SQLite. Matching
a reply locks the session's open asks (``FOR UPDATE``), so two workers that
see the same reply match it once, and two replies never take one ask.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import StoreError
from ..model import Conversation, now
from .base import ASK_OPEN_STATES, ASK_STATES, Ask
from .rows import CONVERSATION_COLUMNS, conversation_row

__all__ = ["PostgresAsks", "pg006_asks"]

ASK_COLUMNS = (
    "id, origin_conversation_id, origin_seq, peer_conversation_id, question, state, asked_at,"
    " deadline, message_seq, outbox_id, reason, answer_seq, matched_at, reported_at,"
    " expiry_reported_at"
)
_OPEN = "state IN ({})".format(", ".join(f"'{state}'" for state in ASK_OPEN_STATES))


async def pg006_asks(connection: Any) -> None:
    """The `asks` table (the PostgreSQL twin of SQLite's m006_asks)."""
    await connection.execute(
        """
        CREATE TABLE asks (
            id BIGSERIAL PRIMARY KEY,
            origin_conversation_id BIGINT NOT NULL,
            origin_seq BIGINT,
            peer_conversation_id BIGINT NOT NULL,
            question TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending',
            asked_at DOUBLE PRECISION NOT NULL,
            deadline DOUBLE PRECISION NOT NULL,
            message_seq BIGINT,
            outbox_id BIGINT,
            reason TEXT,
            answer_seq BIGINT,
            matched_at DOUBLE PRECISION,
            reported_at DOUBLE PRECISION,
            expiry_reported_at DOUBLE PRECISION
        );
        CREATE INDEX asks_session ON asks (peer_conversation_id, id);
        CREATE INDEX asks_origin ON asks (origin_conversation_id, id);
        CREATE INDEX asks_open ON asks (deadline) WHERE reported_at IS NULL;
        """
    )


class PostgresAsks:
    """Ask rows for `PostgresStore` (which provides `_fetchall` and `_write`)."""

    async def _fetchall(
        self, sql: str, params: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:  # provided by PostgresStore
        raise NotImplementedError

    async def _write(self, work: Callable[[Any], Awaitable[Any]]) -> Any:  # by PostgresStore
        raise NotImplementedError

    async def peer_conversations(
        self, account: str, peer: str, *, active_since: float | None = None
    ) -> list[Conversation]:
        rows = await self._fetchall(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE account = %s AND chat = %s"
            " AND active_at >= %s ORDER BY active_at DESC, id DESC",
            (account, peer, active_since if active_since is not None else float("-inf")),
        )
        return [conversation_row(row) for row in rows]

    async def record_ask(
        self,
        *,
        origin_conversation_id: int,
        origin_seq: int | None,
        peer_conversation_id: int,
        question: str,
        deadline: float,
        message_seq: int | None = None,
        outbox_id: int | None = None,
    ) -> Ask:
        async def work(connection: Any) -> Ask:
            cursor = await connection.execute(
                "INSERT INTO asks (origin_conversation_id, origin_seq, peer_conversation_id,"
                " question, state, asked_at, deadline, message_seq, outbox_id)"
                f" VALUES (%s,%s,%s,%s,'pending',%s,%s,%s,%s) RETURNING {ASK_COLUMNS}",
                (
                    origin_conversation_id,
                    origin_seq,
                    peer_conversation_id,
                    question,
                    now(),
                    deadline,
                    message_seq,
                    outbox_id,
                ),
            )
            return _ask(await cursor.fetchone())

        result: Ask = await self._write(work)
        return result

    async def mark_ask(
        self, ask_id: int, state: str, reason: str | None = None, *, unanswered: bool = False
    ) -> Ask:
        if state not in ASK_STATES:
            raise StoreError(f"ask state must be one of {', '.join(ASK_STATES)}, not {state!r}")
        stamp = now() if state == "answered" else None
        only = " AND answer_seq IS NULL" if unanswered else ""

        async def work(connection: Any) -> Ask:
            cursor = await connection.execute(
                "UPDATE asks SET state = %s, reason = COALESCE(%s, reason),"
                f" reported_at = COALESCE(%s, reported_at) WHERE id = %s{only}"
                f" RETURNING {ASK_COLUMNS}",
                (state, reason, stamp, ask_id),
            )
            row = await cursor.fetchone()
            if row is None and unanswered:  # answered meanwhile: left as it is
                cursor = await connection.execute(
                    f"SELECT {ASK_COLUMNS} FROM asks WHERE id = %s", (ask_id,)
                )
                row = await cursor.fetchone()
            if row is None:
                raise StoreError(f"there is no ask with id {ask_id}")
            return _ask(row)

        result: Ask = await self._write(work)
        return result

    async def correlate_reply(self, peer_conversation_id: int, seq: int) -> Ask | None:
        async def work(connection: Any) -> Ask | None:
            # the session's open asks, locked: one reply matches once, across workers
            cursor = await connection.execute(
                f"SELECT {ASK_COLUMNS} FROM asks WHERE peer_conversation_id = %s"
                f" AND (answer_seq = %s OR (answer_seq IS NULL AND {_OPEN}))"
                " ORDER BY id FOR UPDATE",
                (peer_conversation_id, seq),
            )
            candidates = [_ask(row) for row in await cursor.fetchall()]
            done = [ask for ask in candidates if ask.answer_seq == seq]
            if done:
                return done[0]
            cursor = await connection.execute(
                "SELECT reply_to_seq, reply_to FROM messages WHERE conversation_id = %s"
                " AND seq = %s AND direction = 'in' AND held = 0",
                (peer_conversation_id, seq),
            )
            message = await cursor.fetchone()
            if message is None:
                return None
            reply_to_seq, reply_to = message
            if reply_to_seq is None and reply_to is not None:
                # a reply to a message we cannot place: the oldest open ask whose question's
                # platform id we never learnt (see the SQLite store)
                cursor = await connection.execute(
                    "SELECT a.id FROM asks a LEFT JOIN messages m"
                    " ON m.conversation_id = a.peer_conversation_id AND m.seq = a.message_seq"
                    " WHERE a.peer_conversation_id = %s AND m.platform_message_id IS NULL",
                    (peer_conversation_id,),
                )
                unknown = {row[0] for row in await cursor.fetchall()}
                unplaced = [
                    ask for ask in candidates if ask.id in unknown and (ask.message_seq or 0) < seq
                ]
                if not unplaced:
                    return None
                found = unplaced[:1]  # candidates are in id order
            else:
                found = [
                    ask
                    for ask in candidates
                    if reply_to_seq is not None and ask.message_seq == reply_to_seq
                ]
                if not found and reply_to_seq is not None:
                    cursor = await connection.execute(
                        "SELECT 1 FROM messages WHERE conversation_id = %s AND seq = %s"
                        " AND direction = 'out'",
                        (peer_conversation_id, reply_to_seq),
                    )
                    if await cursor.fetchone() is not None:
                        # a reply to a message of ours no open ask asked: a follow-up of the
                        # peer's own (see the SQLite store)
                        return None
                if not found:
                    found = [ask for ask in candidates if (ask.message_seq or 0) < seq]
            if not found:
                return None
            cursor = await connection.execute(
                f"UPDATE asks SET answer_seq = %s, matched_at = %s WHERE id = %s"
                f" RETURNING {ASK_COLUMNS}",
                (seq, now(), found[0].id),
            )
            return _ask(await cursor.fetchone())

        result: Ask | None = await self._write(work)
        return result

    async def expire_asks(self, now: float) -> list[Ask]:
        async def work(connection: Any) -> list[Ask]:
            await connection.execute(
                "UPDATE asks SET state = 'expired' WHERE reported_at IS NULL"
                " AND state = 'pending' AND answer_seq IS NULL AND deadline <= %s",
                (now,),
            )
            cursor = await connection.execute(
                f"SELECT {ASK_COLUMNS} FROM asks WHERE reported_at IS NULL AND state = 'expired'"
                " AND expiry_reported_at IS NULL ORDER BY id"
            )
            return [_ask(row) for row in await cursor.fetchall()]

        result: list[Ask] = await self._write(work)
        return result

    async def claim_report(self, ask_id: int, outbox_id: int | None = None) -> bool:
        return await self._stamp_once(
            ask_id, "reported_at", "report_outbox_id", outbox_id, "state = 'answered', "
        )

    async def mark_expiry_reported(self, ask_id: int, outbox_id: int | None = None) -> bool:
        return await self._stamp_once(ask_id, "expiry_reported_at", "expiry_outbox_id", outbox_id)

    async def _stamp_once(
        self, ask_id: int, column: str, send_column: str, outbox_id: int | None, also: str = ""
    ) -> bool:
        """Stamp `column` (and set `also`), noting the send in `send_column`, unless it is
        stamped; True when this call did."""

        async def work(connection: Any) -> bool:
            cursor = await connection.execute(
                f"UPDATE asks SET {also}{column} = %s, {send_column} = %s"
                f" WHERE id = %s AND {column} IS NULL RETURNING id",
                (now(), outbox_id, ask_id),
            )
            return await cursor.fetchone() is not None

        stamped: bool = await self._write(work)
        return stamped

    async def asks(
        self,
        *,
        origin_conversation_id: int | None = None,
        peer_conversation_id: int | None = None,
        states: Sequence[str] | None = None,
        awaiting_report: bool = False,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[Ask]:
        clauses: list[str] = []
        params: list[Any] = []
        if origin_conversation_id is not None:
            clauses.append("origin_conversation_id = %s")
            params.append(origin_conversation_id)
        if peer_conversation_id is not None:
            clauses.append("peer_conversation_id = %s")
            params.append(peer_conversation_id)
        if states is not None:
            clauses.append("state = ANY(%s)")
            params.append(list(states))
        if awaiting_report:
            clauses.append("answer_seq IS NOT NULL AND reported_at IS NULL")
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = " DESC" if newest_first else ""
        rows = await self._fetchall(
            f"SELECT {ASK_COLUMNS} FROM asks {where} ORDER BY id{order} LIMIT %s", (*params, limit)
        )
        return [_ask(row) for row in rows]


def _ask(row: Sequence[Any]) -> Ask:
    return Ask(*row)

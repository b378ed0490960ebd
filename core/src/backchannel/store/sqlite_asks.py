"""The SQLite side of asks to other agents: pending-ask rows and reply correlation.

A mixin of `SQLiteStore` (kept apart so the transcript store stays one idea a
module). Every method is one short transaction through `_write`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import apsw

from ..errors import StoreError
from ..model import Conversation, now
from .base import ASK_OPEN_STATES, ASK_STATES, Ask
from .rows import CONVERSATION_COLUMNS, conversation_row

__all__ = ["SQLiteAsks"]

ASK_COLUMNS = (
    "id, origin_conversation_id, origin_seq, peer_conversation_id, question, state, asked_at,"
    " deadline, message_seq, outbox_id, reason, answer_seq, matched_at, reported_at,"
    " expiry_reported_at"
)
_OPEN = "state IN ({})".format(", ".join(f"'{state}'" for state in ASK_OPEN_STATES))


class SQLiteAsks:
    """Ask rows for `SQLiteStore` (which provides `db` and `_write`)."""

    @property
    def db(self) -> apsw.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[None]:  # provided by SQLiteStore
        raise NotImplementedError

    async def peer_conversations(
        self, account: str, peer: str, *, active_since: float | None = None
    ) -> list[Conversation]:
        rows = self.db.execute(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE account = ? AND chat = ?"
            " AND active_at >= ? ORDER BY active_at DESC, id DESC",
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
        with self._write():
            row = self.db.execute(
                "INSERT INTO asks (origin_conversation_id, origin_seq, peer_conversation_id,"
                " question, state, asked_at, deadline, message_seq, outbox_id)"
                f" VALUES (?,?,?,?,'pending',?,?,?,?) RETURNING {ASK_COLUMNS}",
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
            ).fetchall()
        return _ask(row[0])

    async def mark_ask(
        self, ask_id: int, state: str, reason: str | None = None, *, unanswered: bool = False
    ) -> Ask:
        if state not in ASK_STATES:
            raise StoreError(f"ask state must be one of {', '.join(ASK_STATES)}, not {state!r}")
        stamp = now() if state == "answered" else None
        only = " AND answer_seq IS NULL" if unanswered else ""
        with self._write():
            rows = self.db.execute(
                "UPDATE asks SET state = ?, reason = COALESCE(?, reason),"
                f" reported_at = COALESCE(?, reported_at) WHERE id = ?{only}"
                f" RETURNING {ASK_COLUMNS}",
                (state, reason, stamp, ask_id),
            ).fetchall()
            if not rows and unanswered:  # answered meanwhile: left as it is
                rows = self.db.execute(
                    f"SELECT {ASK_COLUMNS} FROM asks WHERE id = ?", (ask_id,)
                ).fetchall()
        if not rows:
            raise StoreError(f"there is no ask with id {ask_id}")
        return _ask(rows[0])

    async def correlate_reply(self, peer_conversation_id: int, seq: int) -> Ask | None:
        db = self.db
        with self._write():
            done = db.execute(
                f"SELECT {ASK_COLUMNS} FROM asks WHERE peer_conversation_id = ? AND answer_seq = ?",
                (peer_conversation_id, seq),
            ).fetchall()
            if done:
                return _ask(done[0])
            message = db.execute(
                "SELECT reply_to_seq, reply_to FROM messages WHERE conversation_id = ? AND seq = ?"
                " AND direction = 'in' AND held = 0",
                (peer_conversation_id, seq),
            ).fetchall()
            if not message:
                return None
            reply_to_seq, reply_to = message[0]
            candidates = f"peer_conversation_id = ? AND answer_seq IS NULL AND {_OPEN}"
            found: list[Any] = []
            if reply_to_seq is None and reply_to is not None:
                # a reply to a message we cannot place: the question it answers is one
                # whose platform id we never learnt (its send died mid-flight), the oldest
                # of those (answers come in the order asked); never a question whose id we
                # know, which a reply would have named (that guess reported one question's
                # answer as another's)
                found = db.execute(
                    "SELECT a.id FROM asks a LEFT JOIN messages m"
                    " ON m.conversation_id = a.peer_conversation_id AND m.seq = a.message_seq"
                    f" WHERE a.peer_conversation_id = ? AND a.answer_seq IS NULL AND a.{_OPEN}"
                    " AND m.platform_message_id IS NULL AND COALESCE(a.message_seq, 0) < ?"
                    " ORDER BY a.id LIMIT 1",
                    (peer_conversation_id, seq),
                ).fetchall()
                if not found:
                    return None
            elif reply_to_seq is not None:
                found = db.execute(
                    f"SELECT id FROM asks WHERE {candidates} AND message_seq = ?",
                    (peer_conversation_id, reply_to_seq),
                ).fetchall()
                if (
                    not found
                    and db.execute(
                        "SELECT 1 FROM messages WHERE conversation_id = ? AND seq = ?"
                        " AND direction = 'out'",
                        (peer_conversation_id, reply_to_seq),
                    ).fetchall()
                ):
                    # a reply to a message of ours that no open ask asked (a question already
                    # answered, say): a follow-up of the peer's own, never another's answer
                    return None
            if not found:
                found = db.execute(
                    f"SELECT id FROM asks WHERE {candidates} AND COALESCE(message_seq, 0) < ?"
                    " ORDER BY id LIMIT 1",
                    (peer_conversation_id, seq),
                ).fetchall()
            if not found:
                return None
            rows = db.execute(
                f"UPDATE asks SET answer_seq = ?, matched_at = ? WHERE id = ? RETURNING {ASK_COLUMNS}",
                (seq, now(), found[0][0]),
            ).fetchall()
        return _ask(rows[0])

    async def expire_asks(self, now: float) -> list[Ask]:
        db = self.db
        with self._write():
            db.execute(
                "UPDATE asks SET state = 'expired' WHERE reported_at IS NULL"
                " AND state = 'pending' AND answer_seq IS NULL AND deadline <= ?",
                (now,),
            )
            rows = db.execute(
                f"SELECT {ASK_COLUMNS} FROM asks WHERE reported_at IS NULL AND state = 'expired'"
                " AND expiry_reported_at IS NULL ORDER BY id"
            ).fetchall()
        return [_ask(row) for row in rows]

    async def claim_report(self, ask_id: int, outbox_id: int | None = None) -> bool:
        return self._stamp_once(
            ask_id, "reported_at", "report_outbox_id", outbox_id, "state = 'answered', "
        )

    async def mark_expiry_reported(self, ask_id: int, outbox_id: int | None = None) -> bool:
        return self._stamp_once(ask_id, "expiry_reported_at", "expiry_outbox_id", outbox_id)

    def _stamp_once(
        self, ask_id: int, column: str, send_column: str, outbox_id: int | None, also: str = ""
    ) -> bool:
        """Stamp `column` (and set `also`), noting the send in `send_column`, unless it is
        stamped; True when this call did."""
        with self._write():
            rows = self.db.execute(
                f"UPDATE asks SET {also}{column} = ?, {send_column} = ?"
                f" WHERE id = ? AND {column} IS NULL RETURNING id",
                (now(), outbox_id, ask_id),
            ).fetchall()
        return bool(rows)

    def _gave_back(self, outbox_id: int, reason: str) -> None:
        """What an ask staked on a send never tried, given back (inside a write): a
        report's or an expiry notice's claim (owed again), the ask of a question never
        sent failed (see the PostgreSQL store's twin)."""
        db = self.db
        for stamp, send in (
            ("reported_at", "report_outbox_id"),
            ("expiry_reported_at", "expiry_outbox_id"),
        ):
            db.execute(
                f"UPDATE asks SET {stamp} = NULL, {send} = NULL WHERE {send} = ?", (outbox_id,)
            )
        db.execute(
            "UPDATE asks SET state = 'failed', reason = ?"
            " WHERE outbox_id = ? AND state IN ('pending', 'expired') AND answer_seq IS NULL"
            " AND reported_at IS NULL",
            (f"the question was never sent ({reason})", outbox_id),
        )

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
            clauses.append("origin_conversation_id = ?")
            params.append(origin_conversation_id)
        if peer_conversation_id is not None:
            clauses.append("peer_conversation_id = ?")
            params.append(peer_conversation_id)
        if states is not None:
            clauses.append(f"state IN ({', '.join('?' for _ in states)})")
            params.extend(states)
        if awaiting_report:
            clauses.append("answer_seq IS NOT NULL AND reported_at IS NULL")
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = " DESC" if newest_first else ""
        rows = self.db.execute(
            f"SELECT {ASK_COLUMNS} FROM asks {where} ORDER BY id{order} LIMIT ?", (*params, limit)
        )
        return [_ask(row) for row in rows]


def _ask(row: Sequence[Any]) -> Ask:
    return Ask(*row)

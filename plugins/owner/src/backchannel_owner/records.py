"""The owner tables on the store's SQLite connection: messages, session marks, corrections.

Every method is one short synchronous transaction on the apsw connection the
`SQLiteStore` owns (no await inside), so it never interleaves with the
store's own transactions on the same event loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import apsw
from attrs import frozen
from backchannel.errors import StoreError
from backchannel.secrets import redact

from .identity import SessionIdentity
from .ids import MAX_MINTS, mint_id
from .marks import PALETTE, choose_slot

__all__ = ["OwnerMessage", "OwnerRecords"]

_COLUMNS = (
    "id, session_id, direction, kind, account, chat, parent_id, text, platform_message_id,"
    " event_id, status, reason, attempts, created_at, updated_at, delivered_at,"
    " stale_notice_at, late_notice_at, meta"
)


@frozen
class OwnerMessage:
    """One row of owner_messages."""

    id: str
    session_id: str
    direction: str
    kind: str
    account: str
    chat: str
    parent_id: str | None
    text: str
    platform_message_id: str | None
    event_id: str | None
    status: str
    reason: str | None
    attempts: int
    created_at: float
    updated_at: float
    delivered_at: float | None
    stale_notice_at: float | None
    late_notice_at: float | None
    meta: Mapping[str, Any]


class OwnerRecords:
    """Reads and writes the owner tables through one apsw connection."""

    def __init__(self, db: apsw.Connection):
        self.db = db

    # messages ---------------------------------------------------------------------
    def insert_message(self, now: float, **fields: Any) -> OwnerMessage:
        """Insert a row under a freshly minted id; a collision mints again (at most 8 in all).

        An existing id is never overwritten: the insert fails on the primary key.
        """
        meta = json.dumps(dict(fields.pop("meta", None) or {}))
        for _ in range(MAX_MINTS):
            message_id = fields.pop("id", None) or mint_id()
            values = {
                "parent_id": None,
                "platform_message_id": None,
                "event_id": None,
                "reason": None,
                **fields,
                "id": message_id,
                "created_at": now,
                "updated_at": now,
                "meta": meta,
            }
            names = ", ".join(values)
            marks = ", ".join("?" * len(values))
            try:
                with self.db:
                    self.db.execute(
                        f"INSERT INTO owner_messages ({names}) VALUES ({marks})",
                        tuple(values.values()),
                    )
            except apsw.ConstraintError:
                if fields.get("event_id") is not None and self.by_event(
                    fields["account"], fields["event_id"]
                ):
                    raise
                continue
            found = self.get(message_id)
            assert found is not None
            return found
        raise StoreError(
            f"could not mint a free message id in {MAX_MINTS} tries (is owner_messages full?)"
        )

    def get(self, message_id: str) -> OwnerMessage | None:
        return self._one("WHERE id = ?", (message_id,))

    def by_event(self, account: str, event_id: str) -> OwnerMessage | None:
        return self._one("WHERE account = ? AND event_id = ?", (account, event_id))

    def by_platform_id(self, account: str, chat: str, platform_id: str) -> OwnerMessage | None:
        """Return our outbound message with this platform id in this chat, or None."""
        return self._one(
            "WHERE account = ? AND chat = ? AND platform_message_id = ? AND direction = 'out'",
            (account, chat, platform_id),
        )

    def prompt_waits(self, account: str, chat: str, now: float) -> bool:
        """Whether a permission prompt sent to this chat waits for its answer."""
        for (meta,) in self.db.execute(
            "SELECT meta FROM owner_messages WHERE account = ? AND chat = ? AND direction = 'out'"
            " AND kind = 'permission' AND created_at > ? ORDER BY created_at DESC LIMIT 20",
            (account, chat, now - 86_400),
        ):
            data = json.loads(meta or "{}")
            if not data.get("answered") and float(data.get("expires_at", 0)) > now:
                return True
        return False

    def routed_reply(self, account: str, chat: str, platform_id: str) -> OwnerMessage | None:
        """Return the owner's reply (or answer) routed from this platform message, or None."""
        return self._one(
            "WHERE account = ? AND chat = ? AND platform_message_id = ? AND direction = 'in'"
            " ORDER BY created_at, rowid",
            (account, chat, platform_id),
        )

    def first_part(self, account: str, chat: str, platform_id: str) -> str | None:
        """The platform id of the message of ours whose later part `platform_id` is (the
        platform got it split; the core store keeps the parts, m013), or None."""
        for (first,) in self.db.execute(
            "SELECT m.platform_message_id FROM message_parts p"
            " JOIN conversations c ON c.id = p.conversation_id"
            " JOIN messages m ON m.conversation_id = p.conversation_id AND m.seq = p.seq"
            " WHERE c.account = ? AND c.chat = ? AND p.platform_message_id = ?",
            (account, chat, platform_id),
        ):
            if first is not None:
                return str(first)
        return None

    def last_outbound(self, session_id: str) -> OwnerMessage | None:
        return self._one(
            "WHERE session_id = ? AND direction = 'out' ORDER BY created_at DESC, rowid DESC",
            (session_id,),
        )

    def update(self, message_id: str, now: float, **changes: Any) -> OwnerMessage:
        if changes.get("reason"):
            # a delivery's reason may quote a platform's answer: never a secret in the store
            changes["reason"] = redact(str(changes["reason"]))
        if "meta" in changes:
            changes["meta"] = json.dumps(dict(changes["meta"]))
        sets = ", ".join(f"{name} = ?" for name in changes)
        with self.db:
            self.db.execute(
                f"UPDATE owner_messages SET {sets}, updated_at = ? WHERE id = ?",
                (*changes.values(), now, message_id),
            )
        found = self.get(message_id)
        if found is None:
            raise StoreError(f"owner message #{message_id} vanished while being updated")
        return found

    def waiting(self) -> list[OwnerMessage]:
        """Inbound messages no session has confirmed yet, oldest first."""
        return self._all("WHERE status = 'waiting' ORDER BY created_at", ())

    def waiting_for(self, session_id: str) -> list[OwnerMessage]:
        return self._all(
            "WHERE status = 'waiting' AND session_id = ? ORDER BY created_at", (session_id,)
        )

    def prune(self, older_than: float) -> int:
        """Delete messages created before `older_than` (and stale correction stamps)."""
        with self.db:
            self.db.execute("DELETE FROM owner_messages WHERE created_at < ?", (older_than,))
            deleted = self.db.changes()
            self.db.execute("DELETE FROM owner_corrections WHERE at < ?", (older_than,))
            self.db.execute("DELETE FROM owner_sessions WHERE seen_at < ?", (older_than,))
        return deleted

    # sessions -----------------------------------------------------------------------
    def mark_for(self, identity: SessionIdentity, now: float) -> str:
        """Return the session's emoji, giving it a slot on first sight; record it as seen."""
        rows = list(self.db.execute("SELECT session_id, slot, seen_at FROM owner_sessions"))
        own = next((row for row in rows if row[0] == identity.session_id), None)
        others = {
            row[0]: (int(row[1]), float(row[2])) for row in rows if row[0] != identity.session_id
        }
        slot = int(own[1]) if own is not None else choose_slot(identity.session_id, others, now)
        with self.db:
            self.db.execute(
                "INSERT INTO owner_sessions (session_id, slot, name, identity, seen_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET"
                " name = excluded.name, identity = excluded.identity, seen_at = excluded.seen_at",
                (identity.session_id, slot, identity.name, _identity_json(identity), now),
            )
        return PALETTE[slot % len(PALETTE)]

    def session(self, session_id: str) -> tuple[str, str]:
        """Return (mark, name) of a known session, or a plain stand-in."""
        row = next(
            iter(
                self.db.execute(
                    "SELECT slot, name FROM owner_sessions WHERE session_id = ?", (session_id,)
                )
            ),
            None,
        )
        if row is None:
            return "•", session_id[:8]
        return PALETTE[int(row[0]) % len(PALETTE)], str(row[1])

    # corrections ----------------------------------------------------------------------
    def may_correct(
        self, chat_key: str, message_id: str, now: float, *, per_chat: float, per_id: float
    ) -> bool:
        """Return True (and stamp both keys) when a correction may be sent now."""
        keys = {f"chat:{chat_key}": per_chat, f"id:{message_id}": per_id}
        with self.db:
            for key, period in keys.items():
                row = next(
                    iter(self.db.execute("SELECT at FROM owner_corrections WHERE key = ?", (key,))),
                    None,
                )
                if row is not None and now - float(row[0]) < period:
                    return False
            for key in keys:
                self.db.execute(
                    "INSERT INTO owner_corrections (key, at) VALUES (?, ?)"
                    " ON CONFLICT (key) DO UPDATE SET at = excluded.at",
                    (key, now),
                )
        return True

    def first_notice(self, key: str, now: float) -> bool:
        """Stamp `key` (an event's notice) and return True the first time only: a
        redelivered event does not send its notice again (pruned with the corrections)."""
        with self.db:
            self.db.execute(
                "INSERT INTO owner_corrections (key, at) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                (key, now),
            )
            first = bool(self.db.changes())
        return first

    # helpers ------------------------------------------------------------------------
    def _one(self, where: str, params: tuple[Any, ...]) -> OwnerMessage | None:
        rows = self._all(where + " LIMIT 1", params)
        return rows[0] if rows else None

    def _all(self, where: str, params: tuple[Any, ...]) -> list[OwnerMessage]:
        return [
            _message(row)
            for row in self.db.execute(f"SELECT {_COLUMNS} FROM owner_messages {where}", params)
        ]


def _message(row: tuple[Any, ...]) -> OwnerMessage:
    values = list(row)
    values[-1] = json.loads(values[-1] or "{}")
    return OwnerMessage(*values)


def _identity_json(identity: SessionIdentity) -> str:
    return json.dumps(
        {
            key: value
            for key, value in {
                "name": identity.name,
                "terminal": identity.terminal,
                "workspace": identity.workspace,
                "cwd": identity.cwd,
                "host": identity.host,
                "harness": identity.harness,
            }.items()
            if value is not None
        }
    )

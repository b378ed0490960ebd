"""The owner plugin's tables, added to the store through the `register_migrations` hook."""

from __future__ import annotations

from typing import Any

__all__ = ["MIGRATIONS", "owner_m001_tables"]


def owner_m001_tables(db: Any) -> None:
    db.execute(
        """
        -- every message between a session and its owner; `id` is the 5-character id the
        -- owner types (#m7k3q). direction 'out' (session -> owner) status: pending, sent,
        -- failed, uncertain; direction 'in' (owner -> session) status: waiting, delivered,
        -- parked. kind out: fyi, needs_answer, reply, permission; kind in: message, permission
        CREATE TABLE owner_messages (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            direction TEXT NOT NULL,
            kind TEXT NOT NULL,
            account TEXT NOT NULL,
            chat TEXT NOT NULL,
            parent_id TEXT,
            text TEXT NOT NULL,
            platform_message_id TEXT,
            event_id TEXT,
            status TEXT NOT NULL,
            reason TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            delivered_at REAL,
            stale_notice_at REAL,
            late_notice_at REAL,
            meta TEXT NOT NULL DEFAULT '{}'
        );
        CREATE UNIQUE INDEX owner_messages_event ON owner_messages (account, event_id)
            WHERE event_id IS NOT NULL;
        CREATE INDEX owner_messages_platform
            ON owner_messages (account, chat, platform_message_id)
            WHERE platform_message_id IS NOT NULL;
        CREATE INDEX owner_messages_session ON owner_messages (session_id, direction, created_at);
        CREATE INDEX owner_messages_waiting ON owner_messages (status) WHERE status = 'waiting';

        -- each session's mark (palette slot) and when it was last seen
        CREATE TABLE owner_sessions (
            session_id TEXT PRIMARY KEY,
            slot INTEGER NOT NULL,
            name TEXT NOT NULL,
            identity TEXT NOT NULL DEFAULT '{}',
            seen_at REAL NOT NULL
        );

        -- when a correction was last sent, by "chat:<account>/<chat>" and "id:<id>"
        CREATE TABLE owner_corrections (
            key TEXT PRIMARY KEY,
            at REAL NOT NULL
        );
        """
    )


MIGRATIONS = [owner_m001_tables]

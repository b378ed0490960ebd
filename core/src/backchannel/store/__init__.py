"""The transcript store: a contract (`Store`) and the embedded SQLite implementation."""

from __future__ import annotations

from .base import AppendResult, Inbound, OutboxEntry, Participant, RunRecord, Store
from .sqlite import SQLiteStore, open_store

__all__ = [
    "AppendResult",
    "Inbound",
    "OutboxEntry",
    "Participant",
    "RunRecord",
    "SQLiteStore",
    "Store",
    "open_store",
]

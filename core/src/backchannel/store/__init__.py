"""The transcript store: a contract (`Store`) and the embedded SQLite implementation."""

from __future__ import annotations

from .base import (
    ASK_OPEN_STATES,
    ASK_STATES,
    NO_ORIGIN,
    NO_ORIGIN_LABEL,
    AppendResult,
    Ask,
    Inbound,
    OutboxEntry,
    Participant,
    RunRecord,
    Store,
    find_by_reference,
)
from .sqlite import SQLiteStore, open_store

__all__ = [
    "ASK_OPEN_STATES",
    "ASK_STATES",
    "NO_ORIGIN",
    "NO_ORIGIN_LABEL",
    "AppendResult",
    "Ask",
    "Inbound",
    "OutboxEntry",
    "Participant",
    "RunRecord",
    "SQLiteStore",
    "Store",
    "find_by_reference",
    "open_store",
]

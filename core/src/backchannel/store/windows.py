"""The latest window rows of recently run conversations, kept between their runs.

A conversation's next run shows nearly the window its last run showed: one
or two rows newer, perhaps one of ours whose status changed. Reading the 50
rows again and making Python values of their 23 columns is most of what a
run costs the framework (bench/runs.py), so `SQLiteStore.window_rows` keeps
each recent conversation's rows and reads only the rows past them.

What makes a kept window stale, and what is done about it:

- a new row: seqs only grow, so rows past the newest kept one are read each
  time (a caller may ask up to a seq not given out yet: that is not taken
  as read);
- a changed or deleted row (an edit, a reaction, a send's status, a row
  moving in or out of `held`): a TEMP trigger on this connection reports
  every UPDATE and DELETE of a messages row, whichever code made it, and a
  window whose seqs it falls among is dropped at once (inserts, the ingest
  path's bulk, fire nothing);
- another connection's commit (a second process on the same file): PRAGMA
  data_version changes, and every window is dropped;
- a read inside an open transaction: not served from or kept here, since
  what it sees may yet be rolled back (a change rolled back has already
  dropped its window: harmless).

Bounded: `capacity` conversations, the least recently read going first.
"""

from __future__ import annotations

from typing import Any

import apsw

from .cache import LRUCache
from .rows import MESSAGE_COLUMNS, first

__all__ = ["WindowCache", "read_window"]

_LAST = (
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND seq <= ?"
    " AND held = 0 ORDER BY seq DESC LIMIT ?"
)
_PAST = (
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? AND seq > ?"
    " AND seq <= ? AND held = 0 ORDER BY seq DESC LIMIT ?"
)
#: TEMP: this connection only, never written to the file; the function is ours
_TRIGGERS = """
CREATE TEMP TRIGGER IF NOT EXISTS window_cache_update AFTER UPDATE ON main.messages BEGIN
    SELECT backchannel_window_changed(old.conversation_id, old.seq);
END;
-- a row moved (no code of ours does; raw SQL may) also changes the window it lands in
CREATE TEMP TRIGGER IF NOT EXISTS window_cache_move AFTER UPDATE OF conversation_id, seq
ON main.messages WHEN new.conversation_id IS NOT old.conversation_id OR new.seq IS NOT old.seq
BEGIN
    SELECT backchannel_window_changed(new.conversation_id, new.seq);
END;
CREATE TEMP TRIGGER IF NOT EXISTS window_cache_delete AFTER DELETE ON main.messages BEGIN
    SELECT backchannel_window_changed(old.conversation_id, old.seq);
END;
"""


def read_window(
    db: apsw.Connection, conversation_id: int, limit: int, upto_seq: int
) -> list[tuple[Any, ...]]:
    """The last `limit` visible rows with seq <= upto_seq, oldest first (MESSAGE_COLUMNS)."""
    rows = db.execute(_LAST, (conversation_id, upto_seq, limit)).fetchall()
    rows.reverse()
    return rows


class _Kept:
    """One conversation's kept rows: the last `limit` visible rows with seq <= covered.

    `covered` is the newest kept row's seq, not the seq a read asked up to:
    a row past it is either held (never kept) or was not there when read,
    and a row added later gets a seq past the conversation's last one, so
    reading past `covered` finds every row a kept window lacks.
    """

    __slots__ = ("covered", "limit", "rows")

    def __init__(self, rows: list[tuple[Any, ...]], limit: int, covered: int):
        self.rows = rows
        self.limit = limit
        self.covered = covered


class WindowCache:
    """Window rows per conversation for `SQLiteStore.window_rows` (see the module)."""

    def __init__(self, db: apsw.Connection, capacity: int):
        self._db = db
        self._kept: LRUCache[int, _Kept] = LRUCache(capacity)
        self._version: int | None = None
        db.create_scalar_function("backchannel_window_changed", self._row_changed, 2)
        db.execute(_TRIGGERS)

    def _row_changed(self, *values: Any) -> None:
        # called by the triggers, inside the statement making the change
        conversation_id, seq = values
        kept = self._kept.peek(conversation_id)
        if kept is not None and (not isinstance(seq, int) or seq <= kept.covered):
            self._kept.pop(conversation_id)

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)

    def rows(self, conversation_id: int, limit: int, upto_seq: int) -> list[tuple[Any, ...]]:
        """`read_window`, from the kept rows and whatever is past them."""
        db = self._db
        if not db.getautocommit():
            return read_window(db, conversation_id, limit, upto_seq)
        version = first(db.execute("PRAGMA data_version"))
        if version != self._version:
            self.clear()
            self._version = version
        kept = self._kept.get(conversation_id)
        if kept is None or kept.limit != limit or upto_seq < kept.covered:
            rows = read_window(db, conversation_id, limit, upto_seq)
            if rows and (kept is None or kept.limit != limit):
                self._kept.put(conversation_id, _Kept(rows, limit, rows[-1][1]))
            return list(rows)
        if upto_seq > kept.covered:
            past = db.execute(_PAST, (conversation_id, kept.covered, upto_seq, limit)).fetchall()
            if past:
                past.reverse()
                rows = kept.rows + past if len(past) < limit else past
                if len(rows) > limit:
                    del rows[: len(rows) - limit]
                kept.rows = rows
                kept.covered = rows[-1][1]
        return list(kept.rows)

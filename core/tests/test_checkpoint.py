"""WAL checkpoints run on their own thread, off the commit path, and the WAL stays bounded."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import apsw
import pytest
from backchannel.store import SQLiteStore, checkpoint
from backchannel.store.checkpoint import Checkpointer


def _wal_database(path: Path) -> apsw.Connection:
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE blobs (data BLOB)")
    return db


def _write_pages(db: apsw.Connection, pages: int) -> None:
    for _ in range(pages):
        with db:
            db.execute("INSERT INTO blobs VALUES (?)", (os.urandom(3000),))


def test_commits_leave_checkpoints_to_the_background_thread(tmp_path: Path) -> None:
    db = _wal_database(tmp_path / "a.db")
    checkpointer = Checkpointer(db, str(tmp_path / "a.db"), wake_pages=20, limit_pages=10**9)
    try:
        _write_pages(db, 40)
        assert checkpointer.checkpointed.wait(30)
        assert checkpointer.background_checkpoints >= 1
        assert checkpointer.inline_checkpoints == 0
        assert checkpointer.peak_pages >= 20
        # what was written is in the database file now: a fresh reader sees all of it
        with apsw.Connection(str(tmp_path / "a.db")) as reader:
            assert reader.execute("SELECT COUNT(*) FROM blobs").fetchone() == (40,)
    finally:
        checkpointer.stop()
        db.close()


def test_the_background_checkpoint_copies_the_wal_into_the_database_file(tmp_path: Path) -> None:
    # the thread's connection must have opened the WAL: a connection that never read the
    # database checkpoints nothing (SQLite reports -1, -1) and the WAL grows to the limit
    path = tmp_path / "copy.db"
    db = _wal_database(path)
    checkpointer = Checkpointer(db, str(path), wake_pages=20, limit_pages=10**9)
    try:
        before = os.path.getsize(path)
        _write_pages(db, 40)
        assert checkpointer.checkpointed.wait(30)
        assert checkpointer.caught_up >= 1
        assert os.path.getsize(path) >= before + 40 * 3000
        # everything was copied: the next commit starts the WAL over from its beginning
        sizes: list[int] = []

        def note_size(_db: apsw.Connection, _name: str, pages: int) -> int:
            sizes.append(pages)
            return apsw.SQLITE_OK

        db.set_wal_hook(note_size)
        _write_pages(db, 1)
        assert sizes and sizes[-1] <= 3, f"the WAL was not restarted: {sizes[-1]} pages"
    finally:
        checkpointer.stop()
        db.close()


class _ScriptedWal:
    """Stands in for the thread's connection: each checkpoint returns the next (frames, copied)."""

    def __init__(self, results: list[tuple[int, int]]) -> None:
        self.results = results
        self.passes = 0

    def wal_checkpoint(self) -> tuple[int, int]:
        self.passes += 1
        return self.results.pop(0)


def test_checkpoints_repeat_until_no_commit_came_in_between(tmp_path: Path) -> None:
    db = _wal_database(tmp_path / "s.db")
    checkpointer = Checkpointer(db, str(tmp_path / "s.db"), limit_pages=10**9)
    try:
        # commits during the first two passes added frames; the third found nothing new
        wal = _ScriptedWal([(1005, 1005), (1012, 1012), (1012, 1012), (1020, 1020)])
        checkpointer._catch_up(wal)  # type: ignore[arg-type]
        assert (wal.passes, checkpointer.caught_up) == (3, 1)
        # a pass that could not copy everything (a reader holds old frames) is no catch-up
        wal = _ScriptedWal([(900, 800), (900, 800), (900, 900), (900, 900)])
        checkpointer._catch_up(wal)  # type: ignore[arg-type]
        assert (wal.passes, checkpointer.caught_up) == (4, 2)
    finally:
        checkpointer.stop()
        db.close()


def test_the_thread_is_woken_once_per_wake_pages_of_growth_not_per_commit(
    tmp_path: Path,
) -> None:
    db = _wal_database(tmp_path / "w.db")
    checkpointer = Checkpointer(db, str(tmp_path / "w.db"), wake_pages=20, limit_pages=10**9)
    try:
        _write_pages(db, 200)  # 200 commits of one or two WAL pages each
        # once per 20 pages of growth (about 20 times), not on every commit past the mark
        assert 1 <= checkpointer.wakes <= 50
    finally:
        checkpointer.stop()
        db.close()


def test_a_wal_past_its_limit_is_checkpointed_by_the_commit(tmp_path: Path) -> None:
    db = _wal_database(tmp_path / "b.db")
    # the thread is never woken: only the limit keeps the WAL from growing
    checkpointer = Checkpointer(db, str(tmp_path / "b.db"), wake_pages=10**9, limit_pages=30)
    try:
        _write_pages(db, 300)
        assert checkpointer.inline_checkpoints >= 5
        assert checkpointer.background_checkpoints == 0
        frames = os.path.getsize(tmp_path / "b.db-wal") // 4096
        assert frames <= 40, f"the WAL grew to {frames} pages"
    finally:
        checkpointer.stop()
        db.close()


class _LockedWal:
    """A connection whose checkpoint finds another connection checkpointing."""

    def wal_checkpoint(self, name: str) -> tuple[int, int]:
        raise apsw.BusyError("database is locked")


def test_a_commit_that_finds_another_checkpoint_running_still_succeeds(tmp_path: Path) -> None:
    db = _wal_database(tmp_path / "busy.db")
    checkpointer = Checkpointer(db, str(tmp_path / "busy.db"), limit_pages=30)
    try:
        # an error from the WAL hook would fail a COMMIT that already happened
        status = checkpointer._committed(_LockedWal(), "main", 31)  # type: ignore[arg-type]
        assert (status, checkpointer.inline_busy) == (apsw.SQLITE_OK, 1)
    finally:
        checkpointer.stop()
        db.close()


async def test_closing_the_store_stops_its_checkpoint_thread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    checkpointer = store._checkpointer
    assert checkpointer is not None and checkpointer._thread.is_alive()
    await store.close()
    assert not checkpointer._thread.is_alive()


def test_the_thread_ends_when_its_store_is_dropped_without_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "_OWNER_CHECK", 0.01)
    db = _wal_database(tmp_path / "d.db")
    checkpointer = Checkpointer(db, str(tmp_path / "d.db"))
    db.close()
    del db
    gc.collect()
    checkpointer._thread.join(30)
    assert not checkpointer._thread.is_alive()

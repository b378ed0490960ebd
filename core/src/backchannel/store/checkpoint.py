"""WAL checkpoints off the commit path: a thread of their own, woken by the WAL's size.

In WAL mode SQLite copies committed pages back into the database file (a
checkpoint) every 1,000 WAL pages by default, inside whichever COMMIT
crosses the mark: that commit then waits on the checkpoint's fsyncs, and the
event loop waits with it (the tail of commit latency). Here the commit only
notes the WAL's size (a WAL hook); past `wake_pages` a thread with its own
connection runs a PASSIVE checkpoint, which never blocks writers or readers.
Should the thread fall behind, a commit that finds the WAL past
`limit_pages` checkpoints inline as before, so the WAL stays bounded.

Durability is unchanged: a commit is in the WAL before COMMIT returns (safe
against SIGKILL), and checkpoints start at the same WAL size as SQLite's
own, so the WAL is synced as often as before (what a power loss may lose
under synchronous=NORMAL is no larger).
"""

from __future__ import annotations

import logging
import threading
import weakref

import apsw

__all__ = ["Checkpointer"]

log = logging.getLogger("backchannel.store")

#: SQLite's own default wal_autocheckpoint
WAKE_PAGES = 1000
#: past this, a commit checkpoints inline: the WAL cannot grow without bound
LIMIT_PAGES = 16_000
#: checkpoints in a row, at most, to copy what commits added during the previous one
_CATCH_UP_PASSES = 16
#: seconds between checks, while idle, that the store was not dropped without close()
_OWNER_CHECK = 30.0


class Checkpointer:
    """Runs PASSIVE checkpoints of one database file on a background thread."""

    def __init__(
        self,
        db: apsw.Connection,
        path: str,
        *,
        wake_pages: int = WAKE_PAGES,
        limit_pages: int = LIMIT_PAGES,
    ):
        self.path = path
        self.wake_pages = wake_pages
        self.limit_pages = limit_pages
        #: checkpoints run by the thread / inline by a commit (for tests and benches)
        self.background_checkpoints = 0
        self.inline_checkpoints = 0
        #: inline checkpoints that found another connection checkpointing
        self.inline_busy = 0
        self.wakes = 0
        #: wakes that ended with the whole WAL copied (the next commit restarts it)
        self.caught_up = 0
        #: the largest WAL a commit left behind, in pages
        self.peak_pages = 0
        #: set after each background checkpoint
        self.checkpointed = threading.Event()
        self._wake = threading.Event()
        #: WAL size that wakes the thread next: `wake_pages` more than at the last wake
        self._wake_at = wake_pages
        self._stopping = False
        #: weak: a store dropped without close() must not be kept alive by its thread
        self._owner = weakref.ref(db)
        self._thread = threading.Thread(
            target=self._loop, name=f"backchannel-checkpoint {path}", daemon=True
        )
        self._thread.start()
        # replaces SQLite's autocheckpoint (which is itself a WAL hook)
        db.set_wal_hook(self._committed)

    def _committed(self, db: apsw.Connection, name: str, pages: int) -> int:
        """Called by SQLite after each commit with the WAL's size in pages."""
        if pages > self.peak_pages:
            self.peak_pages = pages
        if pages >= self.limit_pages:
            self.inline_checkpoints += 1
            try:
                db.wal_checkpoint(name)
            except apsw.BusyError:
                # another connection is checkpointing right now (the thread, or a tool):
                # the WAL is being copied; the commit itself succeeded and must say so
                self.inline_busy += 1
            except apsw.Error as error:
                log.warning("checkpoint of %s after a commit failed: %s", self.path, error)
            self._wake_at = self.wake_pages
        elif pages >= self._wake_at:
            # once per `wake_pages` of growth, not on every commit until the WAL restarts
            self._wake_at = pages + self.wake_pages
            self.wakes += 1
            self._wake.set()
        elif pages < self._wake_at - self.wake_pages:
            self._wake_at = self.wake_pages  # the WAL restarted from its beginning
        return apsw.SQLITE_OK

    def _loop(self) -> None:
        try:
            db = apsw.Connection(self.path)
            db.set_busy_timeout(5000)
            # a connection that has not read the database yet has not opened its WAL
            # either: a checkpoint through it is a no-op that reports (-1, -1)
            db.execute("SELECT COUNT(*) FROM sqlite_schema").fetchall()
        except apsw.Error as error:
            log.error(
                "cannot open %s for checkpoints (%s): commits will checkpoint", self.path, error
            )
            return
        try:
            while True:
                if not self._wake.wait(_OWNER_CHECK):
                    if self._owner() is None:
                        return  # the store was dropped without close(): end with it
                    continue
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    self._catch_up(db)
                except apsw.BusyError:
                    pass  # a commit past the limit is checkpointing inline: nothing to do
                except apsw.Error as error:
                    log.warning("background checkpoint of %s failed: %s", self.path, error)
        finally:
            db.close()

    def _catch_up(self, db: apsw.Connection) -> None:
        """Checkpoint until the whole WAL is in the database file (a bounded number of passes).

        SQLite only restarts a WAL from its beginning (instead of appending to it)
        when a commit finds every frame of it copied. A PASSIVE checkpoint copies
        the frames committed before it started, and it reports the WAL's size as of
        then: commits during its fsyncs are left over, unseen. One pass per wake
        would thus let the WAL grow at every wake, up to `limit_pages`, where a
        commit checkpoints all of it inline (the worst pause a commit ever sees).
        So passes repeat until one starts with nothing left to copy: only then may
        the next commit restart the WAL.
        """
        copied_upto = -1
        for _ in range(_CATCH_UP_PASSES):
            if self._stopping:
                break
            wal_frames, copied = db.wal_checkpoint()  # PASSIVE: copies what it can, blocks no one
            if wal_frames < 0:
                log.warning("%s is not in WAL mode: the background checkpoints stop", self.path)
                break
            self.background_checkpoints += 1
            if copied >= wal_frames and wal_frames <= copied_upto:
                self.caught_up += 1  # nothing was added since the last pass: all copied
                break
            copied_upto = copied if copied >= wal_frames else -1
        self.checkpointed.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (after a checkpoint in progress finishes)."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)

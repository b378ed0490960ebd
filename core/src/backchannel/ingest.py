"""Group commit: many ingests share one transaction, and each returns after its commit.

One SQLite transaction per event tops out near 8,000 events a second on a
small machine; one transaction holding many rows does far more. `commit()`
queues a group of events and awaits a future; a single flusher task writes
everything queued in one transaction (up to `max_batch` events) and resolves
each group's future only after that commit.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import deque
from collections.abc import Callable

from .errors import StoreError
from .store import AppendResult, Inbound, Store

__all__ = ["GroupCommit", "RefusedData"]

log = logging.getLogger("backchannel.ingest")


class RefusedData(StoreError):
    """The store refused what an event holds (text it cannot encode, a number too big).

    Not transient: committing the same event again fails again, so the caller
    turns it into a dead letter instead of retrying.
    """


#: what a store raises for a value it cannot bind (never for a full disk or a lock)
_DATA_ERRORS: tuple[type[Exception], ...] = (UnicodeError, OverflowError, TypeError, ValueError)


def _data_errors() -> tuple[type[Exception], ...]:
    """`_DATA_ERRORS`, psycopg's DataError and apsw's ConstraintError once loaded.

    A value PostgreSQL refuses (SQLSTATE class 22, or a NUL psycopg will not send)
    fails again on every retry, and so does a constraint SQLite refuses. Both
    drivers are optional, and an error of their own can only come once a store
    has imported them."""
    found = _DATA_ERRORS
    psycopg = sys.modules.get("psycopg")
    refused = getattr(psycopg, "DataError", None)
    if isinstance(refused, type) and issubclass(refused, Exception):
        found = (*found, refused)
    # a constraint SQLite refuses fails again on every retry: the transaction held the
    # write lock from its first read (BEGIN IMMEDIATE), so no other writer raced it. (Not
    # so on PostgreSQL: a unique violation there is another worker storing the same event
    # at once, which the retry finds stored.)
    constraint = getattr(sys.modules.get("apsw"), "ConstraintError", None)
    if isinstance(constraint, type) and issubclass(constraint, Exception):
        found = (*found, constraint)
    return found


class GroupCommit:
    """The queue between `ingest` calls and the store."""

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 2000,
        on_commit: Callable[[Inbound, AppendResult], None] | None = None,
    ):
        self.store = store
        self.max_batch = max_batch
        #: called for each committed event, before its ingest call returns
        self.on_commit = on_commit
        self._queue: deque[tuple[list[Inbound], asyncio.Future[list[AppendResult]]]] = deque()
        self._flusher: asyncio.Task[None] | None = None

    def commit(self, inbounds: list[Inbound]) -> asyncio.Future[list[AppendResult]]:
        """Queue events for the next transaction; await the future for their results.

        A plain function returning the future (not a coroutine): one frame less
        for every ingest to enter and leave.
        """
        future: asyncio.Future[list[AppendResult]] = asyncio.get_running_loop().create_future()
        self._queue.append((inbounds, future))
        flusher = self._flusher
        if flusher is None or flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return future

    async def drain(self, timeout: float) -> None:
        """Wait (bounded) for the flusher to write what is queued."""
        if self._flusher is not None:
            await asyncio.wait([self._flusher], timeout=timeout)

    async def _flush(self) -> None:
        """Commit everything queued, many ingests per transaction (group commit)."""
        while self._queue:
            groups: list[tuple[list[Inbound], asyncio.Future[list[AppendResult]]]] = []
            size = 0
            while self._queue and (not groups or size + len(self._queue[0][0]) <= self.max_batch):
                group = self._queue.popleft()
                groups.append(group)
                size += len(group[0])
            try:
                results = await self.store.append_inbound(
                    [item for inbounds, _ in groups for item in inbounds]
                )
            except Exception as error:
                if len(groups) == 1:
                    self._fail(groups[0][1], error, size)
                    continue
                # one group's bad event must not fail the others that shared the transaction
                log.warning("a batch of %d events failed; committing its groups one by one", size)
                for group in groups:
                    await self._commit_alone(group)
                continue
            offset = 0
            for inbounds, future in groups:
                self._settle(inbounds, results[offset : offset + len(inbounds)], future)
                offset += len(inbounds)

    async def _commit_alone(
        self, group: tuple[list[Inbound], asyncio.Future[list[AppendResult]]]
    ) -> None:
        inbounds, future = group
        try:
            results = await self.store.append_inbound(inbounds)
        except Exception as error:
            self._fail(future, error, len(inbounds))
            return
        self._settle(inbounds, results, future)

    def _settle(
        self,
        inbounds: list[Inbound],
        results: list[AppendResult],
        future: asyncio.Future[list[AppendResult]],
    ) -> None:
        # schedule here, not in the ingest caller: a caller cancelled after queueing its
        # events must not leave a committed message without its run
        if self.on_commit is not None:
            for inbound, result in zip(inbounds, results, strict=True):
                self.on_commit(inbound, result)
        if not future.done():
            future.set_result(results)

    @staticmethod
    def _fail(future: asyncio.Future[list[AppendResult]], error: Exception, size: int) -> None:
        log.error("the store refused %d event(s): %s", size, error)
        if isinstance(error, _data_errors()) and not isinstance(error, StoreError):
            error = RefusedData(
                f"the store cannot hold the event(s): {type(error).__name__}: {error}"
            )
        elif not isinstance(error, StoreError):
            error = StoreError(f"the store refused the event(s): {type(error).__name__}: {error}")
        if not future.done():
            future.set_exception(error)

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
from collections import deque

from .store import AppendResult, Inbound, Store

__all__ = ["GroupCommit"]

log = logging.getLogger("backchannel.ingest")


class GroupCommit:
    """The queue between `ingest` calls and the store."""

    def __init__(self, store: Store, *, max_batch: int = 2000):
        self.store = store
        self.max_batch = max_batch
        self._queue: deque[tuple[list[Inbound], asyncio.Future[list[AppendResult]]]] = deque()
        self._flusher: asyncio.Task[None] | None = None

    async def commit(self, inbounds: list[Inbound]) -> list[AppendResult]:
        """Queue events for the next transaction; return their results once committed."""
        future: asyncio.Future[list[AppendResult]] = asyncio.get_running_loop().create_future()
        self._queue.append((inbounds, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

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
                log.error("store refused a batch of %d events: %s", size, error)
                for _, future in groups:
                    if not future.done():
                        future.set_exception(error)
                continue
            offset = 0
            for inbounds, future in groups:
                if not future.done():
                    future.set_result(results[offset : offset + len(inbounds)])
                offset += len(inbounds)

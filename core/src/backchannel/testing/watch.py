"""`Watch`: wait, with a bound, until a condition over some test state holds.

Fakes and test contexts call `watch.changed()` after every change of their
state; tests `await watch.wait_for(predicate, timeout, what)`. No polling, no
sleeps: the predicate is re-checked exactly when something changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Watch"]


class Watch:
    """Wake waiters whenever the watched state changes; each re-checks its predicate."""

    def __init__(self, name: str = "state"):
        self.name = name
        self._waiters: set[asyncio.Future[None]] = set()

    def changed(self) -> None:
        """Say that the state changed (sync: callable from anywhere in the loop's thread)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        """Return once `predicate()` is true; AssertionError naming `what` after `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"{self.name}: timed out after {timeout}s waiting for {what}")
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.add(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                continue
            finally:
                self._waiters.discard(waiter)

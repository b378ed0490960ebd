"""Client-side pacing so a chatty agent stays under Telegram's limits instead of meeting 429s.

Telegram's documented limits: about one message per second in one chat, 20
messages per minute in one group, 30 messages per second overall. Each is a
sliding window here ("at most N sends in any `period` seconds"), which keeps
the exact promise a token bucket only approximates. Windows are configurable
so tests can run them fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from attrs import define, field, frozen

__all__ = ["Pacer", "PacingLimits", "SlidingWindow"]


@frozen
class PacingLimits:
    """How many sends each window allows; a count of 0 switches that window off."""

    per_chat: int = 1
    per_chat_period: float = 1.0
    per_group: int = 20
    per_group_period: float = 60.0
    overall: int = 30
    overall_period: float = 1.0


class _Stamp:
    """When one send happened: +inf while it is in flight, its finish time after."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = math.inf


@define
class SlidingWindow:
    """At most `limit` sends in any `period` seconds.

    A send counts from when its answer came back, not from when it left:
    Telegram counts arrivals, and an arrival always precedes our answer, so
    this stays within the limit however the network jitters.
    """

    limit: int
    period: float
    clock: Callable[[], float] = time.monotonic
    _stamps: deque[_Stamp] = field(factory=deque)

    def delay(self) -> float:
        """Seconds to wait before one more send fits (0 when it fits now)."""
        if self.limit <= 0:
            return 0.0
        now = self.clock()
        while self._stamps and now - self._stamps[0].at >= self.period:
            self._stamps.popleft()
        if len(self._stamps) < self.limit:
            return 0.0
        oldest = min(stamp.at for stamp in self._stamps)
        # in flight: check again shortly
        return self.period / 20 if math.isinf(oldest) else oldest + self.period - now

    def take(self) -> _Stamp | None:
        """Count one send as in flight; finish it with `done`."""
        if self.limit <= 0:
            return None
        stamp = _Stamp()
        self._stamps.append(stamp)
        return stamp

    def busy(self) -> bool:
        """True while a send is in flight or still counts in the window."""
        self.delay()  # drops expired sends
        return bool(self._stamps)

    def done(self, stamp: _Stamp | None) -> None:
        if stamp is not None:
            stamp.at = self.clock()
            # keep the deque ordered by time so expiry from the left stays right
            self._stamps = deque(sorted(self._stamps, key=lambda s: s.at))


class Pacer:
    """Waits until a send to a chat fits every window that applies to it."""

    def __init__(self, limits: PacingLimits):
        self.limits = limits
        self._overall = SlidingWindow(limits.overall, limits.overall_period)
        self._chats: dict[str, SlidingWindow] = {}
        self._groups: dict[str, SlidingWindow] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._turns = 0

    @contextlib.asynccontextmanager
    async def turn(self, chat_id: str, is_group: bool) -> AsyncIterator[None]:
        """Wait until one more send to `chat_id` fits all limits; count it while inside.

        Sends to one chat go one at a time, in the order they asked (parts of
        a split text stay in order); other chats do not wait for them.
        """
        windows = [
            self._overall,
            self._window(self._chats, chat_id, self.limits.per_chat, self.limits.per_chat_period),
        ]
        if is_group:
            windows.append(
                self._window(
                    self._groups, chat_id, self.limits.per_group, self.limits.per_group_period
                )
            )
        lock = self._locks.setdefault(chat_id, asyncio.Lock())
        async with lock:
            while True:
                wait = max(window.delay() for window in windows)
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
            # checked and taken with no await between: atomic within the event loop
            stamps = [(window, window.take()) for window in windows]
            try:
                yield
            finally:
                for window, stamp in stamps:
                    window.done(stamp)
        self._turns += 1
        if self._turns % 1000 == 0:
            self._forget_idle_chats()

    def _forget_idle_chats(self) -> None:
        """Drop the windows and locks of chats with nothing in flight or in their windows."""
        for chat_id in list(self._locks):
            lock = self._locks[chat_id]
            windows = [w for w in (self._chats.get(chat_id), self._groups.get(chat_id)) if w]
            if lock.locked() or any(w.busy() for w in windows):
                continue
            del self._locks[chat_id]
            self._chats.pop(chat_id, None)
            self._groups.pop(chat_id, None)

    @staticmethod
    def _window(
        table: dict[str, SlidingWindow], key: str, limit: int, period: float
    ) -> SlidingWindow:
        window = table.get(key)
        if window is None:
            window = table[key] = SlidingWindow(limit, period)
        return window

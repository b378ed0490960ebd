"""Client-side pacing so a chatty agent stays under Telegram's limits instead of meeting 429s.

Telegram's documented limits: about one message per second in one chat, 20
messages per minute in one group, 30 messages per second overall. Each is a
sliding window here ("at most N sends in any `period` seconds"), which keeps
the exact promise a token bucket only approximates. Windows are configurable
so tests can run them fast.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

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


@define
class SlidingWindow:
    """At most `limit` acquisitions in any `period` seconds."""

    limit: int
    period: float
    clock: Callable[[], float] = time.monotonic
    _stamps: deque[float] = field(factory=deque)

    def delay(self) -> float:
        """Seconds to wait before one more acquisition fits (0 when it fits now)."""
        if self.limit <= 0:
            return 0.0
        now = self.clock()
        while self._stamps and now - self._stamps[0] >= self.period:
            self._stamps.popleft()
        if len(self._stamps) < self.limit:
            return 0.0
        return self._stamps[0] + self.period - now

    def take(self) -> None:
        if self.limit > 0:
            self._stamps.append(self.clock())


class Pacer:
    """Waits until a send to a chat fits every window that applies to it."""

    def __init__(self, limits: PacingLimits):
        self.limits = limits
        self._overall = SlidingWindow(limits.overall, limits.overall_period)
        self._chats: dict[str, SlidingWindow] = {}
        self._groups: dict[str, SlidingWindow] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def wait_turn(self, chat_id: str, is_group: bool) -> None:
        """Return once one more send to `chat_id` keeps within all limits (and count it)."""
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
        # A lock per chat keeps that chat's sends in arrival order (parts of a
        # split text stay in order) without making other chats wait. Checking
        # and taking happen with no await between them, so they are atomic.
        lock = self._locks.setdefault(chat_id, asyncio.Lock())
        async with lock:
            while True:
                wait = max(window.delay() for window in windows)
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
            for window in windows:
                window.take()

    @staticmethod
    def _window(
        table: dict[str, SlidingWindow], key: str, limit: int, period: float
    ) -> SlidingWindow:
        window = table.get(key)
        if window is None:
            window = table[key] = SlidingWindow(limit, period)
        return window

"""Token buckets: how often visitors (and the agent) may send."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["Buckets", "TokenBucket"]


class TokenBucket:
    """`burst` tokens, refilled at `per_minute / 60` tokens a second."""

    def __init__(self, per_minute: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.tokens = float(burst)
        self._clock = clock
        self._at = clock()

    def take(self, cost: float = 1.0) -> float:
        """Take `cost` tokens (at most `burst`); return 0 on success, else the seconds until
        they are available (nothing is taken then)."""
        cost = min(cost, self.burst)
        now = self._clock()
        self.tokens = min(self.burst, self.tokens + (now - self._at) * self.rate)
        self._at = now
        if self.tokens >= cost:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) / self.rate

    @property
    def full(self) -> bool:
        now = self._clock()
        return self.tokens + (now - self._at) * self.rate >= self.burst


class Buckets:
    """One TokenBucket per key, at most `max_keys` kept (full buckets are forgotten first)."""

    def __init__(
        self,
        per_minute: float,
        burst: int,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.per_minute = per_minute
        self.burst = burst
        self.max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def take(self, key: str, cost: float = 1.0) -> float:
        """Take `cost` tokens for `key`; return 0 on success, else the seconds to wait."""
        bucket = self._buckets.get(key)
        if bucket is None:
            self._make_room()
            bucket = self._buckets[key] = TokenBucket(self.per_minute, self.burst, self._clock)
        else:
            self._buckets.move_to_end(key)
        return bucket.take(cost)

    def __len__(self) -> int:
        return len(self._buckets)

    def _make_room(self) -> None:
        if len(self._buckets) < self.max_keys:
            return
        for key in [k for k, b in self._buckets.items() if b.full]:
            del self._buckets[key]
        while len(self._buckets) >= self.max_keys:
            # forgetting a drained bucket only ever gives that key a fresh burst
            self._buckets.popitem(last=False)

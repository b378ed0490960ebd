"""A bounded least-recently-used map: the store's per-conversation caches stay small.

A process serving 50,000 conversations of which a few hundred are active
must not keep a few hundred bytes for each idle one. A plain dict keeps its
insertion order, so the least recently used entry is the first one: a hit
moves its entry to the end, a full cache drops the first.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["LRUCache"]

K = TypeVar("K")
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most `capacity` entries; the least recently used goes first."""

    __slots__ = ("_entries", "capacity")

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"an LRU cache needs a capacity of at least 1, not {capacity}")
        self.capacity = capacity
        self._entries: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        """Return the value for `key` (now the most recently used), or None."""
        entries = self._entries
        value = entries.pop(key, None)
        if value is not None:
            entries[key] = value
        return value

    def put(self, key: K, value: V) -> None:
        """Remember `value` for `key`, dropping the least recently used entry when full."""
        entries = self._entries
        entries.pop(key, None)
        entries[key] = value
        if len(entries) > self.capacity:
            del entries[next(iter(entries))]

    def peek(self, key: K) -> V | None:
        """Return the value for `key` without making it the most recently used."""
        return self._entries.get(key)

    def pop(self, key: K) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        # a new dict: a cleared dict would keep its peak size allocated
        self._entries = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

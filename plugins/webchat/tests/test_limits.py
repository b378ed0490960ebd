"""Token buckets with a controlled clock."""

from __future__ import annotations

import pytest
from backchannel_webchat.limits import Buckets, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_the_burst_then_says_how_long_to_wait() -> None:
    clock = Clock()
    bucket = TokenBucket(per_minute=30, burst=3, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0, 0, 0]
    assert bucket.take() == pytest.approx(2.0)
    clock.now = 1.0
    assert bucket.take() == pytest.approx(1.0)
    clock.now = 2.0
    assert bucket.take() == 0


def test_buckets_are_per_key() -> None:
    buckets = Buckets(per_minute=60, burst=1, clock=Clock())
    assert buckets.take("a") == 0
    assert buckets.take("a") > 0
    assert buckets.take("b") == 0


def test_buckets_keep_a_bounded_number_of_keys() -> None:
    clock = Clock()
    buckets = Buckets(per_minute=60, burst=1, max_keys=100, clock=clock)
    for n in range(1000):
        buckets.take(f"visitor{n}")
    assert len(buckets) <= 100
    clock.now = 10.0  # every bucket refilled: all may be forgotten
    buckets.take("late")
    assert len(buckets) <= 100

"""Pacing windows: exact sliding windows counted from answers, in-flight sends included."""

from __future__ import annotations

from backchannel_telegram.pacing import Pacer, PacingLimits, SlidingWindow


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_window_allows_limit_sends_per_period_counted_from_their_answers() -> None:
    clock = Clock()
    window = SlidingWindow(2, 1.0, clock)
    for _ in range(2):
        assert window.delay() == 0
        window.done(window.take())
    assert window.delay() == 1.0
    clock.now += 0.4
    assert abs(window.delay() - 0.6) < 1e-9
    clock.now += 0.6
    assert window.delay() == 0


def test_a_send_in_flight_counts_until_it_is_answered() -> None:
    clock = Clock()
    window = SlidingWindow(1, 1.0, clock)
    stamp = window.take()
    clock.now += 5  # however long the request takes
    assert window.delay() > 0
    window.done(stamp)
    assert window.delay() == 1.0


def test_a_zero_limit_switches_the_window_off() -> None:
    window = SlidingWindow(0, 1.0)
    for _ in range(100):
        window.done(window.take())
    assert window.delay() == 0 and not window.busy()


async def test_idle_chats_are_forgotten() -> None:
    pacer = Pacer(
        PacingLimits(
            per_chat=5, per_chat_period=0.001, per_group=5, per_group_period=0.001, overall=0
        )
    )
    for n in range(1000):
        async with pacer.turn(f"-{n}", is_group=True):
            pass
    assert len(pacer._locks) < 50 and len(pacer._chats) < 50 and len(pacer._groups) < 50

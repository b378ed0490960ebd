"""A steady arrival schedule from another process (bench/latency.py's sender).

Writes update number n, with when it was due and when it was really
written, to the socket it is handed at begin + n / rate (begin: just after
the process started). A process of its own, so the schedule owes
nothing to the measured process (its event loop, its GIL): like a webhook's
client, it sends on time whatever the receiver is doing. Times are
time.perf_counter(), CLOCK_MONOTONIC on Linux: the same clock in both processes.

    python bench/arrivals.py FD RATE EVENTS
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time

#: the update's number, when it was due and when it was really sent
ARRIVAL = struct.Struct("<Idd")


def send(sink: socket.socket, rate: int, events: int) -> None:
    """Send update number n at begin + n / rate (never faster, late only when the CPU is)."""
    begin = time.perf_counter() + 0.01
    for number in range(events):
        due = begin + number / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sink.sendall(ARRIVAL.pack(number, due, time.perf_counter()))


def main() -> None:
    fd, rate, events = sys.argv[1:4]
    with socket.socket(fileno=int(fd)) as sink:
        send(sink, int(rate), int(events))
    os._exit(0)


if __name__ == "__main__":
    main()

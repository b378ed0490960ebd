"""Tail latency at a steady rate: message -> commit and message -> agent invoked.

Real-shaped Telegram updates arrive at a steady `--rate` per second (default
100) spread over `--conversations` chats (default 50). Arrivals come from
outside, as a webhook's requests would: another process (bench/arrivals.py)
writes each update's number to a socket at its scheduled time
(begin + n / rate), whatever this process is doing, and the event loop reads
it and hands the update to `ingest` (nobody waits for the one before). Every
message triggers (respond = "always", debounce 0).

Both latencies are measured from the update's *scheduled* arrival, so a loop
that was busy (a collection, a checkpoint, a long callback) when the update
was due is charged for the wait: message -> commit is until its `ingest`
returned; message -> agent invoked is until the first run whose window holds
the message started the agent (every message is counted, also those a run
took together with later ones). Prints p50, p95, p99 and the worst, and the
p99s from the moment each update was really sent (the sender's own lag left
out). With `--trace`, where the slowest 1% of commits spent their time (the
sender's lag, waking the idle loop's thread, the loop busy with other work,
the loop's own CPU, waiting for a CPU), collections and checkpoints. On a
machine shared with other work the tail is mostly the machine's: compare runs
made one after another. Never fails for being slow.

    uv run python bench/latency.py [--seconds N] [--rate N] [--conversations N] [--trace] [--json]
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arrivals import ARRIVAL
from backchannel import Binding, Run, Switchboard
from backchannel.runtime import tune_gc
from backchannel.store import SQLiteStore
from figures import bench_parser, emit
from telegram_updates import ACCOUNT, event_id_of, make_adapter, message_shapes, updates

_SENDER = Path(__file__).resolve().parent / "arrivals.py"
#: updates made ahead of the schedule, so making one never delays the next arrival
_AHEAD = 256


def percentiles(samples: list[float]) -> dict[str, float]:
    """Return p50, p95, p99 and the worst of `samples` (seconds) in milliseconds."""
    ordered = sorted(samples) or [0.0]

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000

    return {
        "p50": at(0.50),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": ordered[-1] * 1000,
        "count": len(samples),
    }


def _waited_for_cpu() -> float:
    """Seconds this thread has spent ready to run but waiting for a CPU (Linux; else 0)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except OSError:
        return 0.0


class Trace:
    """Where the slowest commits spent their time, and collections and checkpoints (--trace).

    The event loop's selector is wrapped to note when each wait for I/O began
    and ended: an update sent while the loop was waiting idle is read only once
    the kernel (and, in a VM, the hypervisor) has woken the loop's thread.
    """

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.gc_pauses: list[tuple[int, float]] = []
        self._gc_started = 0.0
        #: the last wait for I/O: when it began and when it returned
        self._select_began = 0.0
        self._select_returned = 0.0
        #: per commit, seconds: due to committed; due to sent (the sender's lag); sent to
        #: the idle loop's wake-up; then until read (the loop busy with other work); then
        #: until committed the main thread's CPU and its wait for a CPU while ready to run
        #: (preempted: the machine was busy)
        self.commits: list[tuple[float, float, float, float, float, float]] = []

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        gc.callbacks.append(self.on_gc)
        selector = getattr(loop, "_selector", None)  # asyncio's selector event loop
        if selector is None:
            return
        select = selector.select

        def timed_select(timeout: float | None = None) -> Any:
            self._select_began = time.perf_counter()
            try:
                return select(timeout)
            finally:
                self._select_returned = time.perf_counter()

        selector.select = timed_select

    def uninstall(self) -> None:
        gc.callbacks.remove(self.on_gc)

    def woken(self, sent: float, read: float) -> tuple[float, float]:
        """Split sent -> read into waking the idle loop and the loop's other work first."""
        if self._select_began <= sent <= self._select_returned:
            return self._select_returned - sent, read - self._select_returned
        return 0.0, read - sent

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_pauses.append((info["generation"], time.perf_counter() - self._gc_started))

    def figures(self) -> dict[str, Any]:
        checkpointer = self.store._checkpointer
        by_generation: dict[str, Any] = {}
        for generation in (0, 1, 2):
            pauses = [p for g, p in self.gc_pauses if g == generation]
            by_generation[f"gen{generation}"] = {
                "count": len(pauses),
                "max_ms": max(pauses, default=0.0) * 1000,
                "total_ms": sum(pauses) * 1000,
            }
        slowest = sorted(self.commits, reverse=True)[: max(1, len(self.commits) // 100)]

        def mean_ms(part: int) -> float:
            return statistics.fmean(c[part] for c in slowest) * 1000

        # means, so the parts add up to the whole
        tail = {
            "count": len(slowest),
            "mean_ms": mean_ms(0),
            "sent_late_ms": mean_ms(1),
            "wake_ms": mean_ms(2),
            "loop_busy_ms": mean_ms(3),
            "loop_cpu_ms": mean_ms(4),
            "runnable_ms": mean_ms(5),
            "blocked_ms": statistics.fmean(c[0] - sum(c[1:]) for c in slowest) * 1000,
        }
        return {
            "slowest_commits": tail,
            "gc": by_generation,
            "checkpoints": {
                "background": checkpointer.background_checkpoints if checkpointer else 0,
                "caught_up": checkpointer.caught_up if checkpointer else 0,
                "inline": checkpointer.inline_checkpoints if checkpointer else 0,
                "wal_peak_pages": checkpointer.peak_pages if checkpointer else 0,
            },
        }


async def measure(
    seconds: float, rate: int, conversations: int, trace: bool = False
) -> dict[str, Any]:
    events = int(seconds * rate)
    #: scheduled arrival of each update, by its event id
    scheduled: dict[str, float] = {}
    #: per conversation, the event ids not yet seen by a run, oldest first
    waiting: dict[int, deque[str]] = {}
    conversation_of: dict[str, int] = {}
    to_commit: list[float] = []
    to_agent: list[float] = []
    #: the same from when the sender really sent the update (without its own lag)
    sent_at: dict[str, float] = {}
    commit_from_sent: list[float] = []
    agent_from_sent: list[float] = []

    async def agent(run: Run) -> None:
        invoked = time.perf_counter()
        if run.trigger is None or run.trigger.event_id not in conversation_of:
            return
        pending = waiting[conversation_of[run.trigger.event_id]]
        # messages of one conversation commit in arrival order: the run's window holds its
        # trigger and every message before it
        while pending:
            event_id = pending.popleft()
            to_agent.append(invoked - scheduled.pop(event_id))
            agent_from_sent.append(invoked - sent_at.pop(event_id))
            if event_id == run.trigger.event_id:
                break

    shapes = message_shapes()
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "latency.db")
        board = Switchboard(store)
        await board.start()
        adapter = make_adapter()
        board.add_account(adapter, Binding(agent, respond="always", debounce=0))
        context = board.accounts[ACCOUNT].context
        loop = asyncio.get_running_loop()
        restore_gc = tune_gc()  # as `serve` does once started
        tracer = Trace(store) if trace else None
        if tracer:
            tracer.install(loop)
        requests: set[asyncio.Task[None]] = set()
        stream: Iterator[dict[str, Any]] = updates(events, conversations, shapes=shapes)
        #: (update, the event id the adapter gives it), made ahead of their arrival
        made: deque[tuple[dict[str, Any], str]] = deque()
        for update in stream:
            made.append((update, event_id_of(update)))
            if len(made) >= _AHEAD:
                break

        async def request(
            update: dict[str, Any], due: float, sent: float, read: float, woke: float
        ) -> None:
            cpu_at, queued_at = time.thread_time(), _waited_for_cpu()
            await context.ingest(update)
            committed = time.perf_counter()
            to_commit.append(committed - due)
            commit_from_sent.append(committed - sent)
            if tracer is not None:
                tracer.commits.append(
                    (
                        committed - due,
                        sent - due,
                        woke,
                        read - sent - woke,
                        time.thread_time() - cpu_at,
                        _waited_for_cpu() - queued_at,
                    )
                )

        # datagrams in order: each read is one whole arrival
        source, sink = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        source.setblocking(False)
        received = 0
        done = loop.create_future()

        def arrived() -> None:
            nonlocal received
            data = source.recv(ARRIVAL.size)
            if data:
                number, due, sent = ARRIVAL.unpack(data)
                update, event_id = made.popleft()
                scheduled[event_id] = due
                sent_at[event_id] = sent
                conversation = number % conversations
                conversation_of[event_id] = conversation
                waiting.setdefault(conversation, deque()).append(event_id)
                read = time.perf_counter()
                woke = tracer.woken(sent, read)[0] if tracer else 0.0
                task = asyncio.create_task(request(update, due, sent, read, woke))
                requests.add(task)
                task.add_done_callback(requests.discard)
                received += 1
            if not data or received == events:
                loop.remove_reader(source.fileno())
                if not done.done():
                    done.set_result(None)
            # top the made-ahead queue up outside the arrival's own path
            loop.call_soon(top_up)

        def top_up() -> None:
            while len(made) < _AHEAD:
                update = next(stream, None)
                if update is None:
                    return
                made.append((update, event_id_of(update)))

        loop.add_reader(source.fileno(), arrived)
        sender = await asyncio.create_subprocess_exec(
            sys.executable,
            str(_SENDER),
            str(sink.fileno()),
            str(rate),
            str(events),
            pass_fds=(sink.fileno(),),
        )
        sink.close()
        try:
            await done
            await asyncio.gather(*requests)
            await board.wait_idle(timeout=60)
        finally:
            if await asyncio.wait_for(sender.wait(), 30) != 0:
                raise SystemExit(f"the arrivals process {_SENDER} failed ({sender.returncode})")
            source.close()
        if tracer:
            tracer.uninstall()
        traced = tracer.figures() if tracer else None
        restore_gc()
        await board.stop()
        await adapter.stop()
    figures = {
        "events": events,
        "rate": rate,
        "conversations": conversations,
        "commit": percentiles(to_commit),
        "agent": percentiles(to_agent),
        "from_sent": {
            "commit": percentiles(commit_from_sent),
            "agent": percentiles(agent_from_sent),
        },
        "load": os.getloadavg()[0],
    }
    if traced is not None:
        figures["trace"] = traced
    return figures


def report(figures: dict[str, Any]) -> None:
    print(
        f"latency: {figures['events']:,} updates at {figures['rate']}/s over"
        f" {figures['conversations']} conversations, debounce 0, from each update's"
        f" scheduled arrival (1-minute load {figures['load']:.1f} on {os.cpu_count()} cores)"
    )
    for name, label in (("commit", "message -> commit"), ("agent", "message -> agent invoked")):
        p = figures[name]
        print(
            f"  {label:<26} p50 {p['p50']:6.2f} ms   p95 {p['p95']:6.2f} ms"
            f"   p99 {p['p99']:6.2f} ms   max {p['max']:7.2f} ms   ({p['count']:,} samples)"
        )
    sent = figures["from_sent"]
    print(
        f"  from the actual send (the sender's own lag left out): commit p99"
        f" {sent['commit']['p99']:.2f} ms, agent p99 {sent['agent']['p99']:.2f} ms"
    )
    trace = figures.get("trace")
    if trace:
        gcs = "  ".join(
            f"{name} {g['count']}x max {g['max_ms']:.2f} ms" for name, g in trace["gc"].items()
        )
        tail = trace["slowest_commits"]
        print(
            f"  slowest 1% of commits ({tail['count']}), means: {tail['mean_ms']:.2f} ms ="
            f" sender late {tail['sent_late_ms']:.2f} + waking the idle loop"
            f" {tail['wake_ms']:.2f} + loop busy with other work {tail['loop_busy_ms']:.2f}"
            f" + main thread on CPU {tail['loop_cpu_ms']:.2f} + ready but waiting for a CPU"
            f" {tail['runnable_ms']:.2f} + the rest (blocked in a system call)"
            f" {tail['blocked_ms']:.2f}"
        )
        checkpoints = trace["checkpoints"]
        print(
            f"  collections: {gcs};  checkpoints: {checkpoints['background']} background passes"
            f" ({checkpoints['caught_up']} times all of the WAL), {checkpoints['inline']} inline;"
            f" WAL peak {checkpoints['wal_peak_pages']:,} pages"
        )


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--trace", action="store_true", help="say where the time went")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.seconds, args.rate, args.conversations, args.trace))
    emit(figures, args.json, report)


if __name__ == "__main__":
    main()

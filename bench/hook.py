"""The owner inbox hook's cost per tool call: whole-process wall time in the empty case.

Claude Code runs `backchannel-owner-hook` after every tool call, so the case
that matters is "nothing waiting": start the interpreter, read the payload,
list one directory, exit. Each round runs the real console script as a new
process with a PostToolUse payload on stdin, and, as the same-run reference,
a bare `python -c pass` (the interpreter's own start-up, which no hook
written in Python can beat). Target: median under 50 ms.

    uv run python bench/hook.py [--rounds 50] [--waiting]

`--waiting` also times the non-empty case (one message: attempt, print,
stamp delivered in the store) for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SESSION = "bench-session-0000"


def hook_command() -> list[str]:
    script = Path(sys.executable).with_name("backchannel-owner-hook")
    if script.exists():
        return [str(script)]
    found = shutil.which("backchannel-owner-hook")
    if found is None:
        raise SystemExit("backchannel-owner-hook is not installed (uv sync --all-packages)")
    return [found]


def timed(command: list[str], payload: bytes, env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(command, input=payload, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed: {done.stderr.decode().strip()}")
    return elapsed


def prepare_waiting(folder: Path, env: dict[str, str]) -> None:
    """Store one waiting message for SESSION and write its marker, as serve does."""
    os.environ.update(env)
    from backchannel.store import SQLiteStore
    from backchannel_owner.inbox import InboxItem, write_marker
    from backchannel_owner.records import OwnerRecords

    async def make() -> None:
        store = SQLiteStore(folder / "bench.db")
        try:
            row = OwnerRecords(store.db).insert_message(
                time.time(),
                session_id=SESSION,
                direction="in",
                kind="message",
                account="tg",
                chat="1",
                text="switch to validation",
                status="waiting",
            )
        finally:
            await store.close()
        write_marker(
            InboxItem(
                {
                    "id": row.id,
                    "session_id": SESSION,
                    "text": row.text,
                    "store": str(folder / "bench.db"),
                    "created_at": row.created_at,
                }
            )
        )

    asyncio.run(make())


def report(name: str, timings: list[float], reference: list[float] | None = None) -> None:
    median = statistics.median(timings)
    line = f"{name:<34} min {min(timings) * 1000:7.1f} ms   median {median * 1000:7.1f} ms"
    if reference is not None:
        line += f"   x{median / statistics.median(reference):.2f} of the interpreter start"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--waiting", action="store_true", help="also time one waiting message")
    args = parser.parse_args()
    hook = hook_command()
    payload = json.dumps(
        {"session_id": SESSION, "hook_event_name": "PostToolUse", "tool_name": "Bash"}
    ).encode()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        env = {**os.environ, "BACKCHANNEL_OWNER_INBOX": str(folder / "inbox")}
        reference_command = [sys.executable, "-c", "pass"]
        for _ in range(3):  # warm the page cache for both
            timed(reference_command, b"", env)
            timed(hook, payload, env)
        reference, empty = [], []
        for _ in range(args.rounds):  # interleaved: both see the same machine load
            reference.append(timed(reference_command, b"", env))
            empty.append(timed(hook, payload, env))
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        print(f"{args.rounds} rounds, each a new process ({' '.join(hook)}); load average {load}")
        report("python -c pass (reference)", reference)
        report("hook, empty inbox", empty, reference)
        verdict = "meets" if statistics.median(empty) < 0.050 else "MISSES"
        print(f"target: median under 50 ms for the empty case: {verdict}")
        if args.waiting:
            waiting = []
            for _ in range(min(args.rounds, 20)):
                prepare_waiting(folder, env)
                waiting.append(timed(hook, payload, env))
            report("hook, one waiting message", waiting, reference)


if __name__ == "__main__":
    main()

"""CLI start-up: whole-process wall time of `backchannel --help` and `import backchannel`.

Each command is a fresh interpreter, as a person runs it. Rounds interleave
the commands (one of each per round) so a load swing on a shared machine hits
all of them alike; the reference is a bare `python -c pass` of the same
interpreter, measured in the same rounds. Bars (on an idle machine): `--help`
under 300 ms, `import backchannel` under 150 ms, both median of 20.

    uv run python bench/startup.py [--rounds 20]

Prints min and median per command, the median minus the bare interpreter's
median (the part backchannel adds), and the ratio of medians to it.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
BARS_MS = {"backchannel --help": 300.0, "import backchannel": 150.0}


def commands() -> dict[str, list[str]]:
    script = shutil.which("backchannel", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if script is None:
        raise SystemExit("the backchannel script is not installed next to this interpreter")
    return {
        "python -c pass (reference)": [sys.executable, "-c", "pass"],
        "import backchannel": [sys.executable, "-c", "import backchannel"],
        "backchannel --help": [script, "--help"],
    }


def wall(argv: list[str]) -> tuple[float, float]:
    """Return (wall seconds, CPU seconds: user + system) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    rounds = parser.parse_args().rounds
    runs = commands()
    for argv in runs.values():  # warm the file cache and .pyc files, not measured
        wall(argv)
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, argv in runs.items():
            elapsed, used = wall(argv)
            times[name].append(elapsed)
            cpu[name].append(used)
    reference = statistics.median(times["python -c pass (reference)"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cached = (
        "yes"
        if Path(__file__)
        .resolve()
        .parents[1]
        .joinpath("core", "src", "backchannel", "__pycache__")
        .is_dir()
        else "no"
    )
    print(
        f"{rounds} rounds, {os.cpu_count()} cpus, load average {load:.1f} at the end;"
        f" PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r},"
        f" core bytecode cached: {cached}"
    )
    print(
        f"{'command':<28} {'min ms':>7} {'median ms':>9} {'- python':>8} {'x python':>8}"
        f" {'cpu med ms':>10}  bar (wall median)"
    )
    for name, samples in times.items():
        median = statistics.median(samples)
        bar = BARS_MS.get(name)
        verdict = (
            "" if bar is None else f"{bar:.0f} ms: {'met' if median * 1000 < bar else 'NOT met'}"
        )
        print(
            f"{name:<28} {min(samples) * 1000:>7.1f} {median * 1000:>9.1f}"
            f" {(median - reference) * 1000:>8.1f} {median / reference:>8.2f}"
            f" {statistics.median(cpu[name]) * 1000:>10.1f}  {verdict}"
        )
    print(
        "wall time on a loaded machine includes waiting for a CPU; the CPU column is the work"
        " the process itself did"
    )


if __name__ == "__main__":
    main()

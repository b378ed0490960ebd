"""Every bench, one table: `make bench` runs this (aiogram comes in for the peer bench only).

Each bench runs in its own process and hands its figures over as JSON.
Ratios are within one run on the same machine; absolute figures on a shared
machine swing from run to run and are shown only for scale.

    uv run --frozen --with 'aiogram>=3,<4' python bench/all.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run(script: str, *arguments: str) -> Any:
    child = subprocess.run(
        [sys.executable, str(HERE / script), "--json", *arguments],
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        raise SystemExit(f"bench/{script} failed:\n{child.stderr[-2000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check that all run")
    args = parser.parse_args()
    quick = args.quick
    rows: list[tuple[str, str, str, str]] = []

    def median(values: list[float]) -> float:
        return statistics.median(values)

    ingest = run("ingest.py", *(("--events", "2000", "--rounds", "1") if quick else ()))
    rows.append(("ingest, ratio to the SQLite ceiling (best, cpu)", "min", "median", "target"))
    targets = {"poller": "≥ 0.75", "webhook": "≥ 0.60", "in-flight": "≥ 0.70"}
    for shape, label in (
        ("poller", "  poller (ingest_many of 100)"),
        ("webhook", "  webhook (40 in flight)"),
        ("in-flight", "  1,000 in flight"),
    ):
        one = ingest[shape]
        rows.append(
            (
                f"{label} ({one['best']:.2f}, {one['cpu']:.2f})",
                f"{one['min']:.2f}",
                f"{one['median']:.2f}",
                targets[shape],
            )
        )
    for size, ratio in ingest["smaller_transactions"].items():
        rows.append((f"  (plain apsw itself at {size} a transaction)", "", f"{ratio:.2f}", ""))
    rows.append(
        (
            "  (ceiling events/s, for scale)",
            f"{ingest['events'] / max(ingest['ceiling']['wall']):,.0f}",
            f"{ingest['ceiling']['events_per_second']:,.0f}",
            "",
        )
    )
    normalize = run("normalize.py", *(("--updates", "500", "--rounds", "1") if quick else ()))
    rows.append(("CPU per Telegram update", "min", "median", ""))
    for name in ("normalize", "normalize+storable"):
        rows.append(
            (
                f"  {name}",
                f"{normalize[name]['min']:.1f} µs",
                f"{normalize[name]['median']:.1f} µs",
                "",
            )
        )
    latency = run("latency.py", *(("--seconds", "1") if quick else ()))
    rows.append(("latency at 100 events/s, 50 conversations", "p95", "p99", "target p99"))
    rows.append(
        (
            "  message -> commit",
            f"{latency['commit']['p95']:.2f} ms",
            f"{latency['commit']['p99']:.2f} ms",
            "≤ 1.5 ms",
        )
    )
    rows.append(
        (
            "  message -> agent invoked",
            f"{latency['agent']['p95']:.2f} ms",
            f"{latency['agent']['p99']:.2f} ms",
            "≤ 4 ms",
        )
    )
    runs = run("runs.py", *(("--conversations", "20", "--rounds", "1") if quick else ()))
    rows.append(("one run's framework overhead (50 messages)", "min", "median", "target"))
    rows.append(
        (
            "  poke -> begin, window, framing, finish",
            f"{runs['min_us']:.0f} µs",
            f"{runs['median_us']:.0f} µs",
            "≤ 300 µs",
        )
    )
    rows.append(
        (
            "  the same, run lately (window kept)",
            f"{runs['recent_min_us']:.0f} µs",
            f"{runs['recent_median_us']:.0f} µs",
            "≤ 300 µs",
        )
    )
    memory = run("memory.py", "--sizes", *(("2000",) if quick else ("10000", "50000")))
    rows.append(("RSS per idle conversation", "", "", ""))
    for one in memory["sizes"]:
        rows.append(
            (
                f"  at {one['conversations']:,} conversations",
                "",
                f"{one['bytes_per_conversation']:,.0f} B",
                "≤ 1 KB",
            )
        )
    if importlib.util.find_spec("aiogram") is not None:
        peer = run("peer_aiogram.py", *(("--events", "2000", "--rounds", "1") if quick else ()))
        rows.append(("ours ÷ aiogram feed_raw_update (>1 = faster)", "min", "median", "target"))
        for key, label in (
            ("normalize", "  normalize alone"),
            ("poller", "  poller, durable"),
            ("webhook", "  webhook, durable"),
            ("in-flight", "  1,000 in flight, durable"),
        ):
            rows.append(
                (
                    label,
                    f"{min(peer[key]):.2f}",
                    f"{median(peer[key]):.2f}",
                    "> 1" if key != "normalize" else "",
                )
            )
    else:
        rows.append(("aiogram not installed: peer bench skipped", "", "", ""))
    print(
        f"backchannel benches on {platform.machine()} {platform.python_implementation()}"
        f" {platform.python_version()}, {os.cpu_count()} cores, 1-minute load now"
        f" {os.getloadavg()[0]:.1f}"
    )
    for label, low, mid, target in rows:
        print(f"{label:<48} {low:>12} {mid:>12} {target:>10}")


if __name__ == "__main__":
    main()

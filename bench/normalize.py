"""CPU per update of turning a raw Telegram update into a checked Event.

The real Telegram adapter's `normalize` (and then `storable_event`, the check
every event passes before it joins a transaction) runs over the bench's real
update shapes (bench/telegram_updates.py: the adapter's real-payload fixtures,
ids varied). Prints CPU µs per update (process time, so other jobs on a shared
machine disturb it less than wall time), min and median over rounds (each
round the best of three passes over the same updates), for normalize alone
and for normalize + storable.

With ``--against REV`` the same measurement also runs, interleaved round by
round in child processes, on the normalize/model/storable sources of git
revision REV (exported to a temporary folder, put first on the child's
``PYTHONPATH``), and prints each figure's ratio to that reference.

    uv run python bench/normalize.py [--updates N] [--rounds N] [--against REV] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from backchannel.storable import storable_event
from figures import bench_parser, emit
from telegram_updates import ACCOUNT, make_adapter, message_shapes, updates

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("normalize", "normalize+storable")
#: the source folders a reference revision is taken from
_SOURCES = ("core/src", "plugins/telegram/src")


def one_round(count: int, conversations: int, passes: int = 3) -> dict[str, float]:
    """Return µs per update of normalize and of normalize + storable: the best of `passes`."""
    shapes = message_shapes()
    batch = list(updates(count, conversations, shapes=shapes))
    adapter = make_adapter()
    normalize = adapter.normalize
    best = {name: float("inf") for name in FIGURES}
    enabled = gc.isenabled()
    gc.disable()  # the collector's pauses belong to the ingest bench, not to this one
    try:
        for _ in range(passes):
            start = time.process_time()
            for update in batch:
                normalize(update)
            alone = time.process_time() - start
            start = time.process_time()
            for update in batch:
                event = normalize(update)
                assert event is not None
                checked = storable_event(event, ACCOUNT)
                assert not isinstance(checked, str), checked
            both = time.process_time() - start
            best["normalize"] = min(best["normalize"], alone / count * 1e6)
            best["normalize+storable"] = min(best["normalize+storable"], both / count * 1e6)
    finally:
        if enabled:
            gc.enable()
    return best


def _export(revision: str, folder: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, *_SOURCES],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")


def _child_round(sources: Path | None, count: int, conversations: int) -> dict[str, float]:
    environment = dict(os.environ)
    if sources is not None:
        paths = [str(sources / part) for part in _SOURCES]
        environment["PYTHONPATH"] = os.pathsep.join([*paths, environment.get("PYTHONPATH", "")])
    command = [sys.executable, __file__, "--child", "--updates", str(count)]
    command += ["--conversations", str(conversations)]
    printed = subprocess.run(
        command, check=True, capture_output=True, text=True, env=environment
    ).stdout
    figures: dict[str, float] = json.loads(printed)
    return figures


def _summary(samples: list[float]) -> dict[str, float]:
    return {"min": min(samples), "median": statistics.median(samples)}


def measure(
    count: int, conversations: int, rounds: int, against: str | None = None
) -> dict[str, Any]:
    """Return min/median µs per update for each figure (and the reference's, with `against`)."""
    now: dict[str, list[float]] = {name: [] for name in FIGURES}
    then: dict[str, list[float]] = {name: [] for name in FIGURES}
    ratios: dict[str, list[float]] = {name: [] for name in FIGURES}
    with tempfile.TemporaryDirectory() as folder:
        reference = None
        if against is not None:
            reference = Path(folder)
            _export(against, reference)
        for _ in range(rounds):
            if reference is None:
                current = one_round(count, conversations)
            else:
                current = _child_round(None, count, conversations)
                old = _child_round(reference, count, conversations)
                for name in FIGURES:
                    then[name].append(old[name])
                    ratios[name].append(current[name] / old[name])
            for name in FIGURES:
                now[name].append(current[name])
    figures: dict[str, Any] = {
        "updates": count,
        "rounds": rounds,
        **{name: _summary(now[name]) for name in FIGURES},
    }
    if against is not None:
        figures["against"] = against
        figures["reference"] = {name: _summary(then[name]) for name in FIGURES}
        figures["ratio"] = {name: _summary(ratios[name]) for name in FIGURES}
    return figures


def report(figures: dict[str, Any]) -> None:
    print(f"CPU µs per Telegram update ({figures['updates']} updates, {figures['rounds']} rounds)")
    print(f"  {'':<20} {'min':>8} {'median':>8}")
    for name in FIGURES:
        print(f"  {name:<20} {figures[name]['min']:8.2f} {figures[name]['median']:8.2f}")
    if "reference" in figures:
        print(f"reference: the same at {figures['against']}")
        for name in FIGURES:
            old = figures["reference"][name]
            print(f"  {name:<20} {old['min']:8.2f} {old['median']:8.2f}")
        print("ratio now / reference, per round")
        for name in FIGURES:
            ratio = figures["ratio"][name]
            print(f"  {name:<20} {ratio['min']:8.2f} {ratio['median']:8.2f}")


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against", metavar="REV", help="also measure git revision REV")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_round(args.updates, args.conversations)))
        return
    figures = measure(args.updates, args.conversations, args.rounds, args.against)
    emit(figures, args.json, report)


if __name__ == "__main__":
    main()

"""What the benches share: their command line's --json and how they print their figures."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by the bench's docstring, with --json already added."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


def emit(figures: dict[str, Any], as_json: bool, report: Callable[[dict[str, Any]], None]) -> None:
    """Print `figures` as one JSON line (for bench/all.py) or as the bench's table."""
    if as_json:
        json.dump(figures, sys.stdout)
        print()
    else:
        report(figures)

"""Each bench script runs end to end at a tiny size (the figures themselves are not checked)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(autouse=True)
def bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))


def test_ingest_runs_every_shape_against_the_ceiling() -> None:
    import ingest

    figures = ingest.measure(events=300, conversations=30, rounds=1)
    for shape in ingest.SHAPES:
        assert figures[shape]["median"] > 0
        assert figures[shape]["cpu"] > 0
    # each shape's own transaction size: a poll commits 100 at most, 40 connections 40
    assert figures["poller"]["per_transaction"] == 100
    assert figures["webhook"]["per_transaction"] <= 40
    assert set(figures["smaller_transactions"]) == {"100", "40"}


def test_latency_measures_commit_and_agent_percentiles() -> None:
    import latency

    figures = asyncio.run(latency.measure(seconds=0.3, rate=100, conversations=5, trace=True))
    assert figures["commit"]["count"] == 30
    # every message is counted, also those a run took together with later ones
    assert figures["agent"]["count"] == 30
    assert figures["trace"]["checkpoints"]["inline"] == 0


def test_runs_measures_the_overhead_of_each_run() -> None:
    import runs

    figures = asyncio.run(runs.measure(conversations=3, history=60, rounds=1))
    assert figures["runs"] == 3
    assert figures["recent_runs"] == 3 * 2  # two rounds after the one that keeps the windows
    assert figures["window"] == 50
    assert figures["ratio_median"] > 0  # to the same-run reference: apsw reading a window
    assert figures["typing_calls"] == 0  # the no-op agent's typing task never sends


def test_memory_measures_rss_per_conversation() -> None:
    import memory

    figures = asyncio.run(memory.measure_one(200, warm_up=20))
    assert figures["stored"] == 200 and figures["runs"] == 200


def test_the_peer_bench_is_not_a_dependency() -> None:
    text = (BENCH / "peer_aiogram.py").read_text()
    assert "--with 'aiogram" in text
    root = BENCH.parent
    projects = [root / "pyproject.toml", root / "core/pyproject.toml"]
    for pyproject in [*projects, *root.glob("plugins/*/pyproject.toml")]:
        assert "aiogram" not in pyproject.read_text(), pyproject
    assert "aiogram" not in (root / "uv.lock").read_text()
    assert "aiogram" not in sys.modules


def test_storable_prints_the_check_cost_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    import storable

    asyncio.run(storable.main(200, 1))
    printed = capsys.readouterr().out
    assert "reference: append_inbound" in printed
    for kind in ("ascii", "unicode", "meta", "surrogate"):
        assert f"storable_event, {kind}" in printed


def test_normalize_prints_the_cost_per_update(capsys: pytest.CaptureFixture[str]) -> None:
    import normalize

    figures = normalize.measure(count=200, conversations=20, rounds=1)
    for name in normalize.FIGURES:
        assert figures[name]["median"] > 0
    normalize.report(figures)
    assert "normalize+storable" in capsys.readouterr().out

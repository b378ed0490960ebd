"""Memory kept per conversation is bounded: LRU caches in the store, idle slots forgotten."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
from backchannel.runs import Run
from backchannel.store import Inbound, SQLiteStore
from backchannel.store import sqlite as sqlite_module
from backchannel.store.cache import LRUCache
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import FakeChannel, RecordingAgent
from backchannel.testing.store_contract import make_event


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now "b" is the least recently used
    cache.put("c", 3)
    assert "b" not in cache
    assert (cache.get("a"), cache.get("c"), len(cache)) == (1, 3, 2)


async def test_conversations_evicted_from_the_caches_keep_their_numbering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "CACHED_CONVERSATIONS", 3)
    store = SQLiteStore(tmp_path / "bc.db")
    for round_number in (1, 2):
        results = await store.append_inbound(
            [Inbound(make_event(f"e{round_number}-{chat}", chat=f"c{chat}")) for chat in range(10)]
        )
        assert [r.seq for r in results] == [round_number] * 10
    assert len(store._conversation_ids) <= 3
    assert len(store._known_counters) <= 3
    assert len(store._known_participants) <= 3
    (participant,) = await store.participants(results[0].conversation_id)
    assert participant.message_count == 2
    await store.close()


async def test_the_page_cache_stays_within_its_bound_as_the_database_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "PAGE_CACHE_KIB", 256)
    store = SQLiteStore(tmp_path / "pages.db")
    for batch in range(10):
        await store.append_inbound(
            [
                Inbound(make_event(f"e{batch}-{chat}", "x" * 400, chat=f"c{batch}-{chat}"))
                for chat in range(200)
            ]
        )
    database = (tmp_path / "pages.db").stat().st_size + (tmp_path / "pages.db-wal").stat().st_size
    assert database > 1024 * 1024  # four times the cache: an unbounded cache would hold it all
    cache_used, _ = store.db.status(apsw.SQLITE_DBSTATUS_CACHE_USED)
    assert cache_used <= 1.25 * 256 * 1024, f"the page cache holds {cache_used:,} bytes"
    await store.close()


async def test_idle_conversations_leave_no_scheduling_state(store: SQLiteStore) -> None:
    channel = FakeChannel()
    agent = RecordingAgent(lambda run: None)
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    for chat in range(300):
        channel.platform.user_says("hello", chat=f"c{chat}")
    await agent.wait_runs(300)
    await board.wait_idle()
    assert board.scheduler._slots == {}
    # the dict was copied once the burst was over: it does not keep its peak size
    assert board.scheduler._slots_peak < 300
    await board.stop()


async def test_runs_waiting_for_a_place_are_queued_not_held_as_tasks(store: SQLiteStore) -> None:
    channel = FakeChannel()
    gate = asyncio.Event()
    started: list[int] = []
    tasks_seen: list[int] = []

    async def agent(run: Run) -> None:
        started.append(run.conversation.id)
        tasks_seen.append(sum(not task.done() for task in board.scheduler._tasks))
        await gate.wait()

    board = Switchboard(store, max_concurrent_runs=2)
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    for chat in range(50):
        channel.platform.user_says("hello", chat=f"c{chat}")
    # every message committed and due while the first two runs hold both places
    await _until(lambda: board.counters["stored"] == 50 and len(started) == 2)
    gate.set()
    await board.wait_idle()
    assert len(set(started)) == 50
    assert max(tasks_seen) <= 2


async def _until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll a cheap in-memory predicate on each loop turn (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)

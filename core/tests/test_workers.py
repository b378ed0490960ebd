"""Several workers on one PostgreSQL store, in one process: leases, takeover, run claims.

Short leases (2 s, heartbeat 0.5 s) keep these quick; the defaults (10 s, 3 s) are
checked by the documented bound. The multi-process kill test is test_workers_kill.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from backchannel import Binding, Switchboard
from backchannel.cli import main
from backchannel.runs import Run
from backchannel.store.postgres import PostgresStore
from backchannel.testing import RecordingAgent
from backchannel.testing.fake_channel import FakeChannelAdapter, FakePlatform
from backchannel.workers import (
    DEFAULT_HEARTBEAT,
    DEFAULT_LEASE_TTL,
    WorkerCoordinator,
)
from click.testing import CliRunner

TTL = 2.0
BEAT = 0.5


class WebhookFakeAdapter(FakeChannelAdapter):
    """The fake channel as a webhook account: every worker receives (no polling)."""

    served_by_every_worker = True

    async def start(self, ctx: Any) -> None:
        self._ctx = ctx
        self.me = None


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    """Await `check()` turning true (re-asked every 50 ms); return how long it took."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


@pytest.fixture
async def boards(postgres_url: str) -> AsyncIterator[Callable[..., Awaitable[Switchboard]]]:
    made: list[Switchboard] = []

    async def make(name: str, adapter: Any, agent: Any, **binding: Any) -> Switchboard:
        store = PostgresStore(postgres_url, worker=name)
        board = Switchboard(store)
        board.add_account(adapter, Binding(agent, respond="always", **binding), name="fake")
        board.workers = WorkerCoordinator(board, store, lease_ttl=TTL, heartbeat=BEAT)
        await board.start()
        made.append(board)
        return board

    yield make
    for board in made:
        await board.stop()


def test_the_default_takeover_bound_is_within_fifteen_seconds() -> None:
    assert DEFAULT_LEASE_TTL + DEFAULT_HEARTBEAT <= 15


async def test_a_polling_account_runs_on_one_worker_and_moves_when_it_dies(
    boards: Callable[..., Awaitable[Switchboard]], postgres_url: str
) -> None:
    platform = FakePlatform()
    agent = RecordingAgent(lambda run: "ok")
    first = await boards("w1", FakeChannelAdapter("fake", {}, platform), agent)
    second = await boards("w2", FakeChannelAdapter("fake", {}, platform), agent)
    assert first.workers is not None and second.workers is not None
    assert first.workers.owned == {"fake"} and second.workers.owned == set()
    platform.user_says("one")
    await agent.wait_runs(1)
    # w1 dies without a word: its heartbeats stop, its adapter stops polling
    for task in first.workers._tasks:
        task.cancel()
    await first.accounts["fake"].adapter.stop()
    took = await until(
        lambda: asyncio.sleep(0, "fake" in second.workers.owned),  # type: ignore[union-attr]
        TTL + BEAT + 5,
        "takeover by w2",
    )
    assert took <= TTL + BEAT + 1.0, took
    platform.user_says("two")
    await agent.wait_runs(2)
    await second.wait_idle()
    assert [s.text for s in platform.sent] == ["ok", "ok"]
    store = PostgresStore(postgres_url)
    assert (await store.leases())["fake"][0] == "w2"
    report = {w["name"]: w for w in await store.workers_report()}
    assert report["w2"]["accounts"] == ["fake"]
    await store.close()


async def test_a_clean_stop_hands_the_account_over_at_once(
    boards: Callable[..., Awaitable[Switchboard]],
) -> None:
    platform = FakePlatform()
    agent = RecordingAgent(lambda run: "ok")
    first = await boards("w1", FakeChannelAdapter("fake", {}, platform), agent)
    second = await boards("w2", FakeChannelAdapter("fake", {}, platform), agent)
    assert second.workers is not None
    await first.stop()
    # the released lease is announced (NOTIFY): w2 takes it before its lease could lapse
    took = await until(
        lambda: asyncio.sleep(0, "fake" in second.workers.owned),  # type: ignore[union-attr]
        TTL,
        "handover to w2",
    )
    assert took < TTL
    platform.user_says("after the handover")
    await agent.wait_runs(1)


async def test_one_run_per_conversation_across_workers_and_every_message_answered(
    boards: Callable[..., Awaitable[Switchboard]], postgres_url: str
) -> None:
    platform = FakePlatform()
    running: dict[int, int] = {}
    most: dict[int, int] = {}

    async def overlap_watch(run: Run) -> None:
        conversation = run.conversation.id
        running[conversation] = running.get(conversation, 0) + 1
        most[conversation] = max(most.get(conversation, 0), running[conversation])
        await asyncio.sleep(0.02)  # long enough for the other worker to try the same chat
        running[conversation] -= 1

    agent = RecordingAgent(
        lambda run: f"answer to {run.trigger.text if run.trigger else ''}", action=overlap_watch
    )
    workers = [
        await boards(f"w{n}", WebhookFakeAdapter("fake", {}, platform), agent) for n in range(3)
    ]
    # a load balancer spreads one burst per chat over the three workers
    sends = []
    for n in range(60):
        raw = platform.make_message(f"m{n}", chat=f"c{n % 4}")
        sends.append(workers[n % 3].ingest("fake", raw))
    await asyncio.gather(*sends)
    store = PostgresStore(postgres_url)

    async def all_answered() -> bool:
        return not await store.unhandled()

    await until(all_answered, 30, "every conversation answered")
    for board in workers:
        await board.wait_idle()
    assert max(most.values()) == 1
    conversations = await store.conversations()
    assert len(conversations) == 4
    for conversation in conversations:
        window = await store.window(conversation.id, 500)
        assert [m.seq for m in window] == list(range(1, conversation.last_seq + 1))
        assert conversation.handled_seq >= max(m.seq for m in window if m.direction == "in")
    runs = await store.runs(limit=500)
    assert all(run.status == "ok" for run in runs)
    assert len(platform.sent) == len(runs)  # one send per run, none doubled
    await store.close()


async def test_a_workers_run_sends_into_another_conversation(
    boards: Callable[..., Awaitable[Switchboard]], postgres_url: str
) -> None:
    """A run's send elsewhere (send_to_conversation, an ask) is fenced by the run's own
    conversation's claim: the target, which no one claims, does not refuse it."""
    from backchannel.model import Address
    from backchannel.orchestration.tools import deliver_cross

    platform = FakePlatform()
    outcomes: list[str] = []
    done = asyncio.Event()

    async def relay(run: Run) -> None:
        try:
            target = await run_board.store.ensure_conversation(Address("fake", "other-chat"))
            outcome = await deliver_cross(
                run_board,
                target,
                "relayed",
                origin_key=run.conversation.address.key,
                run_id=run.session.run_id,
            )
            outcomes.append(outcome.state)
        except Exception as error:
            outcomes.append(f"{type(error).__name__}: {error}")
        finally:
            done.set()

    run_board = await boards("w1", WebhookFakeAdapter("fake", {}, platform), relay)
    await run_board.ingest("fake", platform.make_message("m1", chat="c1"))
    await asyncio.wait_for(done.wait(), 30)
    await run_board.wait_idle()
    assert outcomes == ["sent"]
    assert [(sent.chat, sent.text) for sent in platform.sent] == [("other-chat", "relayed")]


async def test_backchannel_workers_lists_workers_accounts_and_leases(
    boards: Callable[..., Awaitable[Switchboard]], postgres_url: str, tmp_path: Path
) -> None:
    platform = FakePlatform()
    agent = RecordingAgent()
    await boards("w1", FakeChannelAdapter("fake", {}, platform), agent)
    config = tmp_path / "bc.toml"
    config.write_text(f'[store]\nurl = "{postgres_url}"\n\n[accounts.fake]\nchannel = "webchat"\n')

    def invoke(*args: str) -> Any:
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    shown = await asyncio.to_thread(invoke, "workers", "-c", str(config))
    assert shown.exit_code == 0, shown.output
    assert "w1" in shown.output and "alive" in shown.output
    assert "lease fake: w1" in shown.output
    as_json = await asyncio.to_thread(invoke, "workers", "-c", str(config), "--json")
    data = json.loads(as_json.output)
    assert data["leases"]["fake"]["worker"] == "w1"
    assert [w["accounts"] for w in data["workers"]] == [["fake"]]


def test_serve_worker_needs_a_postgresql_store(tmp_path: Path) -> None:
    config = tmp_path / "bc.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "bc.db"}"\n')
    result = CliRunner().invoke(main, ["serve", "-c", str(config), "--worker", "w1"])
    assert result.exit_code == 1
    assert "--worker w1 needs a shared store: set [store] url" in result.output


async def test_serve_as_a_named_worker_takes_the_lease_of_its_accounts(
    postgres_url: str, tmp_path: Path
) -> None:
    from backchannel.app import serve
    from backchannel.config import load_config

    config_file = tmp_path / "bc.toml"
    config_file.write_text(f'[store]\nurl = "{postgres_url}"\n\n[server]\nport = 0\n')
    config = load_config(config_file)
    stop = asyncio.Event()
    ready: asyncio.Future[Switchboard] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        serve(config, on_ready=ready.set_result, stop=stop, worker="web-1", lease_ttl=4.0)
    )
    board = await asyncio.wait_for(ready, 60)
    assert board.workers is not None and board.workers.owned == {"webchat"}
    assert (board.workers.lease_ttl, board.workers.heartbeat) == (4.0, pytest.approx(1.2))
    store = PostgresStore(postgres_url)
    assert (await store.leases())["webchat"][0] == "web-1"
    stop.set()
    await asyncio.wait_for(serving, 60)
    assert await store.leases() == {}  # a clean stop hands its leases back
    (worker,) = await store.workers_report()
    assert (worker["name"], worker["stopped_at"] is not None) == ("web-1", True)
    await store.close()


class _StubStore:
    """What a worker's heartbeat asks of its store, counted (no database)."""

    def __init__(self) -> None:
        self.recovered = 0
        self.asked_leases = 0
        self.failing = 0
        self.slow = 0.0
        self.slow_lease = 0.0
        self.heartbeat_delay = 0.0

    def _me(self) -> str:
        return "w1"

    async def heartbeat(self, ttl: float) -> set[str]:
        await asyncio.sleep(self.heartbeat_delay)  # waiting in the pool's queue
        if self.failing:
            self.failing -= 1
            raise OSError("connection refused")
        return set()

    async def recover_dead_workers(self, ttl: float) -> dict[str, list[Any]]:
        self.recovered += 1
        await asyncio.sleep(self.slow)  # a peer's rows another transaction holds
        return {}

    async def acquire_lease(self, account: str, ttl: float) -> None:
        self.asked_leases += 1
        await asyncio.sleep(self.slow_lease)  # a stalled peer holds the lease's row

    async def keep_handoffs_waiting(self, accounts: Any, within: float) -> None:
        return None

    async def unhandled(self) -> list[Any]:
        return []


def _stub_worker(store: _StubStore, lease_ttl: float = 2.0, heartbeat: float = 0.5) -> Any:
    from types import SimpleNamespace

    from backchannel.workers import WorkerCoordinator

    account = SimpleNamespace(adapter=object(), started=False)
    board = SimpleNamespace(accounts={"tg": account})
    worker = WorkerCoordinator(board, store, lease_ttl=lease_ttl, heartbeat=heartbeat)  # type: ignore[arg-type]
    worker._closing = True  # (no sends to take here)
    return worker


async def test_a_worker_back_from_an_outage_takes_no_peer_for_dead_for_one_lease_time() -> None:
    # both workers lost the database (a restart longer than the lease): the first back
    # "recovered" the other, alive and just as cut off, so its sends in flight became
    # uncertain and its runs interrupted
    store = _StubStore()
    worker = _stub_worker(store)
    await worker._beat()
    assert (store.recovered, store.asked_leases) == (1, 1)  # an ordinary beat
    worker._beat_at = time.monotonic() - 5.0  # cut off for longer than the lease
    await worker._beat()
    await worker._beat()
    assert (store.recovered, store.asked_leases) == (1, 1)  # waits one lease time
    worker._back_until = time.monotonic() - 0.01  # that time has passed
    await worker._beat()
    assert (store.recovered, store.asked_leases) == (2, 2)
    # a heartbeat that began before the outage and waited it out in the pool's queue
    quick = _stub_worker(store, lease_ttl=0.4, heartbeat=0.1)
    await quick._beat()
    assert (store.recovered, store.asked_leases) == (3, 3)
    store.heartbeat_delay = 0.5
    await quick._beat()
    assert (store.recovered, store.asked_leases) == (3, 3)


async def test_a_slow_part_of_a_heartbeat_is_cut_short_and_an_outage_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a table locked (or a peer's rows held) kept the beat from returning: no heartbeat,
    # the leases lapsed, and live workers took each other for dead; and a database away
    # wrote a warning every beat
    store = _StubStore()
    store.slow = 30.0
    worker = _stub_worker(store, lease_ttl=0.3, heartbeat=0.05)
    started = time.monotonic()
    await worker._beat()  # the whole beat shares a budget of half the lease less a beat
    assert time.monotonic() - started < 5.0 and store.recovered == 1
    assert "ran out of time at recovering dead workers" in caplog.text
    store.slow, store.slow_lease = 0.0, 30.0  # a stalled peer's lease row
    started = time.monotonic()
    await worker._beat()
    assert time.monotonic() - started < 5.0 and store.asked_leases == 1
    assert "ran out of time at taking account tg" in caplog.text
    store.slow_lease = 0.0
    store.slow, store.failing = 0.0, 12
    beats = asyncio.create_task(worker._heartbeats())
    try:
        for _ in range(500):
            if "heartbeats again" in caplog.text:
                break
            await asyncio.sleep(0.01)
    finally:
        beats.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beats
    assert store.failing == 0 and "heartbeats again" in caplog.text
    assert caplog.text.count("heartbeat failed") == 1

"""Asks across workers: the answer is matched where it arrives (the peer account's lease
holder) and reported where the asking conversation runs (the origin account's holder),
through the adapter started there, once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from attrs import evolve
from backchannel import Binding, Switchboard
from backchannel.asks import AskCoordinator, AskSettings
from backchannel.model import Address
from backchannel.runs import Run
from backchannel.store.postgres import PostgresStore
from backchannel.testing.fake_channel import FakeChannelAdapter, FakePlatform
from backchannel.workers import WorkerCoordinator

TTL = 2.0
BEAT = 0.5


class Recorded(FakeChannelAdapter):
    """The fake channel, saying which worker's adapter sent and whether it was started."""

    def __init__(self, account: str, platform: FakePlatform, worker: str, sends: list[Any]):
        super().__init__(account, {}, platform)
        self.worker = worker
        self.sends = sends
        if account == "tp":
            self.capabilities = evolve(self.capabilities, agent_peers=True)

    async def send(self, outbound: Any) -> Any:
        self.sends.append((self.worker, self.account, self._task is not None, outbound.text))
        return await super().send(outbound)


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        await asyncio.sleep(0.05)


@pytest.fixture
async def stopped_at_end() -> AsyncIterator[list[Switchboard]]:
    boards: list[Switchboard] = []
    yield boards
    for board in boards:
        await board.stop()


async def test_an_answer_is_reported_by_the_worker_running_the_asking_conversation(
    postgres_url: str, stopped_at_end: list[Switchboard]
) -> None:
    web, tp = FakePlatform(), FakePlatform()
    sends: list[tuple[str, str, bool, str]] = []

    async def agent(run: Run) -> None:
        if run.tool_names == ["send_message"]:  # the reporter run
            await run.call("send_message", {"text": "the peer says 42"})

    setup = PostgresStore(postgres_url, worker="w2")
    await setup.register_worker("host", 2)
    origin = await setup.ensure_conversation(Address("web", "owner"))
    session = await setup.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    await setup.record_ask(
        origin_conversation_id=origin.id,
        origin_seq=None,
        peer_conversation_id=session.id,
        question="what is 6*7?",
        deadline=time.time() + 3600,
    )
    assert await setup.acquire_lease("tp", 30.0) == ""  # w2 holds tp; w1 will take web
    await setup.close()

    for name in ("w1", "w2"):
        store = PostgresStore(postgres_url, worker=name)
        board = Switchboard(store)
        for account, platform in (("web", web), ("tp", tp)):
            adapter = Recorded(account, platform, name, sends)
            board.add_account(adapter, Binding(agent, respond="always"), name=account)
        AskCoordinator(board, AskSettings(report="run")).attach()
        board.workers = WorkerCoordinator(board, store, lease_ttl=TTL, heartbeat=BEAT)
        await board.start()
        stopped_at_end.append(board)
    w1, w2 = stopped_at_end
    assert w1.workers is not None and w2.workers is not None
    assert (w1.workers.owned, w2.workers.owned) == ({"web"}, {"tp"})

    tp.user_says("42", chat="peer", thread="s1", sender="peer")  # read by w2's poller

    async def reported() -> bool:
        return any(send[1] == "web" for send in sends)

    await until(reported, 20, "the report")
    for board in stopped_at_end:
        await board.wait_idle()
    # sent once, by w1 (web's holder), through its started adapter
    assert sends == [("w1", "web", True, "the peer says 42")]
    check = PostgresStore(postgres_url)
    [ask] = await check.asks()
    assert ask.state == "answered" and ask.answer_seq is not None
    await check.close()

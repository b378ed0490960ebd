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
from backchannel.testing import RecordingAgent
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


async def two_workers(
    postgres_url: str,
    agent: Any,
    web: FakePlatform,
    tp: FakePlatform,
    sends: list[Any],
    boards: list[Switchboard],
) -> tuple[Switchboard, Switchboard]:
    """w1 and w2 on one store, each with both accounts; w2 took tp's lease first."""
    for name in ("w1", "w2"):
        store = PostgresStore(postgres_url, worker=name)
        board = Switchboard(store)
        for account, platform in (("web", web), ("tp", tp)):
            adapter = Recorded(account, platform, name, sends)
            board.add_account(adapter, Binding(agent, respond="always"), name=account)
        AskCoordinator(board, AskSettings(report="run")).attach()
        board.workers = WorkerCoordinator(board, store, lease_ttl=TTL, heartbeat=BEAT)
        await board.start()
        boards.append(board)
    w1, w2 = boards
    assert w1.workers is not None and w2.workers is not None
    assert (w1.workers.owned, w2.workers.owned) == ({"web"}, {"tp"})
    return w1, w2


async def _hold_tp_for_w2(postgres_url: str) -> None:
    setup = PostgresStore(postgres_url, worker="w2")
    await setup.register_worker("host", 2)
    assert await setup.acquire_lease("tp", 30.0) == ""  # w2 holds tp; w1 will take web
    await setup.close()


async def test_nothing_is_sent_through_an_account_another_worker_holds(
    postgres_url: str, stopped_at_end: list[Switchboard]
) -> None:
    """w1 does not hold tp: its adapter there is not started. An ask, a send into another
    conversation and an operator send through it are refused in one line, nothing sent."""
    from backchannel.asks.asking import AskRefused, ask_peer
    from backchannel.errors import Rejected
    from backchannel.orchestration.refusals import Refused
    from backchannel.orchestration.tools import deliver_cross

    web, tp = FakePlatform(), FakePlatform()
    sends: list[tuple[str, str, bool, str]] = []
    await _hold_tp_for_w2(postgres_url)
    w1, _ = await two_workers(postgres_url, RecordingAgent(), web, tp, sends, stopped_at_end)
    origin = await w1.store.ensure_conversation(Address("web", "owner"))
    session = await w1.store.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    with pytest.raises(AskRefused, match="connected on another worker"):
        await ask_peer(w1, AskSettings(), origin=origin, origin_seq=None, account="tp",
                       peer="peer", question="6*7?")  # fmt: skip
    with pytest.raises(Refused, match="connected on another worker"):
        await deliver_cross(w1, session, "hello", origin_key=origin.address.key)
    with pytest.raises(Rejected, match="connected on another worker"):
        await w1.send_outcome(session, "hello")
    assert sends == [] and tp.sent == []
    assert await w1.store.outbox(conversation_id=session.id) == []


async def test_an_answer_is_reported_by_the_worker_running_the_asking_conversation(
    postgres_url: str, stopped_at_end: list[Switchboard]
) -> None:
    web, tp = FakePlatform(), FakePlatform()
    sends: list[tuple[str, str, bool, str]] = []

    async def agent(run: Run) -> None:
        if run.tool_names == ["send_message"]:  # the reporter run
            await run.call("send_message", {"text": "the peer says 42"})

    setup = PostgresStore(postgres_url)
    origin = await setup.ensure_conversation(Address("web", "owner"))
    session = await setup.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    await setup.record_ask(
        origin_conversation_id=origin.id,
        origin_seq=None,
        peer_conversation_id=session.id,
        question="what is 6*7?",
        deadline=time.time() + 3600,
    )
    await setup.close()
    await _hold_tp_for_w2(postgres_url)

    await two_workers(postgres_url, agent, web, tp, sends, stopped_at_end)

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


@pytest.mark.parametrize("owed", ["report", "expiry notice"])
async def test_a_worker_starting_makes_what_is_owed_to_its_conversations_at_once(
    postgres_url: str, stopped_at_end: list[Switchboard], owed: str
) -> None:
    """Owed before the start (an answer matched, or an ask expired, while no worker ran):
    the ask coordinator starts before the worker takes its leases, so taking one wakes it;
    waiting for the next sweep could take an hour."""
    from backchannel.store import Inbound
    from backchannel.testing.store_contract import make_event

    web, tp = FakePlatform(), FakePlatform()
    sends: list[tuple[str, str, bool, str]] = []
    setup = PostgresStore(postgres_url)
    origin = await setup.ensure_conversation(Address("web", "owner"))
    session = await setup.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    await setup.record_ask(
        origin_conversation_id=origin.id,
        origin_seq=None,
        peer_conversation_id=session.id,
        question="what is 6*7?",
        deadline=time.time() + (3600 if owed == "report" else -1),
    )
    if owed == "report":
        answer = make_event("a1", "42", chat="peer", account="tp", thread="s1")
        [stored] = await setup.append_inbound([Inbound(answer)])
        assert await setup.correlate_reply(session.id, stored.seq or 0) is not None
    await setup.close()
    store = PostgresStore(postgres_url, worker="w1")
    board = Switchboard(store)
    for account, platform in (("web", web), ("tp", tp)):
        adapter = Recorded(account, platform, "w1", sends)
        board.add_account(adapter, Binding(RecordingAgent(), respond="always"), name=account)
    AskCoordinator(board, AskSettings(report="verbatim")).attach()
    board.workers = WorkerCoordinator(board, store, lease_ttl=TTL, heartbeat=BEAT)
    await board.start()
    stopped_at_end.append(board)

    async def posted() -> bool:
        return any(send[1] == "web" for send in sends)

    await until(posted, 20, f"the {owed}")
    [(worker, account, started, text)] = sends
    assert (worker, account, started) == ("w1", "web", True)
    assert ("42" in text) if owed == "report" else ("No answer" in text)

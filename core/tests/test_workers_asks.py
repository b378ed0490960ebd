"""Asks and sends across workers: a send through an account another worker holds is
handed to that worker; an answer is matched where it arrives (the peer account's lease
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
from backchannel.workers import WorkerCoordinator, send_elsewhere

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


async def test_sends_through_an_account_another_worker_holds_are_handed_to_it(
    postgres_url: str, stopped_at_end: list[Switchboard]
) -> None:
    """w1 does not hold tp: its adapter there is not started. An ask, a send into another
    conversation, an operator's send and reaction through tp are recorded by w1 and sent
    by w2 (tp's holder) through its started adapter, once each; w1 gets each outcome."""
    from backchannel.asks.asking import AskRefused, ask_peer
    from backchannel.orchestration.tools import deliver_cross

    web, tp = FakePlatform(), FakePlatform()
    sends: list[tuple[str, str, bool, str]] = []
    await _hold_tp_for_w2(postgres_url)
    w1, _ = await two_workers(postgres_url, RecordingAgent(), web, tp, sends, stopped_at_end)
    origin = await w1.store.ensure_conversation(Address("web", "owner"))
    session = await w1.store.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")

    asked = await ask_peer(w1, AskSettings(), origin=origin, origin_seq=None, account="tp",
                           peer="peer", session="s1", question="6*7?")  # fmt: skip
    assert asked.state == "pending", asked
    crossed = await deliver_cross(w1, session, "hello", origin_key=origin.address.key)
    assert crossed.state == "sent", crossed
    operator = await w1.send_outcome(session, "from the operator")
    assert operator["state"] == "sent", operator
    reaction = await w1.react_outcome(session, crossed.seq or 0, "👍")
    assert reaction["state"] == "sent", reaction
    assert sends == [
        ("w2", "tp", True, "6*7?"),
        ("w2", "tp", True, "hello"),
        ("w2", "tp", True, "from the operator"),
        ("w2", "tp", True, "👍"),
    ]
    assert [m.text for m in tp.sent if m.kind == "message"] == [
        "6*7?",
        "hello",
        "from the operator",
    ]
    # recorded once each, sent, taken by w2 (a death of w2 mid-send is w2's to recover)
    entries = await w1.store.outbox(conversation_id=session.id)
    assert sorted(e.status for e in entries) == ["sent"] * 4
    window = await w1.store.window(session.id, 10)
    assert [(m.text, m.status) for m in window] == [
        ("6*7?", "sent"),
        ("hello", "sent"),
        ("from the operator", "sent"),
    ]
    assert all(m.platform_message_id for m in window)
    check = PostgresStore(postgres_url)
    rows = await check._fetchall(
        "SELECT h.taken_by, h.asked_by, o.worker FROM handoffs h"
        " JOIN outbox o ON o.id = h.outbox_id ORDER BY h.outbox_id"
    )
    assert rows == [("w2", "w1", "w2")] * 4
    [ask] = await check.asks()
    assert ask.state == "pending" and ask.outbox_id == entries[-1].id
    await check.close()

    # a peer with no conversation yet: its contact list is read through tp's connection
    with pytest.raises(AskRefused, match="holding account 'tp'"):
        await ask_peer(w1, AskSettings(), origin=origin, origin_seq=None, account="tp",
                       peer="stranger", question="hi?")  # fmt: skip
    assert len(sends) == 4


async def _holding_tp(
    postgres_url: str, adapter: FakeChannelAdapter, boards: list[Switchboard]
) -> PostgresStore:
    """Worker w2, started with account tp's adapter (it takes tp's lease); its store."""
    store = PostgresStore(postgres_url, worker="w2")
    board = Switchboard(store)
    board.add_account(adapter, Binding(RecordingAgent()), name="tp")
    board.workers = WorkerCoordinator(board, store, lease_ttl=TTL, heartbeat=BEAT)
    await board.start()
    boards.append(board)
    assert board.workers.owned == {"tp"}
    return store


async def test_a_handed_over_send_no_worker_takes_is_withdrawn_and_never_sent(
    postgres_url: str, stopped_at_end: list[Switchboard]
) -> None:
    """tp's lease is held by a worker that is gone (its lease not lapsed yet): a send
    handed to it is withdrawn after `take_within` and reported not sent; one whose asker
    is cancelled while waiting is withdrawn too. Neither is taken later."""
    from backchannel.orchestration.tools import deliver_cross

    web, tp = FakePlatform(), FakePlatform()
    sends: list[tuple[str, str, bool, str]] = []
    await _hold_tp_for_w2(postgres_url)  # w2 holds tp for 30 s, and never runs
    store = PostgresStore(postgres_url, worker="w1")
    w1 = Switchboard(store)
    for account, platform in (("web", web), ("tp", tp)):
        w1.add_account(
            Recorded(account, platform, "w1", sends),
            Binding(RecordingAgent(), respond="always"),
            name=account,
        )
    w1.workers = WorkerCoordinator(w1, store, lease_ttl=TTL, heartbeat=BEAT)
    await w1.start()
    stopped_at_end.append(w1)
    assert w1.workers.owned == {"web"}
    w1.workers.take_within = 0.5
    origin = await w1.store.ensure_conversation(Address("web", "owner"))
    session = await w1.store.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")

    outcome = await deliver_cross(w1, session, "hello", origin_key=origin.address.key)
    assert outcome.state == "failed", outcome
    assert "no worker holding account 'tp' took the send within 0.5s" in (outcome.reason or "")

    w1.workers.take_within = 60.0
    waiting = asyncio.create_task(deliver_cross(w1, session, "bye", origin_key="x"))

    async def handed() -> bool:
        return len(await store._fetchall("SELECT 1 FROM handoffs")) == 2

    await until(handed, 10, "the second hand-over")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    entries = await store.outbox(conversation_id=session.id)
    assert [(e.text, e.status) for e in entries] == [("bye", "failed"), ("hello", "failed")]
    assert "withdrawn" in (entries[0].reason or "")
    window = await store.window(session.id, 10)
    assert [m.status for m in window] == ["failed", "failed"]
    # a holder appearing now takes neither
    late = PostgresStore(postgres_url, worker="w3")
    assert await late.take_handoffs(["tp"]) == []
    await late.close()
    assert sends == [] and tp.sent == []


async def test_recovery_fails_a_dead_askers_untaken_send_and_doubts_a_dead_takers(
    postgres_url: str,
) -> None:
    """The asker died before any holder took its send: never tried, so failed (a run
    again may send it afresh). The taker died after taking one: it may have gone out,
    so uncertain; the asker's recovery leaves a taken send alone."""
    from backchannel.model import Outbound, Sender

    asker = PostgresStore(postgres_url, worker="wa")
    taker = PostgresStore(postgres_url, worker="wt")
    await asker.register_worker("host", 1)
    await taker.register_worker("host", 2)
    session = await asker.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    me = Sender("bot", "bot", is_bot=True)
    taken = await asker.record_outbound(session.id, Outbound(session.address, "taken"), me)
    await asker.hand_off(taken.id, "tp", within=60)
    [(entry, quiet)] = await taker.take_handoffs(["tp"])
    assert (entry.id, entry.text, quiet) == (taken.id, "taken", False)
    untaken = await asker.record_outbound(
        session.id, Outbound(session.address, "untaken", quiet=True), me
    )
    await asker.hand_off(untaken.id, "tp", quiet=True, within=60)

    judge = PostgresStore(postgres_url, worker="wj")
    await judge.recover_worker("wa")
    assert (await judge._outbox_entry_now(taken.id)).status == "pending"  # wt's to finish
    gone = await judge._outbox_entry_now(untaken.id)
    assert gone.status == "failed" and "before the worker holding the account took it" in (
        gone.reason or ""
    )
    assert await taker.take_handoffs(["tp"]) == []
    await judge.recover_worker("wt")
    assert (await judge._outbox_entry_now(taken.id)).status == "uncertain"
    for store in (asker, taker, judge):
        await store.close()


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


@pytest.mark.usefixtures("fake_channel_plugin")
async def test_an_operator_send_on_postgresql_goes_through_the_worker_holding_the_account(
    postgres_url: str, platform: FakePlatform, tmp_path: Any, stopped_at_end: list[Switchboard]
) -> None:
    """`backchannel send` (and MCP's direct send) on a PostgreSQL store whose worker holds
    the account starts no adapter of its own (a second poller beside the holder's): the
    message is handed to the worker, which sends it; its outcome is printed."""
    from backchannel.cli import _send_directly
    from backchannel.config import load_config
    from backchannel.errors import Rejected

    sends: list[tuple[str, str, bool, str]] = []
    store = PostgresStore(postgres_url, worker="w1")
    worker = Switchboard(store)
    worker.add_account(
        Recorded("ops", platform, "w1", sends), Binding(RecordingAgent(), respond="always")
    )
    worker.workers = WorkerCoordinator(worker, store, lease_ttl=TTL, heartbeat=BEAT)
    await worker.start()
    stopped_at_end.append(worker)
    assert worker.workers.owned == {"ops"}
    config = tmp_path / "bot.toml"
    config.write_text(
        f'[store]\nurl = "{postgres_url}"\n[accounts.ops]\nchannel = "fake"\n'
        '[agents.demo]\nkind = "demo"\n',
        encoding="utf-8",
    )

    loaded = load_config(config)
    # a new address: the holder alone could check it (a refused one would stay listed)
    with pytest.raises(Rejected, match="no conversation there yet"):
        await _send_directly(loaded, Address("ops", "c1"), "to nowhere yet")
    assert await store.find_conversation(Address("ops", "c1")) is None
    await store.ensure_conversation(Address("ops", "c1"))

    outcome, via = await _send_directly(loaded, Address("ops", "c1"), "from ops")

    assert (outcome["state"], via) == ("sent", "worker"), outcome
    assert sends == [("w1", "ops", True, "from ops")]  # by the holder's started adapter
    assert platform.texts("c1") == ["from ops"]
    rows = await store._fetchall("SELECT taken_by, asked_by FROM handoffs")
    assert rows == [("w1", None)]


async def test_an_mcp_client_on_postgresql_asks_through_the_worker_holding_the_account(
    postgres_url: str, tmp_path: Any, stopped_at_end: list[Switchboard]
) -> None:
    """MCP's ask_agent on a PostgreSQL store (its workers open no control socket): the ask
    is recorded by the MCP server and its question handed to the worker holding tp, which
    sends it; the peer's answer, read by that worker, is matched to the ask. With no
    worker holding tp, nothing is sent."""
    from backchannel.hookspecs import hookimpl
    from backchannel.plugins import get_plugin_manager
    from backchannel_mcp.asking import ask_through_serve

    tp = FakePlatform()
    sends: list[tuple[str, str, bool, str]] = []

    class PeersPlugin:
        @hookimpl
        def register_channels(self, register: Any) -> None:
            def make(account: str, settings: Any) -> Recorded:
                return Recorded(account, tp, "mcp", sends)

            make.capabilities = Recorded("tp", tp, "", []).capabilities  # type: ignore[attr-defined]
            register("fakepeers", make)

    pm = get_plugin_manager()
    pm.register(PeersPlugin(), name="test-fake-peers")
    try:
        config = tmp_path / "bot.toml"
        config.write_text(
            f'[store]\nurl = "{postgres_url}"\n[accounts.tp]\nchannel = "fakepeers"\n'
            '[agents.demo]\nkind = "demo"\n',
            encoding="utf-8",
        )
        from backchannel.config import load_config

        loaded = load_config(config)
        setup = PostgresStore(postgres_url)
        session = await setup.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
        await setup.close()
        said = await ask_through_serve(loaded, peer="peer", question="6*7?", session="s1")
        assert "needs a running `backchannel serve`" in said and sends == []

        store = PostgresStore(postgres_url, worker="w2")
        worker = Switchboard(store)
        worker.add_account(
            Recorded("tp", tp, "w2", sends), Binding(RecordingAgent(), respond="always")
        )
        AskCoordinator(worker, AskSettings()).attach()
        worker.workers = WorkerCoordinator(worker, store, lease_ttl=TTL, heartbeat=BEAT)
        await worker.start()
        stopped_at_end.append(worker)
        assert worker.workers.owned == {"tp"}

        # a peer with no conversation yet: its contact list is read on the holder only
        said = await ask_through_serve(loaded, peer="stranger", question="hi?")
        assert "holding account 'tp'" in said and "try again later" not in said, said
        said = await ask_through_serve(loaded, peer="peer", question="6*7?", session="s1")
        assert said.startswith("asked peer"), said
        assert sends == [("w2", "tp", True, "6*7?")]  # sent by the holder, not by MCP
        [ask] = await store.asks()
        assert ask.state == "pending" and ask.peer_conversation_id == session.id
        tp.user_says("42", chat="peer", thread="s1", sender="peer")  # read by w2's poller

        async def answered() -> bool:
            return [a.state for a in await store.asks()] == ["answered"]

        await until(answered, 20, "the answer matched")
    finally:
        pm.unregister(name="test-fake-peers")


async def test_a_holder_stopping_takes_and_finishes_what_is_handed_to_it_meanwhile(
    postgres_url: str, stopped_at_end: list[Switchboard]
) -> None:
    """A holder's stop lets its runs finish first, holding its leases meanwhile: a send
    handed to it then is still taken and sent (it was withdrawn unsent). And a take in
    progress when the stop drains its sends is waited for too: its send is finished, not
    left pending with the asker waiting."""
    from backchannel.orchestration.tools import deliver_cross

    web, tp = FakePlatform(), FakePlatform()
    sends: list[tuple[str, str, bool, str]] = []
    release = asyncio.Event()
    running = asyncio.Event()

    async def slow_run(run: Run) -> None:
        if run.conversation.address.account == "tp":
            running.set()
            await release.wait()

    await _hold_tp_for_w2(postgres_url)
    w1, w2 = await two_workers(
        postgres_url, RecordingAgent(action=slow_run), web, tp, sends, stopped_at_end
    )
    assert w2.workers is not None
    w1.workers.take_within = 5.0  # type: ignore[union-attr]
    session = await w1.store.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    tp.user_says("hold on", chat="peer", thread="s1", sender="peer")
    await asyncio.wait_for(running.wait(), 20)
    stopping = asyncio.create_task(w2.stop())
    await until(lambda: asyncio.sleep(0, w2.workers.stopping), 5, "w2 stopping")  # type: ignore[union-attr]
    # the take in progress is slow to hand its rows over (reading them back, say)
    take = w2.workers.store.take_handoffs

    async def slow_take(*args: Any) -> Any:
        taken = await take(*args)
        await asyncio.sleep(0.3)
        return taken

    w2.workers.store.take_handoffs = slow_take  # type: ignore[method-assign,assignment]
    outcome = asyncio.create_task(deliver_cross(w1, session, "meanwhile", origin_key="x"))

    async def taken() -> bool:
        rows = await w1.store._fetchall("SELECT taken_by FROM handoffs")  # type: ignore[attr-defined]
        return rows == [("w2",)]

    await until(taken, 10, "the take")
    release.set()  # the run ends: the stop drains the sends while the take finishes
    await asyncio.wait_for(stopping, 30)
    result = await asyncio.wait_for(outcome, 30)
    assert result.state == "sent", result
    assert ("w2", "tp", True, "meanwhile") in sends


async def test_a_send_past_its_deadline_is_never_taken_and_is_failed_by_the_holder(
    postgres_url: str,
) -> None:
    """The asker died (or stopped waiting) before any holder took its send: past the
    deadline the holder takes it no more, and marks it failed, whoever the asker was (an
    operator's CLI has no worker name, so no recovery of workers would find it)."""
    from backchannel.model import Outbound, Sender

    asker = PostgresStore(postgres_url)  # a `backchannel send`: no worker name
    holder = PostgresStore(postgres_url, worker="w2")
    session = await asker.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    me = Sender("bot", "bot", is_bot=True)
    late = await asker.record_outbound(session.id, Outbound(session.address, "late"), me)
    await asker.hand_off(late.id, "tp", within=0.2)
    fresh = await asker.record_outbound(session.id, Outbound(session.address, "fresh"), me)
    await asker.hand_off(fresh.id, "tp", within=60)
    await asyncio.sleep(0.3)
    [(entry, _)] = await holder.take_handoffs(["tp"])
    assert entry.id == fresh.id
    gone = await holder._outbox_entry_now(late.id)
    assert gone.status == "failed" and "before its asker stopped waiting" in (gone.reason or "")
    # settled with no taker, it waits no more: out of the table every take reads
    rows = await holder._fetchall("SELECT outbox_id FROM handoffs ORDER BY outbox_id")
    assert rows == [(fresh.id,)]
    window = await holder.window(session.id, 5)
    assert [(m.text, m.status) for m in window] == [("late", "failed"), ("fresh", "pending")]
    for store in (asker, holder):
        await store.close()


async def test_a_send_is_recorded_and_handed_over_in_one_transaction(
    postgres_url: str, tmp_path: Any
) -> None:
    """A send with nothing to write between (not an ask) is recorded and handed over in
    one transaction: a failure (or a kill) between the two cannot leave it pending with no
    holder ever to take it. An SQLite store has no workers to hand anything to."""
    import psycopg
    from backchannel.errors import StoreError
    from backchannel.model import Outbound, Sender
    from backchannel.store.sqlite import SQLiteStore

    store = PostgresStore(postgres_url)
    session = await store.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    me = Sender("bot", "bot", is_bot=True)
    entry = await store.record_outbound(
        session.id, Outbound(session.address, "one"), me, hand_to=("tp", True, 60.0, True)
    )
    rows = await store._fetchall("SELECT outbox_id, account, quiet FROM handoffs")
    assert rows == [(entry.id, "tp", 1)]
    with pytest.raises(psycopg.errors.NotNullViolation):  # the hand-over fails ...
        await store.record_outbound(
            session.id,
            Outbound(session.address, "two"),
            me,
            hand_to=(None, False, 60.0, True),  # type: ignore[arg-type]
        )
    # ... and takes the record with it: no pending row no holder would ever take
    assert [e.text for e in await store.outbox(conversation_id=session.id)] == ["one"]
    assert [m.text for m in await store.window(session.id, 5)] == ["one"]
    await store.close()
    lite = SQLiteStore(tmp_path / "bc.db")
    local = await lite.ensure_conversation(Address("tp", "peer"))
    with pytest.raises(StoreError, match="hands no send"):
        await lite.record_outbound(
            local.id, Outbound(local.address, "x"), me, hand_to=("tp", False, 1.0, True)
        )
    await lite.close()


async def test_an_ask_killed_before_its_question_is_released_is_never_sent_and_fails(
    postgres_url: str,
) -> None:
    """An ask's question is handed over with its record but not ready: the holder takes
    it only once the ask's row is written too (`release_handoff`). An asker killed
    between (an MCP client has no worker name, so no recovery of workers finds it)
    leaves a hand-over that is never taken and that its deadline fails (the sends after
    it in its conversation wait for that); a worker's own recovery fails it sooner."""
    from backchannel.model import Outbound, Receipt, Sender

    asker = PostgresStore(postgres_url)  # an MCP client's process: no worker name
    holder = PostgresStore(postgres_url, worker="w2")
    session = await asker.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    me = Sender("bot", "bot", is_bot=True)

    def question(text: str) -> Outbound:
        return Outbound(session.address, text)

    killed = await asker.record_outbound(
        session.id, question("killed"), me, hand_to=("tp", False, 0.3, False)
    )
    released = await asker.record_outbound(
        session.id, question("released"), me, hand_to=("tp", False, 60.0, False)
    )
    assert await holder.take_handoffs(["tp"]) == []  # neither is ready
    await asker.release_handoff(released.id)
    # ready, but its conversation's older hand-over comes first: it waits for that one
    assert await holder.take_handoffs(["tp"]) == []
    await asyncio.sleep(0.4)  # past the killed one's deadline: failed, and the next goes
    [(entry, _)] = await holder.take_handoffs(["tp"])
    assert entry.id == released.id
    gone = await holder._outbox_entry_now(killed.id)
    assert gone.status == "failed" and "before its asker stopped waiting" in (gone.reason or "")
    await holder.mark_sent(released.id, Receipt("p1"))

    worker = PostgresStore(postgres_url, worker="wa")  # the same, asked by a worker
    await worker.register_worker("host", 3)
    stranded = await worker.record_outbound(
        session.id, question("stranded"), me, hand_to=("tp", False, 60.0, False)
    )
    judge = PostgresStore(postgres_url, worker="wj")
    await judge.recover_worker("wa")
    failed = await holder._outbox_entry_now(stranded.id)
    assert failed.status == "failed" and "before the worker holding the account took it" in (
        failed.reason or ""
    )
    await worker.release_handoff(stranded.id)  # too late: a failed send is never taken
    assert await holder.take_handoffs(["tp"]) == []

    # send_elsewhere writes the hand-over with the record, before the ask's row: a kill
    # while that row is written leaves the hand-over above, not a bare pending row
    board = Switchboard(asker)
    board.add_account(Recorded("tp", FakePlatform(), "mcp", []), Binding(RecordingAgent()))
    seen: list[Any] = []

    async def ask_row(entry: Any) -> None:
        seen.append(
            await asker._fetchall(f"SELECT ready FROM handoffs WHERE outbox_id = {entry.id}")
        )
        seen.append(await holder.take_handoffs(["tp"]))
        raise RuntimeError("killed while writing the ask")

    with pytest.raises(RuntimeError, match="killed"):
        await send_elsewhere(
            asker, board.accounts["tp"].deliverer, session, question("asked"), recorded=ask_row
        )
    assert seen == [[(0,)], []]
    for store in (asker, holder, worker, judge):
        await store.close()


async def test_a_holder_has_one_send_out_per_conversation_in_the_order_handed_over(
    postgres_url: str,
) -> None:
    """Three sends handed over into one conversation, one into another: the holder takes
    the oldest of each, and the next of a conversation only once its send out finished.
    Killed with them out, it leaves one uncertain per conversation; the sends it never
    took are the next holder's, in order."""
    from backchannel.model import Outbound, Receipt, Sender

    asker = PostgresStore(postgres_url)
    holder = PostgresStore(postgres_url, worker="w2")
    await holder.register_worker("host", 2)
    a = await asker.ensure_conversation(Address("tp", "peer-a", "s1"), kind="thread")
    b = await asker.ensure_conversation(Address("tp", "peer-b", "s1"), kind="thread")
    me = Sender("bot", "bot", is_bot=True)
    ids = {}
    for conversation, text in ((a, "a1"), (a, "a2"), (b, "b1"), (a, "a3")):
        entry = await asker.record_outbound(
            conversation.id,
            Outbound(conversation.address, text),
            me,
            hand_to=("tp", False, 60.0, True),
        )
        ids[text] = entry.id

    async def taken(store: PostgresStore) -> list[str]:
        return [entry.text for entry, _ in await store.take_handoffs(["tp"])]

    assert await taken(holder) == ["a1", "b1"]
    assert await taken(holder) == []  # a2 waits for a1
    await holder.mark_sent(ids["a1"], Receipt("p1"))
    assert await taken(holder) == ["a2"]
    judge = PostgresStore(postgres_url, worker="wj")
    await judge.recover_worker("w2")  # killed with a2 and b1 out
    states = {text: (await judge._outbox_entry_now(i)).status for text, i in ids.items()}
    assert states == {"a1": "sent", "a2": "uncertain", "b1": "uncertain", "a3": "pending"}
    successor = PostgresStore(postgres_url, worker="w3")
    assert await taken(successor) == ["a3"]

    # conversations with a send out never hide one with none: the free one is taken
    for n in range(4):
        busy = await asker.ensure_conversation(Address("tp", f"busy-{n}", "s1"), kind="thread")
        for part in (1, 2):
            await asker.record_outbound(
                busy.id,
                Outbound(busy.address, f"busy-{n}/{part}"),
                me,
                hand_to=("tp", False, 60.0, True),
            )
    assert await taken(successor) == [f"busy-{n}/1" for n in range(4)]
    free = await asker.ensure_conversation(Address("tp", "free", "s1"), kind="thread")
    await asker.record_outbound(
        free.id, Outbound(free.address, "free"), me, hand_to=("tp", False, 60.0, True)
    )
    assert [entry.text for entry, _ in await successor.take_handoffs(["tp"], 1)] == ["free"]
    for store in (asker, holder, judge, successor):
        await store.close()


async def test_a_taken_send_whose_outcome_cannot_be_recorded_does_not_hold_its_conversation(
    postgres_url: str, stopped_at_end: list[Switchboard]
) -> None:
    """The store fails while the holder records a taken send's outcome: left pending, it
    would hold back its conversation's next hand-overs (one out at a time) until the
    holder restarted. It is recorded as sent once the store answers (it went out), and
    the next goes."""
    from backchannel.model import Outbound, Sender

    tp = FakePlatform()
    store = await _holding_tp(postgres_url, FakeChannelAdapter("tp", {}, tp), stopped_at_end)
    real_mark_sent = store.mark_sent
    real_state = store.handoff_state
    hiccups = [RuntimeError("connection reset while recording the outcome")]
    # the database stays away a little longer: the first tries to record it fail too
    outage = [RuntimeError("the database is away")] * 2

    async def mark_sent(*args: Any, **kwargs: Any) -> Any:
        if hiccups:
            raise hiccups.pop()
        return await real_mark_sent(*args, **kwargs)

    async def handoff_state(*args: Any, **kwargs: Any) -> Any:
        if outage:
            raise outage.pop()
        return await real_state(*args, **kwargs)

    store.mark_sent = mark_sent  # type: ignore[method-assign]
    store.handoff_state = handoff_state  # type: ignore[method-assign]
    asker = PostgresStore(postgres_url)
    session = await asker.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    me = Sender("bot", "bot", is_bot=True)
    entries = [
        await asker.record_outbound(
            session.id, Outbound(session.address, text), me, hand_to=("tp", False, 60.0, True)
        )
        for text in ("first", "second")
    ]

    async def settled() -> bool:
        states = [(await asker._outbox_entry_now(e.id)).status for e in entries]
        return "pending" not in states

    await until(settled, 20, "both hand-overs settled")
    first, second = [await asker._outbox_entry_now(e.id) for e in entries]
    assert (first.status, second.status) == ("sent", "sent")
    assert [m.text for m in tp.sent] == ["first", "second"]
    await asker.close()


async def test_a_send_waiting_behind_its_conversations_send_out_waits_while_the_holder_lives(
    postgres_url: str, stopped_at_end: list[Switchboard]
) -> None:
    """One send of a conversation is out at a time, and one may be out for minutes (rate
    limits): a send queued behind it is kept waiting by the live holder's heartbeats,
    not failed at its deadline as if no worker held the account. It goes out next."""
    from backchannel.model import Outbound, Sender

    tp = FakePlatform()
    gate = asyncio.Event()

    class Slow(FakeChannelAdapter):
        async def send(self, outbound: Any) -> Any:
            if outbound.text == "first":
                await gate.wait()  # out, waiting on the platform
            return await super().send(outbound)

    await _holding_tp(postgres_url, Slow("tp", {}, tp), stopped_at_end)
    asker = PostgresStore(postgres_url)
    session = await asker.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
    me = Sender("bot", "bot", is_bot=True)

    async def hand(text: str, within: float) -> Any:
        return await asker.record_outbound(
            session.id, Outbound(session.address, text), me, hand_to=("tp", False, within, True)
        )

    first = await hand("first", 60.0)

    async def out() -> bool:
        return (await asker.handoff_state(first.id))[1] == "w2"

    await until(out, 10, "the first send taken")
    second = await hand("second", 2.0)
    handed = await asker._fetchone(f"SELECT deadline FROM handoffs WHERE outbox_id = {second.id}")
    assert handed is not None
    deadline = handed[0]

    async def kept() -> bool:
        row = await asker._fetchone(f"SELECT deadline FROM handoffs WHERE outbox_id = {second.id}")
        return row is not None and row[0] > deadline + 1.0

    await until(kept, 10, "the holder moving the second's deadline")
    await asyncio.sleep(2.5)  # past the deadline it was handed over with
    entry, taker = await asker.handoff_state(second.id)
    assert (entry.status, taker) == ("pending", None)
    gate.set()

    async def both_sent() -> bool:
        return [(await asker._outbox_entry_now(e.id)).status for e in (first, second)] == [
            "sent",
            "sent",
        ]

    await until(both_sent, 20, "both sent")
    assert [m.text for m in tp.sent] == ["first", "second"]
    await asker.close()

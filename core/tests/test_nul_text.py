"""NUL (U+0000) in text: PostgreSQL's text cannot hold it, SQLite can; neither store gets it.

Inbound, `storable_event` makes each NUL in what people wrote (text, names,
handles, titles, attachments, meta) U+FFFD, and a NUL in an id makes a dead
letter; outbound, `Deliverer.deliver` does the same to the text it records and
sends (an agent's send, reply or edit, an operator's send, a cross-conversation
send, an ask's question). Each test runs on both stores and expects the same
rows from both. Should PostgreSQL still refuse a value, the ingest makes it a
dead letter (RefusedData) and the account keeps receiving.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from backchannel import switchboard as switchboard_module
from backchannel.asks.asking import ask_peer
from backchannel.asks.settings import AskSettings
from backchannel.errors import StoreError
from backchannel.ingest import GroupCommit, RefusedData
from backchannel.model import Address, Attachment, Conversation, Event, Message, Sender
from backchannel.orchestration.tools import deliver_cross
from backchannel.runs import Run
from backchannel.storable import storable_event
from backchannel.store import Inbound, SQLiteStore, Store
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel.testing.fake_channel import FakeChannelAdapter, FakePlatform
from backchannel.testing.store_contract import make_event

FFFD = "\ufffd"


@pytest.fixture(params=["sqlite", "postgres"])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store of each kind (PostgreSQL: a new database on the session's cluster)."""
    opened: Store
    if request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "bc.db")
    else:
        from backchannel.store.postgres import PostgresStore

        opened = PostgresStore(request.getfixturevalue("postgres_url"))
    yield opened
    await opened.close()


class PeerAdapter(FakeChannelAdapter):
    """The fake channel as one whose peers are agents (what an ask needs), every peer linked."""

    def __init__(self, account: str, platform: FakePlatform):
        super().__init__(account, {}, platform)
        self.capabilities = attrs.evolve(self.capabilities, agent_peers=True)

    async def is_contact(self, peer: str) -> bool:
        return True


async def _started(
    store: Store, agent: RecordingAgent, *, peers: bool = False
) -> tuple[Switchboard, FakePlatform, FakeChannelAdapter]:
    platform = FakePlatform()
    adapter = PeerAdapter("fake", platform) if peers else FakeChannelAdapter("fake", {}, platform)
    board = Switchboard(store)
    board.add_account(adapter, Binding(agent, respond="always"), name="fake")
    await board.start()
    return board, platform, adapter


async def _until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)


async def _received(store: Store) -> list[Message]:
    """Every inbound message stored, oldest first."""
    return [
        message
        for conversation in await store.conversations()
        for message in await store.window(conversation.id, 100)
        if message.direction == "in"
    ]


async def _conversation(store: Store, chat: str = "c1") -> Conversation:
    conversation = await store.find_conversation(Address("fake", chat))
    assert conversation is not None
    return conversation


# --- inbound ------------------------------------------------------------------------------


async def test_a_nul_in_text_and_sender_name_is_stored_as_fffd_and_the_account_keeps_receiving(
    any_store: Store,
) -> None:
    agent = RecordingAgent()
    board, platform, _adapter = await _started(any_store, agent)
    try:
        platform.user_says("nul\x00inside", name="Al\x00ice")
        platform.user_says("after")

        async def both_stored() -> bool:
            return len(await _received(any_store)) >= 2

        await _until(both_stored)
        first, after = await _received(any_store)
        assert (first.text, first.sender.name) == (f"nul{FFFD}inside", f"Al{FFFD}ice")
        assert (after.text, after.sender.name) == ("after", "Alice")
        assert await any_store.dead_letters() == []
        # and the poller moved past both (the NUL one was not read again and again)
        await _until(lambda: _acked(platform, 2))
        platform.user_says("later\x00on")

        async def third_stored() -> bool:
            return len(await _received(any_store)) >= 3

        await _until(third_stored)
        assert (await _received(any_store))[-1].text == f"later{FFFD}on"
    finally:
        await board.stop()


async def _acked(platform: FakePlatform, update: int) -> bool:
    return platform.acked(update)


async def test_a_nul_in_a_batch_title_attachment_and_meta_is_stored_as_fffd(
    any_store: Store,
) -> None:
    agent = RecordingAgent()
    board, _platform, adapter = await _started(any_store, agent)
    try:
        event = Event(
            Address("fake", "g1"),
            "e-nul",
            Sender("bob", "B\x00b", "b\x00b"),
            text="x\x00y",
            platform_message_id="m-nul",
            conversation_kind="group",
            conversation_title="T\x00itle",
            attachments=(Attachment("photo", "a\x00.jpg", "image/jp\x00eg", 3, "ref\x00"),),
            meta={"k\x00ey": "v\x00alue", "nested": {"deep\x00": ["l\x00ist", 1]}},
        )
        clean = make_event("e-next", "next", chat="g1", account="fake", message_id="m-next")
        adapter.normalize = lambda raw: raw["event"]  # type: ignore[method-assign]
        results = await board.ingest_many("fake", [{"event": event}, {"event": clean}])
        assert [result.status for result in results] == ["stored", "stored"]
        (stored, following) = await _received(any_store)
        assert stored.text == f"x{FFFD}y"
        assert (stored.sender.name, stored.sender.handle) == (f"B{FFFD}b", f"b{FFFD}b")
        (attachment,) = stored.attachments
        assert (attachment.name, attachment.mime, attachment.ref) == (
            f"a{FFFD}.jpg",
            f"image/jp{FFFD}eg",
            f"ref{FFFD}",
        )
        assert stored.meta == {
            f"k{FFFD}ey": f"v{FFFD}alue",
            "nested": {f"deep{FFFD}": [f"l{FFFD}ist", 1]},
        }
        assert (await _conversation(any_store, "g1")).title == f"T{FFFD}itle"
        assert following.text == "next"
    finally:
        await board.stop()


def test_storable_event_makes_every_nul_in_what_people_wrote_fffd() -> None:
    event = Event(
        Address("acct", "c1"),
        "e1",
        Sender("alice", "Al\x00ice", "al\x00"),
        kind="reaction",
        text="\x00",
        platform_message_id="m1",
        conversation_title="\x00t",
        attachments=(Attachment("fi\x00le"),),
        meta={"flat": "a\x00b", "n": 1},
    )
    checked = storable_event(event, "acct")
    assert isinstance(checked, Event)
    assert checked.text == FFFD and checked.conversation_title == f"{FFFD}t"
    assert (checked.sender.name, checked.sender.handle) == (f"Al{FFFD}ice", f"al{FFFD}")
    assert checked.attachments == (Attachment(f"fi{FFFD}le"),)
    assert checked.meta == {"flat": f"a{FFFD}b", "n": 1}
    # a NUL next to half a surrogate pair: both repaired
    both = storable_event(make_event("e2", "\ud800\x00", account="acct"), "acct")
    assert isinstance(both, Event) and both.text == FFFD * 2
    # nothing to repair: the event itself, not a copy
    plain = make_event("e3", "plain", account="acct", meta={"a": "b"})
    assert storable_event(plain, "acct") is plain


@pytest.mark.parametrize(
    "where",
    [
        {"chat": "c\x00"},
        {"thread": "t\x00"},
        {"message_id": "m\x00"},
        {"reply_to": "r\x00"},
        {"sender": Sender("al\x00", "Alice")},
    ],
)
def test_a_nul_in_an_id_makes_a_dead_letter(where: dict[str, Any]) -> None:
    # a repaired id would name nothing on the platform: the same policy as half a
    # surrogate pair, and the same outcome on both stores
    reason = storable_event(make_event("e1", account="acct", **where), "acct")
    assert isinstance(reason, str) and "NUL" in reason
    reason = storable_event(make_event("e\x00", account="acct"), "acct")
    assert reason == "event id 'e\\x00' holds a NUL character"


async def test_a_value_postgresql_still_refuses_is_a_dead_letter_not_a_wedge(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what the storability check does not catch (here: the check switched off) and the
    # store refuses becomes a dead letter, and the next message is stored
    from backchannel.store.postgres import PostgresStore

    store = PostgresStore(postgres_url)
    refused = make_event("e1", "nul\x00inside", account="fake")
    with pytest.raises(RefusedData, match="DataError"):
        await GroupCommit(store).commit([Inbound(refused)])
    monkeypatch.setattr(switchboard_module, "storable_event", lambda event, account: event)
    agent = RecordingAgent()
    board, platform, _adapter = await _started(store, agent)
    try:
        platform.user_says("nul\x00inside")
        platform.user_says("after")

        async def after_stored() -> bool:
            return [m.text for m in await _received(store)] == ["after"]

        await _until(after_stored)
        (letter,) = await store.dead_letters()
        assert "DataError" in letter["reason"]
    finally:
        await board.stop()
        await store.close()


def test_without_psycopg_loaded_the_group_commit_does_not_import_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "psycopg", raising=False)
    loop = asyncio.new_event_loop()
    try:
        for error, kind in ((ValueError("bad"), RefusedData), (RuntimeError("disk"), StoreError)):
            future = loop.create_future()
            GroupCommit._fail(future, error, 1)
            assert type(future.exception()) is kind
    finally:
        loop.close()
    assert "psycopg" not in sys.modules


# --- outbound -----------------------------------------------------------------------------


async def test_what_an_agent_sends_with_a_nul_is_recorded_and_sent_with_fffd(
    any_store: Store,
) -> None:
    results: list[str] = []

    async def act(run: Run) -> None:  # the tools, called as a model calls them
        results.append(await run.call("send_message", {"text": "sa\x00y"}))
        results.append(await run.call("edit_message", {"message_id": 2, "text": "ed\x00it"}))

    agent = RecordingAgent(lambda run: "re\x00ply", action=act)  # then the reply tool
    board, platform, adapter = await _started(any_store, agent)
    try:
        adapter.me = Sender("bot", "B\x00ot", "b\x00t", is_bot=True)
        platform.user_says("hi")
        await agent.wait_runs(1)
        await board.wait_idle()
        assert results == ["sent as #2", "edit done"]
        assert agent.results == ["sent as #3"]
        conversation = await _conversation(any_store)
        assert (await board.send(conversation.address, "oper\x00ator")) == "sent as #4"
        outcome = await deliver_cross(board, conversation, "cro\x00ss", origin_key="fake/other")
        assert (outcome.state, outcome.seq) == ("sent", 5)
        sent = [(m.kind, m.text) for m in platform.sent]
        assert sent == [
            ("message", f"sa{FFFD}y"),
            ("edit", f"ed{FFFD}it"),
            ("message", f"re{FFFD}ply"),
            ("message", f"oper{FFFD}ator"),
            ("message", f"cro{FFFD}ss"),
        ]
        rows = [m for m in await any_store.window(conversation.id, 100) if m.direction == "out"]
        assert [(m.seq, m.text, m.status) for m in rows] == [
            (2, f"ed{FFFD}it", "sent"),  # the edit changed #2's text
            (3, f"re{FFFD}ply", "sent"),
            (4, f"oper{FFFD}ator", "sent"),
            (5, f"cro{FFFD}ss", "sent"),
        ]
        assert {(m.sender.name, m.sender.handle) for m in rows} == {(f"B{FFFD}ot", f"b{FFFD}t")}
        outbox = await any_store.outbox(conversation_id=conversation.id)
        assert [entry.text for entry in reversed(outbox)] == [text for _kind, text in sent]
    finally:
        await board.stop()


async def test_a_question_with_a_nul_is_recorded_and_sent_with_fffd(any_store: Store) -> None:
    agent = RecordingAgent()
    board, platform, _adapter = await _started(any_store, agent, peers=True)
    try:
        origin = await any_store.ensure_conversation(Address("fake", "owner"))
        outcome = await ask_peer(
            board,
            AskSettings(),
            origin=origin,
            origin_seq=None,
            account="fake",
            peer="peer",
            question="what\x00?",
            session="s1",
        )
        assert outcome.state == "pending"
        assert [m.text for m in platform.sent] == [f"what{FFFD}?"]
        (ask,) = await any_store.asks(origin_conversation_id=origin.id)
        assert ask.question == f"what{FFFD}?"
        session = await any_store.conversation(ask.peer_conversation_id)
        (row,) = await any_store.window(session.id, 10)
        assert (row.seq, row.text) == (ask.message_seq, f"what{FFFD}?")
    finally:
        await board.stop()

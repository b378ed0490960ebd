"""`backchannel asks`: every question agents (or MCP clients) asked other agents, where it
went, what became of it, and which message answered it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from backchannel.cli import main
from backchannel.model import Address, Outbound, Sender
from backchannel.store import NO_ORIGIN, Inbound, SQLiteStore
from backchannel.testing.store_contract import make_event
from click.testing import CliRunner, Result

ME = Sender("agent", "Agent", is_bot=True)
PEER = Sender("peer-b", "Agent B", is_bot=True)


def invoke(*args: str) -> Result:
    return CliRunner(env={"UV_RUN_RECURSION_DEPTH": None}).invoke(
        main, list(args), catch_exceptions=False
    )


async def _asked(db: Path) -> None:
    """Three asks: one answered (from web/owner), one waiting (from an MCP client), one failed."""
    store = SQLiteStore(db)
    owner = await store.ensure_conversation(Address("web", "owner"))
    session = await store.ensure_conversation(Address("tp", "peer-b", "s1"), kind="thread")
    other = await store.ensure_conversation(Address("tp", "peer-c", "s2"), kind="thread")
    asks = []
    for origin, target, question in (
        (owner.id, session, "which branch\nare you on?"),
        (NO_ORIGIN, session, "is the build green?"),
        (owner.id, other, "anyone there?"),
    ):
        entry = await store.record_outbound(target.id, Outbound(target.address, question), ME)
        asks.append(
            await store.record_ask(
                origin_conversation_id=origin,
                origin_seq=None,
                peer_conversation_id=target.id,
                question=question,
                deadline=9e12,
                message_seq=entry.message_seq,
                outbox_id=entry.id,
            )
        )
    await store.mark_ask(asks[2].id, "failed", "the relay refused it")
    (answer,) = await store.append_inbound(
        [Inbound(make_event("b1", "on main", account="tp", chat="peer-b", thread="s1",
                            sender=PEER))]
    )  # fmt: skip
    assert answer.seq is not None
    matched = await store.correlate_reply(session.id, answer.seq)
    assert matched is not None and matched.id == asks[0].id
    await store.mark_ask(matched.id, "answered")
    await store.close()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("asks") / "bc.db"
    asyncio.run(_asked(db))
    return db


def test_asks_lists_every_ask_newest_first_with_from_session_state_and_answer(
    store_path: Path,
) -> None:
    result = invoke("asks", "--store", str(store_path))
    assert result.exit_code == 0, result.output
    header, failed, waiting, answered = result.stdout.splitlines()
    assert header.split() == ["ASK", "STATE", "ASKED", "FROM", "SESSION", "ANSWER", "QUESTION"]
    assert failed.split()[:2] == ["3", "failed"] and "web/owner  tp/peer-c/s2" in failed
    assert waiting.split()[:2] == ["2", "pending"] and "(mcp)" in waiting
    assert waiting.split()[-6:] == ["tp/peer-b/s1", "-", "is", "the", "build", "green?"]
    assert answered.split()[:2] == ["1", "answered"]
    assert "tp/peer-b/s1" in answered and "#3" in answered  # the answer's message
    assert answered.endswith("which branch are you on?")  # on one line


def test_asks_filters_by_conversation_and_waiting_and_prints_json(store_path: Path) -> None:
    waiting = invoke("asks", "--waiting", "--store", str(store_path))
    assert [line.split()[0] for line in waiting.stdout.splitlines()[1:]] == ["2"]
    session = invoke("asks", "tp/peer-b/s1", "--store", str(store_path))
    assert [line.split()[0] for line in session.stdout.splitlines()[1:]] == ["2", "1"]
    origin = invoke("asks", "web/owner", "--limit", "1", "--store", str(store_path))
    assert [line.split()[0] for line in origin.stdout.splitlines()[1:]] == ["3"]
    newest = invoke("asks", "--limit", "2", "--store", str(store_path))
    assert [line.split()[0] for line in newest.stdout.splitlines()[1:]] == ["3", "2"]
    one_waiting = invoke("asks", "--waiting", "--limit", "1", "--store", str(store_path))
    assert [line.split()[0] for line in one_waiting.stdout.splitlines()[1:]] == ["2"]
    data = json.loads(invoke("asks", "--json", "--store", str(store_path)).stdout)
    assert [(a["id"], a["state"], a["origin"], a["session"]) for a in data] == [
        (3, "failed", "web/owner", "tp/peer-c/s2"),
        (2, "pending", "(mcp)", "tp/peer-b/s1"),
        (1, "answered", "web/owner", "tp/peer-b/s1"),
    ]
    assert data[0]["reason"] == "the relay refused it" and data[2]["answer_seq"] == 3
    unknown = CliRunner().invoke(main, ["asks", "web/nobody", "--store", str(store_path)])
    assert unknown.exit_code == 1 and "web/nobody" in unknown.output


def test_asks_on_a_store_with_none_says_so(tmp_path: Path) -> None:
    result = invoke("asks", "--store", str(tmp_path / "none.db"))
    assert result.exit_code == 0 and result.stdout.startswith("no asks (store: ")

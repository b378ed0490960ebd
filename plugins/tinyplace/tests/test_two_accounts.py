"""Two backchannel deployments (two identities, two stores) talk through FakeRelay.

Everything is real: SDK request signing, X3DH and the Double Ratchet, the
switchboard's ingest, runs and outbox. The only fake is the relay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backchannel.errors import Rejected
from backchannel.model import Address, Message
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.testing import FakeRelay


async def wait_until(predicate: Callable[[], Any], timeout: float = 15.0) -> None:
    """Re-check an async predicate until it holds (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)


async def window(store: SQLiteStore, address: Address) -> list[Message]:
    conversation = await store.find_conversation(address)
    return [] if conversation is None else await store.window(conversation.id, 50)


async def test_b_replies_inside_a_session_that_a_opened_and_plain_dms_stay_in_master(
    tmp_path: Path, relay: FakeRelay, settings_for: Any
) -> None:
    store_a = SQLiteStore(tmp_path / "a" / "backchannel.db")
    store_b = SQLiteStore(tmp_path / "b" / "backchannel.db")
    alice = TinyplaceAdapter("alice", settings_for())
    bob = TinyplaceAdapter("bob", settings_for())
    relay.make_contacts(alice.agent_id, bob.agent_id)
    runs_b: list[Run] = []

    async def agent_a(run: Run) -> None:  # A only listens in this test
        return None

    async def agent_b(run: Run) -> None:
        runs_b.append(run)
        assert run.trigger is not None
        await run.call(
            "reply", {"message_id": run.trigger.seq, "text": f"B got: {run.trigger.text}"}
        )

    board_a, board_b = Switchboard(store_a), Switchboard(store_b)
    board_a.add_account(alice, Binding(agent=agent_a, respond="never"))
    board_b.add_account(bob, Binding(agent=agent_b, respond="mention"))
    async with board_a, board_b:
        session = Address("alice", bob.agent_id, "review-42")
        assert "sent" in await board_a.send(session, "please review PR 42")

        at_a = await wait_for_messages(store_a, session, 2)
        assert [(m.direction, m.text) for m in at_a] == [
            ("out", "please review PR 42"),
            ("in", "B got: please review PR 42"),
        ]
        assert at_a[1].reply_to_seq == at_a[0].seq
        assert at_a[1].sender.id == bob.agent_id
        assert at_a[1].meta["session"] == "review-42"
        assert at_a[1].meta["tp"]["in_reply_to"] == at_a[0].platform_message_id
        assert at_a[1].meta["envelope_version"] == "tinyplace.harness.session.v1"

        at_b = await window(store_b, Address("bob", alice.agent_id, "review-42"))
        assert [(m.direction, m.text) for m in at_b] == [
            ("in", "please review PR 42"),
            ("out", "B got: please review PR 42"),
        ]
        assert runs_b[0].conversation.kind == "thread"

        master = Address("alice", bob.agent_id, "master")
        assert "sent" in await board_a.send(master, "lunch?")
        at_a_master = await wait_for_messages(store_a, master, 2)
        assert [m.text for m in at_a_master] == ["lunch?", "B got: lunch?"]
        at_b_master = await window(store_b, Address("bob", alice.agent_id, "master"))
        assert [m.text for m in at_b_master] == ["lunch?", "B got: lunch?"]
        assert runs_b[-1].conversation.kind == "direct"
        # the session conversation was not touched by the plain DM
        assert len(await window(store_a, session)) == 2
        await board_a.wait_idle()
        await board_b.wait_idle()


async def wait_for_messages(store: SQLiteStore, address: Address, count: int) -> list[Message]:
    async def enough() -> bool:
        return len(await window(store, address)) >= count

    await wait_until(enough)
    return await window(store, address)


async def test_an_unpaired_senders_message_reaches_the_agent_only_after_accept(
    tmp_path: Path, relay: FakeRelay, settings_for: Any
) -> None:
    from backchannel_tinyplace.cli import accept_contact
    from backchannel_tinyplace.testing import RelayPeer

    store = SQLiteStore(tmp_path / "b" / "backchannel.db")
    settings = settings_for()
    bob = TinyplaceAdapter("bob", settings)
    seen: list[str] = []
    got_run = asyncio.Event()

    async def agent(run: Run) -> None:
        seen.extend(m["content"] for m in run.messages)
        got_run.set()

    board = Switchboard(store)
    board.add_account(bob, Binding(agent=agent, respond="always"))
    async with board, RelayPeer(relay.url) as stranger:
        await stranger.publish_keys()
        await stranger.contacts.request(bob.agent_id)
        relay_id = await stranger.send_text(bob.agent_id, "may I?")
        await relay.wait_listed(bob.agent_id, 3)
        assert not got_run.is_set() and seen == []
        assert not relay.is_acked(bob.agent_id, relay_id)
        assert await store.conversations("bob") == []

        await accept_contact(settings, stranger.agent_id)
        await asyncio.wait_for(got_run.wait(), 15)
        await relay.wait_acked(bob.agent_id, relay_id)
        assert any("may I?" in text for text in seen)
        await board.wait_idle()


async def test_a_first_send_to_an_agent_that_is_no_contact_makes_no_conversation(
    tmp_path: Path, relay: FakeRelay, settings_for: Any
) -> None:
    store = SQLiteStore(tmp_path / "a" / "backchannel.db")
    alice = TinyplaceAdapter("alice", settings_for())
    bob = TinyplaceAdapter("bob", settings_for())

    async def listen(run: Run) -> None:
        return None

    board = Switchboard(store)
    board.add_account(alice, Binding(agent=listen, respond="never"))
    async with board:
        refused = {
            Address("alice", bob.agent_id, "master"): "is not an accepted contact: pair first",
            Address("alice", "not-an-agent"): "is not a tiny.place agent id",
            Address("alice", bob.agent_id, "a session!"): "is not a tiny.place session label",
        }
        for address, reason in refused.items():
            with pytest.raises(Rejected, match=reason):
                await board.send(address, "hello?")
            assert await store.find_conversation(address) is None
        # a contact passes the check
        relay.make_contacts(alice.agent_id, bob.agent_id)
        paired = Address("alice", bob.agent_id, "s2")
        await board.send(paired, "hello, contact")
        assert await store.find_conversation(paired) is not None
        # the relay cannot say: the address is taken, and the send tells what happened (the
        # poller reads /contacts too, so enough faults that one meets the check)
        carol = TinyplaceAdapter("carol", settings_for())
        for _ in range(50):
            relay.fail_next("server_error", method="GET", path="/contacts")
        unsure = Address("alice", carol.agent_id, "s1")
        outcome = await board.send(unsure, "hello?")
        assert "NOT delivered" in outcome  # carol is no contact and has no keys
        assert await store.find_conversation(unsure) is not None

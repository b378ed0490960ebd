"""The first message to a peer opens the Signal session; an uncertain one is sent again.

That `PREKEY_BUNDLE` is the only way the peer gets the session: when its PUT
ends uncertain without reaching the relay, every later `CIPHERTEXT` would be a
dead letter at the peer. So the opening is kept (before the PUT) until the
relay takes it or the peer writes back, and sent again, unchanged, before the
next message. When it did arrive, the copy must change nothing at the peer.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel.model import Address, Outbound
from backchannel.store import SQLiteStore
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.adapter import OPENING_COPIES
from backchannel_tinyplace.sessions import StateUnavailable
from backchannel_tinyplace.testing import FakeRelay, RelayPeer
from tinyplace import LocalSigner, TinyPlaceError

from .conftest import spawn_ready

SENDER = Path(__file__).with_name("crash_sender.py")


def master(account: str, peer: str) -> Address:
    return Address(account, peer, "master")


async def kept_opening(adapter: TinyplaceAdapter, peer: str) -> dict[str, Any] | None:
    store, _ = adapter._require_signal()
    return await store.get_opening(peer)


@pytest.mark.parametrize("fault", ["server_error", "reset", "hang"])
async def test_an_opening_that_never_reached_the_relay_goes_again_before_the_next_message(
    fault: str, account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.fail_next(fault)  # nothing stored: a 500, a dropped connection, a timeout
    with pytest.raises(Uncertain) as caught:
        await account.send(Outbound(master("test", peer.agent_id), "first"))
    assert relay.mailbox(peer.agent_id) == []
    first = caught.value.platform_message_id

    await account.send(Outbound(master("test", peer.agent_id), "second"))
    received = await peer.receive()
    # the opening (same id), then the new message: both decrypt, each once
    assert [(e["id"], e["type"], text) for e, text in received] == [
        (first, "PREKEY_BUNDLE", "first"),
        (received[1][0]["id"], "CIPHERTEXT", "second"),
    ]
    # the relay took it: not sent a third time
    assert await kept_opening(account, peer.agent_id) is None
    await account.send(Outbound(master("test", peer.agent_id), "third"))
    assert [(e["type"], text) for e, text in await peer.receive()] == [("CIPHERTEXT", "third")]


async def test_when_the_resent_opening_fails_too_the_next_message_waits_for_it(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.fail_next("server_error")
    with pytest.raises(Uncertain):
        await account.send(Outbound(master("test", peer.agent_id), "first"))
    relay.fail_next("server_error")  # the copy of the opening fails as well
    with pytest.raises(RateLimited) as caught:
        await account.send(Outbound(master("test", peer.agent_id), "second"))
    # definitely not sent (so retried): a CIPHERTEXT ahead of its opening would be lost
    assert "sent again first" in caught.value.reason
    assert relay.mailbox(peer.agent_id) == []
    await account.send(Outbound(master("test", peer.agent_id), "second"))
    assert [text for _, text in await peer.receive()] == ["first", "second"]


async def test_an_opening_whose_copies_keep_failing_is_given_up_for_a_fresh_session(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    """A relay that keeps refusing the copy (a 5xx on a repeated id, say) must not hold
    every send to the peer forever: after OPENING_COPIES failed copies the session is
    opened afresh, and the next message goes out as its own PREKEY_BUNDLE."""
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.fail_next("stored_then_error")  # the relay kept it; only its answer was lost
    with pytest.raises(Uncertain):
        await account.send(Outbound(master("test", peer.agent_id), "first"))
    for _ in range(OPENING_COPIES - 1):
        relay.fail_next("server_error")  # each copy fails
        with pytest.raises(RateLimited):
            await account.send(Outbound(master("test", peer.agent_id), "second"))
    relay.fail_next("server_error")
    await account.send(Outbound(master("test", peer.agent_id), "second"))
    received = await peer.receive()
    assert [(e["type"], text) for e, text in received] == [
        ("PREKEY_BUNDLE", "first"),
        ("PREKEY_BUNDLE", "second"),  # a fresh session's opening
    ]
    assert await kept_opening(account, peer.agent_id) is None
    await account.send(Outbound(master("test", peer.agent_id), "third"))
    assert [(e["type"], text) for e, text in await peer.receive()] == [("CIPHERTEXT", "third")]


async def test_a_peer_no_longer_a_contact_refuses_the_copy_and_the_next_message_alike(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.fail_next("server_error")
    with pytest.raises(Uncertain):
        await account.send(Outbound(master("test", peer.agent_id), "first"))
    relay.relationships.clear()
    with pytest.raises(Rejected) as caught:
        await account.send(Outbound(master("test", peer.agent_id), "second"))
    assert f"pair first: backchannel tinyplace pair {peer.agent_id}" in caught.value.reason
    assert await kept_opening(account, peer.agent_id) is not None  # still owed to the peer
    relay.make_contacts(peer.agent_id, account.agent_id)
    await account.send(Outbound(master("test", peer.agent_id), "third"))
    assert [text for _, text in await peer.receive()] == ["first", "third"]


@pytest.mark.parametrize(
    ("status", "first_fault", "expected"),
    [
        # the relay says it holds that id already: the session stands
        (409, "stored_then_error", [("PREKEY_BUNDLE", "first"), ("CIPHERTEXT", "second")]),
        # the relay refuses that envelope for good: a fresh session opens with the message
        (400, "server_error", [("PREKEY_BUNDLE", "second")]),
    ],
)
async def test_a_refused_copy_of_the_opening(
    status: int,
    first_fault: str,
    expected: list[tuple[str, str]],
    account: TinyplaceAdapter,
    relay: FakeRelay,
    peer: RelayPeer,
    monkeypatch: Any,
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.fail_next(first_fault)
    with pytest.raises(Uncertain) as caught:
        await account.send(Outbound(master("test", peer.agent_id), "first"))
    messages = account._require_client().messages
    real = messages.send

    async def refusing(envelope: Any, *args: Any, **kwargs: Any) -> Any:
        if envelope["id"] == caught.value.platform_message_id:
            raise TinyPlaceError(status, {"error": "refused", "code": "refused"})
        return await real(envelope, *args, **kwargs)

    monkeypatch.setattr(messages, "send", refusing)
    await account.send(Outbound(master("test", peer.agent_id), "second"))
    assert [(e["type"], text) for e, text in await peer.receive()] == expected
    assert await kept_opening(account, peer.agent_id) is None


async def test_a_session_opened_but_never_kept_is_opened_afresh(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer, monkeypatch: Any
) -> None:
    """The store fails between the SDK storing the new session and the opening being
    kept (as a crash there would): nothing was sent, and the next send starts over."""
    relay.make_contacts(peer.agent_id, account.agent_id)
    store, _ = account._require_signal()
    real = store.store_opening

    async def failing(address: str, envelope: Any) -> None:
        if "body" in envelope:
            raise StateUnavailable("disk full")
        await real(address, envelope)

    monkeypatch.setattr(store, "store_opening", failing)
    with pytest.raises(RateLimited):
        await account.send(Outbound(master("test", peer.agent_id), "never sent"))
    monkeypatch.undo()
    assert relay.sent_by(account.agent_id) == []
    await account.send(Outbound(master("test", peer.agent_id), "hello"))
    assert [(e["type"], text) for e, text in await peer.receive()] == [("PREKEY_BUNDLE", "hello")]
    assert all(status < 400 for method, _, status in relay.requests if method == "PUT")


async def test_a_reply_from_the_peer_settles_the_opening_and_it_is_not_sent_again(
    account: TinyplaceAdapter, contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.fail_next("stored_then_error")  # it arrived; only the answer was lost
    with pytest.raises(Uncertain):
        await account.send(Outbound(master("test", peer.agent_id), "first"))
    assert [text for _, text in await peer.receive()] == ["first"]
    assert await kept_opening(account, peer.agent_id) is not None

    reply = await peer.send_text(account.agent_id, "got it")
    await contract_context.wait_ingested(f"{peer.agent_id}:{reply}")
    assert await kept_opening(account, peer.agent_id) is None
    # no copy of the opening: this SDK peer would choke on its spent one-time pre-key
    await account.send(Outbound(master("test", peer.agent_id), "second"))
    assert [(e["type"], text) for e, text in await peer.receive()] == [("CIPHERTEXT", "second")]


@pytest.mark.parametrize("fault", ["stored_then_error", "garbled", "cut_body"])
async def test_an_opening_that_did_arrive_is_read_once_by_a_backchannel_peer(
    fault: str,
    tmp_path: Path,
    account: TinyplaceAdapter,
    contract_context: ContractContext,
    relay: FakeRelay,
    settings_for: Any,
) -> None:
    """The copy reaches the peer after it read (and acked) the first one and spent the
    one-time pre-key: it is acked as a duplicate, never decrypted, nothing reset."""
    store_b = SQLiteStore(tmp_path / "b" / "backchannel.db")
    ctx_b = ContractContext(store_b, account="bob")
    bob = TinyplaceAdapter("bob", settings_for())
    relay.make_contacts(account.agent_id, bob.agent_id)
    await bob.start(ctx_b.bind(bob))
    try:
        relay.fail_next(fault)
        with pytest.raises(Uncertain) as caught:
            await account.send(Outbound(master("test", bob.agent_id), "first"))
        first = caught.value.platform_message_id
        assert first is not None
        await ctx_b.wait_ingested(f"{account.agent_id}:{first}")
        await relay.wait_acked(bob.agent_id, first)

        receipt = await account.send(Outbound(master("test", bob.agent_id), "second"))
        await ctx_b.wait_ingested(f"{account.agent_id}:{receipt.platform_message_id}")
        # the copy was delivered again, and acked
        await relay.wait_for(lambda: relay.acked.count((bob.agent_id, first)) == 2)
        assert [r.status for r in ctx_b.results] == ["stored", "duplicate", "stored"]
        conversation = await store_b.find_conversation(master("bob", account.agent_id))
        assert conversation is not None
        assert [m.text for m in await store_b.window(conversation.id, 10)] == ["first", "second"]
        assert await store_b.dead_letters("bob") == []

        # both sides still share the session
        answer = await bob.send(Outbound(master("bob", account.agent_id), "both arrived"))
        await contract_context.wait_ingested(f"{bob.agent_id}:{answer.platform_message_id}")
        third = await account.send(Outbound(master("test", bob.agent_id), "third"))
        await ctx_b.wait_ingested(f"{account.agent_id}:{third.platform_message_id}")
        assert await store_b.dead_letters("bob") == []
    finally:
        await bob.stop()
        await store_b.close()


async def run_sender(relay: FakeRelay, db: Path, seed: bytes, peer: str) -> Any:
    return await spawn_ready(SENDER, relay.url, str(db), seed.hex(), peer, what="sender")


@pytest.mark.parametrize("next_message", [True, False], ids=["then-a-message", "alone"])
@pytest.mark.parametrize("fault", ["hang", "stored_then_hang"])
async def test_sigkill_during_the_put_of_the_opening_leaves_the_session_usable(
    fault: str,
    next_message: bool,
    tmp_path: Path,
    relay: FakeRelay,
    peer: RelayPeer,
    settings_for: Any,
) -> None:
    """The opening's PUT is held unanswered (stored first, or not) and the sender killed:
    the restarted account sends the kept opening at start, so it arrives (once) with a
    next message after it or with none at all."""
    seed = os.urandom(32)
    alice = LocalSigner.from_seed(seed, siws=False).agent_id
    db = tmp_path / "alice" / "backchannel.db"
    relay.make_contacts(alice, peer.agent_id)
    relay.fail_next(fault)

    sender = await run_sender(relay, db, seed, peer.agent_id)
    try:
        await relay.wait_for(lambda: relay.hanging == 1, 30, "the opening's PUT")
    finally:
        sender.kill()
    assert await asyncio.wait_for(sender.wait(), 30) == -signal.SIGKILL

    def copied() -> bool:
        return any(r[:3] == ("PUT", "/messages", 201) for r in relay.requests)

    store = SQLiteStore(db)
    ctx = ContractContext(store, account="alice")
    restarted = TinyplaceAdapter("alice", settings_for(seed))
    await restarted.start(ctx.bind(restarted))
    try:
        if next_message:
            await restarted.send(Outbound(master("alice", peer.agent_id), "second"))
        else:
            await relay.wait_for(copied, 30, "the copy sent at start")
        received = await peer.receive()
        assert await kept_opening(restarted, peer.agent_id) is None
    finally:
        await restarted.stop()
        await store.close()
    assert [(e["type"], text) for e, text in received] == [
        ("PREKEY_BUNDLE", "first"),
        *([("CIPHERTEXT", "second")] if next_message else []),
    ]


async def started(contract_context: ContractContext, settings: dict[str, Any]) -> TinyplaceAdapter:
    adapter = TinyplaceAdapter(contract_context.account, settings)
    await adapter.start(contract_context.bind(adapter))
    return adapter


async def test_an_uncertain_opening_is_sent_again_without_waiting_for_a_next_message(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    """A first message (a question to another agent, say) whose PUT never reached the
    relay must not wait for a next message that may never come."""
    account = await started(contract_context, settings_for(opening_retry=0.05))
    try:
        relay.make_contacts(peer.agent_id, account.agent_id)
        relay.fail_next("server_error")
        with pytest.raises(Uncertain) as caught:
            await account.send(Outbound(master("test", peer.agent_id), "first"))
        first = caught.value.platform_message_id
        await relay.wait_for(lambda: len(relay.mailbox(peer.agent_id)) == 1, 30, "the copy")
        assert [(e["id"], e["type"], text) for e, text in await peer.receive()] == [
            (first, "PREKEY_BUNDLE", "first")
        ]
        await relay.wait_for(lambda: not account._openings_kept, 30, "the opening settled")
        assert await kept_opening(account, peer.agent_id) is None
        await account.send(Outbound(master("test", peer.agent_id), "second"))
        assert [(e["type"], text) for e, text in await peer.receive()] == [("CIPHERTEXT", "second")]
    finally:
        await account.stop()


async def test_copies_sent_on_their_own_are_not_counted_against_the_session(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    """A relay that is down for a while fails every copy: the session must not be given
    up for that (the first message would then never arrive), only tried again."""
    account = await started(contract_context, settings_for(opening_retry=0.05))
    try:
        relay.make_contacts(peer.agent_id, account.agent_id)
        relay.fail_next("server_error")
        with pytest.raises(Uncertain) as caught:
            await account.send(Outbound(master("test", peer.agent_id), "first"))
        copies = OPENING_COPIES + 2
        for _ in range(copies):
            relay.fail_next("server_error")
        await relay.wait_for(lambda: len(relay.mailbox(peer.agent_id)) == 1, 30, "a copy")
        failed = [r for r in relay.requests if r[:2] == ("PUT", "/messages") and r[2] == 500]
        assert len(failed) == 1 + copies
        received = await peer.receive()
        assert [(e["id"], e["type"], text) for e, text in received] == [
            (caught.value.platform_message_id, "PREKEY_BUNDLE", "first")
        ]
    finally:
        await account.stop()


async def test_an_opening_kept_while_the_copies_go_out_stays_due(
    account: TinyplaceAdapter, monkeypatch: Any
) -> None:
    """A first send to another peer keeps its opening while a sweep of the kept ones is
    under way (waiting on the ratchet lock): the sweep's list lacks it, so the sweep must
    not mark every opening settled."""
    store, _ = account._require_signal()
    listed = store.peers_with_openings

    async def listed_then_a_new_one_kept() -> list[str]:
        peers = await listed()
        account._openings_stored += 1  # what _send_one does when it keeps an opening
        return peers

    monkeypatch.setattr(store, "peers_with_openings", listed_then_a_new_one_kept)
    await account._resend_kept_openings()
    assert account._openings_kept
    monkeypatch.undo()
    await account._resend_kept_openings()
    assert not account._openings_kept  # nothing kept, and nothing came meanwhile


async def test_copies_sent_on_their_own_stop_after_a_bound_and_the_next_message_still_sends_it(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    """A copy that keeps failing on its own (a peer no longer a contact) is not tried
    forever, each try holding the poll loop; the next message still sends it first."""
    from backchannel_tinyplace.adapter import OPENING_TRIES_ALONE

    account = await started(contract_context, settings_for(opening_retry=0.01))
    try:
        relay.make_contacts(peer.agent_id, account.agent_id)
        relay.fail_next("server_error")
        with pytest.raises(Uncertain):
            await account.send(Outbound(master("test", peer.agent_id), "first"))
        for _ in range(OPENING_TRIES_ALONE):
            relay.fail_next("server_error")

        def failed_copies() -> int:
            return sum(1 for r in relay.requests if r[:3] == ("PUT", "/messages", 500)) - 1

        await relay.wait_for(lambda: failed_copies() == OPENING_TRIES_ALONE, 30, "the copies")
        await relay.wait_for(lambda: not account._openings_kept, 30, "the copies given up")
        assert relay.mailbox(peer.agent_id) == []
        await account.send(Outbound(master("test", peer.agent_id), "second"))
        assert [text for _, text in await peer.receive()] == ["first", "second"]
    finally:
        await account.stop()

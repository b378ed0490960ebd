"""Hostile or broken envelopes from an accepted peer: a dead letter each, never a stalled sender."""

from __future__ import annotations

import base64
import secrets
from typing import Any

import pytest
from backchannel.model import Address
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.testing import FakeRelay, RelayPeer, undecryptable_envelope


def _envelope(to: str, sender: str, **fields: Any) -> dict[str, Any]:
    return undecryptable_envelope(to, sender, **fields)


def _key() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


HOSTILE_SIGNALS = {
    "signal-not-an-object": "x",
    "signal-a-list": [1, 2],
    "negative-message-number": {"ratchetKey": _key(), "messageNumber": -1},
    "negative-chain-length": {"ratchetKey": _key(), "previousChainLength": -5},
    "infinite-message-number": {"ratchetKey": _key(), "messageNumber": float("inf")},
    "message-number-2**40": {"ratchetKey": _key(), "messageNumber": 2**40},
    "short-ratchet-key": {"ratchetKey": base64.b64encode(b"abc").decode()},
}


@pytest.mark.parametrize("signal", list(HOSTILE_SIGNALS.values()), ids=list(HOSTILE_SIGNALS))
async def test_a_hostile_signal_header_is_a_dead_letter_and_the_sender_goes_on(
    account: TinyplaceAdapter,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    signal: Any,
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    first = await peer.send_text(account.agent_id, "hello")  # a session exists from here
    await relay.wait_acked(account.agent_id, first)
    bad = _envelope(account.agent_id, peer.agent_id, signal=signal)
    relay.mailboxes[account.agent_id].append(bad)
    await relay.wait_acked(account.agent_id, bad["id"])
    letters = await contract_context.store.dead_letters("test")
    assert [letter["ref"] for letter in letters] == [bad["id"]]
    good = await peer.send_text(account.agent_id, "still here")
    await relay.wait_acked(account.agent_id, good)
    stored = [
        m.text for m in await contract_context.transcript(Address("test", peer.agent_id, "master"))
    ]
    assert stored == ["hello", "still here"]


async def test_a_relay_id_with_half_a_surrogate_pair_is_stored_once_and_acked(
    account: TinyplaceAdapter,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    odd = await peer.send_text(account.agent_id, "odd id", message_id="msg_\ud800_1")
    await relay.wait_acked(account.agent_id, odd)
    good = await peer.send_text(account.agent_id, "next")
    await relay.wait_acked(account.agent_id, good)
    stored = [
        m.text for m in await contract_context.transcript(Address("test", peer.agent_id, "master"))
    ]
    assert stored == ["odd id", "next"]
    assert await contract_context.store.dead_letters("test") == []


async def test_ciphertexts_of_a_reset_session_are_read_before_the_new_session_opens(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    adapter = TinyplaceAdapter("test", settings_for())
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(contract_context.bind(adapter))
    try:
        first = await peer.send_text(adapter.agent_id, "m0")
        await relay.wait_acked(adapter.agent_id, first)
    finally:
        await adapter.stop()
    # while nobody polls: one more message on the old session, then the peer resets it
    # (a harness plugin's rehandshake) and goes on in the new one
    old = await peer.send_text(adapter.agent_id, "m1")
    await peer.session.remove_session(adapter.agent_id)
    reopened = await peer.send_text(adapter.agent_id, "m2")
    after = await peer.send_text(adapter.agent_id, "m3")
    box = relay.mailboxes[adapter.agent_id]
    assert [m["type"] for m in box] == ["CIPHERTEXT", "PREKEY_BUNDLE", "CIPHERTEXT"]
    for second, message in enumerate(box):  # sent a second apart, listed in that order
        message["timestamp"] = f"2026-11-30T09:00:0{second}.000Z"

    await adapter.start(contract_context)
    try:
        await relay.wait_for(
            lambda: all(relay.is_acked(adapter.agent_id, i) for i in (old, reopened, after))
        )
    finally:
        await adapter.stop()
    assert await contract_context.store.dead_letters("test") == []
    stored = [
        m.text for m in await contract_context.transcript(Address("test", peer.agent_id, "master"))
    ]
    assert stored == ["m0", "m1", "m2", "m3"]


class StateFailsOnce(ContractContext):
    """A context whose store fails the first read of a Signal session."""

    failed = False

    async def get_state(self, key: str) -> str | None:
        if key.startswith("signal/session/") and not self.failed:
            self.failed = True
            raise OSError("database is locked")
        return await super().get_state(key)


async def test_a_store_failure_inside_a_decrypt_is_retried_not_dead_lettered(
    store: Any, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    ctx = StateFailsOnce(store, account="test")
    adapter = TinyplaceAdapter("test", settings_for())
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(ctx.bind(adapter))
    try:
        sent = await peer.send_text(adapter.agent_id, "through a locked database")
        await relay.wait_acked(adapter.agent_id, sent)
    finally:
        await adapter.stop()
    assert ctx.failed
    assert await store.dead_letters("test") == []
    stored = [m.text for m in await ctx.transcript(Address("test", peer.agent_id, "master"))]
    assert stored == ["through a locked database"]


async def test_a_store_failure_before_a_send_is_retried_later_not_refused(
    store: Any, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    """The store failed, not the message: nothing went out, so the outbox tries again
    (RateLimited), where a refusal (Rejected) would give the message up for good."""
    from backchannel.errors import RateLimited
    from backchannel.model import Outbound

    ctx = StateFailsOnce(store, account="test")
    adapter = TinyplaceAdapter("test", settings_for())
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(ctx.bind(adapter))
    try:
        address = Address("test", peer.agent_id, "master")
        with pytest.raises(RateLimited, match="could not read the encryption session"):
            await adapter.send(Outbound(address, "through a locked database"))
        assert ctx.failed and len(relay.mailbox(peer.agent_id)) == 0
        await adapter.send(Outbound(address, "through a locked database"))  # the retry
        assert len(relay.mailbox(peer.agent_id)) == 1
    finally:
        await adapter.stop()

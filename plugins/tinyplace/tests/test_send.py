"""Sending: Signal-encrypted through the SDK, v1 envelopes in sessions, errors mapped."""

from __future__ import annotations

import json
from typing import Any

import pytest
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.envelope import ENVELOPE_V1
from backchannel_tinyplace.testing import FakeRelay, RelayPeer


async def test_session_send_is_a_v1_envelope_naming_the_session_twice_and_the_reply(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    outbound = Outbound(Address("test", peer.agent_id, "s-7"), "hi there", reply_to="their-msg-1")
    receipt = await account.send(outbound)
    ((envelope, plaintext),) = await peer.receive()
    body = json.loads(plaintext)
    assert envelope["type"] == "PREKEY_BUNDLE" and envelope["id"] == receipt.platform_message_id
    assert body["envelope_version"] == ENVELOPE_V1
    assert body["scope"]["wrapper_session_id"] == body["scope"]["harness_session_id"] == "s-7"
    assert body["message"]["text"] == "hi there"
    assert body["message"]["id"] == receipt.platform_message_id
    assert body["tp"]["in_reply_to"] == "their-msg-1"
    # the second message rides the established ratchet
    await account.send(Outbound(Address("test", peer.agent_id, "s-7"), "again"))
    ((envelope, plaintext),) = await peer.receive()
    assert envelope["type"] == "CIPHERTEXT"
    assert "in_reply_to" not in json.loads(plaintext)["tp"]


async def test_a_reply_in_a_plugin_session_names_the_peers_session_label(
    account: TinyplaceAdapter, contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer
) -> None:
    # a Claude/Codex harness plugin labels its sessions (tp.from_session) and routes an
    # incoming envelope by tp.to_session; the reply names the label the peer last used
    relay.make_contacts(peer.agent_id, account.agent_id)
    address = Address("test", peer.agent_id, "conv-1")
    await account.send(Outbound(address, "no label known yet"))
    ((_, plaintext),) = await peer.receive()
    assert "to_session" not in json.loads(plaintext)["tp"]
    first = await peer.send_text(account.agent_id, "hi", session="conv-1", from_session="codex:2")
    await contract_context.wait_ingested(f"{peer.agent_id}:{first}")
    await account.send(Outbound(address, "back to you"))
    ((_, plaintext),) = await peer.receive()
    assert json.loads(plaintext)["tp"]["to_session"] == "codex:2"
    # a label outside the plugins' safe shape is never echoed
    odd = await peer.send_text(account.agent_id, "x", session="conv-1", from_session="a b/c")
    await contract_context.wait_ingested(f"{peer.agent_id}:{odd}")
    await account.send(Outbound(address, "again"))
    ((_, plaintext),) = await peer.receive()
    assert json.loads(plaintext)["tp"]["to_session"] == "codex:2"


async def test_master_send_is_plain_text(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    await account.send(Outbound(Address("test", peer.agent_id, "master"), "just words"))
    ((_, plaintext),) = await peer.receive()
    assert plaintext == "just words"


async def test_unpaired_peer_is_rejected_with_pairing_advice_and_first_send_after_pairing_works(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    address = Address("test", peer.agent_id, "master")
    with pytest.raises(Rejected) as caught:
        await account.send(Outbound(address, "hello?"))
    assert f"pair first: backchannel tinyplace pair {peer.agent_id}" in caught.value.reason
    relay.make_contacts(peer.agent_id, account.agent_id)
    await account.send(Outbound(address, "hello now"))
    ((envelope, plaintext),) = await peer.receive()
    # the refused first message did not leave a half-open session behind
    assert envelope["type"] == "PREKEY_BUNDLE" and plaintext == "hello now"


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("server_error", Uncertain),
        ("stored_then_error", Uncertain),
        ("reset", Uncertain),
        ("rate_limited", RateLimited),
    ],
)
async def test_put_faults_map_to_outcomes_and_are_never_retried_by_the_sdk(
    fault: str,
    expected: type[Exception],
    account: TinyplaceAdapter,
    relay: FakeRelay,
    peer: RelayPeer,
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    address = Address("test", peer.agent_id, "master")
    await account.send(Outbound(address, "warm up"))
    relay.fail_next(fault, method="PUT", path="/messages", retry_after=4)
    with pytest.raises(expected):
        await account.send(Outbound(address, "the faulty one"))
    puts = [r for r in relay.requests if r[:2] == ("PUT", "/messages")]
    # one PUT each (a dropped connection is not answered, so it is not logged), and no
    # silent resend of the same signed request (it would come back 401 replayed_nonce)
    assert len(puts) == (1 if fault == "reset" else 2)
    assert all(status != 401 for _, _, status in relay.requests)
    # the ratchet moved on regardless; later messages still decrypt
    await account.send(Outbound(address, "after"))
    texts = [text for _, text in await peer.receive()]
    assert texts[0] == "warm up" and texts[-1] == "after"


async def test_refused_connection_is_rate_limited_not_uncertain(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    settings = settings_for()
    adapter = TinyplaceAdapter("test", settings)
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(contract_context.bind(adapter))
    address = Address("test", peer.agent_id, "master")
    await adapter.send(Outbound(address, "warm up"))  # the session exists from here on
    await adapter.stop()
    await relay.close()
    # a fresh process (no pooled connection) while the relay is down: nothing can be sent
    restarted = TinyplaceAdapter("test", settings)
    await restarted.start(contract_context.bind(restarted))
    try:
        with pytest.raises(RateLimited) as caught:
            await restarted.send(Outbound(address, "nobody home"))
        assert "refused the connection" in caught.value.reason
    finally:
        await restarted.stop()


async def test_peer_without_keys_is_rejected(account: TinyplaceAdapter, relay: FakeRelay) -> None:
    async with RelayPeer(relay.url) as silent:
        relay.make_contacts(silent.agent_id, account.agent_id)
        with pytest.raises(Rejected) as caught:
            await account.send(Outbound(Address("test", silent.agent_id, "master"), "hello"))
    assert "no pre-key bundle" in caught.value.reason


async def test_edits_and_reactions_are_rejected(account: TinyplaceAdapter, peer: RelayPeer) -> None:
    with pytest.raises(Rejected):
        await account.send(
            Outbound(Address("test", peer.agent_id, "master"), "new", kind="edit", target="x")
        )


async def test_ratchet_survives_a_restart_in_both_directions(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    settings = settings_for()
    address = Address("test", peer.agent_id, "master")
    first = TinyplaceAdapter("test", settings)
    relay.make_contacts(peer.agent_id, first.agent_id)
    await first.start(contract_context.bind(first))
    await first.send(Outbound(address, "before restart"))
    assert [text for _, text in await peer.receive()] == ["before restart"]
    got = await peer.send_text(first.agent_id, "reply before restart")
    await relay.wait_acked(first.agent_id, got)
    await first.stop()

    second = TinyplaceAdapter("test", settings)
    await second.start(contract_context.bind(second))
    try:
        await second.send(Outbound(address, "after restart"))
        assert [text for _, text in await peer.receive()] == ["after restart"]
        got = await peer.send_text(second.agent_id, "reply after restart")
        await relay.wait_acked(second.agent_id, got)
    finally:
        await second.stop()
    assert [m.text for m in await contract_context.transcript(address)] == [
        "reply before restart",
        "reply after restart",
    ]
    assert [e["type"] for e in relay.sent_by(second.agent_id)] == ["PREKEY_BUNDLE", "CIPHERTEXT"]
    assert [e["type"] for e in relay.sent_by(peer.agent_id)] == ["CIPHERTEXT", "CIPHERTEXT"]

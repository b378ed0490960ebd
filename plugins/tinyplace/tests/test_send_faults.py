"""Sending through relay answers the SDK does not wrap, and peers' own broken bundles."""

from __future__ import annotations

from typing import Any

import pytest
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel.model import Address, Outbound
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.testing import FakeRelay, RelayPeer


@pytest.mark.parametrize("fault", ["garbled", "cut_body"])
async def test_an_unreadable_answer_to_a_put_is_uncertain_and_not_resent(
    fault: str, account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    address = Address("test", peer.agent_id, "master")
    await account.send(Outbound(address, "warm up"))
    relay.fail_next(fault, method="PUT", path="/messages")
    with pytest.raises(Uncertain) as caught:
        await account.send(Outbound(address, "stored, answer lost"))
    assert "may have arrived" in caught.value.reason and "\n" not in caught.value.reason
    assert [text for _, text in await peer.receive()] == ["warm up", "stored, answer lost"]
    await account.send(Outbound(address, "after"))
    assert [text for _, text in await peer.receive()] == ["after"]


BROKEN_BUNDLES = {
    "no-public-key": {"keyId": "spk_1", "signature": "AAAA"},
    "not-an-object": "spk",
    "public-key-a-number": {"keyId": "spk_1", "publicKey": 5, "signature": "AAAA"},
}


@pytest.mark.parametrize("signed", list(BROKEN_BUNDLES.values()), ids=list(BROKEN_BUNDLES))
async def test_a_peers_broken_bundle_is_a_one_line_refusal(
    signed: Any, account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.signed_prekeys[peer.agent_id] = signed  # the peer published garbage
    with pytest.raises(Rejected) as caught:
        await account.send(Outbound(Address("test", peer.agent_id, "master"), "hello"))
    assert "cannot open an encrypted session" in caught.value.reason
    assert relay.sent_by(account.agent_id) == []


async def test_an_unreadable_bundle_answer_is_retried_later(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.fail_next("garbled", method="GET", path=f"/keys/{peer.agent_id}/bundle")
    with pytest.raises(RateLimited):
        await account.send(Outbound(Address("test", peer.agent_id, "master"), "hello"))
    assert relay.sent_by(account.agent_id) == []
    await account.send(Outbound(Address("test", peer.agent_id, "master"), "hello again"))
    assert [text for _, text in await peer.receive()] == ["hello again"]


async def test_an_uncertain_send_keeps_the_id_the_relay_stored_it_under(
    account: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer
) -> None:
    """The message id is chosen before the PUT: a send answered 500 after the relay stored
    it is Uncertain, and says that id, so a reply naming it can be placed (and an ask's
    answer matched to its own question, not guessed)."""
    relay.make_contacts(peer.agent_id, account.agent_id)
    relay.fail_next("stored_then_error")
    with pytest.raises(Uncertain) as caught:
        await account.send(Outbound(Address("test", peer.agent_id, "master"), "status?"))
    [stored] = relay.mailbox(peer.agent_id)
    assert caught.value.platform_message_id == stored["id"]

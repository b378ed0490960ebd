"""Group chat traffic in the 1:1 mailbox: sender-key handoffs, group messages, relay hints.

backchannel takes no part in group chats. The SDK's `send_group_message` hands each
member the group's sender key over the encrypted 1:1 channel, and the relay's group
fan-out puts the group messages (and its own hints) in the same mailbox. Everything
here is built with the SDK's own group functions.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from backchannel.model import Address
from backchannel.store import SQLiteStore
from backchannel.testing import ContractContext
from backchannel.testing.fuzz import store_leaks
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.envelope import parse_body
from backchannel_tinyplace.testing import FakeRelay, RelayPeer
from tinyplace.messaging.group import (
    build_group_envelope,
    encode_group_key_distribution,
    is_backend_hint_envelope,
)
from tinyplace.signal import GroupSenderKey

from .test_receive import DecryptCounter, texts


def group_message(group: str, sender: str, text: str, message_id: str) -> dict[str, Any]:
    """A group message as `send_group_message` fans it out: sender-key encrypted."""
    key = GroupSenderKey.create()
    return build_group_envelope(message_id, group, sender, 0, key.encrypt(text.encode()))


def relay_hint(group: str, sender: str, message_id: str) -> dict[str, Any]:
    """The relay's "sender-key-distribution-required" placeholder for a group envelope."""
    hint = {
        **group_message(group, sender, "-", message_id),
        "body": base64.b64encode(b"sender-key-distribution-required").decode(),
    }
    assert is_backend_hint_envelope(hint)
    return hint


async def test_a_group_sender_key_handoff_is_acked_and_never_kept_shown_or_logged(
    account: TinyplaceAdapter,
    store: SQLiteStore,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    relay.make_contacts(peer.agent_id, account.agent_id)
    distribution = GroupSenderKey.create().distribution()
    handoff = encode_group_key_distribution("grp-1", peer.agent_id, 0, distribution)
    # a handoff the SDK cannot read (no iteration) may hold a key all the same
    broken = json.loads(handoff)
    del broken["distribution"]["iteration"]
    ids = [
        await peer.send_text(account.agent_id, handoff),
        await peer.send_text(account.agent_id, json.dumps(broken)),
        await peer.send_text(account.agent_id, "hello"),
    ]
    await relay.wait_for(lambda: all(relay.is_acked(account.agent_id, i) for i in ids))

    master = Address("test", peer.agent_id, "master")
    assert await texts(contract_context, master) == ["hello"]
    assert [e.text for e in contract_context.events] == ["hello"]  # one run, for "hello"
    assert await contract_context.store.dead_letters("test") == []
    chain_key = distribution.chain_key
    assert chain_key not in caplog.text
    assert store_leaks(store.path, [chain_key], ["chainKey"]) == []
    assert caplog.text.count("group sender-key handoff") == 2  # once each
    assert f"group sender-key handoff {ids[0]} from {peer.agent_id} (group grp-1)" in caplog.text
    assert account._reader is not None
    assert account._reader.group_traffic == {"group sender-key handoff": 2}
    # the ratchet moved past them: a redelivery is not decrypted again, nor said again
    counter = DecryptCounter(account)
    relay.redeliver(account.agent_id, ids[0])
    relay.acked.clear()
    await relay.wait_acked(account.agent_id, ids[0])
    assert counter.calls == []
    assert caplog.text.count("group sender-key handoff") == 2


def test_a_handoff_body_has_no_text_only_its_group() -> None:
    distribution = GroupSenderKey.create().distribution()
    body = parse_body(encode_group_key_distribution("grp-9", "someone", 3, distribution))
    assert body.text is None and body.group_key_for == "grp-9"
    mangled = parse_body('  {"kind": "tinyplace/group-sender-key", "chainKey": "x"}')
    assert mangled.text is None and mangled.group_key_for == ""


async def test_group_messages_and_hints_stay_in_the_mailbox_unread_and_said_once(
    account: TinyplaceAdapter,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    relay.make_contacts(peer.agent_id, account.agent_id)
    async with RelayPeer(relay.url) as stranger:  # a group member that is no contact
        counter = DecryptCounter(account)
        before = await peer.send_text(account.agent_id, "before")
        group = [
            group_message("grp-1", peer.agent_id, "hello group", "grp_1_1"),
            relay_hint("grp-1", peer.agent_id, "grp_hint_1"),
            group_message("grp-1", stranger.agent_id, "me too", "grp_1_2"),
        ]
        for envelope in group:
            relay.fan_out(envelope, [account.agent_id, stranger.agent_id])
        after = await peer.send_text(account.agent_id, "after")
        await relay.wait_acked(account.agent_id, after)
        await relay.wait_listed(account.agent_id, 3)  # re-listed, and left alone again

    group_ids = [str(e["id"]) for e in group]
    assert [m["id"] for m in relay.mailbox(account.agent_id)] == group_ids
    assert not any(relay.is_acked(account.agent_id, i) for i in group_ids)
    assert counter.calls == [before, after]  # never decrypted as 1:1
    assert await contract_context.store.dead_letters("test") == []
    master = Address("test", peer.agent_id, "master")
    assert await texts(contract_context, master) == ["before", "after"]
    assert await contract_context.get_state("pending_senders") is None
    for relay_id in group_ids:  # said once each, however often listed
        assert caplog.text.count(f" {relay_id} from ") == 1
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert sum("group message" in line for line in infos) == 1  # the rest at DEBUG
    assert "group message grp_1_1 from" in caplog.text and "(group grp-1)" in caplog.text
    assert account._reader is not None
    assert account._reader.group_traffic == {"group message": 2, "group sender-key hint": 1}


async def test_a_listing_full_of_group_traffic_makes_room_for_the_messages_behind_it(
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    settings_for: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing here reads group traffic, and the relay lists oldest first with no cursor:
    once it fills a listing (poll_limit), the group envelopes in it are removed, so the
    1:1 message behind them is read; below the limit they stay."""
    adapter = TinyplaceAdapter("test", settings_for(poll_limit=2))
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(contract_context.bind(adapter))
    try:
        for n in range(3):
            relay.fan_out(
                group_message("grp-1", peer.agent_id, "hi", f"grp_{n}"), [adapter.agent_id]
            )
        caplog.set_level(logging.INFO)
        sent = await peer.send_text(adapter.agent_id, "behind the group traffic")
        await relay.wait_acked(adapter.agent_id, sent)
    finally:
        await adapter.stop()
    assert [e.text for e in contract_context.events] == ["behind the group traffic"]
    assert relay.mailbox(adapter.agent_id) == []  # below the limit one would have stayed
    assert "removed to make room" in caplog.text
    assert "is full of messages" not in caplog.text

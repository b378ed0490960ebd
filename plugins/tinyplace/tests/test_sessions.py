"""DurableSessionStore: the SDK's SessionStore over durable state, with staged writes."""

from __future__ import annotations

import os

import pytest
from backchannel_tinyplace.sessions import DurableSessionStore
from tinyplace import LocalSigner
from tinyplace.signal import SignalSession
from tinyplace.signal.crypto import ed25519_pub_to_x25519_pub, ed25519_seed_to_x25519_keypair
from tinyplace.signal.keys import build_key_bundle, generate_pre_keys, generate_signed_pre_key
from tinyplace.signal.store import SenderKeyState, X25519KeyPair
from tinyplace.signal.x3dh import x3dh_respond


class DictState:
    """Durable state as a dict (what ctx.get_state / ctx.set_state do, minus the disk)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.writes = 0

    async def get_state(self, key: str) -> str | None:
        return self.values.get(key)

    async def set_state(self, key: str, value: str | None) -> None:
        self.writes += 1
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = value


def identity() -> X25519KeyPair:
    pair = ed25519_seed_to_x25519_keypair(os.urandom(32))
    return X25519KeyPair(pair.public_key, pair.private_key)


async def test_staged_writes_are_read_back_and_only_committed_by_the_caller() -> None:
    state = DictState()
    store = DurableSessionStore(state, identity())
    session = x3dh_respond(  # a real ratchet state, as a first PREKEY_BUNDLE creates it
        ed25519_seed_to_x25519_keypair(os.urandom(32)),
        ed25519_seed_to_x25519_keypair(os.urandom(32)),
        os.urandom(32),
        os.urandom(32),
    )
    with store.staging() as staged:
        await store.store_session("peer", session)
        assert (await store.get_session("peer")) == session  # reads see staged writes
        assert state.writes == 0
        assert set(staged) == {"signal/session/peer"}
    assert await store.get_session("peer") is None  # dropped: nobody committed it
    await store.store_session("peer", session)  # outside staging: written through
    assert await store.get_session("peer") == session
    assert state.writes == 1


async def test_pre_keys_and_sender_keys_round_trip_through_json() -> None:
    store = DurableSessionStore(DictState(), identity())
    signer = LocalSigner.generate(siws=False)
    with pytest.raises(LookupError):
        await store.get_active_signed_pre_key()
    signed = await generate_signed_pre_key(signer, "spk_1")
    await store.store_signed_pre_key(signed)
    active = await store.get_active_signed_pre_key()
    assert (active.key_id, active.key_pair.private_key) == ("spk_1", signed.key_pair.private_key)
    keys = await generate_pre_keys(signer, 1, 3)
    for key in keys:
        await store.store_pre_key(key)
    await store.remove_pre_key("pk_2")
    assert [k.key_id for k in await store.get_all_pre_keys()] == ["pk_1", "pk_3"]
    sender_key = SenderKeyState("d1", os.urandom(32), 4, os.urandom(32), None, {5: os.urandom(32)})
    await store.store_sender_key(sender_key)
    assert await store.get_sender_key("d1") == sender_key
    await store.remove_sender_key("d1")
    assert await store.get_sender_key("d1") is None


async def test_a_conversation_survives_reloading_the_store_from_state() -> None:
    """Two SignalSessions over durable stores; every message goes through fresh store objects."""
    seeds = {"a": os.urandom(32), "b": os.urandom(32)}
    states = {"a": DictState(), "b": DictState()}
    signers = {n: LocalSigner.from_seed(s, siws=False) for n, s in seeds.items()}

    def session(name: str) -> SignalSession:
        pair = ed25519_seed_to_x25519_keypair(seeds[name])
        store = DurableSessionStore(states[name], X25519KeyPair(pair.public_key, pair.private_key))
        return SignalSession(store, pair.public_key)

    signed = await generate_signed_pre_key(signers["b"], "spk_1")
    pair_b = ed25519_seed_to_x25519_keypair(seeds["b"])
    b_store = DurableSessionStore(states["b"], X25519KeyPair(pair_b.public_key, pair_b.private_key))
    await b_store.store_signed_pre_key(signed)
    bundle = build_key_bundle("b", signers["b"].public_key_base64, signed)
    b_ed = signers["b"].public_key
    a_ed = signers["a"].public_key
    first = await session("a").encrypt("b", ed25519_pub_to_x25519_pub(b_ed), b"one", bundle, b_ed)
    envelope = {"type": first.type, "body": first.body, "signal": first.signal}
    assert await session("b").decrypt("a", ed25519_pub_to_x25519_pub(a_ed), envelope) == b"one"
    for text in (b"two", b"three"):
        reply = await session("b").encrypt("a", ed25519_pub_to_x25519_pub(a_ed), text)
        envelope = {"type": reply.type, "body": reply.body, "signal": reply.signal}
        assert await session("a").decrypt("b", ed25519_pub_to_x25519_pub(b_ed), envelope) == text


async def test_skipped_message_keys_are_bounded_keeping_the_newest() -> None:
    """A contact skipping ahead message after message must not grow the stored state without
    end: past MAX_SKIPPED_KEYS, the oldest skipped keys go (sessions and sender keys)."""
    from backchannel_tinyplace.sessions import MAX_SKIPPED_KEYS

    state = DictState()
    store = DurableSessionStore(state, identity())
    session = x3dh_respond(
        ed25519_seed_to_x25519_keypair(os.urandom(32)),
        ed25519_seed_to_x25519_keypair(os.urandom(32)),
        os.urandom(32),
        os.urandom(32),
    )
    total = MAX_SKIPPED_KEYS + 500
    session.skipped_keys.update({f"k{n}": os.urandom(32) for n in range(total)})
    await store.store_session("peer", session)
    kept = (await store.get_session("peer")).skipped_keys  # type: ignore[union-attr]
    assert list(kept) == [f"k{n}" for n in range(500, total)]
    sender_key = SenderKeyState(
        "d1", os.urandom(32), 4, os.urandom(32), None, {n: os.urandom(32) for n in range(total)}
    )
    await store.store_sender_key(sender_key)
    kept_sender = (await store.get_sender_key("d1")).skipped_keys  # type: ignore[union-attr]
    assert sorted(kept_sender) == list(range(500, total))


async def test_the_peers_with_a_kept_opening_are_listed_until_it_is_removed() -> None:
    """The adapter sends kept openings again on its own: it finds them by this list."""
    state = DictState()
    store = DurableSessionStore(state, identity())
    assert await store.peers_with_openings() == []
    await store.store_opening("a", {"id": "m1"})  # the marker, then the envelope
    await store.store_opening("a", {"id": "m1", "body": "x"})
    await store.store_opening("b", {"id": "m2", "body": "y"})
    assert await store.peers_with_openings() == ["a", "b"]
    with store.staging() as staged:
        # the peer wrote back: settled in the transaction of its message
        await store.remove_opening("a")
        assert await store.peers_with_openings() == ["b"]
    for key, value in staged.items():
        await state.set_state(key, value)
    assert await store.peers_with_openings() == ["b"]
    assert await store.get_opening("a") is None
    await store.remove_session("b")  # an opening belongs to its session
    assert await store.peers_with_openings() == []
    state.values["signal/openings"] = '{"not": "a list"}'
    assert await store.peers_with_openings() == []

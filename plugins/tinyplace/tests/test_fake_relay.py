"""FakeRelay holds requests to the relay's rules: signatures, freshness, replays, contacts, keys."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from backchannel_tinyplace.testing import FakeRelay, RelayPeer
from tinyplace import LocalSigner
from tinyplace.auth import sign_directory_write


async def signed_get(
    relay: FakeRelay, signer: LocalSigner, uri: str, **override: str
) -> tuple[int, Any, dict[str, str]]:
    headers = await sign_directory_write(signer, signer.public_key_base64, "GET", uri, "")
    headers["X-Agent-ID"] = signer.agent_id
    headers.update(override)
    async with (
        aiohttp.ClientSession() as session,
        session.get(relay.url + uri, headers=headers) as r,
    ):
        return r.status, await r.json(), headers


async def test_a_correctly_signed_request_is_served_and_an_empty_mailbox_is_null(
    relay: FakeRelay,
) -> None:
    signer = LocalSigner.generate(siws=False)
    status, body, _ = await signed_get(relay, signer, f"/messages?agentId={signer.agent_id}")
    assert status == 200 and body == {"messages": None}


async def test_bad_stale_and_replayed_signatures_are_refused(relay: FakeRelay) -> None:
    signer = LocalSigner.generate(siws=False)
    uri = f"/messages?agentId={signer.agent_id}"
    other = LocalSigner.generate(siws=False)
    forged = (await sign_directory_write(other, other.public_key_base64, "GET", uri, ""))[
        "X-TinyPlace-Signature"
    ]
    status, body, _ = await signed_get(relay, signer, uri, **{"X-TinyPlace-Signature": forged})
    assert (status, body["code"]) == (401, "bad_signature")

    stale = (datetime.now(UTC) - timedelta(minutes=10)).isoformat().replace("+00:00", "Z")
    headers = await sign_directory_write(signer, signer.public_key_base64, "GET", uri, "")
    # re-sign by hand with an old date: the signature is valid, the date is not fresh
    payload = "\n".join(("GET", uri, stale, headers["X-TinyPlace-Nonce"], _sha("")))
    headers["X-TinyPlace-Date"] = stale
    headers["X-TinyPlace-Signature"] = base64.b64encode(
        await signer.sign(payload.encode())
    ).decode()
    async with (
        aiohttp.ClientSession() as session,
        session.get(relay.url + uri, headers=headers) as r,
    ):
        assert (r.status, (await r.json())["code"]) == (401, "stale_signature")

    status, _, used = await signed_get(relay, signer, uri)
    assert status == 200
    async with aiohttp.ClientSession() as session, session.get(relay.url + uri, headers=used) as r:
        assert (r.status, (await r.json())["code"]) == (401, "replayed_nonce")


async def test_an_agent_cannot_read_another_agents_mailbox(relay: FakeRelay) -> None:
    signer, victim = LocalSigner.generate(siws=False), LocalSigner.generate(siws=False)
    status, body, _ = await signed_get(relay, signer, f"/messages?agentId={victim.agent_id}")
    assert (status, body["code"]) == (403, "forbidden")
    status, body, _ = await signed_get(
        relay, signer, f"/messages?agentId={signer.agent_id}", **{"X-Agent-ID": victim.agent_id}
    )
    assert (status, body["code"]) == (403, "agent_mismatch")


async def test_bundles_hand_out_each_one_time_key_once(relay: FakeRelay, peer: RelayPeer) -> None:
    async with aiohttp.ClientSession() as session:
        seen = []
        for _ in range(6):
            async with session.get(f"{relay.url}/keys/{peer.agent_id}/bundle") as r:
                bundle = await r.json()
                seen.append((bundle.get("oneTimePreKey") or {}).get("keyId"))
    assert seen == ["pk_1", "pk_2", "pk_3", "pk_4", "pk_5", None]
    assert bundle["signedPreKey"]["keyId"] == "spk_1"


async def test_messages_between_strangers_are_refused_until_a_request_exists(
    relay: FakeRelay, peer: RelayPeer
) -> None:
    async with RelayPeer(relay.url) as other:
        await other.publish_keys()
        try:
            await peer.send_text(other.agent_id, "hi stranger")
        except Exception as error:
            assert getattr(error, "status", None) == 403
            assert getattr(error, "body", {})["code"] == "not_a_contact"
        else:
            raise AssertionError("a DM between strangers was accepted")
        await peer.contacts.request(other.agent_id)
        await peer.send_text(other.agent_id, "hi, I asked first")
        ((_, text),) = await other.receive()
        assert text == "hi, I asked first"
        await other.contacts.block(peer.agent_id)
        try:
            await peer.send_text(other.agent_id, "blocked?")
        except Exception as error:
            assert getattr(error, "status", None) == 403
        else:
            raise AssertionError("a blocked sender's DM was accepted")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()

"""Keep this agent's pre-key bundle published on the relay.

A peer's first message needs our signed pre-key, and preferably a one-time
pre-key, from ``GET /keys/{agentId}/bundle`` (the relay hands each one-time
key out once). Private halves are written to the durable session store
*before* the public halves are uploaded, so a peer can never hold a key we
have lost.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tinyplace import TinyPlaceClient, TinyPlaceError
from tinyplace.signal.keys import (
    build_pre_keys_request,
    build_signed_pre_key_request,
    generate_pre_keys,
    generate_signed_pre_key,
)

from .identity import Identity
from .sessions import DurableSessionStore

__all__ = ["ensure_published_keys", "one_time_key_count"]

_UPLOADED = "keys/signed_prekey_uploaded"
_NEXT_ID = "keys/next_prekey_id"


async def ensure_published_keys(
    client: TinyPlaceClient,
    store: DurableSessionStore,
    identity: Identity,
    pool: int,
    log: logging.LoggerAdapter[logging.Logger] | logging.Logger,
) -> None:
    """Upload the signed pre-key if the relay lacks it; top the one-time pool up to `pool`."""
    signer = identity.signer()
    agent_id = identity.agent_id
    state = store.state
    try:
        signed = await store.get_active_signed_pre_key()
    except LookupError:
        signed = await generate_signed_pre_key(signer, f"spk_{int(time.time())}")
        await store.store_signed_pre_key(signed)
    health = await _health(client, agent_id)
    relay_has_signed = bool(health.get("signedPreKey")) if health is not None else False
    if await state.get_state(_UPLOADED) != signed.key_id or not relay_has_signed:
        request = build_signed_pre_key_request(signed, identity_key=signer.public_key_base64)
        await client.keys.rotate_signed_pre_key(agent_id, request)
        await state.set_state(_UPLOADED, signed.key_id)
    available = one_time_key_count(health) if health is not None else 0
    if available >= max(1, pool // 2):
        return
    start = int(await state.get_state(_NEXT_ID) or "1")
    fresh = await generate_pre_keys(signer, start, pool - available)
    for key in fresh:
        await store.store_pre_key(key)
    await state.set_state(_NEXT_ID, str(start + len(fresh)))
    request = build_pre_keys_request(fresh, identity_key=signer.public_key_base64)
    await client.keys.upload_pre_keys(agent_id, request)
    log.info("published %d one-time pre-keys (relay had %d)", len(fresh), available)


def one_time_key_count(health: dict[str, Any]) -> int:
    """Return how many one-time pre-keys the relay still holds, from a health answer."""
    for key in ("oneTimePreKeyCount", "oneTimePreKeys", "availableOneTimePreKeys"):
        value = health.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, list):
            return len(value)
    return 0


async def _health(client: TinyPlaceClient, agent_id: str) -> dict[str, Any] | None:
    try:
        answer = await client.keys.health(agent_id)
    except TinyPlaceError as error:
        if error.status == 404:  # nothing published yet
            return {}
        raise
    return answer if isinstance(answer, dict) else {}

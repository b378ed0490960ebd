"""The SDK's Signal `SessionStore`, kept in backchannel's durable per-account state.

Every record (ratchet session per peer, one-time and signed pre-keys, sender
keys) is one state key holding JSON. Reads go to `ctx.get_state`. Writes go
straight through with `ctx.set_state`, except inside `staging()`: there they
are collected, read back by later reads in the same staging, and handed to
the caller, which commits them with `ctx.ingest(raw, state=...)` in the same
transaction as the message whose decryption caused them. If the commit never
happens (crash, store error), the ratchet stays where the store says it was,
and the message, still in the mailbox, decrypts again from that state.

Beside the SDK's records it keeps, per peer, the *opening* envelope of a
session this side opened (the `PREKEY_BUNDLE`) until the relay is known to
hold it or the peer is known to have read it (see `store_opening`).

The long-term identity key pair is never written here: it is derived from
the configured identity secret at start.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from tinyplace.signal.store import (
    PreKeyPair,
    SenderKeyState,
    SessionState,
    SessionStore,
    SignedPreKeyPair,
    X25519KeyPair,
)

__all__ = ["DurableSessionStore", "StateAccess", "StateUnavailable"]

PREFIX = "signal/"
#: the key listing the peers whose session opening is kept
OPENINGS = "openings"


class StateUnavailable(Exception):
    """The durable state could not be read or written (a transient store failure).

    Raised from inside a Signal operation so the caller can tell "the store
    failed, try again" from "this message can never be decrypted".
    """


class StateAccess(Protocol):
    """The durable key/value half of an AdapterContext."""

    async def get_state(self, key: str) -> str | None: ...

    async def set_state(self, key: str, value: str | None) -> None: ...


class DurableSessionStore(SessionStore):
    """A `tinyplace.signal.SessionStore` over an account's durable state."""

    def __init__(self, state: StateAccess, identity: X25519KeyPair) -> None:
        self._state = state
        self._identity = X25519KeyPair(identity.public_key, identity.private_key)
        self._staged: dict[str, str | None] | None = None

    @property
    def state(self) -> StateAccess:
        """The durable state this store reads and writes (for keys kept beside it)."""
        return self._state

    # --- staging -----------------------------------------------------------

    @contextmanager
    def staging(self) -> Iterator[dict[str, str | None]]:
        """Collect writes instead of committing them; yield the dict they land in.

        The caller passes that dict as `state=` to the ingest that commits the
        message; leaving the block drops anything not committed.
        """
        if self._staged is not None:
            raise RuntimeError("DurableSessionStore.staging() does not nest")
        staged: dict[str, str | None] = {}
        self._staged = staged
        try:
            yield staged
        finally:
            self._staged = None

    async def _get(self, key: str) -> str | None:
        full = PREFIX + key
        if self._staged is not None and full in self._staged:
            # reads inside a staging see its own writes
            return self._staged[full]
        try:
            return await self._state.get_state(full)
        except Exception as error:
            raise StateUnavailable(f"{type(error).__name__}: {error}") from error

    async def _put(self, key: str, value: str | None) -> None:
        if self._staged is not None:
            self._staged[PREFIX + key] = value
            return
        try:
            await self._state.set_state(PREFIX + key, value)
        except Exception as error:
            raise StateUnavailable(f"{type(error).__name__}: {error}") from error

    # --- identity ----------------------------------------------------------

    async def get_identity_x25519_key_pair(self) -> X25519KeyPair:
        return X25519KeyPair(self._identity.public_key, self._identity.private_key)

    # --- signed pre-keys ---------------------------------------------------

    async def get_signed_pre_key(self, key_id: str) -> SignedPreKeyPair | None:
        data = await self._get_json(f"signed_prekey/{key_id}")
        return _signed_pre_key(data) if data else None

    async def get_active_signed_pre_key(self) -> SignedPreKeyPair:
        active = await self._get("signed_prekey_active")
        if active is None:
            raise LookupError("No active signed pre-key")
        key = await self.get_signed_pre_key(active)
        if key is None:
            raise LookupError("Active signed pre-key not found")
        return key

    async def store_signed_pre_key(self, pre_key: SignedPreKeyPair) -> None:
        await self._put_json(f"signed_prekey/{pre_key.key_id}", _key_record(pre_key))
        await self._put("signed_prekey_active", pre_key.key_id)

    # --- one-time pre-keys -------------------------------------------------

    async def get_pre_key(self, key_id: str) -> PreKeyPair | None:
        data = await self._get_json(f"prekey/{key_id}")
        return _pre_key(data) if data else None

    async def store_pre_key(self, pre_key: PreKeyPair) -> None:
        await self._put_json(f"prekey/{pre_key.key_id}", _key_record(pre_key))
        ids = await self._pre_key_ids()
        if pre_key.key_id not in ids:
            await self._put_json("prekeys", [*ids, pre_key.key_id])

    async def remove_pre_key(self, key_id: str) -> None:
        await self._put(f"prekey/{key_id}", None)
        ids = await self._pre_key_ids()
        if key_id in ids:
            await self._put_json("prekeys", [i for i in ids if i != key_id])

    async def get_all_pre_keys(self) -> list[PreKeyPair]:
        keys = [await self.get_pre_key(key_id) for key_id in await self._pre_key_ids()]
        return [key for key in keys if key is not None]

    async def _pre_key_ids(self) -> list[str]:
        ids = await self._get_json("prekeys")
        return [str(i) for i in ids] if isinstance(ids, list) else []

    # --- sessions ----------------------------------------------------------

    async def get_session(self, address: str) -> SessionState | None:
        data = await self._get_json(f"session/{address}")
        return _session(data) if data else None

    async def store_session(self, address: str, session: SessionState) -> None:
        await self._put_json(f"session/{address}", _session_record(session))

    async def remove_session(self, address: str) -> None:
        await self._put(f"session/{address}", None)
        # an opening belongs to the session it opened
        await self.remove_opening(address)

    # --- unconfirmed session openings (backchannel's, not the SDK's) ---------

    async def get_opening(self, address: str) -> dict[str, Any] | None:
        """The envelope that opened our session with `address`, while it is unconfirmed."""
        data = await self._get_json(f"opening/{address}")
        return data if isinstance(data, dict) else None

    async def store_opening(self, address: str, envelope: Mapping[str, Any]) -> None:
        """Keep the `PREKEY_BUNDLE` envelope that opens our session with `address`.

        The adapter writes a marker (an envelope with no ``body``) before the
        SDK stores the new session, and the envelope itself before the PUT: so
        whatever becomes of the PUT (an error, a timeout, the process killed),
        a session we opened has its opening at hand, or is known never to have
        been sent. Until the relay accepts the opening or something from the
        peer is decrypted, every send to the peer first sends it again, same id
        and bytes: without it the peer can never decrypt anything of the
        session.
        """
        peers = await self.peers_with_openings()
        if address not in peers:
            # listed before it is kept: a listed peer without an opening is only skipped
            await self._put_json(OPENINGS, [*peers, address])
        await self._put_json(f"opening/{address}", dict(envelope))

    async def remove_opening(self, address: str) -> None:
        await self._put(f"opening/{address}", None)
        await self._put(f"opening_failures/{address}", None)
        peers = await self.peers_with_openings()
        if address in peers:
            await self._put_json(OPENINGS, [peer for peer in peers if peer != address])

    async def peers_with_openings(self) -> list[str]:
        """The peers whose session opening may still be kept (see `store_opening`):
        the adapter sends those again without waiting for a next message."""
        data = await self._get_json(OPENINGS)
        if not isinstance(data, list):
            return []
        return [peer for peer in data if isinstance(peer, str)]

    async def count_opening_failure(self, address: str) -> int:
        """Count one more copy of the kept opening that the relay did not take; return
        how many so far."""
        failures = int(await self._get(f"opening_failures/{address}") or 0) + 1
        await self._put(f"opening_failures/{address}", str(failures))
        return failures

    # --- sender keys (groups; stored for completeness) ----------------------

    async def get_sender_key(self, distribution_id: str) -> SenderKeyState | None:
        data = await self._get_json(f"sender_key/{distribution_id}")
        if not data:
            return None
        return SenderKeyState(
            distribution_id=data["distribution_id"],
            chain_key=_b(data["chain_key"]),
            iteration=int(data["iteration"]),
            signing_public_key=_b(data["signing_public_key"]),
            signing_private_key=_b(data["signing_private_key"])
            if data.get("signing_private_key")
            else None,
            skipped_keys={int(k): _b(v) for k, v in data.get("skipped_keys", {}).items()},
        )

    async def store_sender_key(self, sender_key: SenderKeyState) -> None:
        await self._put_json(
            f"sender_key/{sender_key.distribution_id}",
            {
                "distribution_id": sender_key.distribution_id,
                "chain_key": _s(sender_key.chain_key),
                "iteration": sender_key.iteration,
                "signing_public_key": _s(sender_key.signing_public_key),
                "signing_private_key": _s(sender_key.signing_private_key)
                if sender_key.signing_private_key
                else None,
                "skipped_keys": {
                    str(k): _s(v) for k, v in _bounded(sender_key.skipped_keys).items()
                },
            },
        )

    async def remove_sender_key(self, distribution_id: str) -> None:
        await self._put(f"sender_key/{distribution_id}", None)

    # --- json helpers --------------------------------------------------------

    async def _get_json(self, key: str) -> Any:
        text = await self._get(key)
        return None if text is None else json.loads(text)

    async def _put_json(self, key: str, value: Any) -> None:
        await self._put(key, json.dumps(value, separators=(",", ":")))


def _s(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b(text: str) -> bytes:
    return base64.b64decode(text)


def _key_record(key: PreKeyPair | SignedPreKeyPair | Any) -> dict[str, str]:
    return {
        "key_id": key.key_id,
        "public_key": _s(key.key_pair.public_key),
        "private_key": _s(key.key_pair.private_key),
        "signature": _s(key.signature),
    }


def _pre_key(data: dict[str, str]) -> PreKeyPair:
    pair = X25519KeyPair(_b(data["public_key"]), _b(data["private_key"]))
    return PreKeyPair(key_id=data["key_id"], key_pair=pair, signature=_b(data["signature"]))


def _signed_pre_key(data: dict[str, str]) -> SignedPreKeyPair:
    pair = X25519KeyPair(_b(data["public_key"]), _b(data["private_key"]))
    return SignedPreKeyPair(key_id=data["key_id"], key_pair=pair, signature=_b(data["signature"]))


def _opt(data: bytes | None) -> str | None:
    return None if data is None else _s(data)


def _opt_b(text: str | None) -> bytes | None:
    return None if text is None else _b(text)


def _session_record(session: SessionState) -> dict[str, Any]:
    return {
        "dh_send_public": _s(session.dh_send_key_pair.public_key),
        "dh_send_private": _s(session.dh_send_key_pair.private_key),
        "dh_recv_public_key": _opt(session.dh_recv_public_key),
        "root_key": _s(session.root_key),
        "send_chain_key": _opt(session.send_chain_key),
        "recv_chain_key": _opt(session.recv_chain_key),
        "send_message_number": session.send_message_number,
        "recv_message_number": session.recv_message_number,
        "previous_chain_length": session.previous_chain_length,
        "skipped_keys": {k: _s(v) for k, v in _bounded(session.skipped_keys).items()},
    }


#: message keys kept for a peer's messages that may still arrive out of order, per session.
#: The SDK bounds the keys one message may skip (1,000), not how many pile up: a contact
#: skipping ahead message after message would grow the stored state without end. The
#: oldest go first (they are the least likely still to come), as in Signal's own clients.
MAX_SKIPPED_KEYS = 2_000


_K = TypeVar("_K")


def _bounded(skipped: dict[_K, bytes]) -> dict[_K, bytes]:
    """Drop the oldest skipped keys past MAX_SKIPPED_KEYS, in place; return the dict."""
    extra = len(skipped) - MAX_SKIPPED_KEYS
    if extra > 0:
        for key in list(itertools.islice(skipped, extra)):
            del skipped[key]
    return skipped


def _session(data: dict[str, Any]) -> SessionState:
    return SessionState(
        dh_send_key_pair=X25519KeyPair(_b(data["dh_send_public"]), _b(data["dh_send_private"])),
        dh_recv_public_key=_opt_b(data["dh_recv_public_key"]),
        root_key=_b(data["root_key"]),
        send_chain_key=_opt_b(data["send_chain_key"]),
        recv_chain_key=_opt_b(data["recv_chain_key"]),
        send_message_number=int(data["send_message_number"]),
        recv_message_number=int(data["recv_message_number"]),
        previous_chain_length=int(data["previous_chain_length"]),
        skipped_keys={k: _b(v) for k, v in data.get("skipped_keys", {}).items()},
    )

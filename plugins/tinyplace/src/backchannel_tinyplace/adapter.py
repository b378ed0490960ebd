"""`TinyplaceAdapter`: one tiny.place agent identity as a backchannel account.

Receiving is a mailbox poller. Per relay message, in this order, because a
Signal decrypt advances a ratchet that cannot be rewound:

1. sender gate: only accepted contacts are decrypted; others stay in the
   mailbox and are listed in the durable state ``pending_senders``;
2. dedupe on the relay id before decrypting (a stored message is acked, not
   decrypted again);
3. decrypt once, with the session store's writes staged;
4. commit: `ctx.ingest(raw, state=staged)` stores the message and the ratchet
   advance in one transaction;
5. only then DELETE it from the mailbox.

Sends are Signal-encrypted with the SDK's `SignalSession`; the ratchet advance
is written to the store before the PUT.
"""

from __future__ import annotations

import asyncio
import binascii
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from backchannel.adapter import AdapterContext, Capabilities, split_text
from backchannel.errors import DeliveryError, NormalizeError, RateLimited, Rejected, Uncertain
from backchannel.model import Event, Outbound, Receipt, Sender
from nacl.exceptions import CryptoError
from tinyplace import TinyPlaceClient, TinyPlaceError
from tinyplace.api.messages import decode_agent_address
from tinyplace.signal import SignalSession
from tinyplace.signal.crypto import ed25519_pub_to_x25519_pub

from .contacts import ContactsApi
from .envelope import build_v1_envelope, new_message_id
from .identity import load_identity
from .keys import ensure_published_keys
from .normalize import MASTER, event_id_of, normalize_relay_message, peer_label
from .relay_errors import CONNECT_RETRY_AFTER, retry_after_of, send_error
from .sessions import DurableSessionStore
from .transport import relay_session

__all__ = ["DEFAULT_RELAY_URL", "TinyplaceAdapter"]

DEFAULT_RELAY_URL = "https://api.tiny.place"
#: Characters per relay message. Two costs bound it. The SDK's AES-CBC is pure
#: Python (about 0.1 ms per 16-byte block, on the event loop), so a part's
#: encrypt costs ~0.1 s per 1000 characters here and more at the peer. And a
#: part travels as UTF-8 (up to 4 bytes a character) inside a ~600-byte session
#: envelope, base64-encoded (x4/3) in the JSON body: 4000 characters stay under
#: ~22 KB per request in the worst case. Most replies are never split.
MAX_TEXT_LEN = 4000
#: polls between checks of the relay's one-time pre-key pool (also after each PREKEY_BUNDLE)
_KEY_CHECK_EVERY = 100
#: state key: event ids decrypted and committed without a transcript row (ignored, malformed)
_SETTLED = "settled_event_ids"
#: senders listed in the `pending_senders` state at most
_MAX_PENDING_SENDERS = 200
#: errors from the crypto layer that no retry can fix
_PERMANENT = (ValueError, KeyError, TypeError, UnicodeDecodeError, binascii.Error, CryptoError)

log = logging.getLogger("backchannel.tinyplace")


class TinyplaceAdapter:
    """A tiny.place agent identity: DMs with other agents, threaded by harness session."""

    channel = "tinyplace"

    def __init__(self, account: str, settings: Mapping[str, Any]):
        self.account = account
        self.identity = load_identity(settings, account)
        self.agent_id = self.identity.agent_id
        self.relay_url = str(settings.get("relay_url") or DEFAULT_RELAY_URL).rstrip("/")
        self.poll_interval = float(settings.get("poll_interval", 3.0))
        self.request_timeout = float(settings.get("request_timeout", 20.0))
        self.poll_limit = int(settings.get("poll_limit", 100))
        self.prekey_pool = int(settings.get("prekey_pool", 20))
        self.capabilities = Capabilities(
            threads=True,
            edits=False,
            reactions=False,
            typing=False,
            replies=True,
            max_text_len=MAX_TEXT_LEN,
            display_name="tiny.place",
        )
        self.me: Sender | None = Sender(
            id=self.agent_id, name=peer_label(self.agent_id), handle=self.agent_id, is_bot=True
        )
        self._ctx: AdapterContext | None = None
        self._client: TinyPlaceClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._signal: SignalSession | None = None
        self._store: DurableSessionStore | None = None
        self._contacts: ContactsApi | None = None
        self._accepted: set[str] = set()
        self._contacts_known = False
        self._polls = 0
        self._reported: set[str] = set()
        self._keys_ready = False
        self._ratchet = asyncio.Lock()
        self._stopped = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        _register_secrets(settings, self.identity.secret_text)

    def __repr__(self) -> str:
        return f"TinyplaceAdapter(account={self.account!r}, agent_id={self.agent_id!r})"

    # lifecycle ---------------------------------------------------------------
    async def start(self, ctx: AdapterContext) -> None:
        """Publish pre-keys when needed and start polling the mailbox."""
        self._ctx = ctx
        self._stopped.clear()
        self._session = relay_session()
        self._client = TinyPlaceClient(
            base_url=self.relay_url,
            signer=self.identity.signer(),
            session=self._session,
            timeout=self.request_timeout,
        )
        self._store = DurableSessionStore(ctx, self.identity.x25519())
        self._signal = SignalSession(self._store, self.identity.x25519().public_key)
        self._contacts = ContactsApi(self._client.http)
        await self._publish_keys()
        self._task = asyncio.create_task(self._poll_forever(), name=f"tinyplace-{self.account}")

    async def stop(self) -> None:
        """Stop polling and close the HTTP session. Idempotent."""
        self._stopped.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        """Turn a decrypted relay message into an Event (see `normalize.py`)."""
        return normalize_relay_message(raw, self.account, self.agent_id)

    # receiving ---------------------------------------------------------------
    async def poll_once(self) -> int:
        """Fetch the mailbox once and handle every message; return how many were committed."""
        client = self._require_client()
        self._polls += 1
        if not self._keys_ready or self._polls % _KEY_CHECK_EVERY == 0:
            await self._publish_keys()
        page = await client.messages.list(self.agent_id, self.poll_limit)
        listed = page.get("messages") if isinstance(page, dict) else None
        envelopes = [m for m in listed or [] if isinstance(m, dict)]
        # a PREKEY_BUNDLE opens the session the CIPHERTEXTs after it need
        envelopes.sort(
            key=lambda m: (
                m.get("type") != "PREKEY_BUNDLE",
                str(m.get("timestamp") or ""),
                str(m.get("id") or ""),
            )
        )
        if not await self._refresh_contacts():
            return 0
        committed = 0
        seen: set[str] = set()
        stalled: set[str] = set()
        for envelope in envelopes:
            relay_id, sender = str(envelope.get("id") or ""), str(envelope.get("from") or "")
            if not relay_id or relay_id in seen or sender in stalled:
                continue
            seen.add(relay_id)
            try:
                committed += await self._handle(envelope, relay_id, sender)
            except Exception as error:  # transient: leave it in the mailbox for the next poll
                stalled.add(sender)
                self._log().warning(
                    "message %s from %s not processed (%s: %s); it stays in the mailbox and"
                    " is retried on the next poll",
                    relay_id,
                    sender,
                    type(error).__name__,
                    error,
                )
        return committed

    async def _handle(self, envelope: dict[str, Any], relay_id: str, sender: str) -> int:
        ctx = self._require_ctx()
        if sender not in self._accepted:
            await self._hold_for_approval(sender, relay_id)
            return 0
        routing = _routing(envelope)
        event_id = event_id_of(sender, relay_id)
        if await ctx.is_known(event_id):
            # committed before (a crash came between commit and DELETE): never decrypt twice;
            # the store confirms it as a duplicate
            await ctx.ingest({"envelope": routing, "redelivered": True})
            await self._ack(relay_id)
            return 0
        if event_id in await self._settled():  # decrypted before, stored nothing
            await self._ack(relay_id)
            return 0
        store, signal = self._require_signal()
        async with self._ratchet:
            with store.staging() as staged:
                try:
                    sender_key = ed25519_pub_to_x25519_pub(decode_agent_address(sender))
                    plaintext = (await signal.decrypt(sender, sender_key, envelope)).decode("utf-8")
                except _PERMANENT as error:
                    await self._dead_letter(envelope, f"{type(error).__name__}: {error}")
                    await self._ack(relay_id)
                    return 0
                raw = {"envelope": routing, "plaintext": plaintext}
                if not self._stores_a_row(raw):
                    # nothing will be stored under this event id: remember it as settled,
                    # with the ratchet step, so a re-listing is not decrypted a second time
                    staged[_SETTLED] = json.dumps([*await self._settled(), event_id][-500:])
                result = await ctx.ingest(raw, state=dict(staged))
                if result.status == "malformed":
                    # the message is dropped, but the ratchet did move: keep it in step
                    for key, value in staged.items():
                        await ctx.set_state(key, value)
        if envelope.get("type") == "PREKEY_BUNDLE":
            self._keys_ready = False  # a one-time pre-key was used: top the pool up
        await self._ack(relay_id)
        return 1

    def _stores_a_row(self, raw: Mapping[str, Any]) -> bool:
        try:
            return self.normalize(raw) is not None
        except NormalizeError:
            return False

    async def _settled(self) -> list[str]:
        text = await self._require_ctx().get_state(_SETTLED)
        return list(json.loads(text)) if text else []

    async def _ack(self, relay_id: str) -> None:
        try:
            await self._require_client().messages.acknowledge(relay_id, self.agent_id)
        except TinyPlaceError as error:
            if error.status == 404:  # already gone: acked before, or by another poller
                return
            self._log().warning(
                "could not remove message %s from the mailbox (%s); it is acked on the next poll",
                relay_id,
                error,
            )

    async def _refresh_contacts(self) -> bool:
        """Fetch the accepted contacts; return False when they were never known."""
        try:
            self._accepted = await self._require_contacts().accepted()
            self._contacts_known = True
        except TinyPlaceError as error:
            if not self._contacts_known:
                self._log().warning(
                    "could not fetch contacts (%s); the mailbox is read once they are known",
                    error,
                )
                return False
            self._log().warning("could not refresh contacts (%s); using the last known list", error)
        pending = await self._pending_senders()
        if any(sender in self._accepted for sender in pending):
            remaining = {k: v for k, v in pending.items() if k not in self._accepted}
            await self._require_ctx().set_state("pending_senders", json.dumps(remaining))
        return True

    async def _hold_for_approval(self, sender: str, relay_id: str) -> None:
        pending = await self._pending_senders()
        entry = pending.get(sender) or {"first_seen": time.time(), "message_ids": []}
        if relay_id not in entry["message_ids"]:
            entry["message_ids"] = [*entry["message_ids"], relay_id][-50:]
            entry["last_seen"] = time.time()
            pending[sender] = entry
            if len(pending) > _MAX_PENDING_SENDERS:  # keep the most recently seen
                ranked = sorted(pending.items(), key=lambda kv: kv[1].get("last_seen", 0))
                pending = dict(ranked[-_MAX_PENDING_SENDERS:])
            await self._require_ctx().set_state("pending_senders", json.dumps(pending))
        if sender not in self._reported:
            self._reported.add(sender)
            self._log().warning(
                "%s is not an accepted contact: its messages stay in the mailbox, unread."
                " Approve with: backchannel tinyplace accept %s",
                sender,
                sender,
            )

    async def _pending_senders(self) -> dict[str, Any]:
        text = await self._require_ctx().get_state("pending_senders")
        data = json.loads(text) if text else {}
        return data if isinstance(data, dict) else {}

    async def _dead_letter(self, envelope: Mapping[str, Any], reason: str) -> None:
        ctx = self._require_ctx()
        sender, relay_id = envelope.get("from"), envelope.get("id")
        self._log().error(
            "message %s from %s cannot be decrypted (%s): recorded as a dead letter and"
            " removed from the mailbox",
            relay_id,
            sender,
            reason,
        )
        text = await ctx.get_state("dead_letters")
        letters = json.loads(text) if text else []
        letters.append({"at": time.time(), "reason": reason[:500], "envelope": _routing(envelope)})
        await ctx.set_state("dead_letters", json.dumps(letters[-100:]))

    async def _poll_forever(self) -> None:
        while not self._stopped.is_set():
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except TinyPlaceError as error:
                self._log().warning("mailbox poll failed: %s", error)
            except Exception:
                self._log().exception("mailbox poll failed")
            try:
                await asyncio.wait_for(self._stopped.wait(), self.poll_interval)
            except TimeoutError:
                pass

    async def _publish_keys(self) -> None:
        store, _ = self._require_signal()
        try:
            await ensure_published_keys(
                self._require_client(), store, self.identity, self.prekey_pool, self._log()
            )
        except TinyPlaceError as error:
            self._keys_ready = False
            self._log().warning("could not publish pre-keys yet (%s); retrying on next poll", error)
            return
        self._keys_ready = True

    # sending -----------------------------------------------------------------
    async def send(self, outbound: Outbound) -> Receipt:
        """Encrypt and send a message; in a session, wrapped in a v1 envelope."""
        if outbound.kind != "message":
            raise Rejected(f"tiny.place messages cannot be changed after sending ({outbound.kind})")
        peer = outbound.address.chat
        thread = outbound.address.thread
        session = None if thread in (None, "", MASTER) else thread
        parts = split_text(outbound.text, self.capabilities.max_text_len)
        sent: list[str] = []
        for index, part in enumerate(parts):
            message_id = new_message_id()
            if session is not None:
                reply_to = outbound.reply_to if index == 0 else None
                body = build_v1_envelope(session, part, message_id, in_reply_to=reply_to)
            else:
                body = part
            try:
                await self._send_one(peer, body, message_id)
            except DeliveryError as error:
                if sent:
                    raise Uncertain(
                        f"{len(sent)} of {len(parts)} parts were delivered, then: {error.reason}"
                    ) from None
                raise
            sent.append(message_id)
        return Receipt(platform_message_id=sent[0], part_ids=tuple(sent))

    async def _send_one(self, peer: str, body: str, message_id: str) -> None:
        client = self._require_client()
        _, signal = self._require_signal()
        try:
            peer_ed25519 = decode_agent_address(peer)
        except ValueError:
            raise Rejected(f"{peer!r} is not a tiny.place agent id") from None
        peer_x25519 = ed25519_pub_to_x25519_pub(peer_ed25519)
        await self._ratchet.acquire()
        locked = True
        try:
            first = not await signal.has_session(peer)
            bundle = await self._fetch_bundle(peer) if first else None
            try:
                encrypted = await signal.encrypt(
                    peer, peer_x25519, body.encode("utf-8"), bundle, peer_ed25519
                )
            except ValueError as error:
                raise Rejected(f"cannot open an encrypted session with {peer}: {error}") from None
            if not first:
                # the ratchet advance is durable; concurrent sends may go on
                self._ratchet.release()
                locked = False
            envelope = {
                "id": message_id,
                "from": self.agent_id,
                "to": peer,
                "deviceId": 1,
                "type": encrypted.type,
                "body": encrypted.body,
                "signal": encrypted.signal,
            }
            try:
                await client.messages.send(envelope)
            except TinyPlaceError as error:
                failure = send_error(error, peer)
                if first and not isinstance(failure, Uncertain):
                    # nothing reached the peer: the next send starts over from a fresh bundle
                    await signal.remove_session(peer)
                raise failure from None
        finally:
            if locked:
                self._ratchet.release()

    async def _fetch_bundle(self, peer: str) -> dict[str, Any]:
        try:
            bundle = await self._require_client().keys.get_bundle(peer)
        except TinyPlaceError as error:
            if error.status == 404:
                raise Rejected(
                    f"{peer} has no pre-key bundle on the relay, so it cannot receive"
                    " encrypted messages yet"
                ) from None
            wait = retry_after_of(error, CONNECT_RETRY_AFTER)
            raise RateLimited(wait, f"could not fetch {peer}'s pre-key bundle ({error})") from None
        if not isinstance(bundle, dict):
            raise Rejected(f"the relay returned no usable pre-key bundle for {peer}")
        return bundle

    # helpers -----------------------------------------------------------------
    def _log(self) -> logging.LoggerAdapter[logging.Logger] | logging.Logger:
        return self._ctx.log if self._ctx is not None else log

    def _require_ctx(self) -> AdapterContext:
        if self._ctx is None:
            raise RuntimeError("TinyplaceAdapter.start() was not called")
        return self._ctx

    def _require_client(self) -> TinyPlaceClient:
        if self._client is None:
            raise RuntimeError("the tiny.place adapter is not started")
        return self._client

    def _require_contacts(self) -> ContactsApi:
        if self._contacts is None:
            raise RuntimeError("the tiny.place adapter is not started")
        return self._contacts

    def _require_signal(self) -> tuple[DurableSessionStore, SignalSession]:
        if self._store is None or self._signal is None:
            raise RuntimeError("the tiny.place adapter is not started")
        return self._store, self._signal


def _routing(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The relay-visible fields of an envelope (no ciphertext)."""
    keys = ("id", "from", "to", "timestamp", "deviceId", "type", "contentHint")
    return {key: envelope[key] for key in keys if key in envelope}


def _register_secrets(settings: Mapping[str, Any], seed_hex: str) -> None:
    try:
        from backchannel.secrets import register_secret
    except ImportError:  # an older core without log-wide redaction
        return
    register_secret(seed_hex)
    value = settings.get("identity")
    if isinstance(value, str) and not value.strip().startswith(("/", "~", ".")):
        register_secret(value.strip())

"""`TinyplaceAdapter`: one tiny.place agent identity as a backchannel account.

Receiving is a mailbox poller (`mailbox.py`: sender gate, dedupe before
decrypt, one decrypt, commit with the ratchet advance, then DELETE). It also
keeps this agent's pre-key bundle published (`keys.py`).

Sends are Signal-encrypted with the SDK's `SignalSession`; the ratchet advance
is written to the store before the PUT. The `PREKEY_BUNDLE` that opens a
session is kept too, and sent again before the next message until the relay
has taken it or the peer has written back (`_resend_opening`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from backchannel.adapter import AdapterContext, Capabilities, split_text
from backchannel.config import positive_number
from backchannel.errors import ConfigError, DeliveryError, RateLimited, Rejected, Uncertain
from backchannel.model import Address, Event, Outbound, Receipt, Sender
from tinyplace import TinyPlaceClient, TinyPlaceError
from tinyplace.api.messages import decode_agent_address
from tinyplace.signal import SignalSession
from tinyplace.signal.crypto import ed25519_pub_to_x25519_pub

from .contacts import ContactsApi
from .envelope import SESSION_LABEL, build_v1_envelope, clean_text, new_message_id
from .identity import inline_secret, load_identity
from .keys import ensure_published_keys
from .mailbox import MailboxReader
from .normalize import MASTER, normalize_relay_message, peer_label
from .relay_errors import (
    CONNECT_RETRY_AFTER,
    error_code,
    not_a_contact,
    retry_after_of,
    send_error,
)
from .sessions import DurableSessionStore, StateUnavailable
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

log = logging.getLogger("backchannel.tinyplace")


#: copies of a kept session opening that may fail before the session is opened afresh
OPENING_COPIES = 3
#: copies sent on their own that may fail, per peer and process, before only the next
#: message to the peer sends it again (a peer no longer a contact, a relay hanging: each
#: copy holds the poll loop up to `request_timeout`)
OPENING_TRIES_ALONE = 20


class TinyplaceAdapter:
    """A tiny.place agent identity: DMs with other agents, threaded by harness session."""

    channel = "tinyplace"
    #: identity material must never ride in a payload; dead letters drop it if it does
    secret_fields = frozenset({"private_key", "seed", "identity"})
    #: the same for every account, so readable from the class (the MCP server offers
    #: ask_agent when a configured channel has agent peers)
    capabilities = Capabilities(
        threads=True,
        edits=False,
        reactions=False,
        typing=False,
        replies=True,
        max_text_len=MAX_TEXT_LEN,
        display_name="tiny.place",
        agent_peers=True,
    )

    def __init__(self, account: str, settings: Mapping[str, Any]):
        self.account = account
        self.identity = load_identity(settings, account)
        self.agent_id = self.identity.agent_id
        self.relay_url = str(settings.get("relay_url") or DEFAULT_RELAY_URL).rstrip("/")
        self.poll_interval = _seconds(settings, "poll_interval", 3.0)
        self.request_timeout = _seconds(settings, "request_timeout", 20.0)
        self.poll_limit = _count(settings, "poll_limit", 100)
        self.prekey_pool = _count(settings, "prekey_pool", 20)
        #: seconds between copies of a kept session opening sent on their own
        self.opening_retry = _seconds(settings, "opening_retry", 30.0)
        self.me: Sender | None = Sender(
            id=self.agent_id, name=peer_label(self.agent_id), handle=self.agent_id, is_bot=True
        )
        self._ctx: AdapterContext | None = None
        self._client: TinyPlaceClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._signal: SignalSession | None = None
        self._store: DurableSessionStore | None = None
        self._reader: MailboxReader | None = None
        self._polls = 0
        self._keys_ready = False
        #: whether a session opening may be kept unconfirmed (checked at start), and
        #: when its copies are due (`_resend_kept_openings`)
        self._openings_kept = True
        self._openings_due = 0.0
        #: openings kept so far: a sweep clears `_openings_kept` only if none came during it
        self._openings_stored = 0
        #: copies sent on their own that failed, by peer (see OPENING_TRIES_ALONE)
        self._opening_tries: dict[str, int] = {}
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
        self._reader = MailboxReader(
            agent_id=self.agent_id,
            ctx=ctx,
            client=self._client,
            store=self._store,
            signal=self._signal,
            ratchet=self._ratchet,
            normalize=self.normalize,
            limit=self.poll_limit,
        )
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
        """Read the mailbox once (see `mailbox.py`); return how many messages were committed."""
        reader = self._require_reader()
        self._polls += 1
        if not self._keys_ready or reader.used_prekey or self._polls % _KEY_CHECK_EVERY == 0:
            reader.used_prekey = False
            await self._publish_keys()
        return await reader.poll_once()

    async def _poll_forever(self) -> None:
        # a relay that keeps failing the same way (down, or answering a body that is not
        # JSON) is said once, not every poll interval, and said again when it recovers
        failing: str | None = None
        while not self._stopped.is_set():
            try:
                if self._openings_kept and time.monotonic() >= self._openings_due:
                    self._openings_due = time.monotonic() + self.opening_retry
                    await self._resend_kept_openings()
                await self.poll_once()
                if failing is not None:
                    self._log().info("mailbox polls work again")
                    failing = None
            except asyncio.CancelledError:
                raise
            except Exception as error:
                kind = type(error).__name__
                if kind != failing:
                    failing = kind
                    if isinstance(error, TinyPlaceError | aiohttp.ClientError | ValueError):
                        # the relay's answer (an error, a reset, a body that is not JSON)
                        reason = str(error).splitlines()[0][:300] if str(error) else kind
                        self._log().warning("mailbox poll failed: %s: %s", kind, reason)
                    else:
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
    async def check_address(self, address: Address) -> None:
        """Raise Rejected unless a first operator send to `address` can arrive.

        The chat must be a tiny.place agent id, a thread a session label (or
        ``master``), and the agent an accepted contact on the relay (until it
        is, the relay refuses every message to it). When the relay cannot say
        (unreachable, 5xx) the address is taken as it is: the send says what
        became of it.
        """
        _agent_key(address.chat)
        thread = address.thread
        if thread is not None and not SESSION_LABEL.fullmatch(thread):
            raise Rejected(
                f"{thread!r} is not a tiny.place session label (up to 32 of A-z 0-9 _ : -)"
            )
        if self._client is None:
            return  # not started: nothing to ask with
        try:
            contact = await self.is_contact(address.chat)
        except Uncertain:
            return
        if not contact:
            raise not_a_contact(address.chat)

    async def send(self, outbound: Outbound) -> Receipt:
        """Encrypt and send a message; in a session, wrapped in a v1 envelope."""
        if outbound.kind != "message":
            raise Rejected(f"tiny.place messages cannot be changed after sending ({outbound.kind})")
        peer = outbound.address.chat
        thread = outbound.address.thread
        session = None if thread in (None, "", MASTER) else thread
        # half a surrogate pair (an agent echoing a peer's "\ud800") cannot be encrypted as UTF-8
        parts = split_text(clean_text(outbound.text), self.capabilities.max_text_len)
        label = await self._peer_session_label(outbound.address) if session else None
        sent: list[str] = []
        for index, part in enumerate(parts):
            message_id = new_message_id()
            if session is not None:
                reply_to = (
                    clean_text(outbound.reply_to) if index == 0 and outbound.reply_to else None
                )
                body = build_v1_envelope(
                    session, part, message_id, in_reply_to=reply_to, to_session=label
                )
            else:
                body = part
            if index == 0 and self._ctx is not None:
                # stored before the PUT: when the process dies during it, the message
                # keeps its id, so a peer's answer naming it is placed, not guessed
                try:
                    await self._ctx.note_message_id(outbound.outbox_id, message_id)
                except Exception as error:
                    # the store failed, and nothing was sent: tried again later
                    raise RateLimited(
                        CONNECT_RETRY_AFTER,
                        f"could not record the message id before sending ({type(error).__name__})",
                    ) from None
            try:
                await self._send_one(peer, body, message_id)
            except DeliveryError as error:
                # the id is chosen here, before the PUT: an uncertain send keeps it, so a
                # peer's reply naming it is placed (and matched to its ask, not guessed)
                if sent:
                    raise Uncertain(
                        f"{len(sent)} of {len(parts)} parts were delivered, then: {error.reason}",
                        platform_message_id=sent[0],
                    ) from None
                if isinstance(error, Uncertain):
                    raise Uncertain(error.reason, platform_message_id=message_id) from None
                raise
            sent.append(message_id)
        return Receipt(platform_message_id=sent[0], part_ids=tuple(sent))

    async def _peer_session_label(self, address: Address) -> str | None:
        """Return the peer's own label for this session: its latest `tp.from_session`, if any.

        A Claude/Codex harness plugin routes an incoming envelope to its
        session named by `tp.to_session`; without one it falls back to its
        primary session.
        """
        if self._ctx is None:
            return None
        try:
            window = await self._ctx.transcript(address, 20)
        except NotImplementedError:
            return None
        for message in reversed(window):
            tp = message.meta.get("tp") if message.direction == "in" else None
            label = tp.get("from_session") if isinstance(tp, Mapping) else None
            if isinstance(label, str) and SESSION_LABEL.fullmatch(label):
                return label
        return None

    async def _send_one(self, peer: str, body: str, message_id: str) -> None:
        client = self._require_client()
        store, signal = self._require_signal()
        peer_ed25519 = _agent_key(peer)
        peer_x25519 = ed25519_pub_to_x25519_pub(peer_ed25519)
        await self._ratchet.acquire()
        locked = True
        try:
            try:
                first = not await signal.has_session(peer)
                opening = None if first else await store.get_opening(peer)
            except StateUnavailable as error:
                # the store failed, not the message: nothing was sent, so it is tried again
                raise RateLimited(
                    CONNECT_RETRY_AFTER,
                    f"could not read the encryption session with {peer}: {error}",
                ) from None
            if opening is not None and "body" not in opening:
                # the process died after opening the session and before keeping its opening
                # envelope: nothing of it was sent, so it is opened afresh
                await self._drop_session(peer)
                first = True
            elif opening is not None:
                first = not await self._resend_opening(peer, opening)
            bundle = await self._fetch_bundle(peer) if first else None
            try:
                if first:
                    # marks the session as opened here and not yet sent, before it exists
                    await store.store_opening(peer, {"id": message_id})
                encrypted = await signal.encrypt(
                    peer, peer_x25519, body.encode("utf-8"), bundle, peer_ed25519
                )
            except StateUnavailable as error:
                # nothing was sent and the stored ratchet did not move: tried again later
                raise RateLimited(
                    CONNECT_RETRY_AFTER,
                    f"could not store the encryption session with {peer}: {error}",
                ) from None
            except Exception as error:
                # the peer published its own bundle: a missing field, a wrong type or a bad
                # signature in it (KeyError, TypeError, ValueError, ...) is a refusal, not a crash
                raise Rejected(
                    f"cannot open an encrypted session with {peer}: {type(error).__name__}: {error}"
                ) from None
            envelope = {
                "id": message_id,
                "from": self.agent_id,
                "to": peer,
                "deviceId": 1,
                "type": encrypted.type,
                "body": encrypted.body,
                "signal": encrypted.signal,
            }
            if first:
                try:
                    # kept before the PUT, as the session is: whatever becomes of the PUT (an
                    # error, a timeout, this process killed), it can be sent again
                    await store.store_opening(peer, envelope)
                    # until the relay takes it; copied on its own only after a while
                    self._openings_kept = True
                    self._openings_stored += 1
                    self._openings_due = time.monotonic() + self.opening_retry
                except StateUnavailable as error:
                    # nothing was sent; the marker above makes the next send start over
                    raise RateLimited(
                        CONNECT_RETRY_AFTER,
                        f"could not store the encryption session with {peer}: {error}",
                    ) from None
            else:
                # the ratchet advance is durable; concurrent sends may go on
                self._ratchet.release()
                locked = False
            try:
                await client.messages.send(envelope)
            except TinyPlaceError as error:
                failure = send_error(error, peer)
                if first and not isinstance(failure, Uncertain):
                    # nothing reached the peer: the next send starts over from a fresh bundle
                    # (this drops the kept opening too)
                    await signal.remove_session(peer)
                # after an uncertain opening the session and its opening are both kept: the
                # peer may hold it (its answer is in this session), or may not (then the
                # next send delivers the opening again first)
                raise failure from None
            except Exception as error:
                # the SDK raises more than TinyPlaceError once the request is out: the answer's
                # body could not be read (a dropped connection or a timeout mid-body) or is not
                # JSON. The relay may have stored the message: uncertain, never resent.
                raise Uncertain(
                    f"the relay's answer could not be read ({type(error).__name__});"
                    " the message may have arrived"
                ) from None
            if first:
                await self._opening_confirmed(peer)
        finally:
            if locked:
                self._ratchet.release()

    async def _resend_opening(
        self, peer: str, opening: dict[str, Any], *, count_failure: bool = True
    ) -> bool:
        """Send the kept, unconfirmed opening of our session with `peer` again, unchanged.

        Called with the ratchet lock held, before the next message to `peer` is
        encrypted. Whether the first PUT of the opening reached the relay is not
        known (it ended uncertain, or the process died during it): if it did
        not, nothing of the session can ever be decrypted by the peer. Sent again
        with the same id and bytes it is harmless if it did: a backchannel peer
        acks an id it already stored without decrypting it again.

        Return True when the session stands (the relay took the opening), False
        when it was dropped and the caller must open a fresh one. Raise
        RateLimited when the answer leaves it unknown (the next message waits,
        so it never arrives before the opening it needs), or the refusal the
        next message would get too.
        """
        try:
            await self._require_client().messages.send(opening)
        except TinyPlaceError as error:
            failure = send_error(error, peer)
            if error.status == 409:
                # the relay already holds an envelope with this id: the first PUT arrived
                await self._opening_confirmed(peer)
                return True
            if isinstance(failure, Rejected) and not (
                error.status == 401 or error_code(error.body) == "not_a_contact"
            ):
                # the relay refuses this envelope itself: start the session over
                self._log().warning(
                    "the relay refused the kept opening of the encrypted session with %s (%s);"
                    " opening a new session",
                    peer,
                    failure.reason,
                )
                await self._drop_session(peer)
                return False
            if isinstance(failure, Rejected):
                raise failure from None
            if count_failure and await self._give_up_opening(peer):
                return False
            raise RateLimited(
                failure.retry_after if isinstance(failure, RateLimited) else CONNECT_RETRY_AFTER,
                f"the message that opens the encrypted session with {peer} is sent again first,"
                f" and that failed: {failure.reason}",
            ) from None
        except Exception as error:
            if count_failure and await self._give_up_opening(peer):
                return False
            raise RateLimited(
                CONNECT_RETRY_AFTER,
                f"the message that opens the encrypted session with {peer} is sent again first,"
                f" and the relay's answer could not be read ({type(error).__name__})",
            ) from None
        await self._opening_confirmed(peer)
        return True

    async def _resend_kept_openings(self) -> None:
        """Send every kept, unconfirmed session opening again, without waiting for a
        next message to its peer: at start, and every `opening_retry` seconds while
        one is kept.

        An opening is kept when its PUT ended uncertain or the process died during
        it. That first message (a question to another agent, say) may never have
        reached the relay; waiting for the next message to the peer could leave it
        undelivered for good. A copy that fails here is not counted against the
        session (the relay may just be down): it is tried again later.
        """
        store, _ = self._require_signal()
        stored_before = self._openings_stored
        try:
            peers = await store.peers_with_openings()
        except StateUnavailable:
            return  # tried again later
        kept = False
        for peer in peers:
            if self._opening_tries.get(peer, 0) >= OPENING_TRIES_ALONE:
                continue  # the next message to the peer sends it first, as it always did
            async with self._ratchet:
                try:
                    opening = await store.get_opening(peer)
                    if opening is None:
                        await store.remove_opening(peer)  # only listed: unlist it
                    elif "body" not in opening:
                        # opened, and the process died before its opening was kept: nothing
                        # of it was sent, so the next message opens the session afresh
                        await self._drop_session(peer)
                    else:
                        await self._resend_opening(peer, opening, count_failure=False)
                    self._opening_tries.pop(peer, None)
                except (DeliveryError, StateUnavailable) as error:
                    tries = self._opening_tries[peer] = self._opening_tries.get(peer, 0) + 1
                    kept = kept or tries < OPENING_TRIES_ALONE
                    reason = error.reason if isinstance(error, DeliveryError) else str(error)
                    self._log().info(
                        "the kept opening of the encrypted session with %s was not sent again"
                        " (%s); %s",
                        peer,
                        reason,
                        "trying later"
                        if tries < OPENING_TRIES_ALONE
                        else "the next message to it sends it first",
                    )
        # an opening kept while this sweep ran (a send waiting on the ratchet lock) is not
        # in its list: it stays due
        self._openings_kept = kept or self._openings_stored != stored_before

    async def _give_up_opening(self, peer: str) -> bool:
        """Count a copy of the kept opening the relay did not take; after
        OPENING_COPIES of them, drop the session (True): the next message opens a
        fresh one, rather than every send to `peer` waiting on a copy that keeps
        failing (a relay refusing a repeated id with a 5xx, say)."""
        store, _ = self._require_signal()
        try:
            failures = await store.count_opening_failure(peer)
        except StateUnavailable:
            return False
        if failures < OPENING_COPIES:
            return False
        self._log().warning(
            "the kept opening of the encrypted session with %s failed %d times; opening a new"
            " session",
            peer,
            failures,
        )
        await self._drop_session(peer)
        return True

    async def _opening_confirmed(self, peer: str) -> None:
        """The relay took our session's opening: it is not sent again."""
        store, _ = self._require_signal()
        try:
            await store.remove_opening(peer)
        except StateUnavailable as error:
            # the message went out; the opening is sent once more next time (harmless)
            self._log().warning("could not clear the kept session opening for %s (%s)", peer, error)

    async def _drop_session(self, peer: str) -> None:
        _, signal = self._require_signal()
        try:
            await signal.remove_session(peer)
        except StateUnavailable as error:
            raise RateLimited(
                CONNECT_RETRY_AFTER,
                f"could not reset the encryption session with {peer}: {error}",
            ) from None

    async def _fetch_bundle(self, peer: str) -> dict[str, Any]:
        try:
            bundle = await self._require_client().keys.get_bundle(peer)
        except TinyPlaceError as error:
            if error.status == 404:
                raise Rejected(
                    f"{peer} has no pre-key bundle on the relay, so it cannot receive"
                    " encrypted messages yet"
                ) from None
            if 400 <= error.status < 500 and error.status not in (408, 429):
                code = error_code(error.body)
                raise Rejected(
                    f"the relay refused {peer}'s pre-key bundle"
                    f" (HTTP {error.status}{f' {code}' if code else ''})"
                ) from None
            wait = retry_after_of(error, CONNECT_RETRY_AFTER)
            raise RateLimited(wait, f"could not fetch {peer}'s pre-key bundle ({error})") from None
        except Exception as error:
            # a read: nothing was sent yet, so it may simply be tried again
            raise RateLimited(
                CONNECT_RETRY_AFTER,
                f"could not read {peer}'s pre-key bundle from the relay ({type(error).__name__})",
            ) from None
        if not isinstance(bundle, dict):
            raise Rejected(f"the relay returned no usable pre-key bundle for {peer}")
        return bundle

    # peers -------------------------------------------------------------------
    async def is_contact(self, peer: str) -> bool:
        """Return True when `peer` is an accepted contact on the relay (a DM to it can arrive).

        Raise `Uncertain` when the relay cannot say (unreachable, 5xx).
        """
        try:
            accepted = await ContactsApi(self._require_client().http).accepted()
        except TinyPlaceError as error:
            raise Uncertain(f"could not read the contact list from the relay ({error})") from None
        except Exception as error:  # an answer that could not be read (cut off, not JSON)
            raise Uncertain(
                f"could not read the contact list from the relay ({type(error).__name__})"
            ) from None
        return peer in accepted

    # helpers -----------------------------------------------------------------
    def _log(self) -> logging.LoggerAdapter[logging.Logger] | logging.Logger:
        return self._ctx.log if self._ctx is not None else log

    def _require_client(self) -> TinyPlaceClient:
        if self._client is None:
            raise RuntimeError("the tiny.place adapter is not started")
        return self._client

    def _require_reader(self) -> MailboxReader:
        if self._reader is None:
            raise RuntimeError("the tiny.place adapter is not started")
        return self._reader

    def _require_signal(self) -> tuple[DurableSessionStore, SignalSession]:
        if self._store is None or self._signal is None:
            raise RuntimeError("the tiny.place adapter is not started")
        return self._store, self._signal


def _register_secrets(settings: Mapping[str, Any], seed_hex: str) -> None:
    try:
        from backchannel.secrets import register_secret
    except ImportError:  # an older core without log-wide redaction
        return
    register_secret(seed_hex)
    inline = inline_secret(settings)
    if inline is not None:
        register_secret(inline)


def _agent_key(peer: str) -> bytes:
    """The Ed25519 public key a tiny.place agent id encodes; Rejected for anything else."""
    try:
        return decode_agent_address(peer)
    except ValueError:
        raise Rejected(f"{peer!r} is not a tiny.place agent id") from None


def _seconds(settings: Mapping[str, Any], key: str, default: float) -> float:
    """A positive, finite number of seconds (a nan or 0 poll interval would spin)."""
    value = settings.get(key, default)
    if not positive_number(value):
        raise ConfigError(f"expected a positive number of seconds, got {value!r}", key=key)
    return float(value)


def _count(settings: Mapping[str, Any], key: str, default: int) -> int:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"expected a positive integer, got {value!r}", key=key)
    return value

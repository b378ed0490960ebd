"""Reading one agent's mailbox, in the order that protects the Signal ratchet.

Per relay message (a decrypt advances a ratchet that cannot be rewound):

1. sender gate: only accepted contacts are decrypted; others stay in the
   mailbox, unread and un-acked, and are listed in the durable state
   ``pending_senders`` for the operator to approve;
2. dedupe before decrypting: a message already stored (a crash came between
   commit and DELETE) is acked, never decrypted again;
3. decrypt once, with the session store's writes staged (a decrypt also
   settles the opening of a session we opened with the sender, kept until
   then: see `DurableSessionStore.store_opening`);
4. commit: `ctx.ingest(raw, state=staged)` stores the message and the ratchet
   advance in one transaction;
5. only then DELETE it from the mailbox.

Messages are handled in the order they were sent (at equal times a
`PREKEY_BUNDLE` before `CIPHERTEXT`s). A message that can never be decrypted
is a dead letter (logged, kept among the store's dead letters, acked);
anything else is retried on the next poll.

Group chats share the mailbox: the relay's group fan-out puts each member's
copy of a group message (sender-key encrypted, `signal.senderKeyId`) and its
own "sender-key-distribution-required" hints there too. backchannel takes no
part in group chats, so these are left where they are, as the SDK's own
`fetch_group_inbox` leaves what it cannot read: never decrypted as 1:1 (that
fails), never dead-lettered, and logged once each; another client of this
identity may read them. Only when a listing is full (`poll_limit`) are the
group envelopes in it removed: the relay lists oldest first with no cursor,
so left there they would hide newer 1:1 messages for good.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from backchannel.adapter import AdapterContext
from backchannel.errors import NormalizeError
from backchannel.model import Event
from backchannel.wire import skim_field
from tinyplace import TinyPlaceClient, TinyPlaceError
from tinyplace.api.messages import decode_agent_address
from tinyplace.messaging.group import is_backend_hint_envelope, parse_sender_key_id
from tinyplace.signal import SignalSession
from tinyplace.signal.crypto import ed25519_pub_to_x25519_pub

from .contacts import ContactsApi
from .envelope import clean_text, parse_body
from .normalize import event_id_of, parse_timestamp
from .sessions import DurableSessionStore, StateUnavailable

__all__ = ["MAX_BODY_CHARS", "MailboxReader"]

#: state key: event ids decrypted and committed without a transcript row (ignored, malformed)
_SETTLED = "settled_event_ids"
#: settled event ids remembered (a re-listing comes soon after its first)
_MAX_SETTLED = 500
#: the longest message body (base64) decrypted: our own sends of 4,000 characters stay
#: under ~22 KB even in the worst case (see adapter.MAX_TEXT_LEN); decrypting one this long
#: holds the event loop about 1.5 s
MAX_BODY_CHARS = 32 * 1024
#: state key: the session openings (PREKEY_BUNDLEs) already taken, by sender and ephemeral key
_OPENINGS = "taken_openings"
#: openings remembered (the oldest forgotten first); each peer sends one per session
_MAX_OPENINGS = 2000
#: senders listed in the `pending_senders` state at most
_MAX_PENDING_SENDERS = 200
#: characters kept of one routing field in logs and dead letters
_MAX_FIELD = 256
#: a hint's body is base64 of a short marker; longer bodies are not decoded to check
_MAX_HINT_BODY = 64
#: what group traffic is called in logs and `MailboxReader.group_traffic`
_HANDOFF = "group sender-key handoff"
_GROUP_MESSAGE = "group message"
_HINT = "group sender-key hint"


class MailboxReader:
    """Polls one agent's mailbox once per `poll_once` call."""

    def __init__(
        self,
        *,
        agent_id: str,
        ctx: AdapterContext,
        client: TinyPlaceClient,
        store: DurableSessionStore,
        signal: SignalSession,
        ratchet: asyncio.Lock,
        normalize: Callable[[Mapping[str, Any]], Event | None],
        limit: int = 100,
    ) -> None:
        self.agent_id = agent_id
        self._ctx = ctx
        self._client = client
        self._store = store
        self._signal = signal
        self._ratchet = ratchet
        self._normalize = normalize
        self._contacts = ContactsApi(client.http)
        self._limit = limit
        self._accepted: set[str] = set()
        self._contacts_known = False
        self._reported: set[str] = set()
        self._warned_full = False
        #: group envelopes logged as left in the mailbox (those still listed)
        self._left: set[str] = set()
        #: group traffic seen, by kind: each message counted once (while this process runs)
        self.group_traffic: Counter[str] = Counter()
        #: set when a PREKEY_BUNDLE used one of our one-time pre-keys
        self.used_prekey = False

    async def poll_once(self) -> int:
        """Fetch the mailbox once and handle every message; return how many were committed."""
        client = self._client
        try:
            page = await client.messages.list(self.agent_id, self._limit)
        except RecursionError:
            # an envelope nested deeper than Python's parser goes (a peer's `signal` field,
            # kept as sent): the SDK's parse of the whole listing fails on every poll, and
            # every message behind it would wait for ever
            page = await self._listing_past_the_too_deep()
        listed = page.get("messages") if isinstance(page, dict) else page
        envelopes = [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
        # Oldest first, by the time each was sent: a peer's messages must be decrypted in the
        # order of its sessions. A peer that reset its session (a new PREKEY_BUNDLE) still has
        # CIPHERTEXTs of the old one waiting before it; opening the new session first would
        # make those undecryptable. At equal times a PREKEY_BUNDLE goes first (it opens the
        # session the CIPHERTEXTs beside it need), then the relay's own order.
        order = {id(m): index for index, m in enumerate(envelopes)}
        envelopes.sort(
            key=lambda m: (
                _sent_at(m.get("timestamp")),
                m.get("type") != "PREKEY_BUNDLE",
                order[id(m)],
            )
        )
        if not await self._refresh_contacts():
            return 0
        committed = 0
        deferred: list[tuple[dict[str, Any], str, str]] = []
        #: (sender, relay id): ids are the sender's SDK's (`msg_<ms>_<counter>`), so two
        #: senders can use one; each is handled (an ack by id removes both)
        seen: set[tuple[str, str]] = set()
        stalled: set[str] = set()
        # what stays in the mailbox: held senders' messages (group traffic makes room, below).
        # The relay lists oldest first with no cursor, so a listing full of them hides newer
        # messages
        kinds = [(m, _group_traffic(m)) for m in envelopes]  # what each is, looked at once
        held = [
            m for m, group in kinds if group is None and _text(m.get("from")) not in self._accepted
        ]
        if envelopes and len(held) == len(envelopes) >= self._limit:
            if not self._warned_full:
                self._warned_full = True
                self._ctx.log.warning(
                    "the mailbox listing (poll_limit %d) is full of messages from senders that"
                    " are not accepted contacts; newer messages may be hidden behind them."
                    " Decide: backchannel tinyplace requests / accept / block",
                    self._limit,
                )
        else:
            self._warned_full = False
        # a full listing with group traffic in it: nothing here ever reads that traffic, and
        # left there it would hide newer 1:1 messages for good (no cursor), so it goes
        crowded = len(envelopes) >= self._limit
        for envelope, group in kinds:
            # one spelling of the id for dedupe, the event id and the ack: half a surrogate
            # pair becomes U+FFFD, as the relay (and the store) keep it
            relay_id = clean_text(_text(envelope.get("id")))
            sender = _text(envelope.get("from"))
            if not relay_id or (sender, relay_id) in seen:
                continue
            seen.add((sender, relay_id))
            if group is not None:
                # before the sender gate: a group member need not be a contact, and its
                # group messages are no request to be one
                if crowded:
                    self._note_group(
                        group, relay_id, sender, _group_of(envelope), "removed to make room"
                    )
                    await self.ack(relay_id)
                else:
                    self._leave(envelope, relay_id, sender, group)
                continue
            if sender in stalled:
                continue
            try:
                done = await self._handle(envelope, relay_id, sender, last_try=False)
            except Exception as error:  # transient: leave it in the mailbox for the next poll
                self._stall(stalled, relay_id, sender, error)
                continue
            if done is None:
                deferred.append((envelope, relay_id, sender))
            else:
                committed += done
        # what could not be decrypted in its turn, once more after the sender's others: the
        # listing is ordered by the sender's clock, which may have stepped back (a CIPHERTEXT
        # stamped before the PREKEY_BUNDLE that opens its session). The SDK checks the MAC
        # before it changes anything, so a second try costs nothing
        for envelope, relay_id, sender in deferred:
            if sender in stalled:
                continue
            try:
                committed += await self._handle(envelope, relay_id, sender) or 0
            except Exception as error:
                self._stall(stalled, relay_id, sender, error)
        self._left &= {relay_id for _, relay_id in seen}  # gone from the mailbox: forgotten
        return committed

    async def _listing_past_the_too_deep(self) -> dict[str, Any]:
        """The listing read entry by entry: each envelope that is nested too deep to parse
        is a dead letter (named by its top-level `id` and `from`) and acked; the rest are
        returned as the SDK would have."""
        text = await self._client.http._request(  # the SDK's own signed GET, as text
            "GET",
            "/messages",
            query={"agentId": self.agent_id, "limit": self._limit},
            auth="directory",
            actor=self.agent_id,
            response_type="text",
        )
        envelopes: list[dict[str, Any]] = []
        for item in _listing_items(str(text or "")):
            try:
                envelope = json.loads(item)
            except (RecursionError, ValueError):
                relay_id, sender = _skimmed(item, "id"), _skimmed(item, "from")
                if not relay_id:
                    continue  # nothing to name it by, nor to remove it with
                why = "nested too deep to read (a peer's field); not decrypted"
                await self._dead_letter({}, clean_text(relay_id), sender, why)
                await self.ack(clean_text(relay_id))
                continue
            if isinstance(envelope, dict):
                envelopes.append(envelope)
        return {"messages": envelopes}

    def _stall(self, stalled: set[str], relay_id: str, sender: str, error: Exception) -> None:
        stalled.add(sender)
        self._ctx.log.warning(
            "message %s from %s not processed (%s: %s); it stays in the mailbox and"
            " is retried on the next poll",
            relay_id,
            sender,
            type(error).__name__,
            error,
        )

    def _leave(self, envelope: Mapping[str, Any], relay_id: str, sender: str, kind: str) -> None:
        """Leave a group envelope in the mailbox; count and log it the first time it is listed."""
        if relay_id in self._left:
            return
        self._left.add(relay_id)
        self._note_group(kind, relay_id, sender, _group_of(envelope), "left in the mailbox")

    def _note_group(self, kind: str, relay_id: str, sender: str, group: str, what: str) -> None:
        """Count one piece of group traffic; say the first of each kind at INFO, the rest at DEBUG."""
        self.group_traffic[kind] += 1
        level = logging.INFO if self.group_traffic[kind] == 1 else logging.DEBUG
        self._ctx.log.log(
            level,
            "%s %s from %s (group %s) %s: backchannel takes no part in group chats"
            " (%d seen so far)",
            kind,
            relay_id[:_MAX_FIELD],
            sender[:_MAX_FIELD],
            group[:_MAX_FIELD] or "?",
            what,
            self.group_traffic[kind],
        )

    async def _handle(
        self, envelope: dict[str, Any], relay_id: str, sender: str, *, last_try: bool = True
    ) -> int | None:
        """Handle one message; return 1 when committed, 0 when not (held, a duplicate, a
        dead letter), None when it could not be decrypted and this was not `last_try`."""
        ctx = self._ctx
        if sender not in self._accepted:
            await self._hold_for_approval(sender, relay_id)
            return 0
        routing = _routing(envelope)
        event_id = event_id_of(sender, relay_id)
        if await ctx.is_known(event_id):
            # committed before (a crash came between commit and DELETE): never decrypt twice;
            # the store confirms it as a duplicate
            await ctx.ingest({"envelope": routing, "redelivered": True})
            await self.ack(relay_id)
            return 0
        if event_id in await self._remembered(_SETTLED):  # decrypted before, stored nothing
            await self.ack(relay_id)
            return 0
        body = envelope.get("body")
        if isinstance(body, str) and len(body) > MAX_BODY_CHARS:
            # the SDK's AES is pure Python, on the event loop: ~45 µs a character of body, so
            # a 200,000-character message held every channel of the process for 14 s
            why = (
                f"too long to decrypt here ({len(body)} characters of body; at most"
                f" {MAX_BODY_CHARS}): ask the sender to split it"
            )
            await self._dead_letter(envelope, relay_id, sender, why)
            await self.ack(relay_id)
            return 0
        opening = _opening_of(envelope, sender)
        if opening is not None and opening in await self._remembered(_OPENINGS):
            # the same session opening under another relay id: a replay (the relay's, or a
            # fault's). The SDK would open the session again from it, store its words a
            # second time, and replace the live session, so the peer's next messages
            # could not be decrypted. (One that used a one-time pre-key is refused by the
            # SDK itself; one on the signed pre-key alone is not.)
            why = "a session opening already taken (replayed under a new id); not decrypted"
            await self._dead_letter(envelope, relay_id, sender, why)
            await self.ack(relay_id)
            return 0
        store, signal = self._store, self._signal
        async with self._ratchet:
            with store.staging() as staged:
                try:
                    sender_key = ed25519_pub_to_x25519_pub(decode_agent_address(sender))
                    plaintext = (await signal.decrypt(sender, sender_key, envelope)).decode("utf-8")
                    if await store.get_opening(sender) is not None:
                        # the peer holds our session (it wrote in it), or replaced it with its
                        # own: the opening we kept is not sent again (committed with the message)
                        await store.remove_opening(sender)
                except StateUnavailable:
                    raise  # the store failed, not the message: retried on the next poll
                except Exception as error:
                    if not last_try:
                        return None  # tried again after the sender's other messages
                    # a peer controls every field the SDK reads (a `signal` that is not an
                    # object, a negative or infinite message number, ...): whatever the SDK
                    # raises for it, a retry decrypts the same bytes and fails the same way
                    why = f"{type(error).__name__}: {error}"
                    await self._dead_letter(envelope, relay_id, sender, why)
                    await self.ack(relay_id)
                    return 0
                if opening is not None:
                    # remembered with the ratchet step it made, in the message's commit
                    staged[_OPENINGS] = await self._remember(_OPENINGS, opening, _MAX_OPENINGS)
                raw = {"envelope": routing, "plaintext": plaintext}
                handoff = None
                if not self._stores_a_row(raw):
                    # nothing will be stored under this event id: remember it as settled,
                    # with the ratchet step, so a re-listing is not decrypted a second time
                    staged[_SETTLED] = await self._remember(_SETTLED, event_id, _MAX_SETTLED)
                    # a group sender-key handoff is one such (see envelope.py): said here
                    # by its group only, never by its key
                    handoff = parse_body(plaintext).group_key_for
                result = await ctx.ingest(raw, state=dict(staged))
                if result.status == "malformed":
                    # the message is dropped, but the ratchet did move: keep it in step
                    for key, value in staged.items():
                        await ctx.set_state(key, value)
        if envelope.get("type") == "PREKEY_BUNDLE":
            self.used_prekey = True  # one of our one-time pre-keys is spent
        if handoff is not None:
            self._note_group(_HANDOFF, relay_id, sender, handoff, "acked; its key is not kept")
        await self.ack(relay_id)
        return 1

    def _stores_a_row(self, raw: Mapping[str, Any]) -> bool:
        try:
            return self._normalize(raw) is not None
        except NormalizeError:
            return False

    async def _remembered(self, key: str) -> list[str]:
        """A list kept in the durable state (`_SETTLED`, `_OPENINGS`)."""
        text = await self._ctx.get_state(key)
        return list(json.loads(text)) if text else []

    async def _remember(self, key: str, value: str, keep: int) -> str:
        """The list `key` with `value` added, its last `keep` kept: for the staged state."""
        return json.dumps([*await self._remembered(key), value][-keep:])

    async def ack(self, relay_id: str) -> None:
        """DELETE a message from the mailbox; a failure is retried on the next poll."""
        try:
            await self._client.messages.acknowledge(relay_id, self.agent_id)
        except TinyPlaceError as error:
            if error.status == 404:  # already gone: acked before, or by another poller
                return
            self._ctx.log.warning(
                "could not remove message %s from the mailbox (%s); it is acked on the next poll",
                relay_id,
                error,
            )
        except Exception as error:
            # the message is committed (or settled): a failed DELETE must not make the
            # sender's next messages wait; the redelivery is deduplicated before decrypt
            self._ctx.log.warning(
                "could not remove message %s from the mailbox (%s); it is acked on the next poll",
                relay_id,
                type(error).__name__,
            )

    async def _refresh_contacts(self) -> bool:
        """Fetch the accepted contacts; return False when they were never known."""
        try:
            self._accepted = await self._contacts.accepted()
            self._contacts_known = True
        except TinyPlaceError as error:
            if not self._contacts_known:
                self._ctx.log.warning(
                    "could not fetch contacts (%s); the mailbox is read once they are known",
                    error,
                )
                return False
            self._ctx.log.warning(
                "could not refresh contacts (%s); using the last known list", error
            )
        pending = await self._pending_senders()
        if any(sender in self._accepted for sender in pending):
            remaining = {k: v for k, v in pending.items() if k not in self._accepted}
            await self._ctx.set_state("pending_senders", json.dumps(remaining))
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
            await self._ctx.set_state("pending_senders", json.dumps(pending))
        if sender not in self._reported:
            self._reported.add(sender)
            self._ctx.log.warning(
                "%s is not an accepted contact: its messages stay in the mailbox, unread."
                " Approve with: backchannel tinyplace accept %s",
                sender,
                sender,
            )

    async def _pending_senders(self) -> dict[str, Any]:
        text = await self._ctx.get_state("pending_senders")
        data = json.loads(text) if text else {}
        return data if isinstance(data, dict) else {}

    async def _dead_letter(
        self, envelope: Mapping[str, Any], relay_id: str, sender: str, reason: str
    ) -> None:
        self._ctx.log.error(
            "message %s from %s cannot be decrypted (%s): recorded as a dead letter and"
            " removed from the mailbox",
            relay_id[:_MAX_FIELD],
            sender[:_MAX_FIELD],
            reason[:_MAX_FIELD],
        )
        await self._ctx.dead_letter(relay_id, reason[:500], json.dumps(_routing(envelope)))


#: what gives JSON its shape: a string (escapes and all), or a bracket
_JSON_SHAPE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _listing_items(text: str) -> list[str]:
    """The text of each entry of a listing (`{"messages": [...]}`, or a bare list), found by
    its brackets alone: no entry is parsed, so none can be too deep to find."""
    items: list[str] = []
    depth = 0
    array: int | None = None  # the depth inside the messages list
    start: int | None = None
    key = ""
    for match in _JSON_SHAPE.finditer(text):
        token = match.group()
        if token[0] == '"':
            if depth == 1:
                key = token
            continue
        if token in "[{":
            depth += 1
            if array is None:
                if token == "[" and (depth == 1 or (depth == 2 and key == '"messages"')):
                    array = depth
            elif depth == array + 1 and start is None:
                start = match.start()
            continue
        if array is not None:
            if depth == array + 1 and start is not None:
                items.append(text[start : match.end()])
                start = None
            elif depth == array:
                break  # the list is closed
        depth -= 1
    return items


def _skimmed(item: str, name: str) -> str:
    """The string value of key `name` at the top level of the JSON object `item`, or ""."""
    value = skim_field(item, name)
    return value if isinstance(value, str) else ""


def _opening_of(envelope: Mapping[str, Any], sender: str) -> str | None:
    """A PREKEY_BUNDLE's mark: its sender and ephemeral key, hashed (each session opening
    has an ephemeral key of its own; the SDK sends one PREKEY_BUNDLE per session)."""
    if envelope.get("type") != "PREKEY_BUNDLE":
        return None
    signal = envelope.get("signal")
    key = signal.get("ephemeralKey") if isinstance(signal, Mapping) else None
    if not isinstance(key, str) or not key:
        return None
    return hashlib.sha256(f"{sender}\0{key}".encode("utf-8", "replace")).hexdigest()[:32]


def _group_traffic(envelope: Mapping[str, Any]) -> str | None:
    """What kind of group traffic an envelope is, or None for a 1:1 message.

    Told apart as the SDK's `fetch_group_inbox` does: a relay hint (its body is
    base64 of "sender-key-distribution-required" or "...-rotation-required"), or
    a sender-key message (`signal.senderKeyId`, which no 1:1 message has).
    """
    body = envelope.get("body")
    if (
        isinstance(body, str)
        and len(body) <= _MAX_HINT_BODY
        and is_backend_hint_envelope(dict(envelope))
    ):
        return _HINT
    signal = envelope.get("signal")
    if isinstance(signal, Mapping) and signal.get("senderKeyId"):
        return _GROUP_MESSAGE
    return None


def _group_of(envelope: Mapping[str, Any]) -> str:
    """The group id of a group envelope, from its sender-key id (`{group}:{sender}:epoch:{n}`)."""
    signal = envelope.get("signal")
    key_id = signal.get("senderKeyId") if isinstance(signal, Mapping) else None
    parsed = parse_sender_key_id(key_id) if isinstance(key_id, str) else None
    return clean_text(parsed.group_id) if parsed is not None else ""


def _routing(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The relay-visible fields of an envelope (no ciphertext), as flat bounded values.

    A peer chooses most of them: anything that is not a short string or a
    number (an object, a megabyte of id) is cut down, so it can be stored,
    logged and dumped into a dead letter.
    """
    keys = ("id", "from", "to", "timestamp", "deviceId", "type", "contentHint")
    return {key: _flat(envelope[key]) for key in keys if key in envelope}


def _flat(value: Any) -> str | int | float | bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else _text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return clean_text(value[:_MAX_FIELD] if isinstance(value, str) else _text(value))


def _text(value: Any) -> str:
    """A peer's scalar as text ("" for nothing, bounded text for an object or a list)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value) if not isinstance(value, int) or abs(value) < 10**100 else "?"
    return f"<{type(value).__name__}>"


def _sent_at(value: Any) -> float:
    """Seconds since the epoch of an envelope's timestamp, for ordering; unreadable: +inf."""
    return parse_timestamp(value, default=math.inf)

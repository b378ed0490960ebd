"""Pure functions: a decrypted relay message -> Event.

The adapter hands `ctx.ingest` this raw shape (the relay's routing fields plus
the plaintext it decrypted once)::

    {
      "envelope": {"id", "from", "to", "timestamp", "deviceId", "type"},
      "plaintext": "hello" | "<session envelope JSON>",
    }

A redelivered message that is already stored is handed over as
``{"envelope": {...}, "redelivered": true}`` with no plaintext: it is never
decrypted twice, and the store answers "duplicate".

Conversations: a session envelope routes to ``Address(account, peer,
session)``; a plain DM to ``Address(account, peer, "master")``. The event id
is ``"<peer>:<relay id>"``: relay ids are chosen by senders, so they are
namespaced by the sender that chose them.
"""

from __future__ import annotations

import json
import math
import time
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from backchannel.errors import NormalizeError
from backchannel.model import Address, Event, Sender
from backchannel.storable import LATEST_SENT_AT

from .envelope import HUMAN_ROLES, ParsedBody, clean_text, parse_body

__all__ = ["MASTER", "event_id_of", "normalize_relay_message", "parse_timestamp", "peer_label"]

#: the thread name of a peer's plain-DM conversation
MASTER = "master"
_MAX_SESSION_LEN = 256
_MAX_META_LEN = 512


def normalize_relay_message(raw: Mapping[str, Any], account: str, me: str | None) -> Event | None:
    """Return the Event for one decrypted relay message, or None when it is not for the agent.

    None: our own message (an echo), or a v2 envelope event that carries no
    words (status, tool calls, lifecycle). Raise NormalizeError on a payload
    missing the relay's routing fields.
    """
    if not isinstance(raw, Mapping):
        raise NormalizeError("expected a JSON object", where="raw")
    envelope = _envelope_of(raw)
    relay_id = _required_str(envelope, "id")
    peer = _required_str(envelope, "from")
    if me is not None and peer == me:
        return None
    event_id = event_id_of(peer, relay_id)
    sent_at = parse_timestamp(envelope.get("timestamp"))  # unreadable: receive time
    if raw.get("redelivered") is True:
        return Event(
            address=Address(account, peer, MASTER),
            event_id=event_id,
            sender=_agent_sender(peer),
            sent_at=sent_at,
            meta={"redelivered": True},
            raw=raw,
        )
    body = parse_body(_plaintext(raw.get("plaintext")))
    if body.text is None:
        return None
    session = _checked_session(body.session)
    thread = session if session is not None else MASTER
    return Event(
        address=Address(account, peer, thread),
        event_id=event_id,
        sender=_sender(peer, body),
        kind="message",
        text=body.text,
        platform_message_id=body.message_id or relay_id,
        reply_to=_reply_to(body),
        # `tp.auto` marks an auto-reply (the harness plugins' loop guard): it does not call
        # for an answer, so in a session it does not start a run under respond = "mention"
        mentions_me=(body.tp or {}).get("auto") is not True,
        sent_at=sent_at,
        conversation_kind="thread" if session is not None else "direct",
        conversation_title=f"tiny.place session {session}" if session is not None else None,
        meta=_meta(envelope, body),
        raw=raw,
    )


def event_id_of(peer: str, relay_id: str) -> str:
    """Return the event id of relay message `relay_id` sent by `peer`."""
    return f"{peer}:{relay_id}"


def peer_label(agent_id: str) -> str:
    """Return a short readable name for an agent id (``tiny.place agent 7xKX…sAsU``)."""
    short = agent_id if len(agent_id) <= 12 else f"{agent_id[:4]}…{agent_id[-4:]}"
    return f"tiny.place agent {short}"


def _sender(peer: str, body: ParsedBody) -> Sender:
    # A harness envelope with the owner's role (v2 "owner", v1 "user") is the peer
    # relaying what its own human said; everything else is the peer agent speaking
    # for itself. A v2 prompt the OpenHuman orchestrator injected says "owner" too
    # (the side of the chat it shows on), but its `source` says software wrote it.
    if body.role in HUMAN_ROLES and body.prompt_source != "openhuman_inject":
        return Sender(id=f"{peer}#user", name=f"the user of {peer_label(peer)}", handle=peer)
    return _agent_sender(peer)


def _agent_sender(peer: str) -> Sender:
    return Sender(id=peer, name=peer_label(peer), handle=peer, is_bot=True)


def _checked_session(session: str | None) -> str | None:
    if session is None:
        return None
    if len(session) > _MAX_SESSION_LEN:
        raise NormalizeError(
            f"session id is {len(session)} characters, over {_MAX_SESSION_LEN}",
            where="plaintext.scope.wrapper_session_id",
        )
    if any(unicodedata.category(ch).startswith("C") for ch in session):
        raise NormalizeError(
            "session id contains control characters", where="plaintext.scope.wrapper_session_id"
        )
    return session


def _reply_to(body: ParsedBody) -> str | None:
    value = (body.tp or {}).get("in_reply_to")
    return value if isinstance(value, str) and value else None


def _meta(envelope: Mapping[str, Any], body: ParsedBody) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "relay_message_id": envelope.get("id"),
        "relay_type": envelope.get("type"),
        "session": body.session,
        "envelope_version": body.envelope_version,
        "role": body.role,
        "provider": body.provider,
        "cwd": body.cwd,
        "line": body.line,
        "phase": body.phase,
        "event_kind": body.event_kind,
        "prompt_source": body.prompt_source,
        "tp": dict(body.tp) if body.tp else None,
    }
    return {key: _clip(value) for key, value in facts.items() if value not in (None, "", {})}


def _clip(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value[:_MAX_META_LEN])
    if isinstance(value, dict):
        return {str(k)[:64]: _clip(v) for k, v in list(value.items())[:16]}
    return value


def _envelope_of(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the relay routing fields: ``raw["envelope"]``, or raw itself when flat.

    A flat shape is a relay envelope with the plaintext beside its fields, or
    the SDK's decrypted message (``id``, ``sender``, ``plaintext``, ``timestamp``).
    """
    envelope = raw.get("envelope")
    if isinstance(envelope, Mapping):
        return envelope
    if envelope is None and ("id" in raw and ("from" in raw or "sender" in raw)):
        if "from" in raw:
            return raw
        return {**raw, "from": raw.get("sender")}
    raise NormalizeError("missing the relay envelope", where="envelope")


def _plaintext(value: Any) -> str:
    """Return the decrypted body as text (the SDK hands over bytes)."""
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise NormalizeError("the decrypted bytes are not UTF-8", where="plaintext") from None
    if isinstance(value, Mapping):  # an envelope handed over already parsed
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            raise NormalizeError("the decrypted body is not JSON-able", where="plaintext") from None
    if not isinstance(value, str):
        raise NormalizeError("the decrypted text is missing or not a string", where="plaintext")
    return clean_text(value)


def _required_str(envelope: Mapping[str, Any], key: str) -> str:
    value = envelope.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise NormalizeError("missing or empty", where=f"envelope.{key}")
    return clean_text(value)


def parse_timestamp(value: Any, default: float | None = None) -> float:
    """Return unix seconds for an ISO string or epoch (ms) number.

    Unreadable, or a time no message is sent at (before 1970, or past the year
    5138: microseconds taken for milliseconds, say): `default`, else the
    current time. The peer writes this field; its words must not be lost to it.
    """
    fallback = time.time() if default is None else default
    seconds = _seconds(value, fallback)
    return seconds if 0 < seconds < LATEST_SENT_AT else fallback


def _seconds(value: Any, fallback: float) -> float:
    if isinstance(value, str) and value.strip().lstrip("-").replace(".", "", 1).isdigit():
        try:
            value = float(value)  # an epoch sent as a string
        except ValueError:
            return fallback
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value) / (1000.0 if value > 1e11 else 1.0)
        except OverflowError:
            return fallback
        return seconds if math.isfinite(seconds) and seconds > 0 else fallback
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
        except (ValueError, OverflowError, OSError):
            return fallback
    return fallback

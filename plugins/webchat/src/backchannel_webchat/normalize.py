"""Pure functions between the web chat's wire frames and backchannel's model.

The websocket handler turns a visitor's ``{"type": "message"}`` frame into a
raw payload (`inbound_payload`), hands it to ``ctx.ingest``, and `normalize`
turns that payload into an `Event`. The event id is derived from the
client-generated ``client_id``, scoped to the conversation, so a page that
resends an unacknowledged message after a reconnect adds no second row, and
no visitor can collide with another visitor's ids.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, TypeGuard

from backchannel.errors import NormalizeError
from backchannel.model import Address, Event, Message, Sender
from backchannel.wire import repair_text

__all__ = [
    "AGENT_ID_PREFIX",
    "DEFAULT_NAME",
    "MAX_NAME",
    "PAYLOAD_KIND",
    "clean_name",
    "conversation_chat",
    "inbound_payload",
    "is_client_id",
    "message_frame",
    "normalize",
    "visitor_id",
]

#: the `kind` of every raw payload the web chat hands to ctx.ingest
PAYLOAD_KIND = "webchat.message"
#: platform ids of the agent's messages start with this; visitors' ids never do
AGENT_ID_PREFIX = "a-"
#: client-chosen ids (tab ids, client message ids) must look like this
SAFE_ID = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
#: a visitor's name: at most this many characters, and this when they gave none
MAX_NAME = 64
DEFAULT_NAME = "Visitor"
#: dropped from names: bidi embeddings, overrides, isolates and marks (they reorder what is
#: shown around them), and square brackets, ASCII and fullwidth: the transcript an agent
#: reads marks its own labels with them ("[#12] Ada: ...", "[bot]", "[reactions: ...]")
_NAME_DROPS = dict.fromkeys(
    [
        0x061C,
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        ord("["),
        ord("]"),
        0xFF3B,
        0xFF3D,
    ]
)


def clean_name(value: object) -> str:
    """Return the name a visitor chose, fit to show anywhere: one plain line of at most MAX_NAME.

    Control characters, bidi controls and square brackets are dropped (a name can
    neither reorder the text around it nor pass for a transcript label such as
    ``[agent]:`` or ``[#9]``), whitespace collapses to single spaces, half a
    surrogate pair becomes U+FFFD; what is left empty is DEFAULT_NAME.
    """
    if not isinstance(value, str):
        return DEFAULT_NAME
    text = value.translate(_NAME_DROPS)
    if not text.isprintable():
        text = "".join(c if unicodedata.category(c) != "Cc" else " " for c in text)
    text = " ".join(repair_text(text).split())[:MAX_NAME].rstrip()
    return text or DEFAULT_NAME


def is_client_id(value: object) -> TypeGuard[str]:
    """Say whether `value` may be a visitor's client message id.

    A SAFE_ID that does not start with AGENT_ID_PREFIX: the agent's message ids
    do, and a visitor must not be able to make a message of theirs look like
    the agent's (an edit of it would pass as the agent editing its own).
    """
    return (
        isinstance(value, str)
        and SAFE_ID.match(value) is not None
        and not value.startswith(AGENT_ID_PREFIX)
    )


def visitor_id(token: str) -> str:
    """Return the public id of a visitor from their secret browser token.

    The token lives in the visitor's localStorage and proves who they are; only
    its hash appears in addresses, the store, the CLI and logs.
    """
    # surrogatepass: a token is any string the page sent, half a surrogate pair included
    return "v" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def conversation_chat(visitor: str, tab: str) -> str:
    """Return the `Address.chat` of one visitor's tab conversation."""
    return f"{visitor}.{tab}"


def inbound_payload(
    *,
    chat: str,
    visitor: str,
    name: str,
    client_id: str,
    text: str,
    sent_at: float,
    title: str | None = None,
) -> dict[str, Any]:
    """Return the raw payload the web chat hands to ctx.ingest for one visitor message."""
    payload: dict[str, Any] = {
        "kind": PAYLOAD_KIND,
        "chat": chat,
        "role": "visitor",
        "sender": {"id": visitor, "name": name},
        "client_id": client_id,
        "text": text,
        "sent_at": sent_at,
    }
    if title:
        payload["title"] = title
    return payload


def normalize(account: str, raw: Mapping[str, Any]) -> Event | None:
    """Return the Event for one raw web chat payload, or None for the agent's own messages.

    Raise NormalizeError naming the offending field when the payload is malformed.
    """
    if not isinstance(raw, Mapping):
        raise NormalizeError(f"expected an object, got {type(raw).__name__}", where="payload")
    if raw.get("kind") != PAYLOAD_KIND:
        raise NormalizeError(f"expected {PAYLOAD_KIND!r}, got {raw.get('kind')!r}", where="kind")
    role = raw.get("role")
    if role == "agent":
        return None
    if role != "visitor":
        raise NormalizeError(f"expected 'visitor' or 'agent', got {role!r}", where="role")
    chat = _text(raw, "chat")
    client_id = _text(raw, "client_id")
    if not is_client_id(client_id):
        raise NormalizeError(
            f"expected 1-64 letters, digits, '-' or '_', not starting with {AGENT_ID_PREFIX!r}",
            where="client_id",
        )
    text = raw.get("text")
    if not isinstance(text, str):
        raise NormalizeError(f"expected a string, got {type(text).__name__}", where="text")
    sender = raw.get("sender")
    if not isinstance(sender, Mapping):
        raise NormalizeError("expected an object with id and name", where="sender")
    sender_id = _text(sender, "id", where="sender.id")
    name = sender.get("name")
    sent_at = raw.get("sent_at")
    if isinstance(sent_at, bool) or not isinstance(sent_at, int | float):
        raise NormalizeError(f"expected Unix seconds, got {sent_at!r}", where="sent_at")
    return Event(
        address=Address(account, chat),
        event_id=f"{chat}:{client_id}",
        sender=Sender(sender_id, clean_name(name)),
        kind="message",
        text=text,
        platform_message_id=client_id,
        mentions_me=True,  # a web chat is a direct conversation with the agent
        sent_at=float(sent_at),
        conversation_kind="direct",
        conversation_title=raw.get("title") if isinstance(raw.get("title"), str) else None,
        meta={"channel": "web chat"},
        raw=raw,
    )


def message_frame(message: Message) -> dict[str, Any]:
    """Return the ``{"type": "message"}`` frame that shows one stored transcript row."""
    inbound = message.direction == "in"
    frame: dict[str, Any] = {
        "type": "message",
        "seq": message.seq,
        "id": message.platform_message_id,
        "role": "visitor" if inbound else "agent",
        "sender": message.sender.label,
        "text": message.text,
        "sent_at": message.sent_at,
    }
    if inbound and message.platform_message_id:
        frame["client_id"] = message.platform_message_id
    if message.reply_to:
        frame["reply_to"] = message.reply_to
    if message.edited_at is not None:
        frame["edited"] = True
    if message.deleted_at is not None:
        frame["deleted"] = True
    if not inbound and message.status not in {"sent", "received"}:
        frame["status"] = message.status
    if message.held:
        frame["held"] = True  # stored, but the policy kept it from the agent
    return frame


def _text(raw: Mapping[str, Any], key: str, where: str | None = None) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise NormalizeError(f"expected a non-empty string, got {value!r}", where=where or key)
    return value

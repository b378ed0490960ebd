"""Value types: addresses, senders, inbound events, stored messages, outbound requests.

All are frozen attrs classes. `converter` (un)structures them to JSON-ready
dicts; times are Unix seconds as floats.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
from attrs import field, frozen

if TYPE_CHECKING:
    import cattrs

    #: the cattrs converter of the model classes (made on first use: see `__getattr__`)
    converter: cattrs.Converter

__all__ = [
    "Address",
    "Attachment",
    "Conversation",
    "ConversationKind",
    "Event",
    "EventKind",
    "Message",
    "Outbound",
    "OutboundKind",
    "Receipt",
    "Sender",
    "converter",
    "evolve",
    "from_json",
    "now",
    "to_json",
]

EventKind = Literal["message", "edit", "delete", "reaction"]
ConversationKind = Literal["direct", "group", "thread"]
OutboundKind = Literal["message", "edit", "reaction"]
Direction = Literal["in", "out"]


def now() -> float:
    """Return the current time as Unix seconds."""
    return time.time()


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


@frozen
class Address:
    """Where a conversation lives on its platform: `(account, chat, thread)`."""

    account: str
    chat: str = field(converter=str)
    thread: str | None = field(default=None, converter=_opt_str)

    @property
    def key(self) -> str:
        """A readable unique key, ``account/chat`` or ``account/chat/thread``."""
        base = f"{self.account}/{self.chat}"
        return f"{base}/{self.thread}" if self.thread else base


@frozen
class Sender:
    """Who wrote a message, as the platform names them."""

    id: str = field(converter=str)
    name: str = ""
    handle: str | None = None
    is_bot: bool = False

    @classmethod
    def unknown(cls) -> Sender:
        """The one sender for a payload that names none (a Discord or Slack delete, an
        authorless post): empty id and name, in every channel. Never a stand-in such as
        the channel, the workspace or an id like "unknown"."""
        return cls(id="", name="")

    @property
    def is_unknown(self) -> bool:
        """True for `Sender.unknown()`: the platform did not say who it was."""
        return self.id == ""

    @property
    def label(self) -> str:
        """The name to show: display name, else handle, else id ("someone" when unknown)."""
        return self.name or self.handle or self.id or "someone"


@frozen
class Attachment:
    """Metadata of a file or media item; the bytes stay on the platform."""

    kind: str
    name: str | None = None
    mime: str | None = None
    size: int | None = None
    ref: str | None = None


def _attachments(value: Any) -> tuple[Attachment, ...]:
    return tuple(value or ())


@frozen
class Event:
    """One normalized inbound happening.

    `event_id` is the platform's own id for this happening, unique per account,
    used for dedupe. For `edit`, `delete` and `reaction`, `platform_message_id`
    names the target message; for `message` it is the new message's id.
    """

    address: Address
    event_id: str = field(converter=str)
    sender: Sender
    kind: EventKind = "message"
    text: str = ""
    platform_message_id: str | None = field(default=None, converter=_opt_str)
    reply_to: str | None = field(default=None, converter=_opt_str)
    mentions_me: bool = False
    attachments: tuple[Attachment, ...] = field(default=(), converter=_attachments)
    sent_at: float = field(factory=now)
    conversation_kind: ConversationKind = "direct"
    conversation_title: str | None = None
    #: extra platform facts the framing may mention (untrusted text)
    meta: Mapping[str, Any] = field(factory=dict)
    raw: Mapping[str, Any] | None = field(default=None, eq=False, repr=False)

    @property
    def account(self) -> str:
        return self.address.account


@frozen
class Conversation:
    """One place where talk happens, as the store knows it."""

    id: int
    address: Address
    kind: ConversationKind = "direct"
    title: str | None = None
    last_seq: int = 0
    handled_seq: int = 0
    trigger_seq: int = 0
    visible_count: int = 0
    held_count: int = 0
    created_at: float = 0.0
    meta: Mapping[str, Any] = field(factory=dict)
    #: when the last message (in or out) was written, Unix seconds
    active_at: float = 0.0


@frozen
class Message:
    """One transcript row. `seq` is assigned by the store, 1, 2, 3, ... per conversation."""

    conversation_id: int
    seq: int
    direction: Direction
    sender: Sender
    text: str
    sent_at: float
    platform_message_id: str | None = None
    reply_to: str | None = None
    reply_to_seq: int | None = None
    mentions_me: bool = False
    attachments: tuple[Attachment, ...] = field(default=(), converter=_attachments)
    edited_at: float | None = None
    deleted_at: float | None = None
    held: bool = False
    triggers: bool = False
    #: inbound: "received"; outbound: "pending" | "sent" | "failed" | "uncertain"
    status: str = "received"
    status_reason: str | None = None
    event_id: str | None = None
    reactions: tuple[tuple[str, str], ...] = ()
    meta: Mapping[str, Any] = field(factory=dict)


@frozen
class Outbound:
    """One outbound request to an adapter.

    kind "message": post `text` (as a reply to `reply_to` when set).
    kind "edit": change the text of `target` to `text`.
    kind "reaction": react to `target` with the emoji in `text`.
    """

    address: Address
    text: str
    kind: OutboundKind = "message"
    reply_to: str | None = None
    target: str | None = None
    quiet: bool = False
    #: the store's outbox id: stable across retries, usable as an idempotency key
    outbox_id: int | None = None
    meta: Mapping[str, Any] = field(factory=dict)
    #: the key of the conversation whose run asked for this send (a cross-conversation
    #: send); None when the conversation's own run or an operator sent it
    origin: str | None = None


@frozen
class Receipt:
    """What the platform said after a successful send."""

    platform_message_id: str | None
    #: every message id when the text was split, in order (first is platform_message_id)
    part_ids: tuple[str, ...] = ()
    sent_at: float = field(factory=now)


_converter: cattrs.Converter | None = None


def _get_converter() -> cattrs.Converter:
    # cattrs is built on first use: a CLI call that never (un)structures does not import it
    global _converter
    if _converter is None:
        import cattrs

        _converter = cattrs.Converter()
    return _converter


def __getattr__(name: str) -> Any:
    if name == "converter":
        return _get_converter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_json(value: Any) -> Any:
    """Unstructure a model value to JSON-ready data."""
    return _get_converter().unstructure(value)


def from_json(data: Mapping[str, Any], cls: type[Any]) -> Any:
    """Structure JSON data into a model class."""
    return _get_converter().structure(data, cls)


def evolve(value: Any, **changes: Any) -> Any:
    """Return a copy of a frozen value with some fields changed."""
    return attrs.evolve(value, **changes)

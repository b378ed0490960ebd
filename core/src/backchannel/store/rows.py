"""How the SQLite store's rows map to model values, and what one append batch gathers."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from attrs import define, field

from ..errors import StoreError
from ..model import Address, Attachment, Conversation, Event, Message, Sender
from .base import OutboxEntry

MESSAGE_COLUMNS = (
    "conversation_id, seq, direction, event_id, sender_id, sender_name, sender_handle,"
    " sender_is_bot, text, platform_message_id, reply_to, reply_to_seq, mentions_me,"
    " attachments, sent_at, edited_at, deleted_at, held, triggers, status, status_reason,"
    " reactions, meta"
)
CONVERSATION_COLUMNS = (
    "id, account, chat, thread, kind, title, last_seq, handled_seq, trigger_seq,"
    " visible_count, held_count, created_at, meta, active_at"
)
OUTBOX_COLUMNS = (
    "id, conversation_id, kind, text, status, reason, reply_to, target, message_seq,"
    " platform_ids, created_at, updated_at, origin, run_id"
)


@define
class ConversationCounters:
    last_seq: int
    trigger_seq: int
    active_at: float
    orphan_edits: int = 0
    visible: int = 0
    held: int = 0


@define
class SeenSender:
    first_seq: int
    last_seq: int = 0
    count: int = 0
    name: str = ""
    handle: str | None = None
    is_bot: int = 0


@define
class Batch:
    """What one append_inbound transaction accumulates before writing counters once."""

    conversations: dict[int, ConversationCounters] = field(factory=dict)
    participants: dict[tuple[int, str], SeenSender] = field(factory=dict)
    #: (account, event_id) already in the store before this batch -> (conversation, seq)
    existing: dict[tuple[str, str], tuple[int, int]] = field(factory=dict)
    #: (account, event_id) taken by this batch -> (conversation, seq)
    claimed: dict[tuple[str, str], tuple[int, int]] = field(factory=dict)
    message_rows: list[tuple[Any, ...]] = field(factory=list)
    event_rows: list[tuple[Any, ...]] = field(factory=list)
    #: (conversation, platform message id) -> seq of rows gathered but not yet written
    new_message_ids: dict[tuple[int, str], int] = field(factory=dict)

    def add_inbound(
        self,
        conversation_id: int,
        seq: int,
        event: Event,
        reply_to_seq: int | None,
        held: int,
        triggers: int,
    ) -> None:
        """Gather a new inbound event's message row and count its sender as a participant."""
        if event.platform_message_id is not None:
            self.new_message_ids.setdefault((conversation_id, event.platform_message_id), seq)
        self.message_rows.append(
            inbound_message_row(conversation_id, seq, event, reply_to_seq, held, triggers)
        )
        sender = event.sender
        key = (conversation_id, sender.id)
        seen = self.participants.get(key)
        if seen is None:
            seen = self.participants[key] = SeenSender(first_seq=seq)
        seen.name, seen.handle, seen.is_bot = sender.name, sender.handle, int(sender.is_bot)
        seen.count += 1
        seen.last_seq = seq


def first(cursor: Any) -> Any:
    """Return the first column of the only row; the cursor is drained so no statement stays open."""
    rows = cursor.fetchall()
    if not rows:
        raise StoreError("the database returned no row where one was expected")
    return rows[0][0]


def _make_dump_json() -> Callable[[Any], str]:
    """Return a function that gives exactly `json.dumps(value)`, made once instead of per call.

    `json.dumps` builds a new C encoder for every value; every stored message
    encodes its meta (and its attachments), so the encoder is built once here.
    A value it cannot encode raises as `json.dumps` would, and the encoder is
    then rebuilt (its circular-reference markers may hold stale entries).
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return json.dumps
    default = json.JSONEncoder().default
    ascii_text = json.encoder.encode_basestring_ascii

    def build() -> Any:
        return make({}, default, ascii_text, None, ": ", ", ", False, False, True)

    encoder = build()

    def dump_json(value: Any) -> str:
        nonlocal encoder
        try:
            return "".join(encoder(value, 0))
        except BaseException:
            encoder = build()
            raise

    return dump_json


#: `json.dumps(value)`, faster for the many small values the append path encodes
dump_json = _make_dump_json()


def dump_attachments(attachments: Sequence[Attachment]) -> str | None:
    if not attachments:
        return None
    return dump_json(
        [
            {"kind": a.kind, "name": a.name, "mime": a.mime, "size": a.size, "ref": a.ref}
            for a in attachments
        ]
    )


def inbound_message_row(
    conversation_id: int,
    seq: int,
    event: Event,
    reply_to_seq: int | None,
    held: int,
    triggers: int,
) -> tuple[Any, ...]:
    """The `messages` row of a new inbound event, in the order both stores insert it."""
    sender = event.sender
    return (
        conversation_id,
        seq,
        "in",
        event.event_id,
        sender.id,
        sender.name,
        sender.handle,
        int(sender.is_bot),
        event.text,
        event.platform_message_id,
        event.reply_to,
        reply_to_seq,
        int(event.mentions_me),
        dump_attachments(event.attachments),
        event.sent_at,
        None,
        None,
        held,
        triggers,
        "received",
        None,
        None,
        dump_meta(event.meta) if event.meta else None,
    )


def dump_meta(meta: Any) -> str:
    """Meta as stored: JSON, without copying a meta that is already a dict."""
    return dump_json(meta if type(meta) is dict else dict(meta))


def conversation_row(row: Sequence[Any]) -> Conversation:
    return Conversation(
        id=row[0],
        address=Address(row[1], row[2], row[3] or None),
        kind=row[4],
        title=row[5],
        last_seq=row[6],
        handled_seq=row[7],
        trigger_seq=row[8],
        visible_count=row[9],
        held_count=row[10],
        created_at=row[11],
        meta=json.loads(row[12] or "{}"),
        active_at=row[13],
    )


def message_row(row: Sequence[Any]) -> Message:
    # positional, in Message's field order: a window builds fifty of these per run,
    # and keyword arguments cost attrs' __init__ more than the rest of the row
    return Message(
        row[0],  # conversation_id
        row[1],  # seq
        row[2],  # direction
        Sender(row[4], row[5], row[6], bool(row[7])),
        row[8],  # text
        row[14],  # sent_at
        row[9],  # platform_message_id
        row[10],  # reply_to
        row[11],  # reply_to_seq
        bool(row[12]),  # mentions_me
        _attachments_of(row[13]) if row[13] else (),
        row[15],  # edited_at
        row[16],  # deleted_at
        bool(row[17]),  # held
        bool(row[18]),  # triggers
        row[19],  # status
        row[20],  # status_reason
        row[3],  # event_id
        tuple((str(r[0]), str(r[1])) for r in json.loads(row[21])) if row[21] else (),
        json.loads(row[22]) if row[22] else {},  # meta: a fresh dict, callers may change it
    )


#: decoded attachment lists by their JSON text: consecutive runs read the same rows, and
#: Attachment values are immutable, so sharing them is safe
_ATTACHMENTS: dict[str, tuple[Attachment, ...]] = {}


def _attachments_of(text: str) -> tuple[Attachment, ...]:
    found = _ATTACHMENTS.get(text)
    if found is None:
        found = tuple(Attachment(**a) for a in json.loads(text))
        if len(_ATTACHMENTS) >= 1024:
            del _ATTACHMENTS[next(iter(_ATTACHMENTS))]  # the oldest: bounded, FIFO
        _ATTACHMENTS[text] = found
    return found


def outbox_row(row: Sequence[Any]) -> OutboxEntry:
    return OutboxEntry(
        id=row[0],
        conversation_id=row[1],
        kind=row[2],
        text=row[3],
        status=row[4],
        reason=row[5],
        reply_to=row[6],
        target=row[7],
        message_seq=row[8],
        platform_ids=tuple(json.loads(row[9])) if row[9] else (),
        created_at=row[10],
        updated_at=row[11],
        origin=row[12],
        run_id=row[13],
    )

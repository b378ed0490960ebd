"""How the SQLite store's rows map to model values, and what one append batch gathers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from attrs import define, field

from ..errors import StoreError
from ..model import Address, Attachment, Conversation, Event, Message, Sender
from .base import OutboxEntry

#: seconds an early delete or reaction (one that came before its message) waits for the
#: message: one a day older than a newer early change or message of its conversation is
#: let go (most are of messages from before the bot, which never come)
EARLY_CHANGES_KEPT = 86_400.0
#: what of a reaction's meta `with_reaction` reads (all an early reaction keeps of it)
REACTION_META = ("emoji_key", "cleared", "old_reaction", "new_reaction", "removed")
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


#: the threads (or '' for the chat itself) of one chat holding a message with this platform
#: id; {0} is the driver's placeholder ("?" for SQLite, "%s" for psycopg)
#: the threads of a chat holding a message (or a later part of a split message of ours)
#: with a platform id; its parameters are `chat_target_params`
CHAT_TARGET_SQL = (
    "SELECT c.thread FROM conversations c JOIN messages m ON m.conversation_id = c.id"
    " WHERE c.account = {0} AND c.chat = {0} AND m.platform_message_id = {0}"
    " UNION ALL SELECT c.thread FROM conversations c"
    " JOIN message_parts p ON p.conversation_id = c.id"
    " WHERE c.account = {0} AND c.chat = {0} AND p.platform_message_id = {0} LIMIT 2"
)


def chat_target_params(account: str, chat: str, target: str) -> tuple[str, ...]:
    """CHAT_TARGET_SQL's parameters."""
    return (account, chat, target) * 2


def change_address(event: Event, threads: Sequence[str]) -> Address:
    """Where an edit, delete or reaction goes: its own address, or the thread holding its target.

    Some platforms do not say which thread the message a change is about is
    in (a Slack reaction; a Telegram reaction in a forum topic, once the
    adapter no longer remembers the topic): such a change comes addressed to
    the whole chat. `threads` are what CHAT_TARGET_SQL found for its target;
    when exactly one conversation of the chat holds it and that is a thread,
    the change goes there instead of to (or creating) the chat's own.
    """
    if len(threads) == 1 and threads[0]:
        address = event.address
        return Address(address.account, address.chat, threads[0])
    return event.address


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
        meta=json_value(row[12]) if row[12] else {},
        active_at=row[13],
    )


def message_row(row: Sequence[Any]) -> Message:
    """The Message of one `MESSAGE_COLUMNS` row."""
    return _message_of(row, _sender_of(row))


def message_rows(rows: Iterable[Sequence[Any]]) -> list[Message]:
    """The Messages of `MESSAGE_COLUMNS` rows, in order; one Sender per distinct sender.

    A window repeats a handful of senders fifty times: Sender values are
    immutable, so the messages of one sender share one.
    """
    senders: dict[tuple[Any, ...], Sender] = {}
    messages = []
    for row in rows:
        key = (row[4], row[5], row[6], row[7])
        sender = senders.get(key)
        if sender is None:
            sender = senders[key] = _sender_of(row)
        messages.append(_message_of(row, sender))
    return messages


def _sender_of(row: Sequence[Any]) -> Sender:
    return Sender(row[4], row[5], row[6], bool(row[7]))


# Message values built from rows skip attrs' __init__ (a window builds fifty per run, and
# __init__ sets each field through object.__setattr__ and runs the attachments converter):
# every value below already has its field's type, and each slot is set through its own
# descriptor. `_MESSAGE_FIELDS` fails the import if Message's fields change under it.
_MESSAGE_FIELDS = (
    "conversation_id",
    "seq",
    "direction",
    "sender",
    "text",
    "sent_at",
    "platform_message_id",
    "reply_to",
    "reply_to_seq",
    "mentions_me",
    "attachments",
    "edited_at",
    "deleted_at",
    "held",
    "triggers",
    "status",
    "status_reason",
    "event_id",
    "reactions",
    "meta",
)
if tuple(f.name for f in attrs.fields(Message)) != _MESSAGE_FIELDS:
    raise ImportError("store/rows.py builds Message from rows field by field: update it")
_new = object.__new__
(
    _set_conversation_id,
    _set_seq,
    _set_direction,
    _set_sender,
    _set_text,
    _set_sent_at,
    _set_platform_message_id,
    _set_reply_to,
    _set_reply_to_seq,
    _set_mentions_me,
    _set_attachments,
    _set_edited_at,
    _set_deleted_at,
    _set_held,
    _set_triggers,
    _set_status,
    _set_status_reason,
    _set_event_id,
    _set_reactions,
    _set_meta,
) = (Message.__dict__[name].__set__ for name in _MESSAGE_FIELDS)


def _message_of(row: Sequence[Any], sender: Sender) -> Message:
    message = _new(Message)
    _set_conversation_id(message, row[0])
    _set_seq(message, row[1])
    _set_direction(message, row[2])
    _set_sender(message, sender)
    _set_text(message, row[8])
    _set_sent_at(message, row[14])
    _set_platform_message_id(message, row[9])
    _set_reply_to(message, row[10])
    _set_reply_to_seq(message, row[11])
    _set_mentions_me(message, bool(row[12]))
    _set_attachments(message, attachments_of(row[13]) if row[13] else ())
    _set_edited_at(message, row[15])
    _set_deleted_at(message, row[16])
    _set_held(message, bool(row[17]))
    _set_triggers(message, bool(row[18]))
    _set_status(message, row[19])
    _set_status_reason(message, row[20])
    _set_event_id(message, row[3])
    _set_reactions(message, reactions_of(row[21]) if row[21] else ())
    # meta: a fresh dict, callers may change it
    _set_meta(message, json_value(row[22]) if row[22] else {})
    return message


def reactions_of(text: str) -> tuple[tuple[str, str], ...]:
    """The `reactions` column's (who, emoji) pairs (a third element, the sender id, is left out)."""
    return tuple((str(r[0]), str(r[1])) for r in json.loads(text))


def with_reaction(reactions_json: str | None, event: Event) -> str:
    """The `reactions` column after a reaction event: [who, emoji, sender id] added or taken.

    A reaction is known by its sender's id and emoji, so a removal finds it
    even when the name it is shown with changed meanwhile (a Discord removal
    carries only the user id); rows written before the id was kept hold
    [who, emoji] and are matched by the name shown. An event whose meta has
    the sender's whole set before and after (`old_reaction`, `new_reaction`:
    Telegram) takes what left the set and adds what joined it; any other adds
    its emoji, or with `meta["removed"]` takes it away. Order is kept.
    A moderator's clear names no sender: `meta["cleared"]` "all" takes every
    reaction off the message, "emoji" everyone's `event.text`. An emoji the
    platform names by an id of its own (`meta["emoji_key"]`: a Discord custom
    emoji, whose name may change) is kept with it, as a fourth element, and
    matched by it.
    """
    return _with_reaction(reactions_json, event.sender, event.text, event.meta)


def early_reaction(event: Event) -> str:
    """The text a reaction that came before its message waits as: what `with_reaction`
    reads of it (see `early_reactions_column`)."""
    meta = event.meta
    kept = {key: meta[key] for key in REACTION_META if key in meta}
    sender = event.sender
    return json.dumps([sender.id, sender.name, sender.handle, event.text, kept])


def early_reactions_column(waiting: Iterable[tuple[int, str]]) -> str | None:
    """The `reactions` column a message gets from the reactions that waited for it, given
    as (arrival number, text `early_reaction` wrote): applied in the order they came.
    None when none waited."""
    reactions_json = None
    for _, text in sorted(waiting):
        sender_id, name, handle, emoji, meta = json.loads(text)
        sender = Sender(sender_id, name, handle)
        reactions_json = _with_reaction(reactions_json, sender, emoji, meta)
    return reactions_json


def _with_reaction(
    reactions_json: str | None, sender: Sender, emoji_text: str, meta: Mapping[str, Any]
) -> str:
    reactions = json.loads(reactions_json or "[]")
    raw_key = meta.get("emoji_key")
    key = raw_key if isinstance(raw_key, str) and raw_key else None

    def is_this_emoji(entry: list[Any]) -> bool:
        if key is not None and len(entry) > 3:
            return str(entry[3]) == key
        return str(entry[1]) == emoji_text

    cleared = meta.get("cleared")
    if cleared == "all":
        return "[]"
    if cleared == "emoji":
        return json.dumps([entry for entry in reactions if not is_this_emoji(entry)])
    old, new = meta.get("old_reaction"), meta.get("new_reaction")
    removed = False
    if isinstance(old, list) and isinstance(new, list):
        take = {str(e) for e in old} - {str(e) for e in new}
        give = [str(e) for e in new if e not in old]
    elif meta.get("removed"):
        take, give, removed = set(), [], True
    else:
        take, give = set(), [emoji_text]

    def theirs(entry: list[Any]) -> bool:
        return str(entry[2]) == sender.id if len(entry) > 2 else str(entry[0]) == sender.label

    # a removal that names only the user's id (Discord) says nothing of their name: the
    # name shown with their other reactions stays
    named = bool(sender.name or sender.handle)
    kept: list[list[Any]] = []
    have: set[str] = set()
    for entry in reactions:
        if theirs(entry):
            emoji = str(entry[1])
            if emoji in take or emoji in have or (removed and is_this_emoji(entry)):
                continue
            have.add(emoji)
            # the name as now; an emoji's own id, if it has one, is kept
            entry = [sender.label if named else entry[0], emoji, sender.id, *entry[3:4]]
        kept.append(entry)
    tail = [key] if key is not None else []
    kept.extend(
        [sender.label, emoji, sender.id, *tail] for emoji in give if emoji and emoji not in have
    )
    return json.dumps(kept)


#: the decoder's scanner (C): one JSON value at an index -> (value, end); typeshed omits it
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def json_value(text: str) -> Any:
    """json.loads(text) without its wrappers (the C scanner alone), for text json.dumps wrote."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        return json.loads(text)  # not a lone JSON value: json.loads says exactly what is wrong
    return value


#: decoded attachment lists by their JSON text: consecutive runs read the same rows, and
#: Attachment values are immutable, so sharing them is safe
_ATTACHMENTS: dict[str, tuple[Attachment, ...]] = {}


def attachments_of(text: str) -> tuple[Attachment, ...]:
    """The `attachments` column's values (shared: Attachment values are immutable)."""
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

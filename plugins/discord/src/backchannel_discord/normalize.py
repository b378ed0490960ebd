"""Pure functions: a Discord gateway payload -> an Event (or None).

Input is what the gateway sends, as JSON-decoded dicts:

- a dispatch envelope ``{"op": 0, "t": "MESSAGE_CREATE", "s": 42, "d": {...}}``
  for MESSAGE_CREATE, MESSAGE_UPDATE, MESSAGE_DELETE, MESSAGE_REACTION_ADD and
  MESSAGE_REACTION_REMOVE, or
- a bare Message object (what REST returns), read as a MESSAGE_CREATE.

The adapter adds one key of its own to the envelope, ``"backchannel"``, with
what its cache knows and the payload does not say: the channel's type and name,
a thread's parent, the guild's name, the id of the bot's own role in the guild,
the name of a user a reaction names only by id (``user_name``), the gateway
session a reaction arrived in (``session_id``: ``s`` restarts at 1 in every
session), or ``channel_unknown`` when it could not learn what the channel is. Every
field of it is optional, so a payload captured straight off the wire
normalizes too (except a thread message: see Addresses).

Addresses: a guild text channel, a thread and a DM are each their own
conversation. A channel or DM is ``Address(account, chat=<channel id>)``. A
thread follows the rule every channel follows (docs/concepts.md, "Addresses"):
``Address(account, chat=<parent channel id>, thread=<thread id>)``, kind
"thread". A Discord thread *is* a channel, so the payload names only the
thread (``channel_id``); its parent comes from the adapter's context
(``parent_id``). A message that is in a thread whose parent the context does
not give raises NormalizeError rather than getting a second address for the
thread. The adapter posts to a thread address by the thread's id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from backchannel.errors import NormalizeError
from backchannel.model import (
    ATTACHMENTS_COMPLETE,
    Address,
    Attachment,
    ConversationKind,
    Event,
    Sender,
)
from backchannel.storable import LATEST_SENT_AT

__all__ = [
    "CONTEXT_KEY",
    "MESSAGE_EVENTS",
    "REACTION_EVENTS",
    "SUPER",
    "THREAD_CHANNEL_TYPES",
    "as_snowflake",
    "completes_deferred",
    "normalize_payload",
    "snowflake_time",
]

#: the envelope key where the adapter puts facts from its cache
CONTEXT_KEY = "backchannel"
#: channel types that are threads: announcement, public and private threads
THREAD_CHANNEL_TYPES = frozenset({10, 11, 12})
#: message types that carry a person's (or a bot's) words: DEFAULT, REPLY,
#: CHAT_INPUT_COMMAND and CONTEXT_MENU_COMMAND replies. The rest are system
#: notices (joins, pins, thread created, boosts, ...) and are not for the agent.
_TALK_TYPES = frozenset({0, 19, 20, 23})
#: THREAD_STARTER_MESSAGE: a thread's first message, standing for the one it was started from
_THREAD_STARTER = 21
#: message flag EPHEMERAL: an interaction response only one user sees (no author on the wire)
_EPHEMERAL = 1 << 6
#: message flag LOADING: a deferred interaction response, "<app> is thinking..." (no text yet)
_LOADING = 1 << 7
#: the most characters of embed text a message keeps: Discord's own cap on the text of all
#: the embeds of one message, so only a payload no real message has is cut
_EMBED_CHARS = 6000
#: what a super (burst) reaction's emoji is shown with, apart from a normal one of the emoji
SUPER = " (super)"
#: user (<@id>, legacy <@!id>), role (<@&id>) and channel (<#id>) mention markup
_MARKUP = re.compile(r"<(@[!&]?|#)([0-9]{1,20})>")
#: how many characters of the message a reply answers its meta["reply_quote"] keeps
_QUOTE = 300
#: the longest name a mention is shown with
_MENTION_NAME = 100
_DISCORD_EPOCH_MS = 1420070400000
#: a snowflake is an unsigned 64-bit integer
_MAX_SNOWFLAKE = 2**64 - 1
#: how much of an offending value a NormalizeError shows
_SHOWN = 80
#: the reaction dispatches normalize reads
REACTION_EVENTS = frozenset(
    {
        "MESSAGE_REACTION_ADD",
        "MESSAGE_REACTION_REMOVE",
        "MESSAGE_REACTION_REMOVE_ALL",
        "MESSAGE_REACTION_REMOVE_EMOJI",
    }
)
#: a moderator's clears: they name no user
_CLEARS = frozenset({"MESSAGE_REACTION_REMOVE_ALL", "MESSAGE_REACTION_REMOVE_EMOJI"})
#: every gateway dispatch normalize reads (the rest are not for the agent)
MESSAGE_EVENTS = frozenset({"MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE"}) | REACTION_EVENTS


def normalize_payload(
    raw: Mapping[str, Any], *, account: str, bot_id: str | None = None
) -> Event | None:
    """Return the Event for one gateway payload, or None when it is not for the agent.

    None for: the bot's own messages and reactions (id == `bot_id`), system
    messages, updates that change no text (embed unfurls), and dispatches other
    than MESSAGE_CREATE / UPDATE / DELETE and MESSAGE_REACTION_ADD / REMOVE.
    """
    if not isinstance(raw, Mapping):
        raise NormalizeError(f"expected a JSON object, got {type(raw).__name__}")
    if "t" in raw or "op" in raw:
        kind = raw.get("t")
        data = raw.get("d")
        if not isinstance(kind, str) or kind not in MESSAGE_EVENTS:
            return None
        if not isinstance(data, Mapping):
            raise NormalizeError(f"{kind} without an object in 'd'", where="d")
        where = "d."
    else:
        kind, data, where = "MESSAGE_CREATE", raw, ""
    context = raw.get(CONTEXT_KEY)
    context = context if isinstance(context, Mapping) else {}
    reader = _Reader(data, where)
    if kind == "MESSAGE_DELETE":
        return _delete(reader, account, context)
    if kind in _CLEARS:
        return _reactions_cleared(reader, kind, account, context, raw)
    if kind in REACTION_EVENTS:
        return _reaction(reader, kind, account, bot_id, context, raw)
    return _message(reader, kind, account, bot_id, context, raw)


def snowflake_time(snowflake: str) -> float:
    """Return the Unix time (seconds) a Discord snowflake id was minted."""
    return ((int(snowflake) >> 22) + _DISCORD_EPOCH_MS) / 1000.0


# ---------------------------------------------------------------- helpers


class _Reader:
    """Field access that raises NormalizeError naming the dotted path."""

    def __init__(self, data: Mapping[str, Any], prefix: str):
        self.data = data
        self.prefix = prefix

    def snowflake(self, key: str, *, required: bool = True) -> str | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise NormalizeError("missing snowflake id", where=self.prefix + key)
            return None
        text = as_snowflake(value)
        if text is None:
            raise NormalizeError(
                f"expected a snowflake, got {_show(value)}", where=self.prefix + key
            )
        return text

    def obj(self, key: str) -> Mapping[str, Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise NormalizeError(f"expected an object, got {_show(value)}", where=self.prefix + key)
        return value

    def sub(self, key: str) -> _Reader | None:
        value = self.obj(key)
        return None if value is None else _Reader(value, f"{self.prefix}{key}.")

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise NormalizeError(f"expected a string, got {_show(value)}", where=self.prefix + key)
        return value

    def number(self, key: str, default: int) -> int:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise NormalizeError(
                f"expected an integer, got {_show(value)}", where=self.prefix + key
            )
        return value

    def items(self, key: str) -> list[Any]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise NormalizeError(f"expected a list, got {_show(value)}", where=self.prefix + key)
        return value


def _message(
    reader: _Reader,
    kind: str,
    account: str,
    bot_id: str | None,
    context: Mapping[str, Any],
    raw: Mapping[str, Any],
) -> Event | None:
    message_id = reader.snowflake("id")
    channel_id = reader.snowflake("channel_id")
    assert message_id is not None and channel_id is not None
    message_type = reader.number("type", 0)
    opener: str | None = None
    is_starter = message_type == _THREAD_STARTER
    if is_starter:
        starter = _thread_starter(reader, kind)
        if starter is None:
            return None
        reader, opener = starter
        message_type = 0
    if message_type not in _TALK_TYPES or reader.number("flags", 0) & _EPHEMERAL:
        return None
    author = reader.sub("author")
    is_edit = kind == "MESSAGE_UPDATE"
    if author is None and not is_edit:
        raise NormalizeError("message without an author", where=reader.prefix + "author")
    webhook_id = reader.snowflake("webhook_id", required=False)
    if bot_id is not None and author is not None and author.snowflake("id") == bot_id:
        return None
    sender = _sender(
        author,
        reader.obj("member"),
        webhook_id,
        reader.snowflake("application_id", required=False),
    )
    content = reader.text("content")
    edited = reader.text("edited_timestamp")
    completes = is_edit and edited is None and _completes(reader)
    if is_edit and not completes and (content is None or edited is None):
        # an update without new text: an embed unfurl, a pin, a flags change
        return None
    if edited is not None and _timestamp(edited) is None:
        # part of an edit's event id: only a real time may make it
        raise NormalizeError(
            f"expected an ISO 8601 time, got {_show(edited)}",
            where=reader.prefix + "edited_timestamp",
        )
    reply_to = _reply_to(reader, message_type, channel_id)
    referenced = reader.sub("referenced_message")
    replied_author = referenced.sub("author") if referenced else None
    replied_to_me = bool(
        bot_id and replied_author and replied_author.snowflake("id", required=False) == bot_id
    )
    conversation_kind, title, meta, parent_id = _conversation(reader, context)
    if webhook_id is not None:
        meta["webhook_id"] = webhook_id
    if opener is not None:
        meta["thread_starter"] = opener  # the parent channel's message, shown in the thread
    if referenced is not None and message_type == 19:
        _reply_context(referenced, context, meta)
    # a bot's or webhook's message often says everything (or the rest) in embeds or
    # components; a person's message has no rich embed of its own (only link previews,
    # some of type rich), so its text is all it says
    embeds = reader.items("embeds")
    text = _words(
        content, embeds if sender.is_bot or not content else [], reader.items("components")
    )
    text = _named(text, reader, context, channel_id, parent_id)
    attachments = list(_attachments(reader))
    forwarded = _forwarded(reader)
    if forwarded is not None:
        forwarded_text, origin, forwarded_attachments = forwarded
        meta["forwarded_from"] = origin  # ids: a snapshot does not name its author
        meta["forwarded"] = True  # someone else's words (the head says so)
        text = text or forwarded_text
        attachments.extend(forwarded_attachments)
    attachments.extend(_stickers(reader))
    stickers = [item.name for item in attachments if item.kind == "sticker" and item.name]
    if stickers:
        meta["stickers"] = stickers
    poll = _poll(reader)
    if poll is not None:
        attachments.append(poll)
    if completes and not (text or attachments):
        return None  # a full update of a response that still says nothing
    if is_edit and isinstance(reader.data.get("attachments"), list):
        # the update lists the message's files: none left means they were removed
        meta[ATTACHMENTS_COMPLETE] = True
    sent_at = _timestamp(reader.text("timestamp")) or snowflake_time(message_id)
    if completes:
        # one per message: the unfurl updates that may follow it are this event again
        event_id = f"{message_id}:completed"
    else:
        event_id = f"{message_id}:edit:{edited}" if is_edit else message_id
    return Event(
        address=_address(account, channel_id, parent_id),
        event_id=event_id,
        sender=sender,
        kind="edit" if is_edit else "message",
        text=text,
        platform_message_id=message_id,
        reply_to=reply_to,
        # a thread's copy of its starter: the message in the parent mentioned the bot, if any
        mentions_me=not is_starter
        and (
            replied_to_me
            or _mentions(reader, content or "", bot_id)
            or _mentions_role(reader, context.get("bot_role_id"))
        ),
        attachments=tuple(attachments),
        sent_at=(_timestamp(edited) or sent_at) if is_edit else sent_at,
        conversation_kind=conversation_kind,
        conversation_title=title,
        meta=meta,
        raw=raw,
    )


def _delete(reader: _Reader, account: str, context: Mapping[str, Any]) -> Event:
    message_id = reader.snowflake("id")
    channel_id = reader.snowflake("channel_id")
    assert message_id is not None and channel_id is not None
    conversation_kind, title, meta, parent_id = _conversation(reader, context)
    return Event(
        address=_address(account, channel_id, parent_id),
        event_id=f"{message_id}:delete",
        sender=Sender.unknown(),
        kind="delete",
        platform_message_id=message_id,
        conversation_kind=conversation_kind,
        conversation_title=title,
        meta=meta,
    )


def _reaction(
    reader: _Reader,
    kind: str,
    account: str,
    bot_id: str | None,
    context: Mapping[str, Any],
    raw: Mapping[str, Any],
) -> Event | None:
    """MESSAGE_REACTION_ADD / _REMOVE: one user's emoji on one message, added or taken back.

    A removal names only the user's id: the store takes the reaction back by id.
    """
    user_id = reader.snowflake("user_id")
    message_id = reader.snowflake("message_id")
    channel_id = reader.snowflake("channel_id")
    assert user_id is not None and message_id is not None and channel_id is not None
    if bot_id is not None and user_id == bot_id:
        return None  # our own reaction, recorded in the outbox when we sent it
    burst = _is_burst(reader)
    text, key, custom = _emoji(reader, burst)
    member = reader.sub("member")
    user = member.sub("user") if member is not None else None
    if member is not None and user is not None and user.snowflake("id", required=False) == user_id:
        sender = _sender(user, member.data, None)
    else:
        known = _str(context.get("user_name"))
        sender = Sender(id=user_id, name=known or "", handle=None, is_bot=False)
    conversation_kind, title, meta, parent_id = _conversation(reader, context)
    removed = kind == "MESSAGE_REACTION_REMOVE"
    if removed:
        meta["removed"] = True
    if custom is not None:
        meta["emoji_key"] = custom  # a custom emoji keeps its id when renamed
    if burst:
        meta["burst"] = True
    action = "unreact" if removed else "react"
    return Event(
        address=_address(account, channel_id, parent_id),
        event_id=f"{message_id}:{action}:{user_id}:{key}{_dispatch_suffix(raw, context)}",
        sender=sender,
        kind="reaction",
        text=text,
        platform_message_id=message_id,
        conversation_kind=conversation_kind,
        conversation_title=title,
        meta=meta,
        raw=raw,
    )


def _reactions_cleared(
    reader: _Reader,
    kind: str,
    account: str,
    context: Mapping[str, Any],
    raw: Mapping[str, Any],
) -> Event:
    """A moderator's REMOVE_ALL (every reaction) or REMOVE_EMOJI (everyone's one emoji):
    no user is named, so the sender is unknown and `meta["cleared"]` says what goes."""
    message_id = reader.snowflake("message_id")
    channel_id = reader.snowflake("channel_id")
    assert message_id is not None and channel_id is not None
    custom = None
    if kind == "MESSAGE_REACTION_REMOVE_EMOJI":
        # the adapter hands a clear on twice, the second time marked "burst": once for the
        # emoji's normal reactions, once for its super ones (stored as an emoji of their own)
        text, key, custom = _emoji(reader, _is_burst(reader))
        meta_cleared, what = "emoji", f"unreact-emoji:{key}"
    else:
        text, meta_cleared, what = "", "all", "unreact-all"
    conversation_kind, title, meta, parent_id = _conversation(reader, context)
    meta["cleared"] = meta_cleared
    if custom is not None:
        meta["emoji_key"] = custom
    return Event(
        address=_address(account, channel_id, parent_id),
        event_id=f"{message_id}:{what}{_dispatch_suffix(raw, context)}",
        sender=Sender.unknown(),
        kind="reaction",
        text=text,
        platform_message_id=message_id,
        conversation_kind=conversation_kind,
        conversation_title=title,
        meta=meta,
        raw=raw,
    )


def _emoji(reader: _Reader, burst: bool = False) -> tuple[str, str, str | None]:
    """A reaction's emoji: (as shown, as keyed in the event id and the store, a custom
    emoji's id or a super reaction's key).

    A super (burst) reaction is one of its own: Discord keeps a user's normal and super
    reaction of one emoji apart, and takes either back alone. The store knows a user's
    reaction by its emoji, so a super one is shown ``🔥 (super)`` and keyed
    ``burst:<emoji>``: taking it back leaves the normal one, and the other way round.
    """
    emoji = reader.sub("emoji")
    if emoji is None:
        raise NormalizeError("a reaction without an emoji", where=reader.prefix + "emoji")
    name = emoji.text("name")
    custom = emoji.snowflake("id", required=False)
    # a Unicode emoji is its own name; a custom one is shown :name: (its image is not text)
    text = name if custom is None else f":{name or custom}:"
    if not text:
        raise NormalizeError("an emoji without a name", where=emoji.prefix + "name")
    key = custom or name or ""
    if burst:
        return text + SUPER, f"burst:{key}", f"burst:{key}"
    return text, key, custom


def _is_burst(reader: _Reader) -> bool:
    """Whether a reaction dispatch is about a super reaction (``burst``, or reaction type 1)."""
    return reader.data.get("burst") is True or reader.data.get("type") == 1


def _dispatch_suffix(raw: Mapping[str, Any], context: Mapping[str, Any]) -> str:
    """The gateway session and its sequence number: a replay after a resume (same session)
    is the same event, a later add of the same emoji by the same person is another, also
    in a later session, where Discord counts `s` from 1 again."""
    sequence = raw.get("s")
    if isinstance(sequence, int) and not isinstance(sequence, bool) and 0 <= sequence < 2**63:
        session = _str(context.get("session_id"))
        return f":{session}:{sequence}" if session else f":{sequence}"
    return ""


def _sender(
    author: _Reader | None,
    member: Mapping[str, Any] | None,
    webhook_id: str | None,
    application_id: str | None = None,
) -> Sender:
    if author is None:
        return Sender.unknown()
    user_id = author.snowflake("id")
    assert user_id is not None
    username = author.text("username") or ""
    if webhook_id is not None and user_id == webhook_id and application_id != webhook_id:
        return _persona(webhook_id, username)
    discriminator = author.text("discriminator")
    handle = username
    if username and discriminator and discriminator.strip("0"):
        handle = f"{username}#{discriminator}"
    nick = member.get("nick") if member else None
    name = (nick if isinstance(nick, str) else "") or author.text("global_name") or username
    # Discord's own "system" user (official notices) is no person either
    automated = author.data.get("bot") is True or author.data.get("system") is True
    is_bot = automated or webhook_id is not None
    return Sender(id=user_id, name=name, handle=handle or None, is_bot=is_bot)


def _persona(webhook_id: str, username: str) -> Sender:
    """The sender of a message posted through an incoming webhook, as the name it posted with.

    Its author is the webhook (``author.id`` is the webhook's id), and whoever holds the
    webhook's URL posts under any name: a bridge or PluralKit as each person it relays, a
    CI as each job. One sender per webhook would merge them all; each name posted through
    one webhook is a sender of its own, ``webhook:<webhook id>:<digest of the name>``. No
    such id is a snowflake, so no persona is ever taken for a user (an owner, an allowlisted
    sender, the bot), whatever name it posts with, and it stays marked automated.
    """
    digest = hashlib.sha256(username.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Sender(
        id=f"webhook:{webhook_id}:{digest}", name=username, handle=username or None, is_bot=True
    )


def _completes(reader: _Reader) -> bool:
    """Whether an update without an ``edited_timestamp`` completes a deferred interaction
    response: created LOADING with no text ("<app> is thinking..."), then filled in by an
    update that clears LOADING and leaves ``edited_timestamp`` null (no one edited it).

    Only an interaction response is ever deferred; any other update with no edit time is
    an embed unfurl or a flags change, and changes no text.
    """
    reader.number("flags", 0)  # a flags field that is no number is a malformed payload
    return completes_deferred(reader.data)


def completes_deferred(message: Mapping[str, Any]) -> bool:
    """Whether `message` is an interaction response no longer deferred: an interaction's
    (``interaction_metadata``, ``interaction``, type 20 or 23) with LOADING cleared."""
    flags = message.get("flags")
    if isinstance(flags, int) and flags & _LOADING:
        return False
    return (
        message.get("interaction_metadata") is not None
        or message.get("interaction") is not None
        or message.get("type") in (20, 23)
    )


def _thread_starter(reader: _Reader, kind: str) -> tuple[_Reader, str | None] | None:
    """A THREAD_STARTER_MESSAGE (21) as the message it stands for, if Discord sent it.

    A thread started from a message opens with one: no content or files of its own,
    the parent channel's message in ``referenced_message`` (null once deleted). Read
    as that message (its author, words, files), in the thread, under the starter's own
    id and time: the thread's conversation then holds what it is about. Never edited
    (the parent's message is: its row there takes the edit).
    """
    opener = reader.obj("referenced_message")
    if kind != "MESSAGE_CREATE" or opener is None:
        return None
    data = {**opener, "type": opener.get("type", 0)}
    for key in ("id", "channel_id", "guild_id", "timestamp", "position"):
        if key in reader.data:
            data[key] = reader.data[key]
    data.pop("edited_timestamp", None)
    if data.get("type") not in _TALK_TYPES:
        return None  # a system message (a pin notice) says nothing the thread is about
    data["type"] = 0  # a reply's target is in the parent channel: not this thread's
    return _Reader(data, reader.prefix), as_snowflake(opener.get("id"))


def _reply_to(reader: _Reader, message_type: object, channel_id: str) -> str | None:
    # only REPLY (19) messages reply: a DEFAULT message's reference is a crosspost's
    # source or a forward (reference type 1), not a message in this conversation
    reference = reader.sub("message_reference")
    if reference is None or message_type != 19 or reference.data.get("type", 0) != 0:
        return None
    where = as_snowflake(reference.data.get("channel_id"))
    if where is not None and where != channel_id:
        # a message of another channel (a thread's starter, in its parent): no row of this
        # conversation has that id; the reply's meta says what it quoted
        return None
    return reference.snowflake("message_id", required=False)


def _reply_context(referenced: _Reader, context: Mapping[str, Any], meta: dict[str, Any]) -> None:
    """Put in `meta` who wrote the message a reply answers and its words (``reply_from``,
    ``reply_quote``, cut to _QUOTE characters), from the ``referenced_message`` Discord
    sends with the reply: shown when the store lacks the target (posted before the bot
    joined or read the channel, or in another channel)."""
    data = referenced.data
    author = data.get("author")
    author = author if isinstance(author, Mapping) else {}
    name = _shown_name(author, data.get("member"))
    if name and name.strip():
        meta["reply_from"] = name
    content = _str(data.get("content"))
    embeds, components = _list(data.get("embeds")), _list(data.get("components"))
    automated = author.get("bot") is True or data.get("webhook_id") is not None
    words = _words(content, embeds if automated or not content else [], components)
    if not words.strip():
        files = [
            name
            for item in _list(data.get("attachments"))
            if isinstance(item, Mapping) and (name := _str(item.get("filename")))
        ]
        words = ", ".join(files)
    if words.strip():
        words = _named(words, referenced, context, None, None)
        meta["reply_quote"] = words if len(words) <= _QUOTE else words[: _QUOTE - 1] + "…"


def _forwarded(
    reader: _Reader,
) -> tuple[str, dict[str, str], tuple[Attachment, ...]] | None:
    """The text, origin and attachments (files, stickers) of a forwarded message
    (message_snapshots), if a forward. The text is the snapshot's content, else, as for
    a message of its own, its rich embeds' text or its components' text displays."""
    reference = reader.sub("message_reference")
    snapshots = reader.items("message_snapshots")
    if reference is None or reference.data.get("type") != 1 or not snapshots:
        return None
    first = snapshots[0] if isinstance(snapshots[0], Mapping) else {}
    inner = first.get("message")
    inner = inner if isinstance(inner, Mapping) else {}
    origin = {
        key: found
        for key in ("message_id", "channel_id", "guild_id")
        if (found := as_snowflake(reference.data.get(key))) is not None
    }
    snapshot = _Reader(inner, f"{reader.prefix}message_snapshots.0.message.")
    embeds, components = inner.get("embeds"), inner.get("components")
    text = _words(
        _str(inner.get("content")),
        embeds if isinstance(embeds, list) else [],
        components if isinstance(components, list) else [],
    )
    text = _named(text, snapshot, {}, None, None)
    attachments = (*_attachments(snapshot), *_stickers(snapshot))
    return text, origin, attachments


def _mentions(reader: _Reader, text: str, bot_id: str | None) -> bool:
    if not bot_id:
        return False
    for index, user in enumerate(reader.items("mentions")):
        if not isinstance(user, Mapping):
            raise NormalizeError(
                f"expected a user, got {_show(user)}", where=f"{reader.prefix}mentions.{index}"
            )
        if as_snowflake(user.get("id")) == bot_id:
            return True
    return f"<@{bot_id}>" in text or f"<@!{bot_id}>" in text


def _mentions_role(reader: _Reader, role_id: object) -> bool:
    """True when the message mentions the bot's managed role (``<@&role id>``)."""
    role = as_snowflake(role_id)
    if role is None:
        return False
    return any(as_snowflake(mentioned) == role for mentioned in reader.items("mention_roles"))


def _address(account: str, channel_id: str, parent_id: str | None) -> Address:
    """A channel's or DM's address, or a thread's: the parent as chat, the thread as thread."""
    if parent_id is None:
        return Address(account, channel_id)
    return Address(account, parent_id, thread=channel_id)


def _conversation(
    reader: _Reader, context: Mapping[str, Any]
) -> tuple[ConversationKind, str | None, dict[str, Any], str | None]:
    """The kind, title and meta of the message's conversation, and its parent channel for a thread."""
    guild_id = reader.snowflake("guild_id", required=False)
    meta: dict[str, Any] = {}
    if guild_id is None:
        return "direct", None, meta, None
    meta["guild_id"] = guild_id
    guild_name = _str(context.get("guild_name"))
    if guild_name:
        meta["guild_name"] = guild_name
    channel_type = context.get("channel_type")
    channel_type = channel_type if isinstance(channel_type, int) else None
    # `position` is present only on messages posted in threads
    is_thread = channel_type in THREAD_CHANNEL_TYPES or (
        channel_type is None and "position" in reader.data
    )
    channel_name = _str(context.get("channel_name"))
    if channel_type is None and context.get("channel_unknown") is True:
        # the adapter could not learn what this channel is: a thread's message here
        # under chat=<its id> would give the thread a second address
        raise NormalizeError(
            f"Discord channel {reader.data.get('channel_id')} is not in the bot's cache and "
            "Discord would not describe it, so whether it is a thread is not known; "
            "check the bot's View Channel permission there",
            where=f"{CONTEXT_KEY}.channel_unknown",
        )
    if is_thread:
        parent = as_snowflake(context.get("parent_id"))
        if parent is None:
            thread_id = reader.data.get("channel_id")
            raise NormalizeError(
                f"a message in Discord thread {thread_id} without its parent channel: "
                f"the adapter must put the parent's id in {CONTEXT_KEY}.parent_id "
                "(a thread is addressed chat=<parent id>, thread=<thread id>)",
                where=f"{CONTEXT_KEY}.parent_id",
            )
        parent_name = _str(context.get("parent_name"))
        title = f"#{parent_name} › {channel_name}" if parent_name and channel_name else channel_name
        return "thread", _with_guild(title or None, guild_name), meta, parent
    title = f"#{channel_name}" if channel_name else None
    return "group", _with_guild(title, guild_name), meta, None


def _with_guild(title: str | None, guild_name: object) -> str | None:
    if title and guild_name:
        return f"{title} ({guild_name})"
    return title


def _attachments(reader: _Reader) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    for index, item in enumerate(reader.items("attachments")):
        if not isinstance(item, Mapping):
            raise NormalizeError(
                f"expected an attachment object, got {_show(item)}",
                where=f"{reader.prefix}attachments.{index}",
            )
        mime = _str(item.get("content_type"))
        major = mime.split("/", 1)[0] if mime else ""
        size = item.get("size")
        found.append(
            Attachment(
                kind=major if major in {"image", "video", "audio"} else "file",
                name=_str(item.get("filename")),
                mime=mime,
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                ref=_str(item.get("url")),
            )
        )
    return tuple(found)


def _stickers(reader: _Reader) -> list[Attachment]:
    """Sticker items as attachments of kind "sticker", named, with the sticker id as ref."""
    found = []
    for item in reader.items("sticker_items"):
        if isinstance(item, Mapping):
            ref = as_snowflake(item.get("id"))
            found.append(Attachment(kind="sticker", name=_str(item.get("name")), ref=ref))
    return found


def _poll(reader: _Reader) -> Attachment | None:
    """A poll as an attachment of kind "poll", named by its question and answers."""
    poll = reader.obj("poll")
    if poll is None:
        return None
    question = poll.get("question")
    text = _str(question.get("text")) if isinstance(question, Mapping) else None
    answers = []
    listed = poll.get("answers")
    for answer in listed if isinstance(listed, list) else ():
        media = answer.get("poll_media") if isinstance(answer, Mapping) else None
        label = _str(media.get("text")) if isinstance(media, Mapping) else None
        if label:
            answers.append(label)
    name = text or "poll"
    if answers:
        name = f"{name} ({' / '.join(answers)})"
    return Attachment(kind="poll", name=name)


def _words(content: str | None, embeds: list[Any], components: list[Any]) -> str:
    """A message's text: its content, then its rich embeds' text (a bot's "Build finished:"
    says the rest in an embed), a blank line apart; with neither, its components' text
    displays (a components-v2 message has no content or embeds)."""
    rich = _embed_text(embeds)
    if content:
        return f"{content}\n\n{rich}" if rich else content
    return rich or _component_text(components)


def _named(
    text: str,
    reader: _Reader,
    context: Mapping[str, Any],
    channel_id: str | None,
    parent_id: str | None,
) -> str:
    """`text` with each user, role and channel mention whose name is known shown by it.

    Discord writes a mention as markup: ``<@id>`` (``<@!id>``), ``<@&id>``, ``<#id>``; an
    id tells the agent nothing. A mention becomes ``@Bob (<@id>)``, ``@Admins (<@&id>)``
    or ``#general (<#id>)``: the name to read, and the markup the agent writes to mention
    them back. Users are named by the message's ``mentions`` (server nickname, display
    name, username), roles and channels by the adapter's cache (`role_names`,
    `channel_names` in the context), the message's own channel and ``mention_channels``
    (crossposts). A mention whose name is not known stays as it is.
    """
    if "<" not in text:
        return text
    users: dict[str, str] = {}
    for user in _list(reader.data.get("mentions")):
        if isinstance(user, Mapping) and (user_id := as_snowflake(user.get("id"))) is not None:
            name = _shown_name(user, user.get("member"))
            if name:
                users[user_id] = name
    roles = _names(context.get("role_names"))
    channels = _names(context.get("channel_names"))
    for channel in _list(reader.data.get("mention_channels")):
        if isinstance(channel, Mapping) and (found := as_snowflake(channel.get("id"))):
            channels.setdefault(found, _str(channel.get("name")) or "")
    for known, key in ((channel_id, "channel_name"), (parent_id, "parent_name")):
        name = _str(context.get(key))
        if known is not None and name:
            channels[known] = name

    def shown(match: re.Match[str]) -> str:
        sigil, found = match.group(1), match.group(2)
        if sigil == "#":
            name, prefix = channels.get(found), "#"
        else:
            name, prefix = (roles if sigil == "@&" else users).get(found), "@"
        name = " ".join(name.split())[:_MENTION_NAME] if name else ""
        return f"{prefix}{name} ({match.group(0)})" if name else match.group(0)

    return _MARKUP.sub(shown, text)


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _names(value: object) -> dict[str, str]:
    """An id -> name mapping from the adapter's context, what in it is one."""
    if not isinstance(value, Mapping):
        return {}
    return {
        key: name
        for key, name in value.items()
        if isinstance(key, str) and isinstance(name, str) and name
    }


def _embed_text(embeds: list[Any]) -> str:
    """The words of a message's rich embeds, one block each, in the order Discord shows
    them: author, title, description, each field as ``name: value``, footer. Link
    previews (embed types link, image, video, gifv, article) are left out: they repeat
    the page a URL in the text names. At most _EMBED_CHARS characters."""
    blocks = []
    for embed in embeds:
        if not isinstance(embed, Mapping) or embed.get("type", "rich") != "rich":
            continue
        lines = [
            _inner_text(embed.get("author"), "name"),
            _str(embed.get("title")),
            _str(embed.get("description")),
        ]
        fields = embed.get("fields")
        for field in fields if isinstance(fields, list) else ():
            if isinstance(field, Mapping):
                name, value = _shown_text(field.get("name")), _shown_text(field.get("value"))
                lines.append(f"{name}: {value}" if name and value else name or value)
        lines.append(_inner_text(embed.get("footer"), "text"))
        block = "\n".join(line for line in lines if line)
        if block:
            blocks.append(block)
    text = "\n\n".join(blocks)
    return text if len(text) <= _EMBED_CHARS else text[: _EMBED_CHARS - 1] + "…"


def _inner_text(holder: object, key: str) -> str | None:
    """The text at `key` of an embed's part (author, footer), if both are what they should be."""
    return _str(holder.get(key)) if isinstance(holder, Mapping) else None


#: what bots put in an embed field's name or value to leave it blank (it must not be empty)
_BLANK = " \t\n\r\u200b\u200c\u200d\u2060\ufeff"


def _shown_text(value: object) -> str | None:
    """A field's name or value, unless it is not text or shows nothing (a zero-width space)."""
    return value if isinstance(value, str) and value.strip(_BLANK) else None


#: component types that hold others (action row, section, container) and text display
_COMPONENT_HOLDERS = frozenset({1, 9, 17})
_TEXT_DISPLAY = 10


def _component_text(components: list[Any], depth: int = 0) -> str:
    """The text displays of a components-v2 message (flag IS_COMPONENTS_V2), in order."""
    blocks: list[str] = []
    for component in components:
        if not isinstance(component, Mapping) or depth > 4:
            continue
        kind = component.get("type")
        if not isinstance(kind, int):
            continue
        if kind == _TEXT_DISPLAY and isinstance(component.get("content"), str):
            blocks.append(component["content"])
        elif kind in _COMPONENT_HOLDERS and isinstance(component.get("components"), list):
            blocks.append(_component_text(component["components"], depth + 1))
    return "\n".join(block for block in blocks if block)


def as_snowflake(value: object) -> str | None:
    """`value` as a snowflake's text, if it is one: 0 to 2**64-1, digits, no leading zero.

    The text is the event's key: "0012" and "12" must not both be accepted as
    the same id, nor a number no Discord id can be (or too long to print).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if 0 <= value <= _MAX_SNOWFLAKE else None
    if not isinstance(value, str) or not 0 < len(value) <= 20:
        return None
    if not (value.isascii() and value.isdigit()) or (value[0] == "0" and value != "0"):
        return None
    return value if int(value) <= _MAX_SNOWFLAKE else None


def _show(value: object) -> str:
    """A short, printable form of an offending value for a NormalizeError (one line)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, str) and len(value) > _SHOWN:
        return repr(value[:_SHOWN]) + f"… ({len(value)} characters)"
    if isinstance(value, Mapping | list):
        kind = "an object" if isinstance(value, Mapping) else "a list"
        text = _shown_json(value)
        return text if text is not None else f"{kind} of {len(value)} items"
    return repr(value)


def _shown_json(value: Mapping[str, Any] | list[Any]) -> str | None:
    try:
        text = repr(value) if len(value) <= 8 else None
    except (ValueError, RecursionError):
        return None
    if text is None or len(text) > _SHOWN:
        return None
    return text


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _shown_name(user: Mapping[str, Any], member: object) -> str | None:
    """The name Discord shows for `user` (a payload's user object, read leniently): the
    server nickname of `member`, else the display name, else the username."""
    nick = member.get("nick") if isinstance(member, Mapping) else None
    return _str(nick) or _str(user.get("global_name")) or _str(user.get("username"))


def _timestamp(value: str | None) -> float | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)  # Discord's times are UTC, not the host's
        seconds = moment.timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    # a time no message is sent at (before 1970, past what a store takes) is none: the
    # snowflake's own time is used instead of losing the message to a dead letter
    return seconds if 0 < seconds < LATEST_SENT_AT else None

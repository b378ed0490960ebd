"""Pure functions: a Slack Events API payload -> a backchannel Event (or None).

The input is what Slack sends: the ``event_callback`` body (over HTTP, or as the
``payload`` of a Socket Mode envelope), optionally with a ``_backchannel`` key
the adapter adds before ingesting (names it looked up with ``users.info`` and
``conversations.info``, and whether the bot takes part in the thread). A bare
inner event (``{"type": "message", ...}``) and a whole Socket Mode envelope
(``{"type": "events_api", "payload": {...}}``) are accepted too.

Decisions (see docs/channels/slack.md):

- A message's ``event_id`` is its identity on Slack, ``<channel>:<ts>``, not the
  envelope's ``Ev...`` id: Slack sends both a ``message`` and an ``app_mention``
  event (two envelope ids) for one mention, and both must make one transcript row.
- Edits are ``edit:<channel>:<ts>:<edited.ts>``; deletes ``delete:<channel>:<ts>``;
  reactions ``reaction_added:<channel>:<ts>:<user>:<name>:<event_ts>`` (and
  ``reaction_removed:...``), the emoji as Slack names it (``:thumbsup:``). A
  reaction does not say which thread its message is in: it is addressed to the
  channel, and the store finds the thread that holds the message.
- A thread is its own conversation ``Address(account, channel, thread_ts)``;
  the channel's top level is ``Address(account, channel)``. A top-level message
  that mentions the bot (outside DMs) opens the thread rooted at it
  (``Address(account, channel, ts)``), so the bot answers in that thread.
- The app's own messages are recognised by bot user id and ``bot_id``.
- Block Kit ``blocks`` that say more than ``text`` (then only the notification
  fallback) are shown instead of it; the words of legacy ``attachments``
  (forwarded messages, many integrations) follow, each part once and bounded.
  A mention of the bot inside a shared message is not the sender's.
- ``message_replied`` (which Slack dispatches without its subtype) is ignored;
  see `message_subtype` for the hidden subtypes read by their shape.
- A ts is kept as Slack writes it (``"1700000000.000100"``); a number is read
  back into that form. Anything else where a ts belongs is a NormalizeError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from attrs import frozen
from backchannel.errors import NormalizeError
from backchannel.model import Address, Attachment, ConversationKind, Event, Sender

__all__ = [
    "ENRICHMENT_KEY",
    "USER_MENTION",
    "BotIdentity",
    "mention_pattern",
    "message_identity",
    "message_subtype",
    "normalize_payload",
]

#: key under which the adapter passes looked-up names into the raw payload
ENRICHMENT_KEY = "_backchannel"

#: ``channel_type`` values of one-to-one conversations with the app
DIRECT_CHANNEL_TYPES = frozenset({"im", "app_home"})

#: Slackbot's user id: a bot, though its messages carry no ``bot_id``
SLACKBOT = "USLACKBOT"

#: message subtypes that carry a person's (or another bot's) words
CONTENT_SUBTYPES = frozenset({"bot_message", "file_share", "thread_broadcast", "me_message"})


@frozen
class BotIdentity:
    """Who the app is on Slack: its bot user id (``U...``) and bot id (``B...``)."""

    user_id: str | None = None
    bot_id: str | None = None

    def owns(self, message: Mapping[str, Any]) -> bool:
        """Return True when `message` was posted by this app."""
        user = message.get("user")
        bot = message.get("bot_id")
        if self.user_id and user == self.user_id:
            return True
        return bool(self.bot_id and bot == self.bot_id)


def mention_pattern(user_id: str) -> re.Pattern[str]:
    """Return a pattern matching ``<@USERID>`` and ``<@USERID|name>`` in mrkdwn text."""
    return re.compile(rf"<@{re.escape(user_id)}(?:\|[^>]*)?>")


#: a mention of a person in mrkdwn text, ``<@U123>`` or ``<@W123|name>``: group 1 the id,
#: group 2 the label when there is one
USER_MENTION = re.compile(r"<@([UW][A-Z0-9]{1,31})(\|[^<>]*)?>")


def message_identity(channel: str, ts: str) -> str:
    """Return the dedupe key of one Slack message: ``<channel>:<ts>``."""
    return f"{channel}:{ts}"


def normalize_payload(
    raw: Mapping[str, Any],
    *,
    account: str,
    me: BotIdentity,
    thread_on_mention: bool = True,
) -> Event | None:
    """Return the Event for a Slack payload, or None when it is not for the transcript.

    Raises NormalizeError (naming the field) when a field Slack always sends is
    missing or has the wrong type.
    """
    if not isinstance(raw, Mapping):
        raise NormalizeError(f"expected a JSON object, got {type(raw).__name__}")
    kind = raw.get("type")
    if kind == "events_api" and "payload" in raw:
        # a whole Socket Mode envelope: the event_callback body is its payload
        payload = raw.get("payload")
        if not isinstance(payload, Mapping):
            raise NormalizeError("Socket Mode envelope without a payload object", where="payload")
        return normalize_payload(
            payload, account=account, me=me, thread_on_mention=thread_on_mention
        )
    if kind == "event_callback":
        event = raw.get("event")
        if not isinstance(event, Mapping):
            raise NormalizeError("event_callback without an event object", where="event")
        where = "event"
    elif kind in ("message", "app_mention"):
        event, where = raw, ""
    elif isinstance(kind, str):
        return None  # url_verification, app_rate_limited, other envelope types
    else:
        raise NormalizeError("payload has no string 'type'", where="type")

    extra = raw.get(ENRICHMENT_KEY) or {}
    if not isinstance(extra, Mapping):
        extra = {}
    # the bot's identity comes from auth.test at start, never from a payload: in an org-wide
    # install an event's `authorizations` may name another app's bot
    reader = _Reader(event, where, account, me, extra, thread_on_mention)
    event_type = event.get("type")
    if event_type == "app_mention":
        return reader.message(event, mention=True)
    if event_type in ("reaction_added", "reaction_removed"):
        return reader.reaction(event, event_type)
    if event_type != "message":
        return None  # joins, app_home_opened, ...: not transcript rows
    subtype = message_subtype(event)
    if subtype is not None and not isinstance(subtype, str):
        raise NormalizeError("'subtype' is not a string", where=reader.at("subtype"))
    if subtype is None or subtype in CONTENT_SUBTYPES:
        return reader.message(event, mention=False)
    if subtype == "message_changed":
        return reader.edit(event)
    if subtype == "message_deleted":
        return reader.delete(event)
    return None  # channel_join, channel_topic, message_replied, ...


def message_subtype(event: Mapping[str, Any]) -> Any:
    """A message event's ``subtype``; for one that lacks it, what its shape says it is.

    Slack dispatches ``message_replied`` over the Events API without its subtype
    (its docs' "Bug alert"): a hidden message with the thread's root nested in
    ``message`` and no sender of its own. The other hidden subtypes that nest a
    message are read from their shape the same way when the subtype is missing:
    one with ``deleted_ts`` is a ``message_deleted``; one nesting a message with its
    ``previous_message``, or an edited (or tombstoned) one, a ``message_changed``;
    any other nesting a message is the root of a thread that got a reply. A message
    with a sender of its own (``user``, ``bot_id``) is what it says it is.
    """
    subtype = event.get("subtype")
    if subtype is not None or event.get("user") or event.get("bot_id"):
        return subtype
    if event.get("deleted_ts") is not None:
        return "message_deleted"
    nested = event.get("message")
    if not isinstance(nested, Mapping):
        return None
    if (
        isinstance(event.get("previous_message"), Mapping)
        or nested.get("edited")
        or nested.get("subtype") == "tombstone"
    ):
        return "message_changed"
    return "message_replied"


class _Reader:
    """Reads one inner event; knows the account, the bot and the adapter's enrichment."""

    def __init__(
        self,
        event: Mapping[str, Any],
        where: str,
        account: str,
        me: BotIdentity,
        extra: Mapping[str, Any],
        thread_on_mention: bool,
    ):
        self.event = event
        self.where = where
        self.account = account
        self.me = me
        self.extra = extra
        self.thread_on_mention = thread_on_mention
        self.mention = mention_pattern(me.user_id) if me.user_id else None

    def at(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def ts_field(self, value: Mapping[str, Any], name: str, where: str) -> str:
        """A required Slack ts (a string; a number is read with Slack's six decimals)."""
        ts = _ts_text(value.get(name))
        if ts is None:
            raise NormalizeError(f"missing or invalid Slack ts {name!r}", where=where)
        return ts

    def opt_ts(self, value: Mapping[str, Any], name: str, where: str) -> str | None:
        """An optional Slack ts such as ``thread_ts``: None when absent or empty."""
        raw = value.get(name)
        if raw is None or raw == "":
            return None
        ts = _ts_text(raw)
        if ts is None:
            raise NormalizeError(f"{name!r} is not a Slack ts", where=where)
        return ts

    def text_field(self, value: Mapping[str, Any], name: str, where: str) -> str:
        field = value.get(name)
        if not isinstance(field, str) or not field:
            raise NormalizeError(f"missing or non-string {name!r}", where=where)
        return field

    # kinds -------------------------------------------------------------------
    def message(self, message: Mapping[str, Any], *, mention: bool) -> Event | None:
        channel = self.text_field(message, "channel", self.at("channel"))
        ts = self.ts_field(message, "ts", self.at("ts"))
        if self.me.owns(message):
            return None
        text, own_text = _message_text(message, self.at("text"))
        text = self.named(text)
        thread_ts = self.opt_ts(message, "thread_ts", self.at("thread_ts"))
        direct = self.is_direct(channel, message)
        mentions_me = (
            mention or self.mentions(own_text) or self.replies_to_me(message, thread_ts, ts)
        )
        address, kind = self.address(channel, ts, thread_ts, mentions_me, direct)
        meta: dict[str, Any] = {}
        if message.get("subtype") == "thread_broadcast":
            meta["also_sent_to_channel"] = True
        if thread_ts:
            meta["thread_ts"] = thread_ts
        if text.strip() and not own_text.strip():
            meta["forwarded"] = True  # a share without a comment: none of the words are theirs
        return Event(
            address=address,
            event_id=message_identity(channel, ts),
            sender=self.sender(message),
            kind="message",
            text=text,
            platform_message_id=ts,
            reply_to=thread_ts if thread_ts and thread_ts != ts else None,
            mentions_me=mentions_me,
            attachments=_attachments(message.get("files"), self.at("files")),
            sent_at=_ts_seconds(ts, self.at("ts")),
            conversation_kind=kind,
            conversation_title=self.title(kind),
            meta=meta,
            raw=self.raw_for_store(),
        )

    def edit(self, event: Mapping[str, Any]) -> Event | None:
        channel = self.text_field(event, "channel", self.at("channel"))
        changed = event.get("message")
        if not isinstance(changed, Mapping):
            raise NormalizeError("message_changed without a message", where=self.at("message"))
        where = self.at("message")
        # the changed message's ts; some deliveries carry it only on previous_message
        holder = changed if "ts" in changed else previous_of(event) or changed
        ts = self.ts_field(holder, "ts", f"{where}.ts")
        if self.me.owns(changed):
            return None
        inner_subtype = changed.get("subtype")
        if inner_subtype is not None and not isinstance(inner_subtype, str):
            raise NormalizeError("'subtype' is not a string", where=f"{where}.subtype")
        if inner_subtype == "tombstone":
            # a thread parent deleted while replies remain: Slack edits it into a tombstone
            thread = self.opt_ts(changed, "thread_ts", f"{where}.thread_ts")
            return self.deleted(event, channel, ts, thread, previous_of(event))
        if inner_subtype is not None and inner_subtype not in CONTENT_SUBTYPES:
            return None  # a service message (join, topic, ...) changed
        if not changed.get("user") and not changed.get("bot_id"):
            return None
        text, own_text = _message_text(changed, f"{where}.text")
        text = self.named(text)
        previous = event.get("previous_message")
        if (
            isinstance(previous, Mapping)
            and previous.get("text") == changed.get("text")
            and not changed.get("edited")
        ):
            return None  # an unfurl or a reply count changed, not the words
        edited = changed.get("edited")
        edit_ts = edited.get("ts") if isinstance(edited, Mapping) else None
        stamp = _ts_text(edit_ts) or _ts_text(event.get("event_ts")) or _ts_text(event.get("ts"))
        if stamp is None:
            raise NormalizeError("message_changed without ts or edited.ts", where=self.at("ts"))
        thread_ts = self.opt_ts(changed, "thread_ts", f"{where}.thread_ts")
        direct = self.is_direct(channel, event)
        mentions_me = self.mentions(own_text) or self.replies_to_me(changed, thread_ts, ts)
        # the edited row lives where its words before this edit put it: a mention
        # added or removed by the edit does not move the message to another thread
        before = previous.get("text") if isinstance(previous, Mapping) else None
        placed_by_mention = self.mentions(before) if isinstance(before, str) else mentions_me
        address, kind = self.address(channel, ts, thread_ts, placed_by_mention, direct)
        return Event(
            address=address,
            event_id=f"edit:{channel}:{ts}:{stamp}",
            sender=self.sender(changed),
            kind="edit",
            text=text,
            platform_message_id=ts,
            mentions_me=mentions_me,
            attachments=_attachments(changed.get("files"), f"{where}.files"),
            sent_at=_ts_seconds(stamp, self.at("ts")),
            conversation_kind=kind,
            conversation_title=self.title(kind),
            raw=self.raw_for_store(),
        )

    def delete(self, event: Mapping[str, Any]) -> Event | None:
        channel = self.text_field(event, "channel", self.at("channel"))
        deleted_ts = self.ts_field(event, "deleted_ts", self.at("deleted_ts"))
        previous = previous_of(event)
        thread = self.opt_ts(previous, "thread_ts", self.at("previous_message.thread_ts"))
        return self.deleted(event, channel, deleted_ts, thread, previous)

    def deleted(
        self,
        event: Mapping[str, Any],
        channel: str,
        deleted_ts: str,
        thread_ts: str | None,
        previous: Mapping[str, Any],
    ) -> Event | None:
        if self.me.owns(previous):
            return None
        text = previous.get("text") or ""
        direct = self.is_direct(channel, event)
        mentions_me = isinstance(text, str) and self.mentions(text)
        address, kind = self.address(channel, deleted_ts, thread_ts, mentions_me, direct)
        stamp = _ts_text(event.get("event_ts")) or _ts_text(event.get("ts")) or deleted_ts
        sender = self.sender(previous) if previous.get("user") or previous.get("bot_id") else None
        return Event(
            address=address,
            event_id=f"delete:{channel}:{deleted_ts}",
            sender=sender or Sender.unknown(),
            kind="delete",
            platform_message_id=deleted_ts,
            sent_at=_ts_seconds(stamp, self.at("event_ts")),
            conversation_kind=kind,
            conversation_title=self.title(kind),
            raw=self.raw_for_store(),
        )

    def reaction(self, event: Mapping[str, Any], event_type: str) -> Event | None:
        item = event.get("item")
        if not isinstance(item, Mapping):
            raise NormalizeError("a reaction without an item object", where=self.at("item"))
        if item.get("type") != "message":
            return None  # a file or file comment (older apps): not a transcript row
        channel = self.text_field(item, "channel", self.at("item.channel"))
        ts = self.ts_field(item, "ts", self.at("item.ts"))
        user = self.text_field(event, "user", self.at("user"))
        if self.me.user_id and user == self.me.user_id:
            return None  # our own reaction, recorded when we sent it
        name = self.text_field(event, "reaction", self.at("reaction"))
        stamp = self.ts_field(event, "event_ts", self.at("event_ts"))
        # the item names no thread: the reaction's row is the channel's (or DM's)
        address, kind = self.address(channel, ts, None, False, self.is_direct(channel, item))
        return Event(
            address=address,
            event_id=f"{event_type}:{channel}:{ts}:{user}:{name}:{stamp}",
            sender=self.sender({"user": user}),
            kind="reaction",
            text=f":{name}:",
            platform_message_id=ts,
            sent_at=_ts_seconds(stamp, self.at("event_ts")),
            conversation_kind=kind,
            conversation_title=self.title(kind),
            meta={"removed": True} if event_type == "reaction_removed" else {},
            raw=self.raw_for_store(),
        )

    # pieces ------------------------------------------------------------------
    def is_direct(self, channel: str, event: Mapping[str, Any]) -> bool:
        channel_type = event.get("channel_type")
        if isinstance(channel_type, str):
            return channel_type in DIRECT_CHANNEL_TYPES
        return channel.startswith("D")  # app_mention carries no channel_type

    def named(self, text: str) -> str:
        """`text` with each mention of a person the adapter looked up labelled with their
        name, ``<@U123>`` -> ``<@U123|Bob>`` (Slack's own form of a labelled mention, which
        it still reads when the agent writes it back): the agent can tell who is meant
        without the person having spoken in its window."""
        if "<@" not in text:
            return text
        names = self.extra.get("user_names")
        if not isinstance(names, Mapping) or not names:
            return text

        def label(match: re.Match[str]) -> str:
            name = names.get(match[1])
            if match[2] or not isinstance(name, str) or not name.strip():
                return match[0]
            return f"<@{match[1]}|{_UNSAFE_IN_LABEL.sub(' ', name).strip()}>"

        return USER_MENTION.sub(label, text)

    def mentions(self, text: str) -> bool:
        return bool(self.mention and self.mention.search(text))

    def replies_to_me(self, message: Mapping[str, Any], thread_ts: str | None, ts: str) -> bool:
        if not thread_ts or thread_ts == ts:
            return False
        parent = message.get("parent_user_id")
        if self.me.user_id and parent == self.me.user_id:
            return True
        return bool(self.extra.get("bot_in_thread"))

    def address(
        self, channel: str, ts: str, thread_ts: str | None, mentions_me: bool, direct: bool
    ) -> tuple[Address, ConversationKind]:
        if thread_ts and thread_ts != ts:
            # a thread of a DM (an AI app's assistant thread, a reply under a DM message)
            # is still a DM: only the person and the bot are in it
            return Address(self.account, channel, thread_ts), "direct" if direct else "thread"
        if not direct and mentions_me and self.thread_on_mention:
            return Address(self.account, channel, ts), "thread"
        return Address(self.account, channel), "direct" if direct else "group"

    def sender(self, message: Mapping[str, Any]) -> Sender:
        user = _opt_str(message.get("user"))
        bot_id = _opt_str(message.get("bot_id"))
        names = self.extra.get("user_names")
        names = names if isinstance(names, Mapping) else {}
        profile = message.get("user_profile")
        profile = profile if isinstance(profile, Mapping) else {}
        bot_profile = message.get("bot_profile")
        bot_profile = bot_profile if isinstance(bot_profile, Mapping) else {}
        # an old integration's bot_message may name only its app or its username; a
        # username is free text (it could read "U0OWNER01"), so it never passes for an id
        username = _opt_str(message.get("username"))
        sender_id = (
            user
            or bot_id
            or _opt_str(message.get("app_id"))
            or (f"username:{username}" if username else None)
        )
        if sender_id is None:
            raise NormalizeError("message has neither 'user' nor 'bot_id'", where=self.at("user"))
        name = (
            _opt_str(names.get(sender_id))
            or _opt_str(profile.get("display_name"))
            or _opt_str(profile.get("real_name"))
            or _opt_str(message.get("username"))
            or _opt_str(bot_profile.get("name"))
            or ""
        )
        # the handle is the user id: it is what a mention looks like in Slack text
        # (<@U123>), so the agent can recognise mentions and write its own
        handle = user if user else None
        bots = self.extra.get("user_bots")
        known = bots.get(user) if isinstance(bots, Mapping) and user else None
        if user is None or user == SLACKBOT:
            is_bot = True
        elif isinstance(known, bool):
            # users.info said what the author's account is: a person posting through an
            # app still carries the app's bot_id (IRCCloud, a user token)
            is_bot = known
        else:  # not looked up: an app's bot_id, or an old integration's bot_message
            is_bot = bot_id is not None or message.get("subtype") == "bot_message"
        return Sender(id=sender_id, name=name, handle=handle, is_bot=is_bot)

    def title(self, kind: ConversationKind) -> str | None:
        name = _opt_str(self.extra.get("channel_name"))
        if name is None:
            return None
        if kind == "direct":
            return name
        return f"#{name} (thread)" if kind == "thread" else f"#{name}"

    def raw_for_store(self) -> Mapping[str, Any]:
        return dict(self.event)


#: what a name put into ``<@U…|name>`` must not hold (it would end the mention early)
_UNSAFE_IN_LABEL = re.compile(r"[<>|\s]+")


def previous_of(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``previous_message`` of a change or delete, or an empty mapping."""
    previous = event.get("previous_message")
    return previous if isinstance(previous, Mapping) else {}


def _opt_str(value: Any) -> str | None:
    """A non-empty string field, else None: Slack writes ids and names as strings, and
    anything else (``{"id": "U1"}`` where a user id belongs) is not one, not its repr."""
    return value if isinstance(value, str) and value else None


def _typed_by_a_person(message: Mapping[str, Any], blocks: Any) -> bool:
    """A person's message with a text: Slack's client adds rich_text blocks saying what
    the text says (the usual message: its blocks are not drawn only to be compared)."""
    return (
        "user" in message
        and "bot_id" not in message
        and isinstance(blocks, list)
        and all(isinstance(b, Mapping) and b.get("type") == "rich_text" for b in blocks)
    )


def _message_text(message: Mapping[str, Any], where: str) -> tuple[str, str]:
    """The words a message shows: its mrkdwn ``text`` (or its blocks), then its legacy
    attachments'.

    With ``blocks``, ``text`` is only the notification fallback: the blocks' words are
    shown instead of it when they say more than it does (a person's message carries
    rich_text blocks saying what its text says: the text is kept). The words of legacy
    ``attachments`` (an integration's card, a message shared or forwarded) come after,
    each part once (a part whose words are already shown is left out), at most
    `_ATTACHMENTS_LIMIT` characters of them.

    Returns the text to store and the text a mention of the bot is looked for in:
    the words of a message shared in an attachment are not the sender's own.
    """
    text = message.get("text")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise NormalizeError("'text' is not a string", where=where)
    body = text if text.strip() else ""
    blocks = message.get("blocks")
    if blocks and not (body and _typed_by_a_person(message, blocks)):
        drawn = _blocks_text(blocks)
        if drawn.strip() and not _covered(drawn, _words(body), body):
            body = _cut(drawn, _BLOCKS_LIMIT)
    attachments = message.get("attachments")
    if not attachments or not isinstance(attachments, list):
        return body, body
    shown, own = [body] if body else [], [body] if body else []
    seen = _words(body)
    room = _ATTACHMENTS_LIMIT
    for item in attachments:
        if not isinstance(item, Mapping):
            continue
        shared = _is_shared_message(item)
        for part in _attachment_parts(item):
            if room <= 0:
                break
            if _covered(part, seen, "\n".join(shown)):
                continue
            part = _cut(part, room)
            room -= len(part)
            seen |= _words(part)
            shown.append(part)
            if not shared:
                own.append(part)
    return "\n".join(shown), "\n".join(own)


#: at most this many characters of a message's blocks, and of its attachments' words
_BLOCKS_LIMIT = 40_000
_ATTACHMENTS_LIMIT = 4_000
_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _covered(part: str, seen: set[str], shown: str) -> bool:
    """Whether `part` says nothing that is not already shown: each of its words is (one
    of no words at all, only emoji or marks, is looked for as it is)."""
    words = _words(part)
    if words:
        return words <= seen
    return not part.strip() or part.strip() in shown


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def _is_shared_message(item: Mapping[str, Any]) -> bool:
    """An attachment that is a message shared or linked to (not an integration's card)."""
    return (
        item.get("is_share") is True
        or item.get("is_msg_unfurl") is True
        or bool(_list(item.get("message_blocks")))
    )


def _attachment_parts(item: Mapping[str, Any]) -> list[str]:
    """What a legacy attachment says, in the order Slack's notification and card give
    it: its ``fallback``, ``pretext``, ``title`` (and ``title_link``), ``text``, each
    field as ``title: value``, its blocks, and the blocks of the message it shares
    (``message_blocks``). The caller leaves out the parts already said."""
    parts = [
        value
        for key in ("fallback", "pretext", "title", "title_link", "text")
        if isinstance(value := item.get(key), str) and value.strip()
    ]
    parts.extend(line for line in map(_field_line, _list(item.get("fields"))) if line)
    blocks = _blocks_text(item.get("blocks"))
    if blocks:
        parts.append(blocks)
    parts.extend(
        line
        for holder in _list(item.get("message_blocks"))
        if isinstance(holder, Mapping)
        and isinstance(holder.get("message"), Mapping)
        and (line := _blocks_text(holder["message"].get("blocks")))
    )
    return parts


def _link_text(label: Any, url: Any) -> str:
    """A link as ``label (url)``; the one of them there is, when the other is missing
    or the same."""
    label = label if isinstance(label, str) and label.strip() else ""
    url = url if isinstance(url, str) and url.strip() else ""
    if label and url and label.strip() != url.strip():
        return f"{label} ({url})"
    return label or url


def _field_line(field: Any) -> str:
    """A legacy attachment field as ``title: value`` (or the one of them it has)."""
    if not isinstance(field, Mapping):
        return ""
    title, value = field.get("title"), field.get("value")
    title = title.strip() if isinstance(title, str) else ""
    value = value.strip() if isinstance(value, str) else ""
    return f"{title}: {value}" if title and value else title or value


def _blocks_text(blocks: Any) -> str:
    lines: list[str] = []
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "rich_text":
            line = "".join(_rich_text(block.get("elements"), depth=0)).rstrip("\n")
        elif kind == "markdown":  # AI apps' standard markdown: its text is a plain string
            text = block.get("text")
            line = text if isinstance(text, str) else ""
        else:  # header, section, context: text objects
            parts = [block.get("text"), *_list(block.get("fields")), *_list(block.get("elements"))]
            line = "\n".join(
                part["text"]
                for part in parts
                if isinstance(part, Mapping) and isinstance(part.get("text"), str)
            )
        if line.strip():
            lines.append(line)
    return "\n".join(lines)


def _rich_text(elements: Any, depth: int) -> list[str]:
    """The words of rich_text elements as mrkdwn-ish text (mentions as ``<@U…>``)."""
    out: list[str] = []
    if depth > 8:
        return out
    for element in _list(elements):
        if not isinstance(element, Mapping):
            continue
        kind = element.get("type")
        if kind == "text" and isinstance(element.get("text"), str):
            out.append(element["text"])
        elif kind == "link":
            out.append(_link_text(element.get("text"), element.get("url")))
        elif kind == "user" and isinstance(element.get("user_id"), str):
            out.append(f"<@{element['user_id']}>")
        elif kind == "channel" and isinstance(element.get("channel_id"), str):
            out.append(f"<#{element['channel_id']}>")
        elif kind == "emoji" and isinstance(element.get("name"), str):
            out.append(f":{element['name']}:")
        elif kind == "broadcast" and isinstance(element.get("range"), str):
            out.append(f"<!{element['range']}>")
        elif kind == "usergroup" and isinstance(element.get("usergroup_id"), str):
            out.append(f"<!subteam^{element['usergroup_id']}>")
        elif kind == "date":
            out.append(_date_text(element))
        elif "elements" in element:
            inner = "".join(_rich_text(element.get("elements"), depth + 1))
            out.append(inner if inner.endswith("\n") else inner + "\n")
    return out


def _date_text(element: Mapping[str, Any]) -> str:
    """A rich_text date: its ``fallback`` (what Slack shows when it cannot format the
    date), else the time it stands for, in UTC."""
    fallback = element.get("fallback")
    if isinstance(fallback, str) and fallback.strip():
        return fallback
    stamp = element.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not 0 <= stamp < _TS_LIMIT:
        return ""
    try:
        return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _ts_text(value: Any) -> str | None:
    """A Slack ts as Slack writes it: strings as sent, numbers with six decimals; else None.

    A number no Slack ts can be (an integer past what a float holds, say, which
    JSON allows) is None too, not an OverflowError.
    """
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < _TS_LIMIT:
        return f"{value:.6f}"
    return None


#: past any ts Slack writes (seconds since 1970, ten digits): refused as a number
_TS_LIMIT = 1e15


def _ts_seconds(ts: str, where: str) -> float:
    try:
        seconds = float(ts)
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds):
        raise NormalizeError(f"timestamp {ts!r} is not a Slack ts", where=where)
    return seconds


def _attachments(files: Any, where: str) -> tuple[Attachment, ...]:
    if files is None:
        return ()
    if not isinstance(files, list):
        raise NormalizeError("'files' is not a list", where=where)
    found: list[Attachment] = []
    for index, item in enumerate(files):
        if not isinstance(item, Mapping):
            raise NormalizeError("file entry is not an object", where=f"{where}[{index}]")
        mime = _opt_str(item.get("mimetype"))
        size = item.get("size")
        found.append(
            Attachment(
                kind=_file_kind(mime, item),
                name=_opt_str(item.get("name")) or _opt_str(item.get("title")),
                mime=mime,
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                ref=_opt_str(item.get("id")),
            )
        )
    return tuple(found)


def _file_kind(mime: str | None, item: Mapping[str, Any]) -> str:
    if item.get("mode") == "tombstone":
        return "deleted_file"
    if mime:
        major = mime.split("/", 1)[0]
        if major in ("image", "video", "audio"):
            return major
    return "file"

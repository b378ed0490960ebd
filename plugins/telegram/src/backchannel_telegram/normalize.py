"""Pure functions: a Telegram Bot API `Update` -> a backchannel `Event` (or None).

What becomes what:

- ``message`` / ``channel_post`` -> kind "message"; ``edited_message`` /
  ``edited_channel_post`` -> kind "edit"; ``message_reaction`` -> kind "reaction".
- ``event_id`` is ``"{update_id}:{date}"``: the Update's ``update_id``
  (Telegram's own id of this happening, kept across webhook retries and
  getUpdates re-reads, and different for every edit of a message) and the
  Unix time it carries (the message's ``date``, an edit's ``edit_date``, a
  reaction's ``date``). The time is there because update ids are not unique
  forever: after a week without updates Telegram picks the next id at
  random, and it may land on ids already stored; an id alone would then
  drop new messages as duplicates of old ones.
- The conversation is the chat; in a forum supergroup a message with
  ``is_topic_message`` lives in the topic ``message_thread_id`` (the Address's
  thread). Messages in a forum's General topic carry no thread.
- A channel's direct messages chat (a supergroup with ``is_direct_messages``,
  Bot API 9.2) holds one topic per user writing to the channel; every message
  there names it in ``direct_messages_topic``. Each topic is a conversation of
  its own, kind "direct" (one person writing privately to the channel), whose
  thread is ``"dm:{topic_id}"`` (`DIRECT_MESSAGES_THREAD` + the id): the prefix
  tells the adapter to send with ``direct_messages_topic_id``, not a forum's
  ``message_thread_id``. A message in such a chat whose topic is missing, null
  or no positive 64-bit integer is a NormalizeError naming the field: filed
  under the chat it would join every user's messages in one conversation,
  where Telegram refuses any answer. Reactions do not name the topic (see the
  adapter and the store's one-holder rule).
- Telegram Business (a bot connected to a business account, answering its
  customers): ``business_message`` -> kind "message", ``edited_business_message``
  -> "edit", ``deleted_business_messages`` -> "delete" (one update per deleted
  message: `split_update` makes them before ingest), in the conversation
  ``"biz:{connection id}:{chat id}"`` (see business.py), kind "direct". The
  customer writes with ``from.id`` equal to the chat's id; anything else in
  that chat is the business side: the owner writing themselves is marked
  ``meta["business_owner"]`` (stored, never starting a run: see the owner
  router in business.py), and what this bot sent on the business's behalf
  (``sender_business_bot`` is us) is our own echo, None. ``business_connection``
  updates give None here; the adapter keeps their state.
- Service messages (members joining, pins, topic created, migration notices,
  ...) and updates of kinds we do not handle (callback queries, polls, ...)
  give None, as do messages the bot itself sent.
- A group upgraded to a supergroup keeps its conversation: the adapter learns
  ``migrate_to_chat_id`` / ``migrate_from_chat_id`` from Telegram's service
  messages and passes `chat_aliases` (supergroup id -> original group id), so
  messages from the supergroup land at the original Address, with
  ``meta["chat_id"]`` (the supergroup id) and ``meta["migrated_from_chat_id"]``.

- A forward (``forward_origin``, or the older ``forward_*`` fields) sets
  ``meta["forwarded"]`` and names its origin in ``meta["forwarded_from"]``; a
  mention of the bot in forwarded words does not count. A reply puts its
  target's author and words (or the part quoted) in ``meta["reply_from"]`` and
  ``meta["reply_quote"]``, an ``external_reply`` (another chat's message) too; a
  target without words is quoted as what it shared (``[photo]``), and a reply to
  a story (``reply_to_story``) names the story's poster and quotes ``[story]``.
- A ``gift`` (a regular gift, as a business account's customers send them) is a
  message: the note sent with it is its text, the gift an attachment.
- A ``text_link`` shows its URL after its words, a ``text_mention`` its user's
  ``tg://user?id=`` link.

Entity offsets and lengths count UTF-16 code units, as Telegram does.

Ids and dates are integers on the wire; numeric strings (as some relays and
logging proxies re-serialise them) are accepted too. Telegram's ids fit in a
signed 64-bit integer (it promises at most 52 significant bits): a number
outside that range is no id, and is refused like any other non-integer.
Optional text fields of the wrong type (a name that is not a string, say) are
ignored rather than carried into the Event.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from attrs import frozen
from backchannel.errors import NormalizeError
from backchannel.model import (
    ATTACHMENTS_COMPLETE,
    NO_RUN,
    Address,
    Attachment,
    ConversationKind,
    Event,
    EventKind,
    Sender,
    evolve,
)
from backchannel.storable import LATEST_SENT_AT

from .business import BUSINESS_OWNER, BusinessConnection, business_chat, valid_connection_id

__all__ = [
    "DIRECT_MESSAGES_THREAD",
    "TOPIC_NAME",
    "BotIdentity",
    "int_field",
    "migration_of",
    "normalize_update",
    "split_update",
    "topic_name_of",
    "utf16_slice",
]

#: meta key: the forum topic's name, when the message carries it (see _topic_name)
TOPIC_NAME = "topic_name"
#: the prefix of an Address thread naming a topic of a channel's direct messages
#: chat (``"dm:{topic_id}"``), as opposed to a forum topic (its bare id)
DIRECT_MESSAGES_THREAD = "dm:"

#: Message fields that carry something a person said or shared. A message
#: with none of these is a service message (or a kind we do not understand).
_CONTENT_FIELDS = (
    "text",
    "caption",
    "photo",
    "document",
    "video",
    "animation",
    "audio",
    "voice",
    "video_note",
    "sticker",
    "contact",
    "location",
    "venue",
    "poll",
    "dice",
    "game",
    "story",
    "paid_media",
    "checklist",
    "giveaway",
    "giveaway_winners",
    "web_app_data",
    "gift",
)
_CONTENT_FIELD_SET = frozenset(_CONTENT_FIELDS)

#: the message fields that add to meta (or say what it replies to)
_META_FIELDS = frozenset(
    {
        "media_group_id",
        "author_signature",
        "forward_origin",
        "forward_date",
        "forward_from",
        "forward_from_chat",
        "forward_sender_name",
        "reply_to_message",
        "external_reply",
        "quote",
        "reply_to_story",
    }
)
#: the message fields that say it is a forward (Bot API 7.0's, then the older ones)
_FORWARD_FIELDS = (
    "forward_origin",
    "forward_date",
    "forward_from",
    "forward_from_chat",
    "forward_sender_name",
)
#: how many characters of the replied-to message meta["reply_quote"] holds
_QUOTE_LIMIT = 300

_DIGITS = re.compile(r"-?[0-9]{1,20}")
#: every Telegram id and date fits in a signed 64-bit integer; nothing outside is one
_INT_LOW, _INT_HIGH = -(2**63), 2**63 - 1

_MESSAGE_KINDS: dict[str, EventKind] = {
    "message": "message",
    "channel_post": "message",
    "edited_message": "edit",
    "edited_channel_post": "edit",
}
#: Telegram Business updates (Bot API 7.2): looked for only when no other kind matched
_BUSINESS_MESSAGE_KINDS: dict[str, EventKind] = {
    "business_message": "message",
    "edited_business_message": "edit",
}
_BUSINESS_UPDATES = frozenset(
    {
        "business_message",
        "edited_business_message",
        "deleted_business_messages",
        "business_connection",
    }
)


@frozen
class BotIdentity:
    """Who the bot is: its user id (from the token or getMe) and @username (from getMe)."""

    id: str | None = None
    username: str | None = None
    #: this bot's own /commands (lowercase, no slash): a bare one in a group is for us
    commands: frozenset[str] = frozenset()


def normalize_update(
    update: Mapping[str, Any],
    account: str,
    bot: BotIdentity = BotIdentity(),
    chat_aliases: Mapping[str, str] | None = None,
) -> Event | None:
    """Return the Event for one Update, or None when it is not for the agent.

    `chat_aliases` maps a chat id to the id its conversation is filed under
    (a supergroup to the group it was upgraded from). Raise NormalizeError
    naming the offending field when the update is malformed.
    """
    # Hot path (every update a bot receives): the usual shapes -- dicts from a
    # JSON decoder, int ids -- are recognised with `type(x) is ...` and take
    # no helper call; anything else goes through the helpers that check it.
    if type(update) is not dict and not _is_mapping(update):
        raise NormalizeError("an update must be a JSON object", where="update")
    update_id = update.get("update_id")
    if type(update_id) is not int or not _INT_LOW <= update_id <= _INT_HIGH:
        update_id = _opt_int(update_id)
        if update_id is None:
            raise NormalizeError(
                f"missing or non-integer update_id: {_show(update.get('update_id'))}",
                where="update_id",
            )
    for field_name, kind in _MESSAGE_KINDS.items():
        # a field that is null is absent (serialisers of typed Update models write every
        # optional field, null when unset)
        message = update.get(field_name)
        if message is not None:
            if type(message) is not dict:
                message = _mapping(message, field_name)
            return _message_event(
                update, update_id, message, field_name, kind, account, bot, chat_aliases
            )
    if update.get("message_reaction") is not None:
        reaction = _mapping(update["message_reaction"], "message_reaction")
        return _reaction_event(update_id, update, reaction, account, bot, chat_aliases or {})
    if not _BUSINESS_UPDATES.isdisjoint(update):
        return _business_event(update, update_id, account, bot)
    return None


def split_update(update: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Return `update` as the updates normalize takes, one Event each: a
    ``deleted_business_messages`` naming several messages becomes one update per
    message id (same ``update_id``); any other update is itself."""
    deleted = update.get("deleted_business_messages")
    if deleted is None or not _is_mapping(deleted):
        return [update]
    ids = deleted.get("message_ids")
    if not isinstance(ids, list) or len(ids) <= 1:
        return [update]
    return [
        {**update, "deleted_business_messages": {**deleted, "message_ids": [message_id]}}
        for message_id in ids
    ]


def migration_of(update: Mapping[str, Any]) -> tuple[str, str] | None:
    """Return (old group id, new supergroup id) when the update announces an upgrade."""
    message = update.get("message")
    if not _is_mapping(message) or not _is_mapping(message.get("chat")):
        return None
    chat_id = _opt_int(message["chat"].get("id"))
    moved_to = _opt_int(message.get("migrate_to_chat_id"))
    moved_from = _opt_int(message.get("migrate_from_chat_id"))
    if chat_id is None:
        return None
    if moved_to is not None:
        return str(chat_id), str(moved_to)
    if moved_from is not None:
        return str(moved_from), str(chat_id)
    return None


def utf16_slice(text: str, offset: int, length: int) -> str:
    """Return the part of `text` at UTF-16 `offset` and `length` (how Telegram counts)."""
    if text.isascii():  # a flag on the string, not a scan: one code unit a character
        return text[offset : offset + length]
    encoded = text.encode("utf-16-le", "surrogatepass")
    return encoded[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")


# messages -------------------------------------------------------------------


def _message_event(
    update: Mapping[str, Any],
    update_id: int,
    message: Mapping[str, Any],
    where: str,
    kind: EventKind,
    account: str,
    bot: BotIdentity,
    aliases: Mapping[str, str] | None,
) -> Event | None:
    # Checks run in a fixed order (ids, chat, date, from, text, sender,
    # attachments): a payload with several faults is always reported by the first.
    get = message.get
    message_id = get("message_id")
    if type(message_id) is not int or not _INT_LOW <= message_id <= _INT_HIGH:
        message_id = _int(message_id, f"{where}.message_id")
    chat = get("chat")
    if type(chat) is not dict:
        chat = _mapping(chat, f"{where}.chat")
    chat_id = chat.get("id")
    if type(chat_id) is not int or not _INT_LOW <= chat_id <= _INT_HIGH:
        chat_id = _int(chat_id, f"{where}.chat.id")
    date = get("date")
    if type(date) is not int or not _INT_LOW <= date <= _INT_HIGH:
        date = _int(date, f"{where}.date")
    author = get("from")
    author_id: str | None = None
    if author is not None:
        if type(author) is not dict:
            author = _mapping(author, f"{where}.from")
        raw_author_id = author.get("id")
        if type(raw_author_id) is int and _INT_LOW <= raw_author_id <= _INT_HIGH:
            author_id = str(raw_author_id)
        else:
            author_id = _id_text(raw_author_id)
        if bot.id is not None and author_id == bot.id:
            return None
    text = get("text")
    if text is not None:
        entities_key = "entities"
        if type(text) is not str and not isinstance(text, str):
            raise NormalizeError(
                f"expected a string, got {type(text).__name__}", where=f"{where}.text"
            )
    elif not _has_content(message):
        return None  # a service message: members joined, a pin, a topic created, a migration, ...
    else:
        text, entities_key = get("caption"), "caption_entities"
        if text is None:
            text = _words_without_text(message)
        elif type(text) is not str and not isinstance(text, str):
            raise NormalizeError(
                f"expected a string, got {type(text).__name__}", where=f"{where}.caption"
            )
    entities = get(entities_key) or None
    if entities is not None and not isinstance(entities, list):
        raise NormalizeError("expected a list", where=f"{where}.{entities_key}")

    chat_type = chat.get("type")
    if type(chat_type) is not str:
        chat_type = _chat_type(chat)
    chat_text = str(chat_id)
    filed_under = aliases.get(chat_text, chat_text) if aliases else chat_text
    in_topic = get("is_topic_message") is True
    thread = _topic_id(get("message_thread_id")) if in_topic else None
    conversation_kind: ConversationKind
    dm_title: str | None = None
    dm_topic = get("direct_messages_topic")
    if dm_topic is not None or chat.get("is_direct_messages") is True:
        # a channel's direct messages chat: one conversation per user's topic
        topic_id, dm_title = _direct_messages_topic(dm_topic, chat, where)
        address = Address(account, filed_under, f"{DIRECT_MESSAGES_THREAD}{topic_id}")
        conversation_kind = "direct"
    elif thread is not None:
        # a topic of a private chat (a bot's threaded mode) is still a chat with one person
        address = Address(account, filed_under, str(thread))
        conversation_kind = "direct" if chat_type == "private" else "thread"
    else:
        address = Address(account, filed_under)
        conversation_kind = "direct" if chat_type == "private" else "group"
    meta: dict[str, Any] = {"update_id": update_id, "chat_type": chat_type}
    if filed_under is not chat_text and address.chat != chat_text:
        meta["chat_id"] = chat_id
        meta["migrated_from_chat_id"] = _opt_int(address.chat)
    forwarded = False
    reply_to = None
    if not _META_FIELDS.isdisjoint(message):
        # strings on the wire: anything else (a number, an object) is not carried into meta
        media_group = get("media_group_id")
        if isinstance(media_group, str):
            meta["media_group_id"] = media_group
        signature = get("author_signature")
        if isinstance(signature, str):
            meta["author_signature"] = signature
        if any(get(name) is not None for name in _FORWARD_FIELDS):
            # someone else's words, passed on: whose they are goes in the line's head
            forwarded = True
            meta["forwarded"] = True
            origin = _forward_origin(message)
            if origin:
                meta["forwarded_from"] = origin
        if (
            get("reply_to_message") is not None
            or get("external_reply") is not None
            or get("quote") is not None
        ):
            reply_to = _reply_context(message, chat_id, meta)
        elif get("reply_to_story") is not None:
            _story_reply(get("reply_to_story"), meta)
    sent_at = float(date)
    if kind == "edit":
        edited_at = _opt_int(get("edit_date"))
        if edited_at is not None and 0 < edited_at < LATEST_SENT_AT:
            sent_at = float(edited_at)  # else the message's date: the edit is still news
        # an edited message comes whole: no files in it means none (edited away)
        meta[ATTACHMENTS_COMPLETE] = True
    if author_id is not None and get("sender_chat") is None:
        # the usual case, inline: a person (or bot) wrote it
        assert author is not None  # author_id is read from it
        handle = author.get("username")
        if handle is not None and not isinstance(handle, str):
            handle = None
        sender = Sender(author_id, _full_name(author), handle, author.get("is_bot") is True)
    else:
        sender = _sender(message, chat_id, chat, chat_type, where, author, author_id)
    # a mention inside forwarded words is the original author's, not the forwarder's
    mentions_me = (
        entities is not None
        and not forwarded
        and _mentions_bot(text, entities, bot, private=conversation_kind == "direct")
    )
    if entities is not None:
        if not mentions_me and text[:1] == "/" and _command_for_another_bot(text, entities, bot):
            meta[NO_RUN] = True  # /cmd@other_bot: stored, but for no run of ours
        # after the mentions, whose offsets count in the text as sent
        text = _with_links(text, entities)
    if not mentions_me and reply_to is not None and bot.id is not None:
        mentions_me = _replies_to_bot(message, bot)
    if _ATTACHMENT_FIELDS.isdisjoint(message):
        attachments: Sequence[Attachment] = ()  # plain text, the usual case
    else:
        attachments = _attachments(message, where)
    title = chat.get("title") if dm_title is None else dm_title
    if type(title) is not str or not title:
        title = _title(chat)
    if conversation_kind == "thread" and thread is not None:
        # a forum topic's messages (all but replies) carry the topic's creation message,
        # which names it: the conversation is titled "Forum / Topic"
        topic = _topic_name(message, thread)
        if topic is not None:
            meta[TOPIC_NAME] = topic
            title = f"{title} / {topic}" if title else topic
    # positional (in Event's field order): fourteen keywords cost more than the check itself
    return Event(
        address,
        f"{update_id}:{int(sent_at)}",  # event_id (see the module's docstring)
        sender,
        kind,
        text,
        str(message_id),  # platform_message_id
        reply_to,
        mentions_me,
        attachments,
        sent_at,
        conversation_kind,
        title,  # conversation_title
        meta,
        update,  # raw
    )


# Telegram Business ---------------------------------------------------------------


def _business_event(
    update: Mapping[str, Any], update_id: int, account: str, bot: BotIdentity
) -> Event | None:
    """A business account's chat: a message or edit (the customer's, or the business
    side's), or one deleted message; None for our own echo and what is no Event."""
    for field_name, kind in _BUSINESS_MESSAGE_KINDS.items():
        message = update.get(field_name)
        if message is not None:
            return _business_message(update, update_id, message, field_name, kind, account, bot)
    deleted = update.get("deleted_business_messages")
    if deleted is not None:
        return _business_delete(update, update_id, deleted, account)
    connection = update.get("business_connection")
    if connection is not None and (
        not _is_mapping(connection) or BusinessConnection.from_update(connection) is None
    ):
        # no Event either way, but one the adapter cannot read is dead-lettered, not lost
        # in silence: the owner connected, or cut off, a bot that never heard it
        raise NormalizeError(
            f"expected a business connection id, got {_show(_get(connection, 'id'))}",
            where="business_connection.id",
        )
    return None


def _get(value: Any, key: str) -> Any:
    return value.get(key) if _is_mapping(value) else value


def _customer_chat_id(value: Any, where: str) -> int:
    """A business chat is a private chat with a customer: its id is the customer's user
    id, a positive number (the adapter refuses to send anywhere else)."""
    chat_id = _int(value, where)
    if chat_id <= 0:
        raise NormalizeError(
            f"expected a private chat's positive id, got {_show(value)}", where=where
        )
    return chat_id


def _connection_id(value: Mapping[str, Any], where: str) -> str:
    connection_id = valid_connection_id(value.get("business_connection_id"))
    if connection_id is None:
        raise NormalizeError(
            f"expected a business connection id, got {_show(value.get('business_connection_id'))}",
            where=f"{where}.business_connection_id",
        )
    return connection_id


def _business_message(
    update: Mapping[str, Any],
    update_id: int,
    raw_message: Any,
    where: str,
    kind: EventKind,
    account: str,
    bot: BotIdentity,
) -> Event | None:
    message = _mapping(raw_message, where)
    connection_id = _connection_id(message, where)
    agent = message.get("sender_business_bot")
    # a User object or nothing: anything else (no object, no id) says no bot sent it
    agent_id = _id_text(agent.get("id")) if _is_mapping(agent) else None
    if agent_id is None:
        agent = None
    if agent_id is not None and bot.id is not None and agent_id == bot.id and kind == "message":
        # what this bot sent on the business's behalf, echoed back; an edit of it is kept:
        # the owner correcting the bot's words (the echo of the bot's own edit changes none)
        return None
    event = _message_event(update, update_id, message, where, kind, account, bot, None)
    if event is None:
        return None  # a service message
    chat_id = _customer_chat_id(message["chat"].get("id"), f"{where}.chat.id")
    meta = dict(event.meta)
    meta["business_connection_id"] = connection_id
    meta["chat_id"] = chat_id
    # the chat is the business account's private chat with the customer, whose user id
    # is the chat's: whoever else writes there is the business side
    owner = agent_id is not None or event.sender.id != str(chat_id)
    sender = event.sender
    if owner:
        meta[BUSINESS_OWNER] = True
        # the person is answering the customer: shown to the agent, no run of its own
        # (the adapter's business_owner_triggers takes the mark off)
        meta[NO_RUN] = True
        if agent is not None:
            meta["sender_business_bot"] = _full_name(agent) or agent_id or ""
        # the agent reads both people of the chat: say which one is the business
        sender = evolve(
            sender, name=f"{sender.name or sender.handle or sender.id} (business owner)"
        )
    customer = _title(message["chat"])
    return evolve(
        event,
        sender=sender,
        address=Address(account, business_chat(connection_id, chat_id)),
        mentions_me=event.mentions_me and not owner,
        conversation_kind="direct",
        conversation_title=f"{customer} (Telegram Business)" if customer else "Telegram Business",
        meta=meta,
    )


def _business_delete(
    update: Mapping[str, Any], update_id: int, raw: Any, account: str
) -> Event | None:
    where = "deleted_business_messages"
    deleted = _mapping(raw, where)
    connection_id = _connection_id(deleted, where)
    chat = _mapping(deleted.get("chat"), f"{where}.chat")
    chat_id = _customer_chat_id(chat.get("id"), f"{where}.chat.id")
    ids = deleted.get("message_ids")
    if not isinstance(ids, list):
        raise NormalizeError(
            f"expected a list of message ids, got {_show(ids)}", where=f"{where}.message_ids"
        )
    if not ids:
        return None  # nothing deleted
    if len(ids) > 1:
        raise NormalizeError(
            f"{len(ids)} message ids in one update: split it with split_update first",
            where=f"{where}.message_ids",
        )
    message_id = _int(ids[0], f"{where}.message_ids[0]")
    chat_text = business_chat(connection_id, chat_id)
    customer = _title(chat)
    # no date on the wire: the chat and message make the id unique (a message is deleted
    # once) and the update id keeps a redelivery the same
    return Event(
        address=Address(account, chat_text),
        event_id=f"{update_id}:delete:{chat_text}:{message_id}",
        sender=Sender.unknown(),  # Telegram does not say who deleted it
        kind="delete",
        platform_message_id=str(message_id),
        conversation_kind="direct",
        conversation_title=f"{customer} (Telegram Business)" if customer else "Telegram Business",
        meta={
            "update_id": update_id,
            "business_connection_id": connection_id,
            "chat_id": chat_id,
        },
        raw=update,
    )


def _has_content(message: Mapping[str, Any]) -> bool:
    """Say whether `message` carries something a person said or shared (a field not null)."""
    if _CONTENT_FIELD_SET.isdisjoint(message):
        return False  # the usual service message: no content field at all
    return any(message.get(name) is not None for name in _CONTENT_FIELDS)


def _words_without_text(message: Mapping[str, Any]) -> str:
    """The words of a message with neither text nor caption: what a user sent the bot
    from a Web App (a keyboard button's), the note added to a gift; else ""."""
    for field_name, key in (("web_app_data", "data"), ("gift", "text")):
        thing = message.get(field_name)
        words = _opt_str(thing.get(key)) if _is_mapping(thing) else None
        if words:
            return words
    return ""


def _story_reply(story: Any, meta: dict[str, Any]) -> None:
    """Put in `meta` what a reply to a story answers (``reply_to_story``: a story has no
    message id here, only its poster)."""
    poster = story.get("chat") if _is_mapping(story) else None
    name = _title(poster) if _is_mapping(poster) else None
    if name:
        meta["reply_from"] = name
    meta["reply_quote"] = "[story]"


def _direct_messages_topic(
    topic: Any, chat: Mapping[str, Any], where: str
) -> tuple[int, str | None]:
    """Return the topic id of a message in a channel's direct messages chat, and the
    conversation's title (the user's name and the chat's); NormalizeError when the
    message names no usable topic."""
    field_name = f"{where}.direct_messages_topic"
    if topic is None:
        raise NormalizeError(
            "a message in a channel's direct messages chat names no topic", where=field_name
        )
    if not _is_mapping(topic):
        raise NormalizeError(f"expected an object, got {type(topic).__name__}", where=field_name)
    raw = topic.get("topic_id")
    topic_id = _opt_int(raw)
    if topic_id is None or topic_id <= 0:
        raise NormalizeError(
            f"expected a positive integer topic id, got {_show(raw)}",
            where=f"{field_name}.topic_id",
        )
    user = topic.get("user")
    person = _full_name(user) if _is_mapping(user) else ""
    channel = _title(chat)
    if person and channel:
        return topic_id, f"{person} (direct messages to {channel})"
    return topic_id, person or (f"{channel} (direct messages)" if channel else None)


def _chat_type(chat: Mapping[str, Any]) -> str:
    """Return chat.type; old payloads (and Telegram's own webhook examples) omit it."""
    kind = _opt_str(chat.get("type"))
    if kind is not None:
        return kind
    chat_id = _opt_int(chat.get("id"))
    return "private" if chat_id is not None and chat_id > 0 else "group"


def _title(chat: Mapping[str, Any]) -> str | None:
    title = _opt_str(chat.get("title"))
    if title:
        return title
    return _full_name(chat) or None


def _sender(
    message: Mapping[str, Any],
    chat_id: int,
    chat: Mapping[str, Any],
    chat_type: str,
    where: str,
    author: Mapping[str, Any] | None,
    author_id: str | None,
) -> Sender:
    """Return who wrote `message`; `author` is its checked ``from`` and `author_id` that id."""
    # Anonymous admins and channels posting into a group speak as `sender_chat`;
    # `from` is then a placeholder bot (GroupAnonymousBot, Channel_Bot).
    sender_chat = message.get("sender_chat")
    if sender_chat is not None and _is_mapping(sender_chat):
        chat_sender_id = _id_text(sender_chat.get("id"))
        if chat_sender_id is not None:
            signature = _opt_str(message.get("author_signature"))
            name = signature or _opt_str(sender_chat.get("title")) or ""
            handle = _opt_str(sender_chat.get("username"))
            return Sender(chat_sender_id, name, handle, is_bot=False)
    if author is not None:
        if author_id is None:
            raise NormalizeError("sender has no id", where=f"{where}.from.id")
        handle = author.get("username")
        if handle is not None and not isinstance(handle, str):
            handle = None
        return Sender(author_id, _full_name(author), handle, author.get("is_bot") is True)
    signature = _opt_str(message.get("author_signature"))
    if chat_type == "channel" and signature:
        # a signed post with no sender_chat: its author's signature, in the channel's name
        return Sender(str(chat_id), signature, _opt_str(chat.get("username")))
    if chat_type == "channel":
        return Sender.unknown()  # an unsigned post that names no sender (see Sender.unknown)
    raise NormalizeError("message has neither from nor sender_chat", where=f"{where}.from")


def _full_name(person: Mapping[str, Any]) -> str:
    first, last = person.get("first_name"), person.get("last_name")
    if type(first) is str:  # the usual case: a first name, perhaps a last name
        if last is None or last == "":
            return first
        if type(last) is str:
            return f"{first} {last}" if first else last
    parts = (_opt_str(first), _opt_str(last))
    return " ".join(part for part in parts if part)


def _topic_name(message: Mapping[str, Any], thread: int) -> str | None:
    """The name of the forum topic `thread`, when `message` carries its creation message."""
    root = message.get("reply_to_message")
    if not _is_mapping(root) or _opt_int(root.get("message_id")) != thread:
        return None
    created = root.get("forum_topic_created")
    return topic_name_of(created)


def topic_name_of(service: Any) -> str | None:
    """The name a ``forum_topic_created`` or ``forum_topic_edited`` object gives, if any."""
    name = service.get("name") if _is_mapping(service) else None
    if type(name) is not str:
        return None
    name = " ".join(name.split())  # one line, whatever the topic's name holds
    return name[:128] or None


def _reply_target(message: Mapping[str, Any]) -> str | None:
    replied = message.get("reply_to_message")
    if not _is_mapping(replied):
        return None
    target = _opt_int(replied.get("message_id"))
    if target is None:
        return None
    # In a forum topic every message "replies" to the topic's creation message,
    # whose id is the thread id: that is where it lives, not what it answers.
    if message.get("is_topic_message") is True and target == _opt_int(
        message.get("message_thread_id")
    ):
        return None
    return str(target)


def _reply_context(message: Mapping[str, Any], chat_id: int, meta: dict[str, Any]) -> str | None:
    """Return the id of the message `message` replies to in its chat (or None), and put in
    `meta` what the reply says of it: ``reply_from`` (its author's name) and
    ``reply_quote`` (the part quoted, else its words, cut): a bot in privacy mode never
    saw it, and a reply to another chat's message (``external_reply``) has no id here."""
    replied = message.get("reply_to_message")
    target: str | None = None
    author: str | None = None
    words: str | None = None
    if _is_mapping(replied):
        target = _reply_target(message)
        if target is None:
            return None  # no id, or a forum topic's mark on every message: no reply
        author = _author_name(replied)
        words = _words_of(replied)
    else:
        external = message.get("external_reply")
        if _is_mapping(external):
            origin = external.get("origin")
            author = _origin_name(origin) if _is_mapping(origin) else None
            words = _words_of(external)  # ExternalReplyInfo carries no text: a quote does
            where = external.get("chat")
            if _is_mapping(where) and _opt_int(where.get("id")) == chat_id:
                # another topic of this chat: the message is here
                external_id = _opt_int(external.get("message_id"))
                target = None if external_id is None else str(external_id)
    quote = message.get("quote")
    quoted = _opt_str(quote.get("text")) if _is_mapping(quote) else None
    if quoted and quoted.strip():
        words = quoted
    if author:
        meta["reply_from"] = author
    if words and words.strip():
        meta["reply_quote"] = (
            words if len(words) <= _QUOTE_LIMIT else words[: _QUOTE_LIMIT - 1].rstrip() + "…"
        )
    return target


def _words_of(message: Mapping[str, Any]) -> str | None:
    """A replied-to message's words: its text or caption, links shown."""
    for key, entities_key in (("text", "entities"), ("caption", "caption_entities")):
        text = _opt_str(message.get(key))
        if text:
            entities = message.get(entities_key)
            return _with_links(text, entities) if isinstance(entities, list) else text
    return _content_of(message)


def _content_of(message: Mapping[str, Any]) -> str | None:
    """What a replied-to message without words shared, as the agent would read it in a
    quote: ``[photo]``, ``[poll: Lunch? (Pizza / Sushi)]``; None when it names nothing."""
    if _ATTACHMENT_FIELDS.isdisjoint(message):
        return None
    try:
        found = _attachments(message, "reply_to_message")
    except NormalizeError:
        return None  # a target's broken file does not break the reply
    if not found:
        return None
    first = found[0]
    return f"[{first.kind}: {first.name}]" if first.name else f"[{first.kind}]"


def _author_name(message: Mapping[str, Any]) -> str | None:
    """Who wrote `message`, named as its sender would be (see _sender)."""
    sender_chat = message.get("sender_chat")
    if _is_mapping(sender_chat):
        name = _opt_str(message.get("author_signature")) or _title(sender_chat)
        if name:
            return name
    author = message.get("from")
    return (_full_name(author) or None) if _is_mapping(author) else None


def _forward_origin(message: Mapping[str, Any]) -> str | None:
    """The name of whoever wrote a forwarded message: its ``forward_origin`` (a
    MessageOrigin), else the older ``forward_from`` / ``forward_from_chat`` /
    ``forward_sender_name``; None when it names no one."""
    origin = message.get("forward_origin")
    if _is_mapping(origin):
        return _origin_name(origin)
    user = message.get("forward_from")
    if _is_mapping(user):
        return _full_name(user) or None
    chat = message.get("forward_from_chat")
    if _is_mapping(chat):
        return _signed(_title(chat), _opt_str(message.get("forward_signature")))
    return _opt_str(message.get("forward_sender_name")) or None


def _origin_name(origin: Mapping[str, Any]) -> str | None:
    """A MessageOrigin's name: the user, the hidden user's name, the chat or channel
    (with the post's signature)."""
    kind = origin.get("type")
    if kind == "user":
        user = origin.get("sender_user")
        return (_full_name(user) or None) if _is_mapping(user) else None
    if kind == "hidden_user":
        return _opt_str(origin.get("sender_user_name")) or None
    chat = origin.get("sender_chat" if kind == "chat" else "chat")
    if kind in ("chat", "channel") and _is_mapping(chat):
        return _signed(_title(chat), _opt_str(origin.get("author_signature")))
    return None


def _signed(title: str | None, signature: str | None) -> str | None:
    if title and signature:
        return f"{title} ({signature})"
    return title or signature or None


def _with_links(text: str, entities: Sequence[Any]) -> str:
    """`text` with each ``text_link`` entity's URL after its words (``label (url)``) and
    each ``text_mention`` naming its user (``Ben (tg://user?id=42)``); offsets in UTF-16."""
    links: list[tuple[int, int, str]] = []
    for entity in entities:
        if type(entity) is not dict and not _is_mapping(entity):
            continue
        kind = entity.get("type")
        if kind != "text_link" and kind != "text_mention":
            continue  # (a type that is no string, a list say, is no link either)
        offset, length = _opt_int(entity.get("offset")), _opt_int(entity.get("length"))
        if offset is None or length is None or offset < 0 or length <= 0:
            continue
        if kind == "text_link":
            target = _opt_str(entity.get("url"))
        else:
            user = entity.get("user")
            user_id = _id_text(user.get("id")) if _is_mapping(user) else None
            target = None if user_id is None else f"tg://user?id={user_id}"
        if target and target.strip():
            links.append((offset, offset + length, target.strip()))
    if not links:
        return text  # the usual entities: mentions, commands, bold, ...
    links.sort(key=lambda link: link[1])
    ends = _code_point_indexes(text, [end for _, end, _ in links])
    starts = _code_point_indexes(text, sorted(start for start, _, _ in links))
    start_of = dict(zip(sorted(start for start, _, _ in links), starts, strict=True))
    parts: list[str] = []
    done = 0
    for (start, _, target), end in zip(links, ends, strict=True):
        if end < done:
            continue  # overlapping another link's end: once is enough
        label = text[start_of[start] : end].strip()
        parts.append(text[done:end])
        if label != target:
            parts.append(f" ({target})")
        done = end
    parts.append(text[done:])
    return "".join(parts)


def _code_point_indexes(text: str, offsets: Sequence[int]) -> list[int]:
    """The index in `text` of each UTF-16 offset (ascending); one inside a character (a
    surrogate pair) is read as just after it, one past the end as the end."""
    if text.isascii():
        size = len(text)
        return [min(offset, size) for offset in offsets]
    found: list[int] = []
    units = 0
    pending = iter(offsets)
    offset = next(pending, None)
    for index, char in enumerate(text):
        while offset is not None and offset <= units:
            found.append(index)
            offset = next(pending, None)
        if offset is None:
            return found
        units += 2 if ord(char) > 0xFFFF else 1
    while offset is not None:
        found.append(len(text))
        offset = next(pending, None)
    return found


def _mentions_bot(
    text: str, entities: Sequence[Any], bot: BotIdentity, *, private: bool = False
) -> bool:
    """Say whether the message addresses the bot: @bot, a text mention, /cmd@bot, or a
    bare /cmd that is one of the bot's own commands (any bare /cmd in a private chat).

    A bare /start in a group with several bots is for whichever bot has that command;
    counting it for every bot would wake them all.
    """
    handle = f"@{bot.username}".lower() if bot.username else None
    for entity in entities:
        if not _is_mapping(entity):
            continue
        kind = entity.get("type")
        if kind == "text_mention":
            user = entity.get("user")
            if bot.id is not None and _is_mapping(user) and _id_text(user.get("id")) == bot.id:
                return True
        elif kind in ("mention", "bot_command"):
            offset, length = _opt_int(entity.get("offset")), _opt_int(entity.get("length"))
            if offset is None or length is None or offset < 0 or length <= 0:
                continue
            word = utf16_slice(text, offset, length).lower()
            if kind == "bot_command" and offset == 0 and "@" not in word:
                if private or word.removeprefix("/") in bot.commands:
                    return True
                continue
            if handle and (word == handle or (kind == "bot_command" and word.endswith(handle))):
                return True
    return False


def _command_for_another_bot(text: str, entities: Sequence[Any], bot: BotIdentity) -> bool:
    """Say whether the message opens with a command addressed to another bot by name
    (``/start@other_bot``): in a group that answers everything, still not ours."""
    if not bot.username:
        return False  # not knowing our own name, we cannot tell it is someone else's
    handle = f"@{bot.username}".lower()
    for entity in entities:
        if not _is_mapping(entity) or entity.get("type") != "bot_command":
            continue
        if _opt_int(entity.get("offset")) != 0:
            continue
        length = _opt_int(entity.get("length"))
        if length is None or length <= 0:
            return False
        word = utf16_slice(text, 0, length).lower()
        _, at, name = word.partition("@")
        return bool(at and name) and f"@{name}" != handle
    return False


def _replies_to_bot(message: Mapping[str, Any], bot: BotIdentity) -> bool:
    if bot.id is None or _reply_target(message) is None:
        return False
    replied = message["reply_to_message"]
    author = replied.get("from")
    return _is_mapping(author) and _id_text(author.get("id")) == bot.id


# attachments ------------------------------------------------------------------


def _attachments(message: Mapping[str, Any], where: str) -> list[Attachment]:
    """Files first (largest photo, then each file kind), then the things shared by name."""
    present = _ATTACHMENT_FIELDS.intersection(message)
    kinds: Iterable[str] = (
        sorted(present, key=_ATTACHMENT_RANK.__getitem__) if len(present) > 1 else present
    )
    found: list[Attachment] = []
    for kind in kinds:
        item = message[kind]
        if kind == "photo":
            if isinstance(item, list) and item:
                # PhotoSize variants of one picture, smallest first: keep the largest.
                found.append(_file("photo", item[-1], f"{where}.photo", mime="image/jpeg"))
        elif not _is_mapping(item):
            continue  # every other kind is an object; anything else is not one
        elif kind in _FILE_KINDS:
            found.append(_file(kind, item, f"{where}.{kind}"))
        elif kind == "document":
            # An animation message also carries `document` for old clients: report it once.
            if message.get("animation") is None:
                found.append(_file("document", item, f"{where}.document"))
        elif kind == "location":
            if not _is_mapping(message.get("venue")):  # a venue names its place itself
                found.append(Attachment(kind="location", name=_place(item)))
        else:
            found.append(_shared_thing(kind, item))
    return found


def _file(kind: str, item: Any, where: str, mime: str | None = None) -> Attachment:
    file_id = _opt_str(item.get("file_id")) if _is_mapping(item) else None
    if not _is_mapping(item) or not file_id:
        raise NormalizeError("a file without a file_id", where=f"{where}.file_id")
    name = _opt_str(item.get("file_name"))
    if name is None and kind == "audio":
        parts = (_opt_str(item.get("performer")), _opt_str(item.get("title")))
        name = " - ".join(p for p in parts if p) or None
    if name is None and kind == "sticker":
        name = _opt_str(item.get("emoji"))
    size = _opt_int(item.get("file_size"))
    return Attachment(
        kind=kind,
        name=name,
        mime=_opt_str(item.get("mime_type")) or mime,
        size=size if size is not None and size >= 0 else None,
        ref=file_id,
    )


_FILE_KINDS = frozenset({"animation", "video", "audio", "voice", "video_note", "sticker"})
#: every key _attachments looks at, in the order it reports what it finds
_ATTACHMENT_ORDER = (
    "photo",
    "animation",
    "video",
    "audio",
    "voice",
    "video_note",
    "sticker",
    "document",
    "contact",
    "venue",
    "location",
    "dice",
    "poll",
    "game",
    "checklist",
    "story",
    "paid_media",
    "giveaway",
    "giveaway_winners",
    "web_app_data",
    "gift",
)
_ATTACHMENT_FIELDS = frozenset(_ATTACHMENT_ORDER)
_ATTACHMENT_RANK = {kind: rank for rank, kind in enumerate(_ATTACHMENT_ORDER)}
#: the field naming each shared thing that has a title (a Web App's data: its button)
_TITLE_KEYS = {
    "poll": "question",
    "game": "title",
    "checklist": "title",
    "web_app_data": "button_text",
}
#: the items listed after a poll's question and a checklist's title, and each one's text
_ITEM_KEYS = {"poll": "options", "checklist": "tasks"}


def _shared_thing(kind: str, thing: Mapping[str, Any]) -> Attachment:
    """A contact, venue, poll, dice, game, story, checklist, paid media, giveaway or Web
    App's data: named, not a file."""
    if kind == "contact":
        parts = (_full_name(thing), _opt_str(thing.get("phone_number")))
        return Attachment(kind="contact", name=" ".join(p for p in parts if p) or None)
    if kind == "venue":
        return Attachment(kind="venue", name=_venue_name(thing))
    if kind == "dice":
        value = _opt_int(thing.get("value"))
        throw = (_opt_str(thing.get("emoji")), None if value is None else str(value))
        return Attachment(kind="dice", name=" ".join(p for p in throw if p) or None)
    if kind == "story":
        poster = thing.get("chat")
        return Attachment(kind="story", name=_title(poster) if _is_mapping(poster) else None)
    if kind == "gift":
        # a regular gift sent with a note (its words are the message text): its price
        gift = thing.get("gift")
        stars = _opt_int(gift.get("star_count")) if _is_mapping(gift) else None
        return Attachment(kind="gift", name=None if stars is None else f"{stars} ⭐")
    if kind == "paid_media":
        stars = _opt_int(thing.get("star_count"))
        return Attachment(kind="paid_media", name=None if stars is None else f"{stars} ⭐")
    if kind in ("giveaway", "giveaway_winners"):
        # a channel's giveaway post, then its results: the prize and how many win
        count = _opt_int(thing.get("winner_count"))
        winners = None if count is None else f"{count} winner{'' if count == 1 else 's'}"
        prize = (_opt_str(thing.get("prize_description")), winners)
        return Attachment(kind=kind, name=", ".join(p for p in prize if p) or None)
    name = _opt_str(thing.get(_TITLE_KEYS[kind])) or None
    if kind in _ITEM_KEYS:
        # a poll's options, a checklist's tasks: "Lunch? (Pizza / Sushi)"
        items = thing.get(_ITEM_KEYS[kind])
        texts = [
            text
            for item in (items if isinstance(items, list) else ())
            if _is_mapping(item) and (text := _opt_str(item.get("text")))
        ]
        if texts:
            name = f"{name or kind} ({' / '.join(texts)})"
    return Attachment(kind=kind, name=name)


def _place(location: Mapping[str, Any]) -> str | None:
    latitude, longitude = (
        _coordinate(location.get("latitude")),
        _coordinate(location.get("longitude")),
    )
    if latitude is not None and longitude is not None:
        return f"{latitude:.6f},{longitude:.6f}"
    return None


def _venue_name(venue: Mapping[str, Any]) -> str | None:
    parts = [_opt_str(venue.get("title")), _opt_str(venue.get("address"))]
    where = venue.get("location")
    if _is_mapping(where):
        parts.append(_place(where))
    return ", ".join(p for p in parts if p) or None


# reactions ------------------------------------------------------------------


def _reaction_event(
    update_id: int,
    update: Mapping[str, Any],
    reaction: Mapping[str, Any],
    account: str,
    bot: BotIdentity,
    aliases: Mapping[str, str],
) -> Event | None:
    chat = _mapping(reaction.get("chat"), "message_reaction.chat")
    chat_id = _int(chat.get("id"), "message_reaction.chat.id")
    message_id = _int(reaction.get("message_id"), "message_reaction.message_id")
    date = _int(reaction.get("date"), "message_reaction.date")
    user = reaction.get("user")
    actor = reaction.get("actor_chat")
    user_id = _id_text(user.get("id")) if _is_mapping(user) else None
    actor_id = _id_text(actor.get("id")) if _is_mapping(actor) else None
    if _is_mapping(user) and user_id is not None:
        if bot.id is not None and user_id == bot.id:
            return None
        sender = Sender(
            user_id, _full_name(user), _opt_str(user.get("username")), user.get("is_bot") is True
        )
    elif _is_mapping(actor) and actor_id is not None:
        sender = Sender(actor_id, _title(actor) or "", _opt_str(actor.get("username")))
    else:
        raise NormalizeError("a reaction without user or actor_chat", where="message_reaction.user")
    new = _emojis(reaction.get("new_reaction"), "message_reaction.new_reaction")
    old = _emojis(reaction.get("old_reaction"), "message_reaction.old_reaction")
    # Telegram sends the whole new set; the text carries the added emoji (or
    # "" when the user took their reactions back), meta carries both sets, from
    # which the store takes what left the set and adds what joined it.
    added = [emoji for emoji in new if emoji not in old]
    text = added[0] if added else (new[0] if new else "")
    filed_under = aliases.get(str(chat_id), str(chat_id))
    # Reactions do not say their forum topic today; if Telegram adds
    # message_thread_id (as it says it may), a forum's topic is honoured.
    thread = _topic_id(reaction.get("message_thread_id"))
    if chat.get("is_forum") is True and thread is not None:
        address, kind = Address(account, filed_under, str(thread)), "thread"
    else:
        address = Address(account, filed_under)
        kind = "direct" if _chat_type(chat) == "private" else "group"
    return Event(
        address=address,
        event_id=f"{update_id}:{date}",
        sender=sender,
        kind="reaction",
        text=text,
        platform_message_id=str(message_id),
        sent_at=float(date),
        conversation_kind=kind,  # type: ignore[arg-type]
        conversation_title=_title(chat),
        meta={"update_id": update_id, "new_reaction": new, "old_reaction": old},
        raw=update,
    )


def _emojis(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise NormalizeError("expected a list of ReactionType", where=where)
    found = []
    for item in value:
        if not _is_mapping(item):
            continue
        if item.get("type") == "emoji" and isinstance(item.get("emoji"), str):
            found.append(item["emoji"])
        elif item.get("type") == "custom_emoji" and _opt_str(item.get("custom_emoji_id")):
            found.append(f"custom_emoji:{item['custom_emoji_id']}")
        elif item.get("type") == "paid":
            found.append("⭐")
    return found


# field helpers ----------------------------------------------------------------


def _is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """isinstance(value, Mapping), quick for the dicts a JSON decoder makes and for None.

    The Mapping ABC's own check costs several times a type comparison, and
    normalize asks it some twenty times an update.
    """
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not _is_mapping(value):
        raise NormalizeError(f"expected an object, got {type(value).__name__}", where=where)
    return value


def _int(value: Any, where: str) -> int:
    number = _opt_int(value)
    if number is None:
        raise NormalizeError(f"expected an integer, got {_show(value)}", where=where)
    return number


def _opt_int(value: Any) -> int | None:
    """Return an integer field's value (an int, or a string of digits), else None.

    Only values a signed 64-bit integer holds: Telegram sends no others, and a
    bigger one would not survive the store (nor, past 4300 digits, even `str`).
    """
    if type(value) is int:  # the usual case, first (bool is a subclass of int, not int)
        return value if _INT_LOW <= value <= _INT_HIGH else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value) if _INT_LOW <= value <= _INT_HIGH else None
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        number = int(value)
        return number if _INT_LOW <= number <= _INT_HIGH else None
    return None


#: the public name of `_opt_int`, for the receivers (update ids of a poll's batch)
int_field = _opt_int


def _topic_id(value: Any) -> int | None:
    """Return a forum topic's id: a positive integer (anything else names no topic)."""
    number = _opt_int(value)
    return number if number is not None and number > 0 else None


def _show(value: Any) -> str:
    """A short, one-line, always computable picture of a bad value for an error message."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not _INT_LOW <= value <= _INT_HIGH:
            return f"an integer of {value.bit_length()} bits"
    elif isinstance(value, str | list | dict):
        if len(value) > 40:
            return f"a {type(value).__name__} of length {len(value)}"
    elif not isinstance(value, float | bool) and value is not None:
        return f"a {type(value).__name__}"
    try:
        shown = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"
    return shown if len(shown) <= 80 else f"{shown[:77]}..."


def _id_text(value: Any) -> str | None:
    """Return an id field as text (Telegram sends ints; strings of digits are accepted)."""
    number = _opt_int(value)
    return None if number is None else str(number)


def _opt_str(value: Any) -> str | None:
    """Return a text field's value, or None when it is missing or not a string."""
    return value if isinstance(value, str) else None


def _coordinate(value: Any) -> float | None:
    """Return a latitude or longitude as a finite float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too big for a float
        return None
    return number if math.isfinite(number) else None

"""`FakeTelegram`: a loopback Bot API server for testing Telegram bots, with real faults.

It speaks the Bot API's JSON on 127.0.0.1 (an ephemeral port): ``POST
/bot<token>/<method>`` answering ``{"ok": true, "result": ...}`` or
``{"ok": false, "error_code": N, "description": "...", "parameters": {...}}``
exactly as Telegram does. Point any client at ``fake.url`` instead of
``https://api.telegram.org``::

    async with FakeTelegram() as fake:
        alice = fake.user("Alice", username="alice")
        chat = fake.private_chat(alice)
        adapter = TelegramAdapter("tg", fake.settings())
        ...
        fake.inject_message(chat, alice, "hello")
        await fake.wait_for(lambda: fake.sent_texts(chat) == ["hi Alice"])

Methods: getMe, getUpdates (offset confirmation, negative offsets, limit,
long polls woken by new updates, the two 409 conflicts), setWebhook,
deleteWebhook, getWebhookInfo (updates POSTed to the webhook with the secret
header, non-2xx retried), getChat, sendMessage, editMessageText,
setMessageReaction, sendChatAction, with Telegram's own validation errors.

Channel direct messages (Bot API 9.2): `fake.channel(title)` and
`fake.direct_messages_chat(channel)` make a channel and its direct messages
chat; a message injected there is in its sender's own topic (``topic_id`` is
the user's id, as the Bot API server gives it). sendMessage there needs
``direct_messages_topic_id``, refused as Telegram refuses it otherwise
(`DM_TOPIC_REQUIRED`, ``topic not found``).

Faults: `fail_next(method, fault)` with "429", "500", "502", "hang" (never
answers, nothing done), "hang_after" (done, then never answers), "reset" (the
connection is dropped, nothing done), "forbidden", "conflict"; `deliver_again`
(the same update twice); `webhook_out_of_order`; `limit_rates` (rate windows
that enforce with 429s or only record violations); `restart_update_ids` (ids
chosen anew, as Telegram does after a week without updates).

Telegram Business (Bot API 7.2): `fake.business_connection(owner)` connects
the bot to `owner`'s business account (a ``business_connection`` update);
`fake.inject_business_message(connection, customer, text)` (or
``from_owner=True``), `inject_business_edit`, `inject_business_delete` speak
the ``business_message`` / ``edited_business_message`` /
``deleted_business_messages`` updates. sendMessage, editMessageText and
sendChatAction take ``business_connection_id`` (getBusinessConnection too),
answering as the Bot API server does: ``business connection not found`` for
an unknown id, and Telegram's ``BUSINESS_PEER_INVALID`` for a connection
that is disabled or may not reply. What the bot sends through a connection
comes back to it as a ``business_message`` with ``sender_business_bot``.

`event_id_of(update)` is the event id backchannel stores an Update under, and
`update_id_of(event_id)` the update id it was made from (the fake's acks and
redeliveries are by update id).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from attrs import define, field
from backchannel.testing.loopback import serve_loopback
from backchannel.testing.watch import Watch

from .business import business_chat

__all__ = [
    "BUSINESS_CONNECTION_NOT_FOUND",
    "BUSINESS_PEER_INVALID",
    "DM_TOPIC_REQUIRED",
    "FakeTelegram",
    "RateWindow",
    "SentMessage",
    "event_id_of",
    "update_id_of",
]

DEFAULT_TOKEN = "123456789:AAH-fake-test-token_DO_NOT_USE_0123456789"
CONFLICT_POLLER = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
    "is running"
)
CONFLICT_WEBHOOK = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to "
    "delete the webhook first"
)
#: Telegram's answer to a send into a channel's direct messages chat that names no topic
#: (TDLib's "Channel direct messages topic must be specified", as the Bot API server words it)
DM_TOPIC_REQUIRED = "Bad Request: channel direct messages topic must be specified"
#: the Bot API server's answer for a business_connection_id it does not know (or one the
#: business account deleted): telegram-bot-api's check_business_connection
BUSINESS_CONNECTION_NOT_FOUND = "Bad Request: business connection not found"
#: Telegram's answer for a send through a connection that may not send there (turned off,
#: or without the right to reply): the server's error, passed on by the Bot API server
#: (TDLib leaves "can_reply" and "disabled" for the server to check)
BUSINESS_PEER_INVALID = "Bad Request: BUSINESS_PEER_INVALID"
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
#: ReactionTypeEmoji's documented emoji set
REACTION_EMOJI = frozenset(
    [
        "👍",
        "👎",
        "❤",
        "🔥",
        "🥰",
        "👏",
        "😁",
        "🤔",
        "🤯",
        "😱",
        "🤬",
        "😢",
        "🎉",
        "🤩",
        "🤮",
        "💩",
        "🙏",
        "👌",
        "🕊",
        "🤡",
        "🥱",
        "🥴",
        "😍",
        "🐳",
        "❤\u200d🔥",
        "🌚",
        "🌭",
        "💯",
        "🤣",
        "⚡",
        "🍌",
        "🏆",
        "💔",
        "🤨",
        "😐",
        "🍓",
        "🍾",
        "💋",
        "🖕",
        "😈",
        "😴",
        "😭",
        "🤓",
        "👻",
        "👨\u200d💻",
        "👀",
        "🎃",
        "🙈",
        "😇",
        "😨",
        "🤝",
        "✍",
        "🤗",
        "🫡",
        "🎅",
        "🎄",
        "☃",
        "💅",
        "🤪",
        "🗿",
        "🆒",
        "💘",
        "🙉",
        "🦄",
        "😘",
        "💊",
        "🙊",
        "😎",
        "👾",
        "🤷\u200d♂",
        "🤷",
        "🤷\u200d♀",
        "😡",
    ]
)
CHAT_ACTIONS = frozenset(
    [
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    ]
)
_SECRET_TOKEN = re.compile(r"\A[A-Za-z0-9_-]{1,256}\Z")


@define
class SentMessage:
    """One message the bot sent, as the fake recorded it."""

    chat_id: int
    message_id: int
    text: str
    thread_id: int | None = None
    reply_to: int | None = None
    quiet: bool = False
    date: int = 0
    edits: list[str] = field(factory=list)
    #: the user's topic, in a channel's direct messages chat (`direct_messages_topic_id`)
    direct_messages_topic_id: int | None = None
    #: the business connection it was sent through (`business_connection_id`), if any
    business_connection_id: str | None = None


@define
class RateWindow:
    """At most `limit` sends in any `period` seconds (a Telegram rate limit)."""

    limit: int
    period: float
    stamps: list[float] = field(factory=list)

    def over(self, now: float) -> float:
        """Seconds until one more send fits (0 when it fits now)."""
        self.stamps = [s for s in self.stamps if now - s < self.period]
        if len(self.stamps) < self.limit:
            return 0.0
        return self.stamps[0] + self.period - now


def event_id_of(update: Mapping[str, Any]) -> str:
    """The event id backchannel gives `update`: ``"{update_id}:{date}"``.

    The date is the Unix time the update carries: a message's ``date``, an
    edit's ``edit_date`` (its ``date`` when it has none), a reaction's ``date``.
    Read from the payload here, not through `normalize_update`, so a test that
    compares the two checks the adapter rather than itself.
    """
    for key in (
        "message",
        "channel_post",
        "edited_message",
        "edited_channel_post",
        "business_message",
        "edited_business_message",
    ):
        message = update.get(key)
        if message is not None:
            date = message["date"]
            if key.startswith("edited_") and message.get("edit_date") is not None:
                date = message["edit_date"]
            return f"{int(update['update_id'])}:{int(date)}"
    deleted = update.get("deleted_business_messages")
    if deleted is not None:
        # no date on the wire: the business chat and the (one) message name the delete
        chat = business_chat(deleted["business_connection_id"], int(deleted["chat"]["id"]))
        (message_id,) = deleted["message_ids"]
        return f"{int(update['update_id'])}:delete:{chat}:{int(message_id)}"
    reaction = update["message_reaction"]
    return f"{int(update['update_id'])}:{int(reaction['date'])}"


def update_id_of(event_id: str) -> int:
    """The update id an event id of this adapter was made from (the part before ':')."""
    return int(event_id.partition(":")[0])


class _Fault(Exception):
    def __init__(self, kind: str, retry_after: float):
        self.kind = kind
        self.retry_after = retry_after


class FakeTelegram:
    """A Bot API server on 127.0.0.1:0 with a Python control API for tests."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        bot_username: str = "backchannel_test_bot",
        bot_name: str = "Backchannel",
        first_update_id: int = 800_000_000,
        webhook_retry_delay: float = 0.05,
        max_hang: float = 60.0,
    ):
        self.token = token
        self.bot: dict[str, Any] = {
            "id": int(token.split(":", 1)[0]),
            "is_bot": True,
            "first_name": bot_name,
            "username": bot_username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self.webhook_retry_delay = webhook_retry_delay
        self.max_hang = max_hang
        #: the bot's command menu, as setMyCommands would have left it (getMyCommands)
        self.commands: list[dict[str, str]] = []
        #: the menus set for a scope ("all_group_chats", ...): getMyCommands with that scope
        self.scoped_commands: dict[str, list[dict[str, str]]] = {}
        #: every call the fake answered: (method, params), in arrival order
        self.calls: list[tuple[str, dict[str, Any]]] = []
        #: time.monotonic() of each entry in `calls`
        self.call_times: list[float] = []
        self.sent: list[SentMessage] = []
        self.reactions: list[tuple[int, int, list[dict[str, Any]]]] = []
        self.chat_actions: list[tuple[int, str, int | None]] = []
        #: rate-limit windows that were exceeded (when recording rather than enforcing)
        self.rate_violations: list[str] = []
        #: update_ids the bot has confirmed (getUpdates offset) or answered 2xx (webhook)
        self.acked: set[int] = set()
        self.chats: dict[int, dict[str, Any]] = {}
        self.webhook: dict[str, Any] | None = None
        self.webhook_deliveries: list[tuple[int, int]] = []  # (update_id, HTTP status)
        self.webhook_out_of_order = False
        self._next_update = first_update_id
        self._pending: list[dict[str, Any]] = []
        self._replays: list[dict[str, Any]] = []
        self._all_updates: dict[int, dict[str, Any]] = {}
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}
        self._next_message: dict[int, itertools.count[int]] = {}
        self._topics: dict[int, set[int]] = {}
        #: direct messages chat id -> topic id -> the user whose topic it is
        self._dm_topics: dict[int, dict[int, dict[str, Any]]] = {}
        #: channel id -> its direct messages chat id
        self._dm_chats: dict[int, int] = {}
        self._migrated: dict[int, int] = {}
        #: business connection id -> its BusinessConnection object
        self.business_connections: dict[str, dict[str, Any]] = {}
        #: (business owner id, chat id) -> message id -> message, in the business's chats
        self._business_messages: dict[tuple[int, int], dict[int, dict[str, Any]]] = {}
        #: (business owner id, chat id) -> the business chat's Chat object
        self._business_chats: dict[tuple[int, int], dict[str, Any]] = {}
        self._business_serial = itertools.count(1)
        self._business_last: dict[tuple[int, int], int] = {}
        #: echo what the bot sends through a connection as a business_message, as Telegram does
        self.echo_business_sends = True
        self._faults: dict[str, list[_Fault]] = {}
        self._limits: dict[str, tuple[int, float]] = {}
        self._windows: dict[str, RateWindow] = {}
        self._enforce_limits = True
        self._poll_serial = 0
        self._user_ids = itertools.count(100_000_001)
        self._group_ids = itertools.count(4_000_000_001)
        self._supergroup_ids = itertools.count(1_000_000_000_001)
        self._watch = Watch("FakeTelegram")
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._delivery: asyncio.Task[None] | None = None
        self._client: aiohttp.ClientSession | None = None
        self.url = ""

    # lifecycle ----------------------------------------------------------------

    async def start(self) -> FakeTelegram:
        """Serve on 127.0.0.1 at an ephemeral port; `url` is then the API base."""
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        # no access log: request paths carry the bot token
        self._runner, self.url = await serve_loopback(app, shutdown_timeout=1.0, access_log=None)
        return self

    async def close(self) -> None:
        """Release hung requests and long polls, stop delivering, stop serving."""
        self._closing.set()
        self._watch.changed()
        if self._delivery is not None:
            self._delivery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._delivery
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeTelegram:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def settings(self, **overrides: Any) -> dict[str, Any]:
        """Adapter settings pointing at this fake, with fast timeouts and pacing."""
        settings: dict[str, Any] = {
            "token": self.token,
            "api_base": self.url,
            "poll_timeout": 5,
            "request_timeout": 2.0,
            "retry_initial": 0.05,
            "retry_max": 0.5,
            "pace_per_chat": 0,
            "pace_per_group": 0,
            "pace_overall": 0,
        }
        settings.update(overrides)
        return settings

    # people and chats -----------------------------------------------------------

    def user(
        self,
        first_name: str,
        last_name: str | None = None,
        username: str | None = None,
        *,
        is_bot: bool = False,
        language_code: str | None = "en",
    ) -> dict[str, Any]:
        """Return a new Telegram User object."""
        user: dict[str, Any] = {
            "id": next(self._user_ids),
            "is_bot": is_bot,
            "first_name": first_name,
        }
        if last_name:
            user["last_name"] = last_name
        if username:
            user["username"] = username
        if language_code:
            user["language_code"] = language_code
        return user

    def private_chat(self, user: Mapping[str, Any]) -> dict[str, Any]:
        """Return (and register) the private chat between `user` and the bot."""
        chat = {"id": user["id"], "first_name": user["first_name"], "type": "private"}
        for key in ("last_name", "username"):
            if key in user:
                chat[key] = user[key]
        return self._register(chat)

    def group(self, title: str) -> dict[str, Any]:
        """Return (and register) a basic group chat."""
        return self._register({"id": -next(self._group_ids), "title": title, "type": "group"})

    def supergroup(
        self, title: str, *, forum: bool = False, username: str | None = None
    ) -> dict[str, Any]:
        """Return (and register) a supergroup; `forum` makes it a forum with topics."""
        chat: dict[str, Any] = {
            "id": -next(self._supergroup_ids),
            "title": title,
            "type": "supergroup",
        }
        if forum:
            chat["is_forum"] = True
        if username:
            chat["username"] = username
        return self._register(chat)

    def channel(self, title: str, *, username: str | None = None) -> dict[str, Any]:
        """Return (and register) a channel (the bot is taken to administer it)."""
        chat: dict[str, Any] = {
            "id": -next(self._supergroup_ids),
            "title": title,
            "type": "channel",
        }
        if username:
            chat["username"] = username
        return self._register(chat)

    def direct_messages_chat(self, channel: Mapping[str, Any]) -> dict[str, Any]:
        """Return (and register, once) the direct messages chat of `channel` (Bot API 9.2).

        A supergroup with ``is_direct_messages``; getChat adds ``parent_chat``
        (the channel). Each user who writes there has a topic of their own.
        """
        known = self._dm_chats.get(channel["id"])
        if known is not None:
            return self.chats[known]
        chat = {
            "id": -next(self._supergroup_ids),
            "title": channel["title"],
            "type": "supergroup",
            "is_direct_messages": True,
        }
        self._dm_chats[channel["id"]] = chat["id"]
        self._dm_topics[chat["id"]] = {}
        return self._register(chat)

    def business_connection(
        self,
        owner: Mapping[str, Any],
        *,
        can_reply: bool = True,
        enabled: bool = True,
        deliver: bool = True,
    ) -> dict[str, Any]:
        """Connect the bot to `owner`'s business account; return the BusinessConnection.

        A ``business_connection`` update is queued (unless `deliver` is false). The id
        is 27 characters of URL-safe base64, as Telegram's look.
        """
        digest = hashlib.sha256(f"{owner['id']}:{next(self._business_serial)}".encode()).digest()
        connection_id = base64.urlsafe_b64encode(digest[:20]).decode().rstrip("=")
        connection: dict[str, Any] = {
            "id": connection_id,
            "user": dict(owner),
            "user_chat_id": owner["id"],
            "date": int(time.time()),
        }
        self.business_connections[connection_id] = connection
        self._set_rights(connection, enabled=enabled, can_reply=can_reply)
        if deliver:
            self.inject({"business_connection": dict(connection)})
        return connection

    def set_business_connection(
        self,
        connection: Mapping[str, Any],
        *,
        enabled: bool | None = None,
        can_reply: bool | None = None,
    ) -> dict[str, Any]:
        """Change a connection as its owner would (turn the bot off, take its right to
        reply); queue the ``business_connection`` update saying so; return the Update."""
        stored = self.business_connections[connection["id"]]
        self._set_rights(
            stored,
            enabled=stored["is_enabled"] if enabled is None else enabled,
            can_reply=stored["can_reply"] if can_reply is None else can_reply,
        )
        return self.inject({"business_connection": dict(stored)})

    @staticmethod
    def _set_rights(connection: dict[str, Any], *, enabled: bool, can_reply: bool) -> None:
        # as the Bot API server writes it (Bot API 9.0): `rights`, and the older
        # `can_reply` beside it
        connection["is_enabled"] = enabled
        connection["can_reply"] = can_reply
        rights = {"can_read_messages": True}
        if can_reply:
            rights["can_reply"] = True
        connection["rights"] = rights

    def inject_business_message(
        self,
        connection: Mapping[str, Any],
        customer: Mapping[str, Any],
        text: str,
        *,
        from_owner: bool = False,
        reply_to: int | None = None,
        extra: Mapping[str, Any] | None = None,
        deliver: bool = True,
    ) -> dict[str, Any]:
        """Queue a `business_message` Update in the business account's chat with
        `customer`: written by the customer, or with `from_owner` by the business
        owner themselves; return the Update."""
        owner = self.business_connections[connection["id"]]["user"]
        message = self._new_business_message(
            connection, customer, owner if from_owner else customer
        )
        message["text"] = text
        entities = _mention_entities(text)
        if entities:
            message["entities"] = entities
        if reply_to is not None:
            message["reply_to_message"] = dict(self._business_chat(owner, customer)[reply_to])
            message["reply_to_message"].pop("reply_to_message", None)
        message.update(extra or {})
        return self.inject({"business_message": message}, deliver=deliver)

    def inject_business_edit(
        self,
        connection: Mapping[str, Any],
        customer: Mapping[str, Any],
        message_id: int,
        text: str,
    ) -> dict[str, Any]:
        """Queue an `edited_business_message` Update changing a message's text."""
        owner = self.business_connections[connection["id"]]["user"]
        stored = self._business_chat(owner, customer)[message_id]
        stored["text"] = text
        stored["edit_date"] = int(time.time())
        return self.inject({"edited_business_message": dict(stored)})

    def inject_business_delete(
        self,
        connection: Mapping[str, Any],
        customer: Mapping[str, Any],
        message_ids: Iterable[int],
    ) -> dict[str, Any]:
        """Queue a `deleted_business_messages` Update: these messages of the chat with
        `customer` were deleted (by either side)."""
        owner = self.business_connections[connection["id"]]["user"]
        chat = self._business_chat(owner, customer)
        ids = list(message_ids)
        for message_id in ids:
            chat.pop(message_id, None)
        return self.inject(
            {
                "deleted_business_messages": {
                    "business_connection_id": connection["id"],
                    "chat": _private_chat_of(customer),
                    "message_ids": ids,
                }
            }
        )

    def business_sent_texts(
        self, connection: Mapping[str, Any], customer: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Texts the bot sent through `connection` (to one customer), oldest first."""
        return [
            m.text
            for m in self.sent
            if m.business_connection_id == connection["id"]
            and (customer is None or m.chat_id == customer["id"])
        ]

    def _business_chat(
        self, owner: Mapping[str, Any], customer: Mapping[str, Any] | int
    ) -> dict[int, dict[str, Any]]:
        chat_id = customer if isinstance(customer, int) else customer["id"]
        return self._business_messages.setdefault((owner["id"], chat_id), {})

    def _new_business_message(
        self,
        connection: Mapping[str, Any],
        customer: Mapping[str, Any],
        author: Mapping[str, Any],
    ) -> dict[str, Any]:
        owner = self.business_connections[connection["id"]]["user"]
        chat = self._business_chat(owner, customer)
        self._business_chats.setdefault((owner["id"], customer["id"]), _private_chat_of(customer))
        message: dict[str, Any] = {
            "business_connection_id": connection["id"],
            # one counter for the business account's chat, as Telegram numbers it
            "message_id": self._business_last.get((owner["id"], customer["id"]), 0) + 1,
            "from": dict(author),
            "chat": dict(self._business_chats[(owner["id"], customer["id"])]),
            "date": int(time.time()),
        }
        chat[message["message_id"]] = message
        self._business_last[(owner["id"], customer["id"])] = message["message_id"]
        return message

    def _register(self, chat: dict[str, Any]) -> dict[str, Any]:
        self.chats[chat["id"]] = chat
        self._next_message.setdefault(chat["id"], itertools.count(1))
        return chat

    def create_topic(self, forum: Mapping[str, Any], name: str, creator: Mapping[str, Any]) -> int:
        """Create a forum topic (injecting the service message); return its message_thread_id."""
        message = self._new_message(forum, creator)
        thread = message["message_id"]
        message.update(
            {
                "message_thread_id": thread,
                "is_topic_message": True,
                "forum_topic_created": {"name": name, "icon_color": 7322096},
            }
        )
        self._topics.setdefault(forum["id"], set()).add(thread)
        self.inject({"message": message})
        return thread

    def migrate_group(
        self, group: Mapping[str, Any], by: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Upgrade a basic group to a supergroup as Telegram does; return the new chat.

        Two service updates are queued (``migrate_to_chat_id`` in the old group,
        ``migrate_from_chat_id`` in the new one), and sends to the old id are
        refused with ``parameters.migrate_to_chat_id`` from then on.
        """
        new = self._register(
            {"id": -next(self._supergroup_ids), "title": group["title"], "type": "supergroup"}
        )
        self._migrated[group["id"]] = new["id"]
        old_notice = self._new_message(group, by or self.user("Group", username="group_owner"))
        old_notice["migrate_to_chat_id"] = new["id"]
        anonymous = {
            "id": 1087968824,
            "is_bot": True,
            "first_name": "Group",
            "username": "GroupAnonymousBot",
        }
        new_notice = self._new_message(new, anonymous)
        new_notice["sender_chat"] = dict(new)
        new_notice["migrate_from_chat_id"] = group["id"]
        self.inject({"message": old_notice})
        self.inject({"message": new_notice})
        return new

    def set_webhook(self, url: str, secret_token: str | None = None) -> None:
        """Set a webhook as another deployment of the same bot would (getUpdates then gets 409)."""
        self.webhook = {
            "url": url,
            "secret_token": secret_token,
            "allowed_updates": None,
            "max_connections": 40,
        }
        self._poll_serial += 1
        self._poke()

    # injecting updates ----------------------------------------------------------

    def inject(self, update: Mapping[str, Any], *, deliver: bool = True) -> dict[str, Any]:
        """Queue a raw Update (its update_id is assigned unless given); return it.

        With ``deliver=False`` the update is only built (to POST it yourself).
        """
        payload = dict(update)
        if "update_id" not in payload:
            payload = {"update_id": self._next_update, **payload}
            self._next_update += 1
        self._all_updates[payload["update_id"]] = payload
        if deliver:
            self._pending.append(payload)
            self._poke()
        return payload

    def inject_message(
        self,
        chat: Mapping[str, Any],
        user: Mapping[str, Any],
        text: str | None = None,
        *,
        topic: int | None = None,
        reply_to: int | None = None,
        caption: str | None = None,
        media: str | None = None,
        extra: Mapping[str, Any] | None = None,
        deliver: bool = True,
        topic_of: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Queue a `message` Update from `user` in `chat`; return the Update.

        `topic` posts in a forum topic; `reply_to` replies to that message id;
        `media` ("photo", "document", "video", "voice", "audio", "sticker",
        "animation") attaches a file with `caption`. @mentions in the text get
        their `mention` entities, as Telegram's servers add them. In a
        channel's direct messages chat the message is in the topic of
        `topic_of` (default: `user`, writing in their own topic; give the user
        when an admin answers in theirs), as ``direct_messages_topic``.
        """
        message = self._new_message(chat, user)
        direct = chat["id"] in self._dm_topics
        if direct:
            owner = dict(topic_of or user)
            self._dm_topics[chat["id"]][owner["id"]] = owner
            message["direct_messages_topic"] = {"topic_id": owner["id"], "user": owner}
        if text is not None:
            message["text"] = text
            entities = _mention_entities(text)
            if entities:
                message["entities"] = entities
        if media is not None:
            message.update(_media(media, message["message_id"]))
        if caption is not None:
            message["caption"] = caption
            entities = _mention_entities(caption)
            if entities:
                message["caption_entities"] = entities
        if topic is not None:
            message["message_thread_id"] = topic
            message["is_topic_message"] = True
            message["reply_to_message"] = self._shallow(chat["id"], topic)
        if reply_to is not None:
            message["reply_to_message"] = self._shallow(chat["id"], reply_to)
            if topic is None and chat.get("type") == "supergroup" and not direct:
                message["message_thread_id"] = reply_to
        message.update(extra or {})
        return self.inject({"message": message}, deliver=deliver)

    def inject_edit(self, chat: Mapping[str, Any], message_id: int, text: str) -> dict[str, Any]:
        """Queue an `edited_message` Update changing a user's message text."""
        stored = self._messages[(chat["id"], message_id)]
        stored["text"] = text
        stored["edit_date"] = int(time.time())
        return self.inject({"edited_message": dict(stored)})

    def inject_reaction(
        self,
        chat: Mapping[str, Any],
        user: Mapping[str, Any],
        message_id: int,
        emoji: Iterable[str],
        old: Iterable[str] = (),
    ) -> dict[str, Any]:
        """Queue a `message_reaction` Update: `user` now reacts to the message with `emoji`."""
        return self.inject(
            {
                "message_reaction": {
                    "chat": dict(chat),
                    "message_id": message_id,
                    "user": dict(user),
                    "date": int(time.time()),
                    "old_reaction": [{"type": "emoji", "emoji": e} for e in old],
                    "new_reaction": [{"type": "emoji", "emoji": e} for e in emoji],
                }
            }
        )

    def restart_update_ids(self, first: int) -> None:
        """Number the next updates from `first` on, even if that id was used before.

        Telegram does this after a week without updates: the next id is "chosen
        randomly instead of sequentially", and may be one a bot has already seen.
        `deliver_again` of a reused id delivers the newest update that had it, and
        `is_acked` of it is true already if the older one was acked.
        """
        if self._pending:
            raise AssertionError(
                "Telegram numbers anew only after a week without updates: confirm the"
                " pending ones first"
            )
        self._next_update = first

    def deliver_again(self, update_id: int) -> None:
        """Deliver an already delivered update once more (even if it was confirmed)."""
        payload = self._all_updates[update_id]
        if self.webhook is not None:
            self._pending.append(payload)
        else:
            self._replays.append(payload)
        self._poke()

    def _new_message(self, chat: Mapping[str, Any], user: Mapping[str, Any]) -> dict[str, Any]:
        chat_id = chat["id"]
        self._register(dict(self.chats.get(chat_id, chat)))
        message: dict[str, Any] = {
            "message_id": next(self._next_message[chat_id]),
            "from": dict(user),
            "chat": dict(self.chats[chat_id]),
            "date": int(time.time()),
        }
        self._messages[(chat_id, message["message_id"])] = message
        return message

    def _shallow(self, chat_id: int, message_id: int) -> dict[str, Any]:
        found = self._messages.get((chat_id, message_id))
        if found is None:
            raise KeyError(f"no message {message_id} in chat {chat_id}")
        return {k: v for k, v in found.items() if k != "reply_to_message"}

    # reading what the bot did ---------------------------------------------------------

    def sent_texts(
        self,
        chat: Mapping[str, Any] | int | None = None,
        topic: int | None = None,
        *,
        direct_messages_topic: int | None = None,
    ) -> list[str]:
        """Texts the bot sent (to one chat, and forum topic or direct messages topic),
        oldest first, as they read now."""
        chat_id = chat["id"] if isinstance(chat, Mapping) else chat
        return [
            m.text
            for m in self.sent
            if (chat_id is None or m.chat_id == chat_id)
            and (topic is None or m.thread_id == topic)
            and (
                direct_messages_topic is None or m.direct_messages_topic_id == direct_messages_topic
            )
        ]

    def calls_to(self, method: str) -> list[dict[str, Any]]:
        """Parameters of every call to `method`, oldest first."""
        return [params for name, params in self.calls if name.lower() == method.lower()]

    def is_acked(self, update_id: int) -> bool:
        """True once the bot confirmed the update (getUpdates offset) or answered it 2xx."""
        return update_id in self.acked

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    async def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        """Return once `predicate()` holds, re-checked whenever the fake's state changes.

        AssertionError naming `what` after `timeout` seconds.
        """
        await self._watch.wait_for(predicate, timeout, what)

    # faults --------------------------------------------------------------------------

    def fail_next(
        self, method: str, fault: str, *, retry_after: float = 3, times: int = 1, after: int = 0
    ) -> None:
        """Answer the next `times` calls of `method` with `fault` (see module docs).

        `after` lets that many calls of `method` succeed first.
        """
        known = {"429", "500", "502", "hang", "hang_after", "reset", "forbidden", "conflict"}
        if fault not in known:
            raise ValueError(f"unknown fault {fault!r}; use one of {sorted(known)}")
        queue = self._faults.setdefault(method.lower(), [])
        queue.extend([_Fault("none", 0)] * after)
        queue.extend(_Fault(fault, retry_after) for _ in range(times))

    def limit_rates(
        self,
        *,
        per_chat: tuple[int, float] | None = (1, 1.0),
        per_group: tuple[int, float] | None = (20, 60.0),
        overall: tuple[int, float] | None = (30, 1.0),
        enforce: bool = True,
    ) -> None:
        """Apply Telegram-like rate windows to sendMessage and editMessageText.

        Each window is (count, seconds). With `enforce`, a send over a limit gets
        Telegram's 429 with retry_after; otherwise it succeeds and the excess is
        recorded in `rate_violations`.
        """
        self._limits = {
            k: v for k, v in (("chat", per_chat), ("group", per_group), ("overall", overall)) if v
        }
        self._windows = {}
        self._enforce_limits = enforce

    # HTTP ----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params = await _params(request)
        self.calls.append((method, params))
        self.call_times.append(time.monotonic())
        handler = getattr(self, f"_m_{method.lower()}", None)
        if handler is None:
            return _error(404, "Not Found")
        queue = self._faults.get(method.lower())
        fault = queue.pop(0) if queue else None
        if fault is not None and fault.kind == "none":
            fault = None
        try:
            if fault is not None:
                early = await self._fault_before(fault, request)
                if early is not None:
                    return early
            response = await handler(params)
            if fault is not None and fault.kind == "hang_after":
                await self._hang()
            return response
        except _Fault as error:
            return _error(
                429,
                f"Too Many Requests: retry after {int(error.retry_after)}",
                {"retry_after": int(error.retry_after)},
            )
        except _BadRequest as error:
            return _error(error.code, error.description, error.parameters)
        finally:
            self._poke()

    async def _fault_before(self, fault: _Fault, request: web.Request) -> web.StreamResponse | None:
        if fault.kind == "429":
            return _error(
                429,
                f"Too Many Requests: retry after {int(fault.retry_after)}",
                {"retry_after": int(fault.retry_after)},
            )
        if fault.kind == "500":
            return _error(500, "Internal Server Error")
        if fault.kind == "502":
            return web.Response(
                status=502,
                content_type="text/html",
                text="<html><body><h1>502 Bad Gateway</h1></body></html>",
            )
        if fault.kind == "forbidden":
            return _error(403, "Forbidden: bot was blocked by the user")
        if fault.kind == "conflict":
            return _error(409, CONFLICT_POLLER)
        if fault.kind == "hang":
            await self._hang()
            return _error(500, "Internal Server Error")
        if fault.kind == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError  # aiohttp drops the handler quietly
        return None

    async def _hang(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), self.max_hang)

    def _poke(self) -> None:
        self._watch.changed()
        if (
            self.webhook is not None
            and self._pending
            and (self._delivery is None or self._delivery.done())
        ):
            self._delivery = asyncio.get_running_loop().create_task(self._deliver())

    # methods ---------------------------------------------------------------------------

    async def _m_getme(self, params: dict[str, Any]) -> web.Response:
        return _ok(self.bot)

    async def _m_getchat(self, params: dict[str, Any]) -> web.Response:
        chat = self._chat(params)
        full = dict(chat)
        if chat.get("type") == "supergroup":
            full["is_forum"] = bool(chat.get("is_forum"))
        parent = next((c for c, dm in self._dm_chats.items() if dm == chat["id"]), None)
        if parent is not None:
            full["parent_chat"] = dict(self.chats[parent])
        return _ok(full)

    async def _m_getmycommands(self, params: dict[str, Any]) -> web.Response:
        scope = _json_param(params.get("scope"))
        kind = scope.get("type") if isinstance(scope, Mapping) else None
        if kind not in (None, "default"):
            # as Telegram answers: exactly the menu set for that scope, [] when none is
            return _ok([dict(command) for command in self.scoped_commands.get(kind, [])])
        return _ok([dict(command) for command in self.commands])

    async def _m_getupdates(self, params: dict[str, Any]) -> web.Response:
        if self.webhook is not None:
            return _error(409, CONFLICT_WEBHOOK)
        self._poll_serial += 1
        serial = self._poll_serial
        self._watch.changed()  # an older long poll sees it was superseded
        offset = _int(params.get("offset"), 0)
        limit = min(max(_int(params.get("limit"), 100), 1), 100)
        timeout = max(_int(params.get("timeout"), 0), 0)
        self._confirm(offset)

        def ready() -> bool:
            return (
                bool(self._pending or self._replays)
                or serial != self._poll_serial
                or (self._closing.is_set())
            )

        if not ready() and timeout > 0:
            # a long poll that times out answers with what there is (nothing)
            with contextlib.suppress(AssertionError):
                await self._watch.wait_for(ready, timeout, "an update to return")
        if self.webhook is not None:
            return _error(409, CONFLICT_WEBHOOK)
        if serial != self._poll_serial:
            return _error(409, CONFLICT_POLLER)
        allowed = _json_param(params.get("allowed_updates"))
        if allowed:
            # Telegram never creates updates of kinds the bot did not ask for
            unwanted = [u for u in self._pending if not any(k in allowed for k in u)]
            self._pending = [u for u in self._pending if u not in unwanted]
        replays = self._replays[:limit]
        self._replays = self._replays[len(replays) :]
        return _ok(replays + self._pending[: limit - len(replays)])

    def _confirm(self, offset: int) -> None:
        if offset > self._next_update + 10:
            # as the Bot API server's queue does: an offset "in the future" (ids numbered
            # anew since, lower) confirms nothing, and the answer starts at the queue's head
            return
        if offset > 0:
            confirmed = [u for u in self._pending if u["update_id"] < offset]
            self._pending = [u for u in self._pending if u["update_id"] >= offset]
        elif offset < 0:
            # "-offset updates from the end of the queue; all previous ones are forgotten"
            keep = -offset
            confirmed = self._pending[:-keep] if keep < len(self._pending) else []
            self._pending = self._pending[-keep:]
        else:
            return
        self.acked.update(u["update_id"] for u in confirmed)
        self.acked.update(i for i in self._all_updates if offset > 0 and i < offset)

    async def _m_setwebhook(self, params: dict[str, Any]) -> web.Response:
        url = params.get("url") or ""
        secret = params.get("secret_token")
        if secret is not None and not _SECRET_TOKEN.match(str(secret)):
            raise _BadRequest("Bad Request: secret token contains unallowed characters")
        if not url:
            self.webhook = None
            return _ok(True, "Webhook was deleted")
        if not str(url).startswith(("http://", "https://")):
            raise _BadRequest("Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        if params.get("drop_pending_updates") in (True, "true"):
            self._pending.clear()
        self.webhook = {
            "url": str(url),
            "secret_token": secret,
            "allowed_updates": params.get("allowed_updates"),
            "max_connections": _int(params.get("max_connections"), 40),
        }
        self._poll_serial += 1  # a waiting long poll ends with a conflict
        return _ok(True, "Webhook was set")

    async def _m_deletewebhook(self, params: dict[str, Any]) -> web.Response:
        was_set = self.webhook is not None
        self.webhook = None
        if params.get("drop_pending_updates") in (True, "true"):
            self._pending.clear()
        return _ok(True, "Webhook was deleted" if was_set else "Webhook is already deleted")

    async def _m_getwebhookinfo(self, params: dict[str, Any]) -> web.Response:
        info: dict[str, Any] = {
            "url": "",
            "has_custom_certificate": False,
            "pending_update_count": len(self._pending),
        }
        if self.webhook is not None:
            info["url"] = self.webhook["url"]
            info["max_connections"] = self.webhook["max_connections"]
            if self.webhook.get("allowed_updates"):
                info["allowed_updates"] = self.webhook["allowed_updates"]
            if self.webhook.get("last_error_message"):
                info["last_error_date"] = self.webhook["last_error_date"]
                info["last_error_message"] = self.webhook["last_error_message"]
        return _ok(info)

    async def _m_sendmessage(self, params: dict[str, Any]) -> web.Response:
        if params.get("business_connection_id"):
            return self._business_send(params)
        chat = self._chat(params)
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _BadRequest("Bad Request: message text is empty")
        if len(text.encode("utf-16-le")) // 2 > 4096:
            raise _BadRequest("Bad Request: message is too long")
        thread = _int(params.get("message_thread_id"), 0) or None
        dm_topic: int | None = None
        if chat["id"] in self._dm_topics:
            # as the Bot API server checks it: a direct messages chat takes only its own
            # topic parameter (a forum's message_thread_id is ignored there), and needs it
            dm_topic = _int(params.get("direct_messages_topic_id"), 0) or None
            if dm_topic is None and thread is None:
                raise _BadRequest(DM_TOPIC_REQUIRED)
            if dm_topic not in self._dm_topics[chat["id"]]:
                raise _BadRequest("Bad Request: topic not found")
            thread = None
        if (
            thread is not None
            and chat.get("is_forum")
            and thread not in self._topics.get(chat["id"], set())
        ):
            raise _BadRequest("Bad Request: message thread not found")
        reply = _json_param(params.get("reply_parameters")) or {}
        if not reply and params.get("reply_to_message_id") is not None:
            reply = {
                "message_id": params["reply_to_message_id"],
                "allow_sending_without_reply": params.get("allow_sending_without_reply"),
            }
        reply_to: int | None = None
        if reply:
            reply_to = _int(reply.get("message_id"), 0)
            if (chat["id"], reply_to) not in self._messages:
                if reply.get("allow_sending_without_reply") not in (True, "true"):
                    raise _BadRequest("Bad Request: message to be replied not found")
                reply_to = None
        self._check_rate(chat)
        message = self._new_message(chat, self.bot)
        message["text"] = text
        if thread is not None:
            message["message_thread_id"] = thread
            if chat.get("is_forum"):
                message["is_topic_message"] = True
        if dm_topic is not None:
            owner = self._dm_topics[chat["id"]][dm_topic]
            message["direct_messages_topic"] = {"topic_id": dm_topic, "user": dict(owner)}
        if reply_to is not None:
            message["reply_to_message"] = self._shallow(chat["id"], reply_to)
        quiet = params.get("disable_notification") in (True, "true")
        self.sent.append(
            SentMessage(
                chat["id"],
                message["message_id"],
                text,
                thread,
                reply_to,
                quiet,
                message["date"],
                direct_messages_topic_id=dm_topic,
            )
        )
        return _ok(message)

    async def _m_editmessagetext(self, params: dict[str, Any]) -> web.Response:
        if params.get("business_connection_id"):
            return self._business_edit(params)
        chat = self._chat(params)
        message_id = _int(params.get("message_id"), 0)
        stored = self._messages.get((chat["id"], message_id))
        if stored is None:
            raise _BadRequest("Bad Request: message to edit not found")
        if stored["from"]["id"] != self.bot["id"]:
            raise _BadRequest("Bad Request: message can't be edited")
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _BadRequest("Bad Request: message text is empty")
        if len(text.encode("utf-16-le")) // 2 > 4096:
            raise _BadRequest("Bad Request: MESSAGE_TOO_LONG")
        if text == stored.get("text"):
            raise _BadRequest(NOT_MODIFIED)
        self._check_rate(chat)
        stored["text"] = text
        stored["edit_date"] = int(time.time())
        for sent in self.sent:
            if sent.chat_id == chat["id"] and sent.message_id == message_id:
                sent.edits.append(sent.text)
                sent.text = text
        return _ok(stored)

    async def _m_setmessagereaction(self, params: dict[str, Any]) -> web.Response:
        chat = self._chat(params)
        message_id = _int(params.get("message_id"), 0)
        if (chat["id"], message_id) not in self._messages:
            raise _BadRequest("Bad Request: MESSAGE_ID_INVALID")
        reaction = _json_param(params.get("reaction")) or []
        for item in reaction:
            if item.get("type") == "emoji" and item.get("emoji") not in REACTION_EMOJI:
                raise _BadRequest("Bad Request: REACTION_INVALID")
        self.reactions.append((chat["id"], message_id, list(reaction)))
        return _ok(True)

    async def _m_sendchataction(self, params: dict[str, Any]) -> web.Response:
        action = params.get("action")
        if params.get("business_connection_id"):
            _, chat_id, _ = self._business_check(params)
            if action not in CHAT_ACTIONS:
                raise _BadRequest("Bad Request: wrong parameter action in request")
            self.chat_actions.append((chat_id, str(action), None))
            return _ok(True)
        chat = self._chat(params)
        if action not in CHAT_ACTIONS:
            raise _BadRequest("Bad Request: wrong parameter action in request")
        thread = _int(params.get("message_thread_id"), 0) or None
        self.chat_actions.append((chat["id"], str(action), thread))
        return _ok(True)

    async def _m_getbusinessconnection(self, params: dict[str, Any]) -> web.Response:
        connection = self.business_connections.get(str(params.get("business_connection_id")))
        if connection is None:
            raise _BadRequest(BUSINESS_CONNECTION_NOT_FOUND)
        return _ok(dict(connection))

    def _business_check(
        self, params: Mapping[str, Any], *, sending: bool = True
    ) -> tuple[dict[str, Any], int, dict[int, dict[str, Any]]]:
        """The connection, chat id and the business chat's messages a business call names,
        checked in the Bot API server's order (chat id, connection, then Telegram's own)."""
        raw = params.get("chat_id")
        if raw is None or raw == "":
            raise _BadRequest("Bad Request: chat identifier is empty")
        try:
            chat_id = int(str(raw))
        except ValueError:
            raise _BadRequest("Bad Request: chat identifier must be a valid Integer") from None
        connection = self.business_connections.get(str(params["business_connection_id"]))
        if connection is None:
            raise _BadRequest(BUSINESS_CONNECTION_NOT_FOUND)
        owner = connection["user"]
        if chat_id == owner["id"]:
            raise _BadRequest("Bad Request: Messages must not be sent to self")
        if sending and not (connection["is_enabled"] and connection["can_reply"]):
            raise _BadRequest(BUSINESS_PEER_INVALID)
        if (owner["id"], chat_id) not in self._business_chats:
            raise _BadRequest("Bad Request: chat not found")
        return connection, chat_id, self._business_chat(owner, chat_id)

    def _business_send(self, params: dict[str, Any]) -> web.Response:
        connection, chat_id, chat = self._business_check(params)
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _BadRequest("Bad Request: message text is empty")
        if len(text.encode("utf-16-le")) // 2 > 4096:
            raise _BadRequest("Bad Request: message is too long")
        reply = _json_param(params.get("reply_parameters")) or {}
        reply_to: int | None = None
        if reply:
            reply_to = _int(reply.get("message_id"), 0)
            if reply_to not in chat:
                if reply.get("allow_sending_without_reply") not in (True, "true"):
                    raise _BadRequest("Bad Request: message to be replied not found")
                reply_to = None
        customer = self._business_chats[(connection["user"]["id"], chat_id)]
        owner = connection["user"]
        message = self._new_business_message(connection, customer, owner)
        message["sender_business_bot"] = dict(self.bot)
        message["text"] = text
        if reply_to is not None:
            message["reply_to_message"] = {
                k: v for k, v in chat[reply_to].items() if k != "reply_to_message"
            }
        quiet = params.get("disable_notification") in (True, "true")
        self.sent.append(
            SentMessage(
                chat_id,
                message["message_id"],
                text,
                None,
                reply_to,
                quiet,
                message["date"],
                business_connection_id=connection["id"],
            )
        )
        if self.echo_business_sends:
            self.inject({"business_message": dict(message)})
        return _ok(message)

    def _business_edit(self, params: dict[str, Any]) -> web.Response:
        connection, chat_id, chat = self._business_check(params)
        message_id = _int(params.get("message_id"), 0)
        stored = chat.get(message_id)
        if stored is None:
            raise _BadRequest("Bad Request: message to edit not found")
        if stored.get("sender_business_bot", {}).get("id") != self.bot["id"]:
            raise _BadRequest("Bad Request: message can't be edited")
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _BadRequest("Bad Request: message text is empty")
        if text == stored.get("text"):
            raise _BadRequest(NOT_MODIFIED)
        stored["text"] = text
        stored["edit_date"] = int(time.time())
        for sent in self.sent:
            if (
                sent.business_connection_id == connection["id"]
                and sent.chat_id == chat_id
                and sent.message_id == message_id
            ):
                sent.edits.append(sent.text)
                sent.text = text
        if self.echo_business_sends:
            self.inject({"edited_business_message": dict(stored)})
        return _ok(stored)

    def _chat(self, params: Mapping[str, Any]) -> dict[str, Any]:
        raw = params.get("chat_id")
        if raw is None or raw == "":
            raise _BadRequest("Bad Request: chat_id is empty")
        chat: dict[str, Any] | None = None
        if isinstance(raw, str) and raw.startswith("@"):
            chat = next((c for c in self.chats.values() if c.get("username") == raw[1:]), None)
        else:
            chat_id = _int(raw, 0)
            if chat_id in self._migrated:
                raise _BadRequest(
                    "Bad Request: group chat was upgraded to a supergroup chat",
                    {"migrate_to_chat_id": self._migrated[chat_id]},
                )
            chat = self.chats.get(chat_id)
        if chat is None:
            raise _BadRequest("Bad Request: chat not found")
        return chat

    def _check_rate(self, chat: Mapping[str, Any]) -> None:
        if not self._limits:
            return
        now = time.monotonic()
        keys = {"overall": "overall", "chat": f"chat:{chat['id']}"}
        if chat.get("type") in ("group", "supergroup"):
            keys["group"] = f"group:{chat['id']}"
        worst, worst_key = 0.0, ""
        windows = []
        for kind, key in keys.items():
            if kind not in self._limits:
                continue
            limit, period = self._limits[kind]
            window = self._windows.setdefault(key, RateWindow(limit, period))
            windows.append(window)
            wait = window.over(now)
            if wait > worst:
                worst, worst_key = wait, key
        if worst > 0:
            if self._enforce_limits:
                raise _Fault("429", max(1, round(worst + 0.5)))
            self.rate_violations.append(worst_key)
        for window in windows:
            window.stamps.append(now)

    # webhook delivery -------------------------------------------------------------------

    async def _deliver(self) -> None:
        """POST pending updates to the webhook, one at a time, retrying non-2xx answers."""
        if self._client is None:
            self._client = aiohttp.ClientSession()
        delay = self.webhook_retry_delay
        while self.webhook is not None and self._pending and not self._closing.is_set():
            batch = (
                list(reversed(self._pending)) if self.webhook_out_of_order else [self._pending[0]]
            )
            for update in batch:
                status = await self._post_update(update)
                self.webhook_deliveries.append((update["update_id"], status))
                if 200 <= status < 300:
                    if update in self._pending:
                        self._pending.remove(update)
                    self.acked.add(update["update_id"])
                    delay = self.webhook_retry_delay
                else:
                    assert self.webhook is not None
                    self.webhook["last_error_date"] = int(time.time())
                    self.webhook["last_error_message"] = (
                        f"Wrong response from the webhook: {status}"
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                self._watch.changed()
                if self.webhook is None:
                    return

    async def _post_update(self, update: Mapping[str, Any]) -> int:
        assert self.webhook is not None and self._client is not None
        headers = {}
        if self.webhook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = str(self.webhook["secret_token"])
        try:
            async with self._client.post(
                self.webhook["url"],
                json=update,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=10),
            ) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return 0


class _BadRequest(Exception):
    def __init__(
        self, description: str, parameters: Mapping[str, Any] | None = None, code: int = 400
    ):
        self.description = description
        self.parameters = parameters
        self.code = code


def _ok(result: Any, description: str | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": True, "result": result}
    if description:
        body["description"] = description
    return web.json_response(body)


def _error(
    code: int, description: str, parameters: Mapping[str, Any] | None = None
) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = dict(parameters)
    return web.json_response(body, status=code)


async def _params(request: web.Request) -> dict[str, Any]:
    """The Bot API takes parameters from the query string, a form, or a JSON body."""
    params: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            with contextlib.suppress(ValueError):
                body = await request.json()
                if isinstance(body, dict):
                    params.update(body)
        else:
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
    return params


def _json_param(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
        return None
    return value


def _int(value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _BadRequest(f"Bad Request: invalid integer value {value!r}") from None


def _private_chat_of(user: Mapping[str, Any]) -> dict[str, Any]:
    """The private Chat object with `user` (a business chat's ``chat``)."""
    chat = {"id": user["id"], "first_name": user["first_name"], "type": "private"}
    for key in ("last_name", "username"):
        if key in user:
            chat[key] = user[key]
    return chat


def _mention_entities(text: str) -> list[dict[str, Any]]:
    """The `mention` and `bot_command` entities Telegram's servers add to a text."""
    entities = []
    found = [
        *(
            (m, "bot_command")
            for m in re.finditer(
                r"(?<![\w/])/[A-Za-z0-9_]{1,32}(?:@[A-Za-z][A-Za-z0-9_]{3,31})?", text
            )
        ),
        *((m, "mention") for m in re.finditer(r"(?<![\w@/])@[A-Za-z][A-Za-z0-9_]{3,31}", text)),
    ]
    for match, kind in sorted(found, key=lambda pair: pair[0].start()):
        if kind == "mention" and any(
            k == "bot_command" and c.start() <= match.start() < c.end() for c, k in found
        ):
            continue  # the @bot of /cmd@bot belongs to the command
        offset = len(text[: match.start()].encode("utf-16-le")) // 2
        length = len(match.group(0).encode("utf-16-le")) // 2
        entities.append({"offset": offset, "length": length, "type": kind})
    return entities


def _media(kind: str, seed: int) -> dict[str, Any]:
    """A realistic media payload of `kind` (file ids are made up)."""
    file_id = f"AgACAgIAAxkBAAI{seed:06d}{kind[:3]}"
    unique = f"AQAD{seed:06d}{kind[:2]}"
    base = {"file_id": file_id, "file_unique_id": unique}
    if kind == "photo":
        return {
            "photo": [
                {**base, "file_id": file_id + "s", "file_size": 1423, "width": 90, "height": 67},
                {**base, "file_id": file_id + "m", "file_size": 21840, "width": 320, "height": 240},
                {**base, "file_size": 101230, "width": 1280, "height": 960},
            ]
        }
    if kind == "document":
        return {
            "document": {
                **base,
                "file_name": "report.pdf",
                "mime_type": "application/pdf",
                "file_size": 536392,
            }
        }
    if kind == "video":
        return {
            "video": {
                **base,
                "width": 1280,
                "height": 720,
                "duration": 12,
                "file_name": "clip.mp4",
                "mime_type": "video/mp4",
                "file_size": 2458112,
            }
        }
    if kind == "animation":
        doc = {**base, "file_name": "fun.gif.mp4", "mime_type": "video/mp4", "file_size": 81234}
        return {"animation": {**doc, "width": 320, "height": 240, "duration": 3}, "document": doc}
    if kind == "voice":
        return {"voice": {**base, "duration": 5, "mime_type": "audio/ogg", "file_size": 23000}}
    if kind == "audio":
        return {
            "audio": {
                **base,
                "duration": 243,
                "mime_type": "audio/mpeg",
                "file_size": 3897500,
                "title": "Test music file",
                "performer": "Band",
            }
        }
    if kind == "sticker":
        return {
            "sticker": {
                **base,
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
                "emoji": "😀",
                "set_name": "HotCherry",
                "file_size": 28000,
            }
        }
    raise ValueError(f"unknown media kind {kind!r}")

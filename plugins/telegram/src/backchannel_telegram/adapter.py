"""The Telegram adapter: updates in (see receive.py), Bot API calls out.

Sending paces itself (pacing.py), splits long text in UTF-16 units, follows
groups upgraded to supergroups, and maps every failure to RateLimited,
Rejected or Uncertain. An Address thread is a forum topic's id, or
``"dm:{topic_id}"``, a user's topic in a channel's direct messages chat (sent
to with ``direct_messages_topic_id``). An Address chat ``"biz:{connection
id}:{chat id}"`` is a chat of a connected Telegram Business account (sent to
with ``business_connection_id``; see business.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from backchannel.adapter import AdapterContext, Capabilities, split_text, utf16_len
from backchannel.config import positive_number
from backchannel.errors import (
    ConfigError,
    DeliveryError,
    RateLimited,
    Rejected,
    Uncertain,
)
from backchannel.model import (
    NO_RUN,
    Address,
    ConversationKind,
    Event,
    Outbound,
    Receipt,
    Sender,
    evolve,
)
from backchannel.secrets import register_secret

from .api import BotApi, TelegramError, Token
from .business import (
    BUSINESS_CHAT,
    BUSINESS_OWNER,
    BusinessConnection,
    parse_business_chat,
    state_key,
)
from .normalize import (
    DIRECT_MESSAGES_THREAD,
    TOPIC_NAME,
    BotIdentity,
    int_field,
    migration_of,
    normalize_update,
    topic_name_of,
)
from .pacing import Pacer, PacingLimits
from .receive import SECRET_HEADER, Poller, PollSettings, WebhookReceiver, WebhookSettings

__all__ = ["DEFAULT_ALLOWED_UPDATES", "SECRET_HEADER", "TelegramAdapter"]

#: `message_reaction` must be asked for by name: Telegram leaves it out by default. The
#: business updates come only to a bot a Telegram Business account connected.
DEFAULT_ALLOWED_UPDATES = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "message_reaction",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
)
MAX_TEXT = 4096
#: the command menus a group's members see (None: the default scope), read at start
_GROUP_COMMAND_SCOPES = (None, "all_group_chats", "all_chat_administrators")
_fallback_log = logging.getLogger("backchannel.telegram")
#: the longest a later part of a split text waits out a 429 before giving up
MAX_PART_RETRY_WAIT = 60.0


class TelegramAdapter:
    """One Telegram bot account. Settings are the account's config table (see docs)."""

    channel = "telegram"
    #: Updates carry no secret (the bot token is in the URL, the webhook secret in a header)
    secret_fields: frozenset[str] = frozenset()
    capabilities = Capabilities(
        threads=True,
        edits=True,
        reactions=True,
        typing=True,
        replies=True,
        max_text_len=MAX_TEXT,
        display_name="Telegram",
    )

    def __init__(self, account: str, settings: Mapping[str, Any]):
        self.account = account
        if "token" not in settings:
            raise ConfigError("a Telegram account needs `token` (from @BotFather)", key="token")
        try:
            self._token = Token(settings["token"])
        except ValueError as error:
            raise ConfigError(str(error), key="token") from None
        # the token is in every Bot API URL: whatever logs one (aiohttp, a traceback), it
        # is redacted, even when the token was not written as ${ENV} in the config
        register_secret(self._token.reveal())
        self.mode = str(settings.get("mode", "polling"))
        if self.mode not in ("polling", "webhook"):
            raise ConfigError(f"mode must be 'polling' or 'webhook', not {self.mode!r}", key="mode")
        self.api_base = str(settings.get("api_base", "https://api.telegram.org"))
        number = _NumberReader(settings)
        self.poll_timeout = number.int("poll_timeout", 25, low=0)
        self.poll_limit = number.int("poll_limit", 100, low=1)
        self.request_timeout = number.float("request_timeout", 15.0)
        allowed = settings.get("allowed_updates", DEFAULT_ALLOWED_UPDATES)
        if not isinstance(allowed, list | tuple) or not all(isinstance(a, str) for a in allowed):
            raise ConfigError("expected a list of update kinds", key="allowed_updates")
        self.allowed_updates = list(allowed)
        owner_triggers = settings.get("business_owner_triggers", False)
        if not isinstance(owner_triggers, bool):
            raise ConfigError(
                f"expected true or false, got {owner_triggers!r}", key="business_owner_triggers"
            )
        #: do the business owner's own messages start runs (off: stored, no run)?
        self.business_owner_triggers = owner_triggers
        self.webhook_path = str(settings.get("webhook_path", f"/telegram/{account}"))
        self.webhook_url: str | None = settings.get("webhook_url")
        self.webhook_max_connections = number.int("webhook_max_connections", 40, low=1)
        self.retry_initial = number.float("retry_initial", 1.0)
        self.retry_max = number.float("retry_max", 30.0)
        self.pacing = PacingLimits(
            per_chat=number.int("pace_per_chat", 1, low=0),
            per_chat_period=number.float("pace_per_chat_period", 1.0),
            per_group=number.int("pace_per_group", 20, low=0),
            per_group_period=number.float("pace_per_group_period", 60.0),
            overall=number.int("pace_overall", 30, low=0),
            overall_period=number.float("pace_overall_period", 1.0),
        )
        self.me: Sender | None = Sender(self._token.bot_id, "", settings.get("username"), True)
        self._username: str | None = settings.get("username")
        commands = settings.get("commands", [])
        if not isinstance(commands, list | tuple) or not all(isinstance(c, str) for c in commands):
            raise ConfigError(
                'expected a list of command names, such as ["start", "help"]', key="commands"
            )
        #: the configured commands; those from getMyCommands join them at start
        self._configured_commands = frozenset(c.strip().lstrip("/").lower() for c in commands)
        self._commands = self._configured_commands
        #: who normalize is told the bot is (rebuilt when username or commands change)
        self._identity = BotIdentity(self._token.bot_id, self._username, self._commands)
        self._api = BotApi(self._token, self.api_base, self.request_timeout)
        self._pacer = Pacer(self.pacing)
        self._ctx: AdapterContext | None = None
        self._receiver: Poller | WebhookReceiver | None = None
        self._identity_task: asyncio.Task[None] | None = None
        #: (chat, message id) -> forum topic or direct messages topic ("dm:..."), for
        #: reactions (which do not name the topic)
        self._topics = _RecentTopics(10_000)
        #: (chat, thread) -> the forum topic's name, as last seen (see _with_topic_name)
        self._topic_names = _RecentTopics(10_000)
        #: (channel id, post id) of the last channel posts this bot made: their copies in
        #: the discussion group are its own words, comments on them replies to it
        self._posts = _RecentTopics(10_000)
        #: old group chat id -> supergroup chat id, learnt from Telegram
        self._migrated: dict[str, str] = {}
        #: business connection id -> what business_connection updates said of it (None:
        #: looked up in the durable state and not found there)
        self._business: dict[str, BusinessConnection | None] = {}

    def __repr__(self) -> str:
        return f"TelegramAdapter(account={self.account!r}, mode={self.mode!r})"

    @property
    def served_by_every_worker(self) -> bool:
        """Webhook updates may reach any `serve --worker` behind a load balancer; polling may not."""
        return self.mode == "webhook"

    # lifecycle --------------------------------------------------------------

    async def start(self, ctx: AdapterContext) -> None:
        """Learn who the bot is, then poll or register the webhook."""
        try:
            await self._start(ctx)
        except BaseException:
            await self.stop()  # nothing half-started stays behind (an open session, a route)
            raise

    async def _start(self, ctx: AdapterContext) -> None:
        self._ctx = ctx
        self._api.open()
        self._migrated = json.loads(await ctx.get_state("migrations") or "{}")
        if not await self._learn_identity():
            self._identity_task = asyncio.create_task(self._learn_identity_later())
        allowed = tuple(self.allowed_updates)
        if self.mode == "webhook":
            hook = WebhookSettings(
                self.webhook_path, self.webhook_url, self.webhook_max_connections, allowed
            )
            self._receiver = WebhookReceiver(self._api, ctx, self.account, hook, self._state_for)
        else:
            poll = PollSettings(
                self.poll_timeout,
                self.poll_limit,
                allowed,
                self.request_timeout,
                self.retry_initial,
                self.retry_max,
            )
            self._receiver = Poller(self._api, ctx, self.account, poll, self._state_for)
        await self._receiver.start()
        await ctx.set_state("mode", self.mode)

    async def stop(self) -> None:
        """Stop receiving (an ingest in progress may finish) and close the session. Idempotent."""
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            await receiver.stop()
        task, self._identity_task = self._identity_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._api.close()

    # receiving --------------------------------------------------------------

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        """Turn one Bot API Update into an Event (see normalize.py).

        A reaction update does not say which forum topic (or which user's topic of
        a channel's direct messages chat) its message is in; when this process has
        seen that message (received or sent), the reaction is placed in its topic.
        The discussion group's copy of a channel post this process made is the
        bot's own (None), and a comment on it replies to the bot.
        """
        identity = self._identity
        if identity.username != self._username or identity.commands is not self._commands:
            # getMe and getMyCommands may have taught us more since the last update
            identity = BotIdentity(self._token.bot_id, self._username, self._commands)
            self._identity = identity
        aliases = self._aliases if self._migrated else None
        event = normalize_update(raw, self.account, identity, aliases)
        if event is None or event.platform_message_id is None:
            if event is None:
                self._learn_topic_rename(raw)
            return event
        message_id = event.platform_message_id
        if event.conversation_kind == "thread" and event.address.thread is not None:
            event = self._with_topic_name(event)
        if self.business_owner_triggers and event.meta.get(BUSINESS_OWNER) is True:
            # this account lets the business owner's own words start runs too
            event = evolve(event, meta={k: v for k, v in event.meta.items() if k != NO_RUN})
        if self._posts and (event.reply_to is not None or "forwarded" in event.meta):
            # this bot posts in a channel: its discussion group's copies are its own words
            message = raw.get("message") or raw.get("edited_message")
            if isinstance(message, Mapping):
                if self._copies_own_post(message):
                    return None  # (the post itself is stored, in the channel's conversation)
                if not event.mentions_me and self._copies_own_post(message.get("reply_to_message")):
                    return evolve(event, mentions_me=True)  # a comment on the bot's post
        chat, thread = event.address.chat, event.address.thread
        if event.kind == "reaction" and thread is None:
            thread = self._topics.get((chat, message_id))
            if thread is not None:
                address = Address(self.account, chat, thread)
                # a topic of a private chat (a bot's threaded mode) is still a direct chat
                direct = event.conversation_kind == "direct" or thread.startswith(
                    DIRECT_MESSAGES_THREAD
                )
                kind: ConversationKind = "direct" if direct else "thread"
                return evolve(event, address=address, conversation_kind=kind)
        elif thread is not None:
            self._topics.remember((chat, message_id), thread)
        return event

    def _with_topic_name(self, event: Event) -> Event:
        """A forum topic's message titled with its topic: normalize names it from the
        creation message most messages carry; a reply carries its target instead, and
        takes the name this adapter last saw for the topic."""
        key = (event.address.chat, event.address.thread or "")
        name = event.meta.get(TOPIC_NAME)
        if isinstance(name, str):
            self._topic_names.remember(key, name)
            return event
        known = self._topic_names.get(key)
        if known is None:
            # unknown since a restart: the title stays as the store has it, until a message
            # names the topic (the forum's title alone would undo the name each time)
            return evolve(event, conversation_title=None)
        forum = event.conversation_title
        return evolve(event, conversation_title=f"{forum} / {known}" if forum else known)

    def _learn_topic_rename(self, raw: Mapping[str, Any]) -> None:
        """A ``forum_topic_edited`` service message: the topic's new name, for its next
        messages (the conversation's title changes with the first of them)."""
        message = raw.get("message")
        if not isinstance(message, Mapping) or message.get("forum_topic_edited") is None:
            return
        name = topic_name_of(message.get("forum_topic_edited"))
        chat = message.get("chat")
        thread = int_field(message.get("message_thread_id"))
        if name is not None and isinstance(chat, Mapping) and thread is not None and thread > 0:
            chat_id = int_field(chat.get("id"))
            if chat_id is not None:
                chat_text = str(chat_id)
                chat_text = self._aliases.get(chat_text, chat_text) if self._migrated else chat_text
                self._topic_names.remember((chat_text, str(thread)), name)

    def _copies_own_post(self, message: Any) -> bool:
        """Is `message` a discussion group's copy of a channel post this bot made
        (``is_automatic_forward``, from a post whose id this process sent)?"""
        if not isinstance(message, Mapping) or message.get("is_automatic_forward") is not True:
            return False
        origin = message.get("forward_origin")
        if not isinstance(origin, Mapping) or origin.get("type") != "channel":
            return False
        channel = origin.get("chat")
        channel_id = int_field(channel.get("id")) if isinstance(channel, Mapping) else None
        post_id = int_field(origin.get("message_id"))
        if channel_id is None or post_id is None:
            return False
        return self._posts.get((str(channel_id), str(post_id))) is not None

    @property
    def _aliases(self) -> dict[str, str]:
        """Supergroup id -> the id its conversation is filed under (the original group)."""
        aliases: dict[str, str] = {}
        for old, new in self._migrated.items():
            original = old
            while original in aliases:  # a chain of upgrades files under the first id
                original = aliases[original]
            aliases[new] = original
        return aliases

    def _state_for(self, update: Mapping[str, Any]) -> dict[str, str | None]:
        """The adapter state an update changes, to commit with it: a group upgrade, a
        business connection turned on or off."""
        if not isinstance(update, Mapping):
            return {}
        if update.get("business_connection") is not None:
            return self._learn_business_connection(update["business_connection"])
        return self._learn_migration(update)

    def _learn_business_connection(self, raw: Any) -> dict[str, str | None]:
        """Note what a business_connection update says; return the state to commit with it."""
        connection = BusinessConnection.from_update(raw) if isinstance(raw, Mapping) else None
        if connection is None:
            return {}
        known = self._business.get(connection.id)
        if known != connection:
            self._business[connection.id] = connection
            self._log().info(
                "Telegram Business connection %s of user %s: %s",
                connection.id,
                connection.user_id,
                connection.refusal() or "enabled, the bot may reply",
            )
        return {state_key(connection.id): connection.to_state()}

    async def _business_connection(self, connection_id: str) -> BusinessConnection | None:
        """What this bot knows of a business connection (from memory, else the state)."""
        if connection_id in self._business:
            return self._business[connection_id]
        connection: BusinessConnection | None = None
        if self._ctx is not None:
            saved = await self._ctx.get_state(state_key(connection_id))
            if saved is not None:
                connection = BusinessConnection.from_state(connection_id, saved)
        self._business[connection_id] = connection
        return connection

    async def _business_target(self, address: Address) -> tuple[str, int] | None:
        """(connection id, chat id) of a business chat address, None for any other
        address; Rejected when it is malformed or its connection may not be used."""
        if not address.chat.startswith(BUSINESS_CHAT):
            return None
        try:
            target = parse_business_chat(address.chat)
        except ValueError as error:
            raise Rejected(str(error)) from None
        assert target is not None
        if address.thread is not None:
            raise Rejected(f"a Telegram Business chat has no threads (got {address.thread!r})")
        connection = await self._business_connection(target[0])
        refusal = connection.refusal() if connection is not None else None
        if refusal is not None:
            raise Rejected(refusal)
        return target

    def _learn_migration(self, update: Mapping[str, Any]) -> dict[str, str | None]:
        """Note a group upgrade announced by `update`; return the state to commit with it."""
        found = migration_of(update) if isinstance(update, Mapping) else None
        if found is None:
            return {}
        old, new = found
        if self._migrated.get(old) != new:
            self._migrated[old] = new
            self._log().info("group %s was upgraded to supergroup %s; following it", old, new)
        # returned even when already known here: the commit that should have carried it
        # may have failed (and the update is being read again), and it must reach the store
        return {"migrations": json.dumps(self._migrated)}

    async def _learn_identity(self, quiet: bool = False) -> bool:
        """Ask getMe who the bot is; return False when Telegram could not say (yet)."""
        try:
            me = await self._api.call("getMe")
        except TelegramError as error:
            if error.code in (401, 404):
                raise ConfigError(
                    f"Telegram refused the token of account {self.account!r} ({error.description});"
                    " check `token` against @BotFather",
                    key="token",
                ) from None
            if not quiet:
                self._log().warning(
                    "getMe failed (%s); @mentions of the bot are not recognised until it works",
                    error,
                )
            return False
        self._username = me.get("username") or self._username
        name = " ".join(str(p) for p in (me.get("first_name"), me.get("last_name")) if p)
        self.me = Sender(str(me.get("id", self._token.bot_id)), name, self._username, True)
        await self._learn_commands()
        return True

    async def _learn_commands(self) -> None:
        """Add the bot's command menus (getMyCommands) to the configured `commands`: the
        default one and those set for groups only (`setMyCommands` with a scope, which
        the default menu does not list), as a group's members are shown them."""
        names: set[str] = set()
        for scope in _GROUP_COMMAND_SCOPES:
            try:
                menu = await self._api.call(
                    "getMyCommands", None if scope is None else {"scope": {"type": scope}}
                )
            except TelegramError as error:
                if scope is None:
                    self._log().info(
                        "getMyCommands failed (%s); a bare /command in a group counts as"
                        " addressed to this bot only if it is in `commands`",
                        error.description or error.outcome,
                    )
                    return
                continue  # a scoped menu that cannot be read adds nothing
            names.update(
                str(item["command"]).lower()
                for item in (menu if isinstance(menu, list) else ())
                if isinstance(item, Mapping) and isinstance(item.get("command"), str)
            )
        self._commands = self._configured_commands | names

    async def _learn_identity_later(self) -> None:
        delay = self.retry_initial
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_max)
            try:
                if await self._learn_identity(quiet=True):
                    self._log().info("getMe works now; the bot is @%s", self._username)
                    return
            except ConfigError as error:
                self._log().error("%s", error)
                return

    # sending ------------------------------------------------------------------

    async def send(self, outbound: Outbound) -> Receipt:
        """Send, edit or react. Raise RateLimited, Rejected or Uncertain only."""
        try:
            if outbound.kind == "edit":
                return await self._edit(outbound)
            if outbound.kind == "reaction":
                return await self._react(outbound)
            return await self._send_text(outbound)
        except DeliveryError:
            raise
        except TelegramError as error:
            raise _delivery_error(error) from None

    async def check_address(self, address: Address) -> None:
        """Raise Rejected unless Telegram knows the chat (asked before a first operator send).

        The chat must be a Telegram id (an integer) or a public @username, a
        thread a topic's id in a forum or a private chat (Bot API 9.3's topics
        with a bot), or ``dm:{topic id}`` in a channel's
        direct messages chat (where Telegram takes no send without a topic), and
        `getChat` must find the chat for this bot: Telegram answers "chat not
        found" for a mistyped id and for a person who never started the bot.
        When Telegram cannot be asked (429, 5xx, no connection) the address is
        taken as it is: the send says what became of it.
        """
        if address.chat.startswith(BUSINESS_CHAT):
            return await self._check_business_address(address)
        chat = self._chat(address)
        username = chat.startswith("@") and len(chat) > 1 and chat[1:].replace("_", "a").isalnum()
        if not username:
            _number(chat, "chat")
        thread = address.thread
        direct = False
        if thread is not None and thread.startswith(DIRECT_MESSAGES_THREAD):
            _direct_messages_topic(thread)  # Rejected unless written as normalize writes it
            direct = True
        elif thread is not None and _number(thread, "topic") <= 0:
            raise Rejected(f"topic {thread!r} is not a forum topic id (a positive integer)")
        try:
            info = await self._api.call("getChat", {"chat_id": chat})
        except TelegramError as error:
            refused = _delivery_error(error)
            if isinstance(refused, Rejected) and error.migrate_to_chat_id is None:
                raise Rejected(f"Telegram says: {error.description}") from None
            return  # rate limited, down, or a group that moved on: the send will tell
        known = info if isinstance(info, Mapping) else {}
        if known.get("is_direct_messages") is True and not direct:
            raise Rejected(
                f"chat {chat} is a channel's direct messages chat: send to one user's topic,"
                f" thread {DIRECT_MESSAGES_THREAD}<topic id> (see `backchannel conversations`)"
            )
        if direct and known.get("is_direct_messages") is not True:
            raise Rejected(
                f"chat {chat} is not a channel's direct messages chat: it has no"
                f" {DIRECT_MESSAGES_THREAD} topics"
            )
        if (
            thread is not None
            and not direct
            and not known.get("is_forum")
            # a private chat's topics (Bot API 9.3): getChat says nothing of them
            and known.get("type") != "private"
        ):
            raise Rejected(f"chat {chat} is not a forum: it has no topics")

    async def _check_business_address(self, address: Address) -> None:
        """A business chat: well formed, and its connection known to Telegram and usable.

        getBusinessConnection says whether the connection exists and is enabled (and
        what it says is remembered); Telegram offers no way to ask about the chat.
        """
        target = await self._business_target(address)
        assert target is not None
        connection_id, chat_id = target
        try:
            info = await self._api.call(
                "getBusinessConnection", {"business_connection_id": connection_id}
            )
        except TelegramError as error:
            if isinstance(_delivery_error(error), Rejected):
                raise Rejected(f"Telegram says: {error.description}") from None
            return  # rate limited or down: the send will tell
        connection = BusinessConnection.from_update(info) if isinstance(info, Mapping) else None
        if connection is None:
            return
        state = self._learn_business_connection(info)
        if self._ctx is not None:
            for key, value in state.items():
                await self._ctx.set_state(key, value)
        refusal = connection.refusal()
        if refusal is not None:
            raise Rejected(refusal)
        if connection.user_id == str(chat_id):
            raise Rejected(
                f"chat {chat_id} is the business owner's own: a business chat is one with a"
                " customer"
            )

    async def typing(self, address: Address) -> None:
        """Show "typing…" in the conversation (Telegram shows it for about 5 seconds).

        Not in a channel's direct messages topic: sendChatAction takes no
        `direct_messages_topic_id`, and shown to the whole chat it would tell
        nothing to the user waiting in their topic.
        """
        if address.thread and address.thread.startswith(DIRECT_MESSAGES_THREAD):
            return
        params: dict[str, Any] = {"action": "typing"}
        try:
            business = await self._business_target(address)
        except Rejected:
            return  # a connection turned off: no one to show it to
        if business is not None:
            params["business_connection_id"] = business[0]
        params["chat_id"] = self._chat(address)
        if address.thread and address.thread.isdigit():
            params["message_thread_id"] = int(address.thread)
        try:
            await self._api.call("sendChatAction", params)
        except TelegramError as error:
            self._log().debug("sendChatAction failed: %s", error)

    async def _send_text(self, outbound: Outbound) -> Receipt:
        parts = split_text(outbound.text, MAX_TEXT, utf16_len)
        business = await self._business_target(outbound.address)
        where: dict[str, Any] = (
            _topic_params(outbound.address.thread)
            if business is None
            else {"business_connection_id": business[0]}
        )
        ids: list[str] = []
        for index, part in enumerate(parts):
            params: dict[str, Any] = {"text": part, **where}
            if outbound.quiet:
                params["disable_notification"] = True
            if index == 0 and outbound.reply_to:
                params["reply_parameters"] = {
                    "message_id": _number(outbound.reply_to, "reply_to message id"),
                    "allow_sending_without_reply": True,
                }
            try:
                message = await self._call_paced(
                    outbound.address, "sendMessage", params, absorb_429=index > 0
                )
            except TelegramError as error:
                if index == 0:
                    raise
                raise Uncertain(
                    f"parts 1-{index} of {len(parts)} were delivered, part {index + 1} was not "
                    f"({error.description})"
                ) from None
            if not isinstance(message, Mapping) or message.get("message_id") is None:
                # Telegram always answers a Message; anything else (a proxy, a
                # broken relay) leaves us not knowing what was delivered
                raise Uncertain(f"sendMessage answered without a message id (part {index + 1})")
            ids.append(str(message["message_id"]))
            chat = message.get("chat")
            if isinstance(chat, Mapping) and chat.get("type") == "channel":
                self._posts.remember((str(chat.get("id")), ids[-1]), "")
            if outbound.address.thread:
                self._topics.remember((outbound.address.chat, ids[-1]), outbound.address.thread)
        return Receipt(ids[0], part_ids=tuple(ids))

    async def _edit(self, outbound: Outbound) -> Receipt:
        if not outbound.target:
            raise Rejected("an edit needs the target message id")
        if utf16_len(outbound.text) > MAX_TEXT:
            raise Rejected(f"an edited text may hold at most {MAX_TEXT} UTF-16 units")
        params: dict[str, Any] = {
            "message_id": _number(outbound.target, "target message id"),
            "text": outbound.text,
        }
        business = await self._business_target(outbound.address)
        if business is not None:
            params["business_connection_id"] = business[0]
        try:
            await self._call_paced(outbound.address, "editMessageText", params)
        except TelegramError as error:
            if error.code != 400 or "message is not modified" not in error.description:
                raise
            # the message already says exactly this: the edit is in place
        return Receipt(outbound.target, part_ids=(outbound.target,))

    async def _react(self, outbound: Outbound) -> Receipt:
        if not outbound.target:
            raise Rejected("a reaction needs the target message id")
        if outbound.address.chat.startswith(BUSINESS_CHAT):
            raise Rejected(
                "a bot cannot react in a Telegram Business chat (setMessageReaction takes no"
                " business_connection_id)"
            )
        # Telegram's reaction set spells ❤ without the emoji variation selector
        emoji = outbound.text.strip().replace("\ufe0f", "")
        params = {
            "chat_id": self._chat(outbound.address),
            "message_id": _number(outbound.target, "target message id"),
            "reaction": [{"type": "emoji", "emoji": emoji}] if emoji else [],
        }
        await self._with_migration(outbound.address, "setMessageReaction", params)
        return Receipt(outbound.target, part_ids=(outbound.target,))

    async def _call_paced(
        self, address: Address, method: str, params: dict[str, Any], absorb_429: bool = False
    ) -> Any:
        """Wait for a pacing turn, then call; with `absorb_429`, wait out Telegram's 429s too."""
        waited = 0.0
        while True:
            chat = self._chat(address)
            try:
                async with self._pacer.turn(chat, is_group=chat.startswith("-")):
                    return await self._with_migration(address, method, params)
            except TelegramError as error:
                retry_after = error.retry_after or 1.0
                if (
                    not absorb_429
                    or error.code != 429
                    or waited + retry_after > MAX_PART_RETRY_WAIT
                ):
                    raise
                waited += retry_after
                await asyncio.sleep(retry_after)

    async def _with_migration(self, address: Address, method: str, params: dict[str, Any]) -> Any:
        """Call with `chat_id` set; follow a group upgraded to a supergroup once."""
        chat = self._chat(address)
        try:
            return await self._api.call(method, {**params, "chat_id": chat})
        except TelegramError as error:
            if error.migrate_to_chat_id is None:
                raise
            new_chat = str(error.migrate_to_chat_id)
            self._migrated[address.chat] = new_chat
            if self._ctx is not None:
                await self._ctx.set_state("migrations", json.dumps(self._migrated))
            self._log().info("group %s became supergroup %s; sending there", address.chat, new_chat)
            return await self._api.call(method, {**params, "chat_id": new_chat})

    def _chat(self, address: Address) -> str:
        """The chat_id to call the Bot API with: a group's supergroup, a business chat's
        own chat id."""
        chat = address.chat
        if chat.startswith(BUSINESS_CHAT):
            try:
                target = parse_business_chat(chat)
            except ValueError as error:
                raise Rejected(str(error)) from None
            assert target is not None
            return str(target[1])
        return self._migrated.get(chat, chat)

    def _log(self) -> Any:
        return self._ctx.log if self._ctx is not None else _fallback_log


def _number(value: str | None, what: str) -> int:
    """Return a Telegram id given as text; refuse (Rejected) anything else.

    Only as Telegram writes it (``str(int(value)) == value``): "+5", "007",
    " 7" or "1_000" would name the chat under a key inbound events never use.
    """
    try:
        number = int(str(value))
    except ValueError:
        number = None
    if number is None or str(number) != value:
        raise Rejected(
            f"{what} {value!r} is not a Telegram id (an integer, written without '+', "
            "spaces, '_' or leading zeros)"
        )
    return number


def _direct_messages_topic(thread: str) -> int:
    """Return the topic id of a ``dm:{topic id}`` thread; refuse (Rejected) anything else.

    As strict as `_number`: only the form normalize gives (a positive id,
    written as Telegram writes it), never a second key for the same topic.
    """
    try:
        number = _number(thread[len(DIRECT_MESSAGES_THREAD) :], "topic")
    except Rejected:
        number = 0
    if not 0 < number < 2**63:
        raise Rejected(
            f"thread {thread!r} is not a channel direct messages topic"
            f" ({DIRECT_MESSAGES_THREAD} and a positive integer, written without '+', spaces,"
            " '_' or leading zeros)"
        )
    return number


def _topic_params(thread: str | None) -> dict[str, int]:
    """The sendMessage parameters that put a message in `thread` (none for the chat itself)."""
    if not thread:
        return {}
    if thread.startswith(DIRECT_MESSAGES_THREAD):
        # required in a direct messages chat; message_thread_id (a forum's) is not it
        return {"direct_messages_topic_id": _direct_messages_topic(thread)}
    return {"message_thread_id": _number(thread, "thread id")}


def _delivery_error(error: TelegramError) -> DeliveryError:
    """Map a failed Bot API call to the delivery outcome it means."""
    if error.outcome == "unreachable":
        return RateLimited(5.0, f"could not connect to Telegram for {error.method}")
    if error.outcome != "error":
        return Uncertain(str(error))
    if error.code == 429:
        return RateLimited(error.retry_after or 1.0, f"Telegram: {error.description}")
    if error.code is not None and error.code >= 500:
        return Uncertain(str(error))
    return Rejected(error.description)


class _NumberReader:
    """Reads numeric settings, raising ConfigError that names the key."""

    def __init__(self, settings: Mapping[str, Any]):
        self._settings = settings

    def int(self, key: str, default: int, low: int) -> int:
        value = self._settings.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"expected an integer >= {low}, got {value!r}", key=key)
        return value

    def float(self, key: str, default: float) -> float:
        value = self._settings.get(key, default)
        if not positive_number(value):
            raise ConfigError(f"expected a positive number of seconds, got {value!r}", key=key)
        return float(value)


class _RecentTopics:
    """The last `size` keys remembered, each with its value, oldest forgotten first: the
    forum topic of topic messages seen, or the channel posts this bot made ("")."""

    def __init__(self, size: int):
        self._size = size
        self._topics: OrderedDict[tuple[str, str], str] = OrderedDict()

    def remember(self, key: tuple[str, str], thread: str) -> None:
        self._topics[key] = thread
        self._topics.move_to_end(key)
        while len(self._topics) > self._size:
            self._topics.popitem(last=False)

    def get(self, key: tuple[str, str]) -> str | None:
        return self._topics.get(key)

    def __len__(self) -> int:
        return len(self._topics)

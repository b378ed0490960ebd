"""`DiscordAdapter`: one Discord bot as a backchannel account, on discord.py (unpatched).

Receiving: discord.py keeps the Gateway connection (heartbeats, reconnect,
RESUME). The adapter listens to ``on_socket_raw_receive`` (so discord.py is
built with ``enable_debug_events=True``), queues each raw gateway payload in
arrival order, and one task hands MESSAGE_CREATE / UPDATE / DELETE dispatches,
as the documented JSON, to ``ctx.ingest``. Replays after a RESUME and duplicate
dispatches carry the same event ids (message id; message id + edited_timestamp
for edits), so the store keeps one row each.

When discord.py's connection loop ends on its own after start (an exception it
does not reconnect on, such as a frame that is not JSON), the adapter restarts
receiving with a fresh client, waiting `reconnect_delay` seconds, doubling up to
`reconnect_max_delay`; the new session's READY catches up from the cursors.
A refused token or a fatal close code (4004, 4010-4014) is not retried.

Sending goes through discord.py's HTTP layer and its rate limiter. Waits the
limiter would take longer than ``max_ratelimit_wait`` seconds surface as
RateLimited so the switchboard retries from the outbox instead of blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import discord
import yarl
from backchannel.adapter import AdapterContext, Capabilities, split_text
from backchannel.errors import (
    BackchannelError,
    NormalizeError,
    RateLimited,
    Rejected,
    Uncertain,
)
from backchannel.model import Address, Event, Outbound, Receipt, Sender
from backchannel.wire import BadPayload, parse_json
from discord.gateway import DiscordWebSocket
from discord.http import Route

from .catchup import Cursor, Cursors, History, late_dispatches, read_history
from .failures import (
    DiscordStartError,
    delivery_error,
    explain_connection_failure,
    fatal_failure,
    one_line,
)
from .normalize import (
    CONTEXT_KEY,
    MESSAGE_EVENTS,
    REACTION_EVENTS,
    as_snowflake,
    completes_deferred,
    normalize_payload,
)
from .settings import DiscordSettings

__all__ = ["DiscordAdapter", "DiscordStartError"]

_T = TypeVar("_T")
#: seconds before the second try to store a Gateway event the store refused, doubling
#: up to STORE_RETRY_MAX: the queue waits on it (see _ingest)
STORE_RETRY_FIRST = 0.5
STORE_RETRY_MAX = 30.0
#: tries at `GET /channels/{id}` when Discord answers with a rate limit or a 5xx
_LOOKUP_ATTEMPTS = 3
#: the longest wait between two of them, in seconds (receiving waits meanwhile)
_LOOKUP_MAX_WAIT = 10.0
#: seconds a failed client's Gateway socket gets to close before it is left to its HTTP's close
_SOCKET_CLOSE_WAIT = 5.0
#: channel mention markup in a message's text (<#id>)
_CHANNEL_MENTION = re.compile(r"<#([0-9]{1,20})>")
#: the most role and channel mentions of one message named from the cache (each kind)
_MENTIONS_NAMED = 50


class DiscordAdapter:
    """One Discord bot account. Settings: see docs/channels/discord.md."""

    channel = "discord"
    #: payload fields that carry a secret: an interaction's reply token
    secret_fields = frozenset({"token"})

    def __init__(self, account: str, settings: Mapping[str, Any]):
        self.account = account
        self.settings = DiscordSettings.parse(account, settings)
        self.capabilities = Capabilities(
            threads=True,
            edits=True,
            reactions=True,
            typing=True,
            replies=True,
            max_text_len=2000,
            display_name="Discord",
        )
        self.me: Sender | None = None
        self._ctx: AdapterContext | None = None
        #: the client receiving (or about to) and sending; during a restart's backoff, the
        #: failed one, whose Gateway socket is closed and whose HTTP still sends
        self._client: _GatewayClient | None = None
        #: a restart's new client while it logs in (not yet sending)
        self._pending: _GatewayClient | None = None
        #: the client `_client` replaced, kept open for sends in flight until the next restart
        self._retired: _GatewayClient | None = None
        #: receiving: the first connection, then the supervisor that restarts it
        self._client_task: asyncio.Task[None] | None = None
        self._stopping = False
        #: when receiving stopped unexpectedly (monotonic), until a restarted client is ready
        self._down_since: float | None = None
        self._ingest_task: asyncio.Task[None] | None = None
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._ready = asyncio.Event()
        self._committed: OrderedDict[str, None] = OrderedDict()
        #: the gateway session of the payloads being read (from READY, in arrival order)
        self._session_id: str | None = None
        self._cursors = Cursors()
        #: channels discord.py's cache did not have, as fetched over REST (recent ones)
        self._fetched: OrderedDict[int, Any] = OrderedDict()

    def __repr__(self) -> str:
        return f"DiscordAdapter(account={self.account!r}, me={self.me!r})"

    # ------------------------------------------------------------ lifecycle

    async def start(self, ctx: AdapterContext) -> None:
        """Log in, connect to the Gateway and return once discord.py is ready.

        Raises DiscordStartError (a ConfigError) for a refused token, a
        privileged intent that is not enabled, or no READY within `ready_timeout`.
        """
        if self._client is not None:
            raise RuntimeError(f"Discord account {self.account!r} is already started")
        self._ctx = ctx
        self._stopping = False
        self._down_since = None
        self._ready = asyncio.Event()
        self._inbox = asyncio.Queue()
        self._cursors = await Cursors.load(ctx.get_state)
        # discord.py reads these class attributes for every client in the process
        if self.settings.api_base:
            Route.BASE = self.settings.api_base.rstrip("/")
        if self.settings.gateway_url:
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.settings.gateway_url)
        client = self._new_client()
        self._client = client
        self._ingest_task = asyncio.create_task(
            self._ingest_loop(), name=f"discord-ingest-{self.account}"
        )
        self._client_task = asyncio.create_task(
            self._receive(client), name=f"discord-{self.account}"
        )
        ready = asyncio.create_task(self._ready.wait())
        done, _ = await asyncio.wait(
            {ready, self._client_task},
            timeout=self.settings.ready_timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
        ready.cancel()
        if self._ready.is_set():
            return
        failure = self._client_task.exception() if self._client_task in done else None
        await self.stop()
        if isinstance(failure, BackchannelError):
            raise failure
        if failure is not None:
            raise DiscordStartError(
                f"discord.py failed while connecting account {self.account!r}: "
                f"{type(failure).__name__}: {failure}"
            ) from failure
        raise DiscordStartError(
            f"Discord account {self.account!r} was not ready within {self.settings.ready_timeout:g}s "
            "(no READY from the Gateway); check the network and Discord's status page"
        )

    async def stop(self) -> None:
        """Close the Gateway connection, store what was already received, close HTTP. Idempotent.

        Ends the supervisor too: no restart happens during or after stop.
        """
        self._stopping = True  # the supervisor starts nothing new from here on
        if self._ingest_task is not None and not self._ingest_task.done():
            # payloads discord.py already received are in no one else's hands: store them,
            # while the client can still say what their channels are (a guild message whose
            # channel no one can describe is refused, and the catch-up cursor moves past it)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._inbox.join(), self.settings.drain_timeout)
        clients = [c for c in (self._client, self._pending, self._retired) if c is not None]
        self._client = self._pending = self._retired = None
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()
        tasks = [task for task in (self._client_task, self._ingest_task) if task is not None]
        for task in tasks:
            task.cancel()
        # their errors were reported already (start raised them, or they were logged)
        await asyncio.gather(*tasks, return_exceptions=True)
        self._client_task = self._ingest_task = None

    def _new_client(self) -> _GatewayClient:
        client = _GatewayClient(self)
        # discord.py will not take a max_ratelimit_timeout under 30 s; shorter
        # waits belong to the switchboard's outbox retry, not to a blocked send
        client.http.max_ratelimit_timeout = self.settings.max_ratelimit_wait
        return client

    async def _receive(self, client: _GatewayClient) -> None:
        """The receiving task: the first connection (its failure is start's), then supervision."""
        error = await _ended(client.start(self.settings.token))
        if not self._ready.is_set():
            # start() is waiting for this task: it raises why, and stops the adapter
            if error is None:
                return
            failure = explain_connection_failure(error, self.account)
            if failure is None:
                raise error
            raise failure from None
        await self._supervise(client, error)

    async def _supervise(self, ended: _GatewayClient, error: Exception | None) -> None:
        """Restart receiving each time discord.py's loop ends, until stop() or a fatal failure.

        discord.py reconnects by itself on network errors, close codes it can
        resume after, op 7 and op 9; its loop ends for good on anything else
        (a frame that is not JSON, a READY without a field it needs). Then: one
        log line, a wait (`reconnect_delay`, doubling up to `reconnect_max_delay`;
        back to the start after a connection that stayed up that long), and a
        fresh client (the failed one is not made to connect again): it logs in,
        takes over sending, and connects. Its new session's READY catches up
        what was posted meanwhile. Until it takes over, the failed client's
        HTTP (its Gateway socket closed) goes on sending.
        """
        assert self._ctx is not None
        log = self._ctx.log
        backoff = _Backoff(self.settings.reconnect_delay, self.settings.reconnect_max_delay)
        attempt = 0
        while not self._stopping:
            if ended is not self._client:
                # a new client that never took over (its login failed)
                with contextlib.suppress(Exception):
                    await ended.close()
            else:
                await _close_gateway(ended)
            fatal = fatal_failure(error, self.account)
            if fatal is not None:
                # a refused token, a fatal close code: reconnecting cannot fix it
                log.error(
                    "Discord stopped listening: %s; not retried: receiving stays stopped "
                    "until backchannel is restarted",
                    fatal,
                )
                return
            delay = backoff.next(ended.uptime())
            what = _describe(error, self.account)
            if ended.ready_at is not None:
                attempt = 0
                self._down_since = time.monotonic()
                log.error("Discord stopped listening: %s; reconnecting in %gs", what, delay)
            else:
                attempt += 1
                log.warning(
                    "Discord could not reconnect (attempt %d): %s; next try in %gs",
                    attempt,
                    what,
                    delay,
                )
            await asyncio.sleep(delay)
            if self._stopping:
                return
            fresh = self._pending = self._new_client()
            error = await _ended(fresh.login(self.settings.token))
            if self._stopping:
                return  # stop() closed it
            self._pending = None
            if error is None:
                retired, self._retired, self._client = self._retired, self._client, fresh
                if retired is not None:
                    with contextlib.suppress(Exception):
                        await retired.close()
                if self._stopping:
                    return
                error = await _ended(fresh.connect())
            ended = fresh

    # ------------------------------------------------------------ receiving

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        """Return the Event for a raw gateway payload (see backchannel_discord.normalize)."""
        return normalize_payload(raw, account=self.account, bot_id=self.me.id if self.me else None)

    def is_committed(self, event_id: str) -> bool:
        """True once `event_id` was handed to ctx.ingest and the store committed it (recent ones)."""
        return event_id in self._committed

    def _on_raw(self, text: str | bytes) -> None:
        self._inbox.put_nowait(text if isinstance(text, str) else text.decode("utf-8", "replace"))

    def _on_ready(self, client: discord.Client) -> None:
        user = client.user
        if user is not None and self.me is None:
            self.me = Sender(str(user.id), user.global_name or user.name, user.name, is_bot=True)
        down_since, self._down_since = self._down_since, None
        if down_since is not None and client is self._client and self._ctx is not None:
            self._ctx.log.info(
                "Discord is listening again, after %.1fs", time.monotonic() - down_since
            )
        self._ready.set()

    async def _ingest_loop(self) -> None:
        while True:
            text = await self._inbox.get()
            try:
                await self._handle_raw(text)
            except asyncio.CancelledError:
                raise
            except Exception:
                # one payload of a shape nobody expected must not stop all receiving
                if self._ctx is not None:
                    self._ctx.log.exception("skipped a Discord Gateway payload it could not read")
            finally:
                self._inbox.task_done()

    async def _handle_raw(self, text: str) -> None:
        try:
            payload = parse_json(text)
        except BadPayload as error:
            if self._ctx is not None:
                self._ctx.log.warning("skipped a Discord Gateway payload: %s", error)
            return
        kind = payload.get("t") if isinstance(payload, dict) else None
        if not isinstance(kind, str):
            return  # not a dispatch (heartbeat acks, hello) or not one we can read
        if kind == "READY":
            ready = payload.get("d")
            session_id = ready.get("session_id") if isinstance(ready, dict) else None
            # a new session counts `s` from 1 again; a RESUME keeps the session (no READY)
            self._session_id = session_id if isinstance(session_id, str) and session_id else None
            user = ready.get("user") if isinstance(ready, dict) else None
            if isinstance(user, dict) and user.get("id"):
                name = user.get("global_name") or user.get("username") or ""
                self.me = Sender(str(user["id"]), name, user.get("username"), is_bot=True)
            if self.settings.catch_up:
                await self._guilds_loaded(ready)
                await self._catch_up()
        elif kind == "MESSAGE_REACTION_REMOVE_EMOJI" and isinstance(payload.get("d"), dict):
            # everyone's emoji, normal and super reactions alike: the store keeps a super
            # reaction as an emoji of its own (see normalize), so it is cleared as one too
            data = payload["d"]
            await self._ingest({**payload, "d": {**data, "burst": False}})
            await self._ingest({**payload, "d": {**data, "burst": True}})
        elif kind in MESSAGE_EVENTS:
            await self._ingest(payload)
        elif kind == "MESSAGE_DELETE_BULK":
            data = payload.get("d")
            ids = data.get("ids") if isinstance(data, dict) else None
            if not isinstance(data, dict) or not isinstance(ids, list):
                if self._ctx is not None:
                    self._ctx.log.warning("skipped a MESSAGE_DELETE_BULK without a list of ids")
                return
            for message_id in ids:
                single = {k: v for k, v in data.items() if k != "ids"}
                await self._ingest(
                    {"op": 0, "t": "MESSAGE_DELETE", "d": {**single, "id": message_id}}
                )

    async def _guilds_loaded(self, ready: object) -> None:
        """Wait until discord.py holds the servers the READY lists, or none came for
        `guild_ready_timeout` seconds (at most `ready_timeout` in all), as discord.py waits.

        READY lists every server unavailable, and discord.py empties its cache on it;
        each GUILD_CREATE after it brings a server's channels, names and the bot's role.
        Caught up before them, a missed message would have no server name in its title,
        no role or channel names, and a mention of the bot's role would start no run.
        Live dispatches wait meanwhile (the catch-up goes first).
        """
        client = self._client
        listed = ready.get("guilds") if isinstance(ready, dict) else None
        if client is None or not isinstance(listed, list):
            return
        waiting = {
            int(found)
            for guild in listed
            if isinstance(guild, dict) and (found := as_snowflake(guild.get("id"))) is not None
        }
        loop = asyncio.get_running_loop()
        start = last = loop.time()
        while waiting and not self._stopping and client is self._client:
            loaded = {
                guild_id
                for guild_id in waiting
                if (guild := client.get_guild(guild_id)) is not None and not guild.unavailable
            }
            now = loop.time()
            if loaded:
                waiting -= loaded
                last = now
            elif (
                now - last >= self.settings.guild_ready_timeout
                or now - start >= self.settings.ready_timeout
            ):
                return
            if waiting:
                await asyncio.sleep(0.02)

    async def _catch_up(self) -> None:
        """Ingest what was posted after each channel's cursor while no session was listening."""
        assert self._ctx is not None
        client = self._client
        for channel_id, cursor in list(self._cursors.by_channel.items()):
            if client is None:
                return
            try:
                history = await self._call(
                    read_history(client.http, channel_id, cursor, self.settings.catch_up_limit)
                )
            except (RateLimited, Rejected, Uncertain) as error:
                self._ctx.log.warning(
                    "could not read the history of Discord channel %s to catch up: %s",
                    channel_id,
                    error.reason,
                )
                continue
            for message in history.missed:
                await self._ingest({"op": 0, "t": "MESSAGE_CREATE", "d": message})
            await self._changed_while_away(channel_id, cursor, history)

    async def _changed_while_away(self, channel_id: str, cursor: Cursor, history: History) -> None:
        """Apply the edits and deletions made while no session listened to messages at or
        before the cursor (the newest page of them): Discord dispatches neither again.

        An edited message is ingested as the MESSAGE_UPDATE it would have been (its
        event id names the edit's time: one already stored changes nothing). A message
        stored here, within the page's span, that the page no longer holds was deleted.
        A deferred interaction response (stored empty, "<app> is thinking...") that
        the history shows answered is ingested as the update that completes it (an
        answer carries no ``edited_timestamp``: no one edited it).
        Reactions made meanwhile are not recovered: REST gives counts, not who reacted.
        """
        assert self._ctx is not None
        recent = history.recent
        if not recent:
            return
        for message in recent:
            if message.get("edited_timestamp"):
                await self._ingest({"op": 0, "t": "MESSAGE_UPDATE", "d": dict(message)})
        address = await self._address_of(reversed(recent))
        if address is None:
            return  # only our own messages (no event), or none normalize can place
        try:
            stored = await self._ctx.transcript(address, 2 * len(recent))
        except NotImplementedError:
            return
        # posted just before the cursor's message but dispatched after it, and lost with
        # a crash in between: the cursor had moved past them (the store drops any it has)
        kept_ids = {kept.platform_message_id for kept in stored if kept.platform_message_id}
        for message in late_dispatches(recent, cursor, kept_ids):
            await self._ingest({"op": 0, "t": "MESSAGE_CREATE", "d": dict(message)})
        empty = {
            kept.platform_message_id
            for kept in stored
            if not kept.text and not kept.attachments and kept.deleted_at is None
        }
        for message in recent:
            # answered, never edited: the answer to one that may be stored empty
            if (
                str(message.get("id")) in empty
                and completes_deferred(message)
                and not message.get("edited_timestamp")
            ):
                await self._ingest({"op": 0, "t": "MESSAGE_UPDATE", "d": dict(message)})
        present = {str(message.get("id")) for message in recent}
        # the page's span: from its oldest message, or from the start when it holds the
        # whole channel (a deleted message older than every one left is in it too)
        oldest = 0 if history.complete else min(int(message["id"]) for message in recent)
        for kept in stored:
            platform_id = kept.platform_message_id
            if platform_id is None or not platform_id.isdigit() or platform_id in present:
                continue
            if oldest <= int(platform_id) <= cursor.message_id:
                data = {"id": platform_id, "channel_id": channel_id}
                if cursor.guild_id:
                    data["guild_id"] = cursor.guild_id
                await self._ingest({"op": 0, "t": "MESSAGE_DELETE", "d": data})

    async def _address_of(self, messages: Iterable[dict[str, Any]]) -> Address | None:
        """The conversation of a channel's history: that of the first of `messages` that
        normalizes to an event (our own messages make none; the cursor moves on them)."""
        for message in messages:
            probe: dict[str, Any] = {"op": 0, "t": "MESSAGE_CREATE", "d": dict(message)}
            context = await self._context_for(message)
            if context:
                probe[CONTEXT_KEY] = context
            try:
                event = self.normalize(probe)
            except NormalizeError:
                return None  # its channel cannot be placed (an unknown thread parent)
            if event is not None:
                return event.address
        return None

    async def _ingest(self, payload: dict[str, Any]) -> None:
        assert self._ctx is not None
        data = payload.get("d")
        if not isinstance(data, dict):
            data = {}  # normalize says what is wrong with the payload
        if self._stopping and self._client is None and self._caught_up_later(payload, data):
            # came in after the drain: with no client its guild channel cannot be described,
            # and a refusal would move the catch-up cursor past it; the next start's
            # catch-up reads it, as if the process had stopped a moment earlier
            return
        context = await self._context_for(data)
        if payload.get("t") in REACTION_EVENTS and self._session_id:
            # a reaction's event id ends with the session and its `s` (see normalize)
            context["session_id"] = self._session_id
        if context:
            payload[CONTEXT_KEY] = context
        state = self._cursors.advance(data) if payload.get("t") == "MESSAGE_CREATE" else None
        kind = payload.get("t")
        attempt = 0
        while True:
            attempt += 1
            try:
                result = await self._ctx.ingest(payload, state=state)
            except asyncio.CancelledError:
                raise
            except Exception:
                # the store (or a router) failing: a database locked, a disk full, a server
                # away. Gateway events come once, and the next one would move the catch-up
                # cursor past this: so the queue waits on it until it is stored
                if attempt == 1:
                    self._ctx.log.exception(
                        "storing a Discord %s failed; trying again until it is stored", kind
                    )
                elif attempt % 10 == 0:
                    self._ctx.log.warning(
                        "storing a Discord %s still fails after %d tries", kind, attempt
                    )
                if self._stopping and attempt >= 3:
                    # stop() cannot wait for the store for ever
                    self._ctx.log.error(
                        "gave up storing a Discord %s at stop after %d tries; %s",
                        kind,
                        attempt,
                        "the next start's catch-up reads it"
                        if self._caught_up_later(payload, data)
                        else "it is lost",
                    )
                    return
                await asyncio.sleep(min(STORE_RETRY_FIRST * 2 ** (attempt - 1), STORE_RETRY_MAX))
                continue
            if attempt > 1:
                self._ctx.log.info("stored the Discord %s after %d tries", kind, attempt)
            if state and result.committed:
                self._cursors.committed(data)
            if result.event is not None and result.committed:
                self._committed[result.event.event_id] = None
                while len(self._committed) > 10_000:
                    self._committed.popitem(last=False)
            return

    def _caught_up_later(self, payload: Mapping[str, Any], data: Mapping[str, Any]) -> bool:
        """Whether the next start's catch-up brings this payload back: a guild message,
        edit or deletion in a channel it keeps a cursor for (not a reaction, nor a DM,
        which needs no lookup anyway, nor a channel it never read)."""
        return (
            payload.get("t") in ("MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE")
            and data.get("guild_id") is not None
            and str(data.get("channel_id")) in self._cursors.by_channel
        )

    async def _context_for(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """What discord.py's cache knows about the message's channel and guild.

        A guild channel that is not in the cache (a thread the bot never saw
        created, an archived thread someone wrote in again) is fetched once
        (``GET /channels/{id}``) so a thread's parent is known before normalize
        addresses it; the answer is kept in `_fetched`.
        """
        client = self._client
        if not isinstance(data, Mapping):
            return {}  # normalize says what is wrong with it
        try:
            channel_id = int(data.get("channel_id", ""))
        except (TypeError, ValueError, OverflowError):
            return {}
        channel = client.get_channel(channel_id) if client is not None else None
        if channel is None and data.get("guild_id") is not None:
            channel = await self._fetch_channel(channel_id)
            if channel is None:
                # thread or not, normalize cannot tell: it refuses rather than guess an address
                return {"channel_unknown": True}
        elif channel is None and "user_id" in data and "member" not in data:
            # a reaction in a DM names only the user, and discord.py caches no DM channel
            # (Discord sends bots no CHANNEL_CREATE for one): the channel names its recipient
            channel = await self._fetch_channel(channel_id)
        context: dict[str, Any] = {}
        user_id = data.get("user_id")
        if client is not None and isinstance(user_id, str | int) and "member" not in data:
            # a reaction in a DM, or any removal, names only the user: say who, if known
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                user = client.get_user(int(user_id))
                recipient = getattr(channel, "recipient", None)
                if user is None and recipient is not None and recipient.id == int(user_id):
                    # discord.py keeps users only while something holds them; a DM
                    # channel holds the person the bot talks with
                    user = recipient
                if user is not None:
                    context["user_name"] = user.global_name or user.name
        if channel is None:
            return context
        channel_type = getattr(channel, "type", None)
        if channel_type is not None:
            context["channel_type"] = channel_type.value
        name = getattr(channel, "name", None)
        if name:
            context["channel_name"] = name
        guild = getattr(channel, "guild", None)
        if guild is not None and guild.name:
            context["guild_name"] = guild.name
        if guild is not None and guild.self_role is not None:
            # people often pick the bot's role from the @ menu instead of the bot
            context["bot_role_id"] = str(guild.self_role.id)
        if isinstance(channel, discord.Thread):
            context["parent_id"] = str(channel.parent_id)
            parent = channel.parent
            if parent is not None:
                context["parent_name"] = parent.name
        if client is not None:
            context.update(_mentioned_names(client, guild, data))
        return context

    async def _fetch_channel(self, channel_id: int) -> Any:
        """The channel `channel_id` as Discord's REST API describes it, or None if it cannot say."""
        if channel_id in self._fetched:
            self._fetched.move_to_end(channel_id)
            return self._fetched[channel_id]
        client = self._client
        if client is None:
            return None
        for attempt in range(1, _LOOKUP_ATTEMPTS + 1):
            try:
                channel = await self._call(client.fetch_channel(channel_id))
                break
            except (RateLimited, Rejected, Uncertain) as error:
                # a rate limit or a 5xx says nothing of the channel: ask again (bounded)
                # rather than turn a good message into a dead letter
                transient = isinstance(error, RateLimited | Uncertain) and not isinstance(
                    error, _DiscordPyFailed
                )
                if not transient or attempt == _LOOKUP_ATTEMPTS or self._client is not client:
                    if self._ctx is not None:
                        self._ctx.log.warning(
                            "could not look up Discord channel %s (a thread's parent, "
                            "a DM's recipient): %s",
                            channel_id,
                            error.reason,
                        )
                    return None
                wait = error.retry_after if isinstance(error, RateLimited) else float(attempt)
                await asyncio.sleep(min(wait, _LOOKUP_MAX_WAIT))
        self._fetched[channel_id] = channel
        while len(self._fetched) > 1_000:
            self._fetched.popitem(last=False)
        return channel

    # ------------------------------------------------------------ sending

    async def check_address(self, address: Address) -> None:
        """Raise Rejected unless Discord knows the channel (asked before a first operator send).

        The chat (and a thread) must be snowflakes; the channel must be in
        discord.py's cache or `GET /channels/{id}` must find it for the bot
        (404 Unknown Channel for a typo, 403 Missing Access where the bot
        cannot see it). A thread must be addressed under its parent
        (``<parent>/<thread>``), never as a chat of its own. When Discord
        cannot be asked (rate limits, 5xx, not connected) the address is
        taken as it is: the send says what became of it.
        """
        channel_id = _channel_of(address)
        _snowflake(address.chat, "chat")
        client = self._client
        if client is None:
            return
        channel = client.get_channel(channel_id)
        if channel is None:
            try:
                channel = await self._call(client.fetch_channel(channel_id))
            except Rejected as error:
                raise Rejected(f"Discord says: {error.reason}") from None
            except (RateLimited, Uncertain):
                return
        parent = getattr(channel, "parent_id", None)
        if address.thread is not None:
            if not isinstance(channel, discord.Thread) or str(parent) != address.chat:
                raise Rejected(f"{address.thread} is not a thread of channel {address.chat}")
        elif isinstance(channel, discord.Thread):
            raise Rejected(
                f"{address.chat} is a thread: address it under its channel, as"
                f" {address.account}/{parent}/{address.chat}"
            )

    async def send(self, outbound: Outbound) -> Receipt:
        """Post, edit or react. Raises RateLimited, Rejected or Uncertain only."""
        client = self._client
        if client is None:
            raise RateLimited(5.0, f"Discord account {self.account!r} is not connected")
        channel = client.get_partial_messageable(_channel_of(outbound.address))
        if outbound.kind == "reaction":
            target = channel.get_partial_message(_snowflake(outbound.target, "target"))
            await self._call(target.add_reaction(outbound.text.strip()))
            return Receipt(str(target.id), (str(target.id),))
        if outbound.kind == "edit":
            if len(outbound.text) > self.capabilities.max_text_len:
                raise Rejected(
                    f"an edit must fit in one Discord message ({self.capabilities.max_text_len} "
                    f"characters); this text has {len(outbound.text)}"
                )
            target = channel.get_partial_message(_snowflake(outbound.target, "target"))
            await self._call(
                target.edit(content=outbound.text, allowed_mentions=self.settings.allowed_mentions)
            )
            return Receipt(str(target.id), (str(target.id),))
        return await self._post(channel, outbound)

    async def typing(self, address: Address) -> None:
        """Show "<bot> is typing..." in the conversation (lasts ~10 s on Discord)."""
        client = self._client
        if client is None:
            return
        with contextlib.suppress(RateLimited, Rejected, Uncertain):
            await self._call(client.http.send_typing(_channel_of(address)))

    async def _post(self, channel: discord.PartialMessageable, outbound: Outbound) -> Receipt:
        parts = split_text(outbound.text, self.capabilities.max_text_len) or [""]
        ids: list[str] = []
        for index, part in enumerate(parts):
            options: dict[str, Any] = {}
            if outbound.reply_to and index == 0:
                options["reference"] = discord.MessageReference(
                    message_id=_snowflake(outbound.reply_to, "reply_to"),
                    channel_id=channel.id,
                    fail_if_not_exists=False,
                )
            nonce = _nonce(outbound, index, part)
            if nonce is not None:
                options["nonce"] = nonce
            send = channel.send(
                content=part,
                allowed_mentions=self.settings.allowed_mentions,
                silent=outbound.quiet,
                **options,
            )
            try:
                message = await self._call(send)
            except (RateLimited, Rejected, Uncertain) as error:
                if not ids:
                    raise
                raise Uncertain(
                    f"part {index + 1} of {len(parts)} was not sent ({error.reason}); "
                    f"parts 1-{index} were delivered as messages {', '.join(ids)}"
                ) from None
            ids.append(str(message.id))
        return Receipt(ids[0], tuple(ids))

    async def _call(self, call: Awaitable[_T]) -> _T:
        """Await one discord.py HTTP call; map every failure to RateLimited / Rejected / Uncertain."""
        try:
            return await asyncio.wait_for(call, self.settings.request_timeout)
        except Exception as error:
            mapped = delivery_error(error, self.settings.request_timeout)
            if mapped is None:
                # discord.py failed in a way of its own (a 429 body without retry_after, a
                # channel of a type it does not know): still one of the three outcomes
                mapped = _DiscordPyFailed(
                    f"discord.py failed ({type(error).__name__}: {one_line(str(error))}); "
                    "the request may have gone through"
                )
            raise mapped from None


class _DiscordPyFailed(Uncertain):
    """A discord.py call failed in a way of its own (no HTTP status, no network error)."""


class _GatewayClient(discord.Client):
    """discord.Client with the intents and options the adapter needs, forwarding raw payloads."""

    def __init__(self, adapter: DiscordAdapter):
        intents = discord.Intents.none()
        intents.guilds = True  # channel, thread and guild names for titles
        intents.guild_messages = True
        intents.dm_messages = True
        intents.guild_reactions = True  # MESSAGE_REACTION_ADD / _REMOVE (not privileged)
        intents.dm_reactions = True
        # privileged: without it Discord blanks the text of guild messages that do not mention the bot
        intents.message_content = adapter.settings.message_content_intent
        super().__init__(
            intents=intents,
            enable_debug_events=True,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
            max_messages=None,
            heartbeat_timeout=adapter.settings.heartbeat_timeout,
            guild_ready_timeout=adapter.settings.guild_ready_timeout,
        )
        self._adapter = adapter
        #: when discord.py last said the client is ready (monotonic), None before
        self.ready_at: float | None = None
        # discord.py parses every dispatch to keep its cache, and an exception from one of its
        # parsers ends Client.connect: one dispatch it cannot read would stop all receiving.
        # The adapter reads each frame itself (on_socket_raw_receive runs before the parser),
        # so a parser failure costs only discord.py's cache update for that one dispatch.
        parsers = self._connection.parsers
        for event, parser in list(parsers.items()):
            parsers[event] = self._guarded(event, parser)

    def _guarded(self, event: str, parser: Callable[[Any], None]) -> Callable[[Any], None]:
        def parse(data: Any) -> None:
            try:
                parser(data)
            except Exception as error:
                ctx = self._adapter._ctx
                if ctx is not None:
                    ctx.log.warning(
                        "discord.py could not read a %s dispatch (%s: %s); "
                        "its cache skipped it, receiving goes on",
                        event,
                        type(error).__name__,
                        one_line(str(error)),
                    )

        return parse

    async def on_socket_raw_receive(self, msg: str | bytes) -> None:
        self._adapter._on_raw(msg)

    async def on_ready(self) -> None:
        self.ready_at = time.monotonic()
        self._adapter._on_ready(self)

    def uptime(self) -> float:
        """Seconds since the client was last ready (0 if it never was)."""
        return time.monotonic() - self.ready_at if self.ready_at is not None else 0.0

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        ctx = self._adapter._ctx
        if ctx is not None:
            ctx.log.exception("error in discord.py handler %s", event_method)


class _Backoff:
    """Waits between restarts: `first` seconds, doubling up to `cap`.

    Back to `first` after a connection that stayed up at least `cap` seconds.
    """

    def __init__(self, first: float, cap: float):
        self.first = first
        self.cap = cap
        self._next = first

    def next(self, uptime: float) -> float:
        """The wait before the next try, after a connection that was up `uptime` seconds."""
        if uptime >= self.cap:
            self._next = self.first
        delay = min(self._next, self.cap)
        self._next = min(self._next * 2, self.cap)
        return delay


async def _ended(run: Awaitable[Any]) -> Exception | None:
    """Await `run`; return the exception it ended with, None if it returned."""
    try:
        await run
    except Exception as error:
        return error
    return None


async def _close_gateway(client: _GatewayClient) -> None:
    """Close a failed client's Gateway socket (and heartbeat thread); its HTTP stays open."""
    ws = client.ws
    if ws is not None and ws.open:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(code=1000), _SOCKET_CLOSE_WAIT)


def _describe(error: Exception | None, account: str) -> str:
    """What ended discord.py's Gateway loop, on one line (never the token)."""
    if error is None:
        return "discord.py's Gateway loop ended"
    explained = explain_connection_failure(error, account)
    if explained is not None:
        return str(explained)
    return f"discord.py failed: {type(error).__name__}: {one_line(str(error))}"


def _mentioned_names(
    client: discord.Client, guild: discord.Guild | None, data: Mapping[str, Any]
) -> dict[str, dict[str, str]]:
    """The names of the roles and channels a message mentions, from discord.py's cache:
    the payload names mentioned users, but gives roles and channels by id only."""
    content = data.get("content")
    if not isinstance(content, str) or "<" not in content:
        return {}
    found: dict[str, dict[str, str]] = {}
    roles = data.get("mention_roles")
    if guild is not None and isinstance(roles, list):
        for role_id in roles[:_MENTIONS_NAMED]:
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                role = guild.get_role(int(role_id))
                if role is not None and role.name:
                    found.setdefault("role_names", {})[str(role.id)] = role.name
    for channel_id in _CHANNEL_MENTION.findall(content)[:_MENTIONS_NAMED]:
        with contextlib.suppress(ValueError, OverflowError):
            channel = client.get_channel(int(channel_id))
            name = getattr(channel, "name", None)
            if isinstance(name, str) and name:
                found.setdefault("channel_names", {})[channel_id] = name
    return found


def _nonce(outbound: Outbound, index: int, part: str) -> str | None:
    """A nonce Discord enforces: a retried send of the same outbox row returns the first message."""
    if outbound.outbox_id is None:
        return None
    digest = zlib.crc32(f"{outbound.address.key}\n{part}".encode())
    return f"b{outbound.outbox_id}.{index}.{digest:08x}"[:25]


def _channel_of(address: Address) -> int:
    """The Discord channel to post to: a thread's own id (a thread is a channel), else the chat."""
    if address.thread:
        return _snowflake(address.thread, "thread")
    return _snowflake(address.chat, "chat")


def _snowflake(value: str | None, what: str) -> int:
    """A Discord id as Discord writes it: ASCII digits, no leading zero (else another key)."""
    text = str(value)
    if value is None or not (text.isascii() and text.isdigit()) or str(int(text)) != text:
        raise Rejected(f"{what} must be a Discord id (a snowflake), got {value!r}")
    return int(text)

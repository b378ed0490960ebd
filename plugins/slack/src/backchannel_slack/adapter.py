"""`SlackAdapter`: one Slack app (bot token) as a backchannel account.

Receiving runs in one of two modes:

- ``socket``: slack-sdk's aiohttp `SocketModeClient` (app-level token). Each
  envelope is acknowledged only after `ctx.ingest` returned; the SDK replaces
  the socket after a ``disconnect`` message or a dropped connection, and what
  Slack redelivers is deduplicated by the store.
- ``events``: the Events API over HTTP on the switchboard's server. Requests
  are checked with `SignatureVerifier` (bad or stale -> 401, nothing stored)
  and answered 200 only after the commit.

Both hand the same ``event_callback`` body to `ctx.ingest`, after adding the
sender's and the conversation's names (``users.info``, ``conversations.info``)
under ``_backchannel`` so that `normalize` stays pure. Deliveries of one
message that overlap (Slack's retry while the first is still being stored, or
``message`` + ``app_mention`` for one mention) share one ingest.

Sending uses `AsyncWebClient`: chat.postMessage, chat.update, reactions.add.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from backchannel.adapter import AdapterContext, Capabilities, IngestResult, split_text
from backchannel.errors import (
    BackchannelError,
    ConfigError,
    DeliveryError,
    NormalizeError,
    Rejected,
    Uncertain,
)
from backchannel.logcount import CountedLog
from backchannel.model import Address, Event, Outbound, Receipt, Sender
from backchannel.store.cache import LRUCache
from backchannel.wire import BadPayload, parse_json
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from .delivery import call_slack, http_status
from .directory import SLACK_ID, Directory
from .normalize import (
    ENRICHMENT_KEY,
    USER_MENTION,
    BotIdentity,
    message_subtype,
    normalize_payload,
)
from .settings import SlackSettings, resolve_proxy

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["SlackAdapter"]

#: a read is retried once, quickly: lookups share Slack's 3 seconds with the store
READ_RETRY_INTERVAL = FixedValueRetryIntervalCalculator(0.25)

#: emoji agents like to send as characters, by Slack's names for them (without U+FE0F)
EMOJI_NAMES = {
    "👍": "thumbsup",
    "👎": "thumbsdown",
    "❤": "heart",
    "😂": "joy",
    "😄": "smile",
    "😀": "grinning",
    "😊": "blush",
    "🙂": "slightly_smiling_face",
    "😅": "sweat_smile",
    "😍": "heart_eyes",
    "😎": "sunglasses",
    "😢": "cry",
    "😮": "open_mouth",
    "🤔": "thinking_face",
    "🤖": "robot_face",
    "🎉": "tada",
    "👀": "eyes",
    "👏": "clap",
    "🙌": "raised_hands",
    "🙏": "pray",
    "👌": "ok_hand",
    "👋": "wave",
    "💪": "muscle",
    "🤝": "handshake",
    "🔥": "fire",
    "🚀": "rocket",
    "💯": "100",
    "⭐": "star",
    "💡": "bulb",
    "🐛": "bug",
    "🎯": "dart",
    "📌": "pushpin",
    "📝": "memo",
    "⏳": "hourglass_flowing_sand",
    "✅": "white_check_mark",
    "✔": "heavy_check_mark",
    "❌": "x",
    "⚠": "warning",
}


#: how many unreadable events' envelope ids are remembered (Slack retries within minutes)
UNREADABLE_REMEMBERED = 1024

#: at most this many people mentioned in one message are looked up to name them
MENTIONS_NAMED = 8

#: a Slack message ts as Slack writes it
SLACK_TS = re.compile(r"\A[0-9]{1,12}\.[0-9]{1,9}\Z")


class SlackAdapter:
    """A Slack app: Socket Mode or Events API in, Web API out."""

    channel = "slack"
    #: payload fields that carry a secret: the Events API envelope's legacy verification token
    secret_fields = frozenset({"token"})

    def __init__(self, account: str, settings: Mapping[str, Any]):
        self.account = account
        self.settings = SlackSettings.from_mapping(account, settings)
        self.capabilities = Capabilities(
            threads=True,
            edits=True,
            reactions=True,
            typing=False,
            replies=True,
            max_text_len=self.settings.max_text_len,
            display_name="Slack",
        )
        self.me: Sender | None = None
        self.identity = BotIdentity(_opt(settings.get("bot_user_id")), _opt(settings.get("bot_id")))
        self.team: str | None = None
        self.events_url: str | None = None
        self._ctx: AdapterContext | None = None
        self._log: logging.Logger | logging.LoggerAdapter[Any] = logging.getLogger(__name__)
        self._told_missing_read_scope = False
        self._reads: AsyncWebClient | None = None
        self._writes: AsyncWebClient | None = None
        self._socket: SocketModeClient | None = None
        self._verifier: SignatureVerifier | None = None
        self._directory: Directory | None = None
        self._inflight: dict[str, asyncio.Task[IngestResult]] = {}
        #: envelope event_ids of recent unreadable events (each is one dead letter)
        self._unreadable: LRUCache[str, bool] = LRUCache(UNREADABLE_REMEMBERED)
        self._threads: set[str] = set()
        self._started = False
        #: received: deliveries with an event; joined: those that shared an in-flight ingest
        self.counters: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"SlackAdapter(account={self.account!r}, mode={self.settings.mode!r})"

    @property
    def served_by_every_worker(self) -> bool:
        """Events API requests may reach any `serve --worker`; a Socket Mode socket is one."""
        return self.settings.mode == "events"

    # lifecycle ---------------------------------------------------------------
    async def start(self, ctx: AdapterContext) -> None:
        """Check the bot token (auth.test), then connect Socket Mode or add the events route."""
        self._ctx = ctx
        self._log = ctx.log
        #: anyone can send a forged signature: counted, not a line each
        self._bad_signatures = CountedLog(ctx.log)
        settings = self.settings
        sdk_logger = ctx.log.logger
        proxy = resolve_proxy(settings.proxy, settings.api_base)
        self._reads = self._client(sdk_logger, proxy, reads=True)
        self._writes = self._client(sdk_logger, proxy, reads=False)
        reads = self._reads
        self._directory = Directory(
            fetch_user=lambda user: _data(reads.users_info(user=user)),
            fetch_channel=lambda chat: _data(reads.conversations_info(channel=chat)),
            ttl=settings.name_ttl,
            log=self._log,
        )
        await self._authenticate()
        self._started = True
        if settings.mode == "socket":
            await self._connect_socket(sdk_logger, proxy)
        else:
            self._verifier = SignatureVerifier(settings.signing_secret or "")
            self.events_url = ctx.routes.add(
                "POST", settings.events_path, self._handle_http, check=_unsigned
            )
            self._log.info("Slack events are expected at %s", self.events_url)

    async def stop(self) -> None:
        """Disconnect, drop the route, let in-flight ingests finish (briefly). Idempotent."""
        if not self._started:
            return
        self._started = False
        if self._socket is not None:
            socket, self._socket = self._socket, None
            await socket.close()
        if self._ctx is not None and self.settings.mode == "events":
            self._ctx.routes.remove("POST", self.settings.events_path)
        pending = list(self._inflight.values())
        if pending:
            _done, still = await asyncio.wait(pending, timeout=5.0)
            for task in still:
                task.cancel()

    def _client(self, logger: logging.Logger, proxy: str | None, *, reads: bool) -> AsyncWebClient:
        # Reads are idempotent: retry a reset connection and a 500/503 once.
        # Writes retry only a connection that was never made (nothing was sent):
        # a post retried after a reset or a 5xx could appear twice in Slack.
        # Neither attaches the rate-limit handler: a send's 429 goes to the
        # outbox as RateLimited(Retry-After), and a lookup's 429 just skips the name.
        handlers = (
            [
                AsyncConnectionErrorRetryHandler(1, interval_calculator=READ_RETRY_INTERVAL),
                AsyncServerErrorRetryHandler(1, interval_calculator=READ_RETRY_INTERVAL),
            ]
            if reads
            else [
                AsyncConnectionErrorRetryHandler(
                    max_retry_count=1, error_types=[aiohttp.ClientConnectorError]
                )
            ]
        )
        client = AsyncWebClient(
            token=self.settings.bot_token,
            base_url=self.settings.api_base,
            timeout=self.settings.timeout,  # type: ignore[arg-type]
            logger=logger,
            retry_handlers=handlers,  # type: ignore[arg-type]
        )
        client.proxy = proxy  # slack-sdk copied HTTPS_PROXY in; apply NO_PROXY / the setting
        return client

    async def _authenticate(self) -> None:
        assert self._reads is not None
        try:
            auth = await self._reads.auth_test()
        except SlackApiError as error:
            if not _refused(error):
                raise BackchannelError(
                    f"account {self.account}: Slack is unavailable at start "
                    f"({_error_code(error)}); try again later"
                ) from None
            raise ConfigError(
                f"Slack refused the bot token ({_error_code(error)}); "
                "check it and the app's installation",
                key=f"accounts.{self.account}.bot_token",
            ) from None
        except (aiohttp.ClientError, TimeoutError) as error:
            raise BackchannelError(
                f"account {self.account}: could not reach Slack at {self.settings.api_base} "
                f"({type(error).__name__})"
            ) from None
        user_id = _opt(auth.get("user_id"))
        configured = self.identity.user_id
        if user_id is None and configured is None:
            raise BackchannelError(
                f"account {self.account}: Slack's auth.test named no bot user for this token;"
                " set bot_user_id in the account's settings"
            )
        if user_id is not None and configured is not None and configured != user_id:
            self._log.warning(
                "configured bot_user_id %s is not the token's bot user %s (auth.test); using %s",
                configured,
                user_id,
                user_id,
            )
        source = "auth.test" if user_id is not None else "the bot_user_id setting"
        user_id = user_id or configured
        self.identity = BotIdentity(user_id, _opt(auth.get("bot_id")) or self.identity.bot_id)
        self.team = _opt(auth.get("team_id"))
        name = _opt(auth.get("user")) or "bot"
        self.me = Sender(
            id=self.identity.user_id or name,
            name=name,
            handle=self.identity.user_id,  # how mentions of the bot look in text: <@U…>
            is_bot=True,
        )
        self._log.info(
            "Slack bot %s: user %s, bot %s, team %s (from %s)",
            name,
            user_id,
            self.identity.bot_id,
            self.team,
            source,
        )

    async def _connect_socket(self, logger: logging.Logger, proxy: str | None) -> None:
        socket = SocketModeClient(
            app_token=self.settings.app_token or "",
            logger=logger,
            web_client=self._reads,
            ping_interval=self.settings.ping_interval,
        )
        socket.proxy = proxy
        socket.socket_mode_request_listeners.append(self._on_envelope)  # type: ignore[arg-type]
        self._socket = socket
        try:
            socket.wss_uri = await socket.issue_new_wss_url()
        except SlackApiError as error:
            await socket.close()
            self._socket = None
            if not _refused(error):
                raise BackchannelError(
                    f"account {self.account}: Slack is unavailable at start "
                    f"({_error_code(error)}); try again later"
                ) from None
            raise ConfigError(
                f"Slack refused the app-level token ({_error_code(error)}); it needs the "
                "connections:write scope and Socket Mode turned on",
                key=f"accounts.{self.account}.app_token",
            ) from None
        try:
            # slack-sdk's connect() retries forever; a bot that cannot reach the
            # websocket at start should say so instead of hanging
            await asyncio.wait_for(socket.connect(), self.settings.connect_timeout)
        except TimeoutError:
            await socket.close()
            self._socket = None
            raise BackchannelError(
                f"account {self.account}: could not open the Socket Mode websocket "
                "(check network access to Slack, or the proxy settings)"
            ) from None

    # receiving -----------------------------------------------------------------
    async def _on_envelope(self, client: SocketModeClient, request: SocketModeRequest) -> None:
        """Ack a Socket Mode envelope once its event is committed (never before)."""
        if request.type == "events_api":
            try:
                result = await self.receive(request.payload)
            except Exception as error:
                # not acked: Slack redelivers it, and the store deduplicates
                self._log.error(
                    "event in envelope %s was not stored (%s); leaving it unacked",
                    request.envelope_id,
                    type(error).__name__,
                )
                return
            if not result.committed:
                return
        try:
            await client.send_socket_mode_response(SocketModeResponse(request.envelope_id))
        except Exception as error:  # a dead socket: the redelivery will be a duplicate
            self._log.warning(
                "could not ack envelope %s (%s)", request.envelope_id, type(error).__name__
            )

    async def _handle_http(self, request: web.Request) -> web.StreamResponse:
        """Answer one Events API request: 401 unsigned, challenge, 200 after commit."""
        from aiohttp import web

        body = await request.read()
        # only a body as small as the unsigned ssl_check is read before the signature: a
        # forged one (its headers pass _unsigned) may carry 4 MiB of %-escapes, whose parse
        # would hold the loop for a second; the signature check costs milliseconds
        small = len(body) <= _UNSIGNED_MAX
        form = _form(request.content_type, body) if small else None
        if form is not None and form.get("ssl_check") == "1":
            # Slack's certificate check of a slash command / interactivity URL: like Bolt,
            # answered without a signature; it asks nothing and stores nothing
            return web.Response(status=200)
        assert self._verifier is not None
        try:
            valid = self._verifier.is_valid_request(body, dict(request.headers))
        except (ValueError, TypeError):
            valid = False
        if not valid:
            self._bad_signatures.note(
                "rejected an Events API request from %s with a bad or stale signature",
                request.remote,
            )
            return web.Response(status=401, text="invalid signature\n")
        if not small:
            form = _form(request.content_type, body)  # signed: Slack's own
        if form is not None:
            # interactivity (payload=...) or a slash command (command=...): acked, not handled
            self._log.info("acked and ignored a signed %s (not handled)", _form_kind(form))
            return web.Response(status=200)
        try:
            payload = parse_json(body)
        except BadPayload as error:
            # a 400, not a 500: Slack would retry a 500 and then disable the app's events
            self._log.warning("refused a signed Events API request: %s", error)
            return web.Response(status=400, text=f"{error}\n")
        if not isinstance(payload, dict):
            self._log.warning("refused a signed Events API request: body is not a JSON object")
            return web.Response(status=400, text="body is not a JSON object\n")
        kind = payload.get("type")
        if kind == "url_verification":
            return web.json_response({"challenge": payload.get("challenge", "")})
        if kind == "app_rate_limited":
            self._log.warning("Slack dropped events: the app is over its Events API rate limit")
            return web.Response(status=200)
        if kind != "event_callback":
            return web.Response(status=200)
        retry = request.headers.get("X-Slack-Retry-Num")
        if retry:
            reason = request.headers.get("X-Slack-Retry-Reason", "?")
            self._log.info("Slack retry %s (%s) of %s", retry, reason, payload.get("event_id"))
        try:
            result = await self.receive(payload)
        except Exception as error:
            self._log.error("event %s was not stored (%s)", payload.get("event_id"), error)
            return web.Response(status=500, text="not stored; retry\n")
        return web.Response(status=200 if result.committed else 500)

    async def receive(self, payload: Mapping[str, Any]) -> IngestResult:
        """Hand one ``event_callback`` body to ctx.ingest; return after the commit.

        Deliveries with the same message identity that overlap share one ingest.
        """
        ctx = self._ctx
        if ctx is None:
            raise RuntimeError("SlackAdapter.receive called before start")
        try:
            event = self.normalize(payload)
        except NormalizeError:
            return await self._ingest_unreadable(payload)  # a dead letter; safe to ack
        except Exception as error:
            # a shape no check foresaw: a dead letter too (the switchboard's normalize
            # says what raised), never an event left unacked for Slack to send forever
            self._log.error(
                "normalize raised %s on event %s",
                type(error).__name__,
                str(payload.get("event_id"))[:80],
            )
            return await self._ingest_unreadable(payload)
        if event is None:
            return await ctx.ingest(payload)
        self.counters["received"] += 1
        return await self._shared(event.event_id, lambda: self._ingest(payload, event))

    async def _shared(
        self, key: str, start: Callable[[], Coroutine[Any, Any, IngestResult]]
    ) -> IngestResult:
        """Run `start()` once for overlapping deliveries with the same `key`; all get its result."""
        task = self._inflight.get(key)
        if task is not None:
            self.counters["joined"] += 1  # a retry or a twin event while the first is stored
        else:
            task = asyncio.create_task(start())
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        return await asyncio.shield(task)

    async def _ingest_unreadable(self, payload: Mapping[str, Any]) -> IngestResult:
        """Hand an event normalize cannot read to ctx.ingest (a dead letter) once per event_id.

        Slack sends an event again with the same envelope ``event_id`` when it saw no
        answer; the store dedupes messages, not dead letters, so the adapter
        remembers the recent ones it handed over.
        """
        assert self._ctx is not None
        ctx = self._ctx
        envelope = payload.get("event_id")
        if not isinstance(envelope, str) or not envelope or len(envelope) > 200:
            return await ctx.ingest(payload)
        if self._unreadable.get(envelope):
            return IngestResult("duplicate", reason="an unreadable event already dead-lettered")

        async def once() -> IngestResult:
            result = await ctx.ingest(payload)
            self._unreadable.put(envelope, True)
            return result

        return await self._shared(f"unreadable:{envelope}", once)

    async def _ingest(self, payload: Mapping[str, Any], event: Event) -> IngestResult:
        assert self._ctx is not None
        ctx = self._ctx
        if await ctx.is_known(event.event_id):
            return await ctx.ingest(payload)  # a redelivery: no lookups needed
        raw = dict(payload)
        try:
            raw[ENRICHMENT_KEY] = await asyncio.wait_for(
                self._enrichment(payload, event), self.settings.lookup_timeout
            )
        except TimeoutError:
            self._log.warning("name lookups for %s took too long; storing ids", event.event_id)
            raw[ENRICHMENT_KEY] = await self._thread_facts(payload)
        state = None
        if event.address.thread and event.mentions_me:
            thread = _thread_key(event.address)
            self._threads.add(thread)
            state = {thread: "1"}
        return await ctx.ingest(raw, state=state)

    async def _enrichment(self, payload: Mapping[str, Any], event: Event) -> dict[str, Any]:
        assert self._directory is not None
        facts = await self._thread_facts(payload)
        names: dict[str, str] = {}
        sender = event.sender.id
        wanted = [sender] if sender[:1] in ("U", "W") else []
        if "<@" in event.text:
            # the people the text mentions (at most MENTIONS_NAMED), named for the agent
            # (<@U123> -> <@U123|Bob>)
            room = len(wanted) + MENTIONS_NAMED
            for match in USER_MENTION.finditer(event.text):
                user = match[1]
                if len(wanted) == room:
                    break
                if not match[2] and user != self.identity.user_id and user not in wanted:
                    wanted.append(user)
        if len(wanted) == 1:
            found = [await self._directory.user(wanted[0])]
        else:
            found = list(await asyncio.gather(*map(self._directory.user, wanted)))
        names.update(
            (user, info.name)
            for user, info in zip(wanted, found, strict=True)
            if info and info.name
        )
        if wanted and wanted[0] == sender and found[0] is not None and found[0].is_bot is not None:
            # whether the author's account is a bot: a person posting through an app (a
            # client such as IRCCloud, a user token) carries the app's bot_id all the same
            facts["user_bots"] = {sender: found[0].is_bot}
        info = await self._directory.channel(event.address.chat)
        channel_name = None
        if info is not None:
            channel_name = info.name
            if info.is_im and info.user:
                channel_name = names.get(info.user) or await self._directory.user_name(info.user)
        facts["user_names"] = names
        if channel_name:
            facts["channel_name"] = channel_name
        return facts

    async def _thread_facts(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Whether the bot takes part in the thread this event belongs to."""
        inner = payload.get("event") if payload.get("type") == "event_callback" else payload
        if not isinstance(inner, Mapping):
            return {}
        changed = message_subtype(inner) == "message_changed"  # Slack may leave the subtype out
        message = inner.get("message") if changed else inner
        if not isinstance(message, Mapping):
            return {}
        channel, thread_ts = inner.get("channel"), message.get("thread_ts")
        if not isinstance(channel, str) or not isinstance(thread_ts, str):
            return {}
        key = _thread_key(Address(self.account, channel, thread_ts))
        if key in self._threads:
            return {"bot_in_thread": True}
        assert self._ctx is not None
        if await self._ctx.get_state(key):
            self._threads.add(key)
            return {"bot_in_thread": True}
        return {}

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        """Return the Event for a Slack payload, or None (the app's own posts, service events)."""
        return normalize_payload(
            raw,
            account=self.account,
            me=self.identity,
            thread_on_mention=self.settings.thread_on_mention,
        )

    # sending ---------------------------------------------------------------------
    async def check_address(self, address: Address) -> None:
        """Raise Rejected unless Slack knows the conversation (asked before a first operator send).

        The chat must look like a Slack conversation id and a thread like a
        message ts; then ``conversations.info`` must not answer
        ``channel_not_found`` (a typo, or a private channel the app is not
        in). Any other answer, or none (rate limits, 5xx, a missing read
        scope), lets the address through: the send says what became of it.
        A missing read scope is logged once, naming the scope Slack asked for.
        """
        if not SLACK_ID.match(address.chat):
            raise Rejected(
                f"{address.chat!r} is not a Slack conversation id (like C0123ABCD or D0123ABCD)"
            )
        if address.thread is not None and not SLACK_TS.match(address.thread):
            raise Rejected(
                f"thread {address.thread!r} is not a Slack message ts (like 1700000000.000100)"
            )
        reads = self._reads
        if reads is None:
            return  # not started: nothing to ask with
        try:
            await reads.conversations_info(channel=address.chat)
        except SlackApiError as error:
            code = _error_code(error)
            if code == "channel_not_found":
                raise Rejected(
                    f"Slack says channel_not_found for {address.chat} (a typo, or a private"
                    " channel the app is not a member of)"
                ) from None
            if code == "missing_scope" and not self._told_missing_read_scope:
                self._told_missing_read_scope = True
                needed = _error_data(error).get("needed")
                self._log.warning(
                    "Slack account %r cannot check a new address before a first send:"
                    " conversations.info needs the %s scope, which the app lacks (add it"
                    " to catch a mistyped channel id before anything is sent)",
                    self.account,
                    needed or "channels:read / groups:read / im:read / mpim:read",
                )
        except (aiohttp.ClientError, TimeoutError):
            return

    async def send(self, outbound: Outbound) -> Receipt:
        """Post, edit or react. Raise RateLimited / Rejected / Uncertain only."""
        if self._writes is None:
            raise Rejected("the Slack adapter is not started")
        if outbound.kind == "edit":
            return await self._edit(outbound)
        if outbound.kind == "reaction":
            return await self._react(outbound)
        return await self._post(outbound)

    async def _post(self, outbound: Outbound) -> Receipt:
        assert self._writes is not None
        writes = self._writes
        address = outbound.address
        # In a thread: stay in it. At a channel's top level, replying to a
        # message starts (or continues) the thread under it, Slack's way of
        # replying; a DM stays one line of talk, so there a reply is a plain post.
        thread_ts = address.thread
        if thread_ts is None and outbound.reply_to and not address.chat.startswith("D"):
            thread_ts = outbound.reply_to
        if not outbound.text.strip():
            raise Rejected("no_text")
        parts = split_text(outbound.text, self.settings.max_text_len)
        ids: list[str] = []
        for index, part in enumerate(parts):
            arguments: dict[str, Any] = {"channel": address.chat, "text": slack_escape(part)}
            if thread_ts:
                arguments["thread_ts"] = thread_ts

            def post(arguments: dict[str, Any] = arguments) -> Awaitable[Any]:
                return writes.chat_postMessage(**arguments)

            try:
                response = await call_slack("chat.postMessage", post, self.settings.timeout)
            except DeliveryError as error:
                if not ids:
                    raise
                # earlier parts are on Slack: a retry would post them twice
                raise Uncertain(f"sent {index} of {len(parts)} parts, then: {error}") from None
            ts = _opt(response.get("ts"))
            if ts is None:
                raise Uncertain("chat.postMessage answered ok without a ts")
            ids.append(ts)
        if thread_ts:
            await self._remember_thread(Address(self.account, address.chat, thread_ts))
        return Receipt(ids[0], part_ids=tuple(ids))

    async def _edit(self, outbound: Outbound) -> Receipt:
        assert self._writes is not None
        writes = self._writes
        if not outbound.target:
            raise Rejected("an edit needs the target message's ts")
        if len(outbound.text) > self.settings.max_text_len:
            raise Rejected(
                f"edited text is {len(outbound.text)} characters; one Slack message "
                f"takes {self.settings.max_text_len} here"
            )
        channel, target, text = outbound.address.chat, outbound.target, slack_escape(outbound.text)
        await call_slack(
            "chat.update",
            lambda: writes.chat_update(channel=channel, ts=target, text=text),
            self.settings.timeout,
        )
        return Receipt(target, part_ids=(target,))

    async def _react(self, outbound: Outbound) -> Receipt:
        assert self._writes is not None
        writes = self._writes
        if not outbound.target:
            raise Rejected("a reaction needs the target message's ts")
        name = emoji_name(outbound.text)
        if not name:
            raise Rejected("invalid_name")
        channel, target = outbound.address.chat, outbound.target
        try:
            await call_slack(
                "reactions.add",
                lambda: writes.reactions_add(channel=channel, timestamp=target, name=name),
                self.settings.timeout,
            )
        except Rejected as error:
            if error.reason != "already_reacted":
                raise
        return Receipt(target, part_ids=(target,))

    async def _remember_thread(self, address: Address) -> None:
        key = _thread_key(address)
        if key in self._threads:
            return
        self._threads.add(key)
        if self._ctx is not None:
            try:
                await self._ctx.set_state(key, "1")
            except Exception as error:  # the post is done; losing this fact costs a mention
                self._log.warning("could not record thread %s (%s)", key, type(error).__name__)


#: what of an agent's text Slack must not see bare: ``&`` (unless it starts one of the
#: three entities Slack uses), and ``<`` ... ``>`` (unless a control sequence the agent
#: meant: a mention ``<@U…>``, ``<#C…>``, ``<!here>``, ``<!subteam^S…>``, ``<!date^…>``,
#: or a link ``<https://…|label>``, ``<mailto:…>``, ``<tel:…>``, ``<slack://…>``)
_ESCAPED = re.compile(
    r"(?P<keep><(?:[@#!][^<>\s][^<>]*|(?:https?://|mailto:|tel:|slack://)[^<>\s|]+(?:\|[^<>]*)?)>"
    r"|&(?:amp|lt|gt);)|(?P<char>[&<>])"
)
_ENTITY = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


#: a person's handle as the framing shows it, ``@U0123ABCD`` (a Slack user id: U or W,
#: upper-case letters and digits, at least one digit), not already inside ``<…>`` or a word
_BARE_HANDLE = re.compile(r"(?<![<\w@])@([UW](?=[A-Z]*[0-9])[A-Z0-9]{6,20})(?![\w|>])")


def slack_escape(text: str) -> str:
    """Escape `text` for Slack's mrkdwn the way its docs ask: ``&``, ``<`` and ``>`` as
    ``&amp;``, ``&lt;``, ``&gt;`` where they are not a control sequence or an entity the
    agent wrote on purpose (``<@U123>``, ``<https://x|label>``, ``&lt;`` copied from a
    message). Unescaped, ``Vec<String>`` or ``a < b > c`` is parsed by Slack as a link.

    A handle written the way the agent is shown people, ``@U0123ABCD``, becomes the
    mention Slack reads, ``<@U0123ABCD>`` (bare, Slack shows it as that text)."""
    if "&" in text or "<" in text or ">" in text:
        text = _ESCAPED.sub(lambda m: m["keep"] or _ENTITY[m["char"]], text)
    if "@" in text:
        text = _BARE_HANDLE.sub(r"<@\1>", text)
    return text


def emoji_name(text: str) -> str:
    """Return Slack's emoji name for `text`: ``:tada:`` -> ``tada``, ``👍`` -> ``thumbsup``."""
    stripped = text.strip()
    bare = stripped.replace("\ufe0f", "")
    if bare in EMOJI_NAMES:
        return EMOJI_NAMES[bare]
    return stripped.strip(":").strip()


#: the longest unsigned request let in (Slack's ssl_check form); anything else must be signed
_UNSIGNED_MAX = 4096
#: how far a request's timestamp may be from now (the signature verifier's own window)
_STALE_AFTER = 300


def _unsigned(request: Any) -> Any:
    """Refuse, before its body is read, a request that cannot be validly signed: without
    Slack's signature headers, or stamped outside the verifier's five minutes (the body
    is checked against the signature once read). Slack's unsigned ssl_check is a small
    form: one announcing at most 4 KB is let in, the handler answers it."""
    from aiohttp import web

    stamp = request.headers.get("X-Slack-Request-Timestamp", "")
    # ten digits today; a long one (300 digits overflow a float) is refused, not a 500
    if (
        request.headers.get("X-Slack-Signature")
        and len(stamp) <= 12
        and stamp.isascii()
        and stamp.isdigit()
    ):
        if abs(time.time() - int(stamp)) <= _STALE_AFTER:
            return None
    elif (
        request.content_type == "application/x-www-form-urlencoded"
        and request.content_length is not None
        and request.content_length <= _UNSIGNED_MAX
    ):
        return None
    return web.Response(status=401, text="invalid signature\n")


def _form(content_type: str, body: bytes) -> dict[str, str] | None:
    """The fields of a form-encoded request (interactivity, slash commands, ssl_check)."""
    if content_type != "application/x-www-form-urlencoded" or body.lstrip()[:1] == b"{":
        return None  # JSON (as Bolt reads it: a body starting with "{" is JSON whatever its label)
    text = body.decode("utf-8", "replace")
    try:
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, max_num_fields=1000)
    except ValueError:
        return {}
    return dict(pairs)


def _form_kind(form: Mapping[str, str]) -> str:
    """What a signed form request is, in a few safe words (for one log line)."""
    if "payload" in form:
        try:
            payload = parse_json(form["payload"])
        except BadPayload:
            payload = None
        kind = payload.get("type") if isinstance(payload, dict) else None
        return f"interactive payload ({_printable(kind)})"
    if "command" in form:
        return f"slash command ({_printable(form['command'])})"
    return "form-encoded request"


def _printable(value: Any) -> str:
    """`value` cut to a short single line (it comes from a request)."""
    if not isinstance(value, str) or not value:
        return "?"
    return "".join(c if c.isprintable() else "?" for c in value[:40])


def _thread_key(address: Address) -> str:
    return f"thread:{address.chat}:{address.thread}"


def _opt(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _refused(error: SlackApiError) -> bool:
    """True when Slack answered and said no (``ok: false``), not when it was down or busy."""
    data = getattr(error.response, "data", None)
    return (
        http_status(error.response) == 200
        and isinstance(data, Mapping)
        and bool(data.get("error"))
        and data.get("error") != "ratelimited"
    )


def _error_data(error: SlackApiError) -> Mapping[str, Any]:
    """The JSON body of Slack's answer, or an empty mapping when it sent none."""
    data = getattr(error.response, "data", None)
    return data if isinstance(data, Mapping) else {}


def _error_code(error: SlackApiError) -> str:
    code = _error_data(error).get("error")
    if code:
        return str(code)
    return f"HTTP {http_status(error.response) or '?'}"


async def _data(call: Any) -> Mapping[str, Any]:
    response = await call
    data = response.data
    return data if isinstance(data, Mapping) else {}

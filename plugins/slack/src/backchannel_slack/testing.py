"""`FakeSlack`: a loopback Slack for tests — Web API, Socket Mode, and an Events API driver.

It speaks Slack's wire format on 127.0.0.1 (port 0), so the real slack-sdk
clients talk to it unpatched::

    async with FakeSlack() as slack:
        adapter = SlackAdapter("work", slack.settings(mode="socket"))
        await adapter.start(ctx)
        await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "hi <@U0FAKEBOT>"))
        ...
        assert slack.posts[-1]["text"] == "hello!"

- **Web API** at ``slack.api_base``: ``auth.test``, ``apps.connections.open``,
  ``chat.postMessage``, ``chat.update``, ``reactions.add``, ``users.info``,
  ``conversations.info``, with Slack's response shapes and error codes
  (``not_authed``, ``invalid_auth``, ``not_allowed_token_type``,
  ``channel_not_found``, ``message_not_found``, ``cant_update_message``,
  ``already_reacted``, ``invalid_name``, ``user_not_found``, ``no_text``,
  ``msg_too_long``). Every call is recorded in ``slack.calls`` (tokens left out).
- **Socket Mode**: ``apps.connections.open`` hands out a ``ws://127.0.0.1``
  URL; each connection gets ``hello``; `deliver` sends ``events_api`` envelopes;
  acks are tracked per envelope; unacked envelopes are sent again after
  ``ack_timeout`` (``retry_attempt`` / ``retry_reason: "timeout"``) and on the
  next connection after a drop. `disconnect` sends Slack's ``disconnect``
  message; `drop_connections` closes sockets abruptly.
- **Events API**: after `use_events_api(url)`, `deliver` POSTs the signed body
  (``X-Slack-Signature`` v0, ``X-Slack-Request-Timestamp``) and retries with
  ``X-Slack-Retry-Num`` / ``X-Slack-Retry-Reason`` when no 2xx comes within
  ``http_timeout``; ``signature="bad"`` or ``"stale"`` plays an attacker.
- **Faults**: `fail_next(method, fault)` with ``rate_limited`` (429 +
  Retry-After), ``server_error`` (500), ``unavailable`` (503), ``error`` (``ok:
  false`` + code), ``hang``, ``slow``, ``reset``, ``reset_after``.
- **Echoes**: what the bot posts comes back as a ``message`` event, as on Slack.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import secrets
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from attrs import define, field

__all__ = ["Delivery", "FakeSlack", "Fault"]

FAULTS = (
    "rate_limited",
    "server_error",
    "unavailable",
    "error",
    "hang",
    "slow",
    "reset",
    "reset_after",
)


@define
class Fault:
    """One injected Web API fault (see `FakeSlack.fail_next`)."""

    kind: str
    retry_after: float = 1.0
    error: str = "channel_not_found"
    delay: float = 30.0


@define
class Delivery:
    """One event as the fake delivers it: its attempts and whether the app acked it."""

    event_id: str
    payload: dict[str, Any]
    #: Socket Mode: envelope ids sent; Events API: (retry number, HTTP status or error)
    envelopes: list[str] = field(factory=list)
    attempts: list[tuple[int, str]] = field(factory=list)
    acked: asyncio.Event = field(factory=asyncio.Event)
    #: how many acks (Socket Mode) or 2xx answers (Events API) the app gave
    acks: int = 0
    gave_up: asyncio.Event = field(factory=asyncio.Event)
    signature: str = "valid"


@define
class _Connection:
    ws: web.WebSocketResponse
    request: web.Request
    number: int
    #: deliveries sent on this socket (unacked ones are sent again on the next socket)
    sent: list[Delivery] = field(factory=list)


class FakeSlack:
    """A Slack workspace with one installed app, on 127.0.0.1."""

    def __init__(
        self,
        *,
        team_id: str = "T0FAKETEAM",
        app_id: str = "A0FAKEAPP",
        bot_user_id: str = "U0FAKEBOT",
        bot_id: str = "B0FAKEBOT",
        bot_name: str = "backchannel",
        ack_timeout: float | None = 3.0,
        max_retries: int = 3,
        http_timeout: float = 3.0,
        retry_delays: tuple[float, ...] = (0.0, 1.0, 5.0),
        echo_own_posts: bool = True,
    ):
        self.team_id = team_id
        self.app_id = app_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.bot_name = bot_name
        self.bot_token = f"xoxb-{secrets.token_hex(6)}-{secrets.token_hex(12)}"
        self.app_token = f"xapp-1-{app_id}-{secrets.token_hex(12)}"
        self.signing_secret = secrets.token_hex(16)
        self.verification_token = secrets.token_hex(12)
        self.ack_timeout = ack_timeout
        self.max_retries = max_retries
        self.http_timeout = http_timeout
        self.retry_delays = retry_delays
        self.echo_own_posts = echo_own_posts

        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.history: dict[str, dict[str, dict[str, Any]]] = {}
        #: chat.postMessage calls that posted, oldest first: channel, ts, text, thread_ts
        self.posts: list[dict[str, Any]] = []
        #: chat.update calls that applied: channel, ts, text
        self.updates: list[dict[str, Any]] = []
        #: reactions.add calls that applied: channel, timestamp, name
        self.reactions: list[dict[str, Any]] = []
        #: every Web API call: (method, arguments without token)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.deliveries: dict[str, Delivery] = {}
        self.events_url: str | None = None
        self.connections_opened = 0
        #: when True, websocket upgrades are refused with 503 (Slack's edge having a bad day)
        self.refuse_sockets = False

        self._faults: dict[str, deque[Fault]] = {}
        self._connections: list[_Connection] = []
        self._envelopes: dict[str, tuple[Delivery, int]] = {}
        self._orphans: list[Delivery] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._changed: asyncio.Condition | None = None
        self._closing: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._last_ts = 0.0
        self._ids = itertools.count(1)
        self.port = 0
        self._seed()

    # lifecycle -------------------------------------------------------------------
    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Listen on 127.0.0.1 at a free port."""
        self._changed = asyncio.Condition()
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._link)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        self._session = aiohttp.ClientSession(trust_env=False)

    async def stop(self) -> None:
        """Close sockets, stop retrying, stop listening."""
        if self._closing is not None:
            self._closing.set()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for connection in list(self._connections):
            with contextlib.suppress(Exception):
                await connection.ws.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_base(self) -> str:
        """The Web API base URL (``http://127.0.0.1:PORT/api/``)."""
        return f"http://127.0.0.1:{self.port}/api/"

    def settings(self, mode: str = "socket", **overrides: Any) -> dict[str, Any]:
        """Settings for `SlackAdapter` against this fake, with short test timeouts."""
        values: dict[str, Any] = {
            "bot_token": self.bot_token,
            "app_token": self.app_token,
            "signing_secret": self.signing_secret,
            "mode": mode,
            "api_base": self.api_base,
            "timeout": 2.0,
            "lookup_timeout": 1.0,
            "ping_interval": 0.25,
        }
        values.update(overrides)
        return values

    # the workspace -------------------------------------------------------------------
    def _seed(self) -> None:
        self.add_user(self.bot_user_id, self.bot_name, is_bot=True)
        self.add_user("U0ALICE", "alice", display_name="Alice", real_name="Alice Liddell")
        self.add_user("U0BOB", "bob", display_name="", real_name="Bob Builder")
        self.add_channel("C0GENERAL", "general")
        self.add_channel("G0SECRET", "secret-plans", kind="group")
        self.add_channel("D0ALICE", kind="im", user="U0ALICE")
        self.add_channel("G0MPIM", "mpdm-alice--bob--backchannel-1", kind="mpim")

    def add_user(
        self,
        user_id: str,
        name: str,
        *,
        display_name: str | None = None,
        real_name: str | None = None,
        is_bot: bool = False,
    ) -> dict[str, Any]:
        """Add a member; return the ``users.info`` user object."""
        real = real_name if real_name is not None else name
        user = {
            "id": user_id,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": real,
            "tz": "Europe/Amsterdam",
            "tz_label": "Central European Time",
            "tz_offset": 3600,
            "profile": {
                "real_name": real,
                "display_name": display_name if display_name is not None else name,
                "real_name_normalized": real,
                "display_name_normalized": display_name if display_name is not None else name,
                "team": self.team_id,
            },
            "is_admin": False,
            "is_owner": False,
            "is_bot": is_bot,
            "is_app_user": False,
            "updated": int(time.time()),
        }
        self.users[user_id] = user
        return user

    def add_channel(
        self,
        channel_id: str,
        name: str | None = None,
        *,
        kind: str = "channel",
        user: str | None = None,
    ) -> dict[str, Any]:
        """Add a conversation (kind channel, group, im or mpim); return its ``conversations.info``."""
        created = int(time.time()) - 86400
        if kind == "im":
            channel: dict[str, Any] = {
                "id": channel_id,
                "created": created,
                "is_im": True,
                "is_org_shared": False,
                "user": user,
                "is_user_deleted": False,
                "priority": 0,
            }
        else:
            channel = {
                "id": channel_id,
                "name": name,
                "is_channel": kind == "channel",
                "is_group": kind == "group",
                "is_im": False,
                "is_mpim": kind == "mpim",
                "is_private": kind != "channel",
                "created": created,
                "is_archived": False,
                "is_general": name == "general",
                "name_normalized": name,
                "is_member": True,
                "topic": {"value": "", "creator": "", "last_set": 0},
                "purpose": {"value": "", "creator": "", "last_set": 0},
            }
        self.channels[channel_id] = channel
        self.history.setdefault(channel_id, {})
        return channel

    def channel_type(self, channel_id: str) -> str:
        """The ``channel_type`` Slack puts on message events: channel, group, im or mpim."""
        info = self.channels.get(channel_id, {})
        if info.get("is_im"):
            return "im"
        if info.get("is_mpim"):
            return "mpim"
        if info.get("is_group") or info.get("is_private"):
            return "group"
        return "channel"

    def next_ts(self) -> str:
        """A fresh message ts, strictly increasing, formatted as Slack does."""
        now = max(time.time(), self._last_ts + 0.000001)
        self._last_ts = now
        return f"{now:.6f}"

    # payloads Slack would send ------------------------------------------------------------
    def event_callback(
        self, event: Mapping[str, Any], event_id: str | None = None
    ) -> dict[str, Any]:
        """Wrap an inner event in the Events API envelope (the Socket Mode payload)."""
        return {
            "token": self.verification_token,
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "context_enterprise_id": None,
            "api_app_id": self.app_id,
            "event": dict(event),
            "type": "event_callback",
            "event_id": event_id or f"Ev{secrets.token_hex(5).upper()}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{secrets.token_hex(16)}",
        }

    def message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        thread_ts: str | None = None,
        ts: str | None = None,
        files: list[dict[str, Any]] | None = None,
        subtype: str | None = None,
    ) -> dict[str, Any]:
        """A person's new message (``message`` event), recorded in the channel's history."""
        ts = ts or self.next_ts()
        event: dict[str, Any] = {
            "client_msg_id": str(uuid.uuid4()),
            "type": "message",
            "text": text,
            "user": user,
            "ts": ts,
            "blocks": _rich_text(text),
            "team": self.team_id,
            "channel": channel,
            "event_ts": ts,
            "channel_type": self.channel_type(channel),
        }
        if subtype:
            event["subtype"] = subtype
        if files:
            event["files"] = files
            event["upload"] = False
            event["display_as_bot"] = False
            event.setdefault("subtype", "file_share")
        if thread_ts:
            event["thread_ts"] = thread_ts
            parent = self.history.get(channel, {}).get(thread_ts)
            event["parent_user_id"] = (parent or {}).get("user", user)
        self.history.setdefault(channel, {})[ts] = dict(event)
        return self.event_callback(event)

    def app_mention(self, message_payload: Mapping[str, Any]) -> dict[str, Any]:
        """The ``app_mention`` event Slack sends alongside a message that mentions the bot."""
        inner = message_payload["event"]
        event = {
            key: inner[key]
            for key in ("client_msg_id", "type", "text", "user", "ts", "blocks", "team")
            if key in inner
        }
        event["type"] = "app_mention"
        if "thread_ts" in inner:
            event["thread_ts"] = inner["thread_ts"]
        if "files" in inner:
            event["files"] = inner["files"]
        event["channel"] = inner["channel"]
        event["event_ts"] = inner["event_ts"]
        return self.event_callback(event)

    def user_says(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None
    ) -> list[dict[str, Any]]:
        """What Slack sends when a person posts: the message, plus app_mention when it mentions the bot."""
        first = self.message(channel, user, text, thread_ts=thread_ts)
        payloads = [first]
        if f"<@{self.bot_user_id}" in text and self.channel_type(channel) != "im":
            payloads.append(self.app_mention(first))
        return payloads

    def bot_message(
        self, channel: str, text: str, *, bot_id: str = "B0DEPLOY", username: str = "deploybot"
    ) -> dict[str, Any]:
        """Another integration's post (``bot_message`` subtype, no user)."""
        ts = self.next_ts()
        event = {
            "type": "message",
            "subtype": "bot_message",
            "text": text,
            "ts": ts,
            "username": username,
            "bot_id": bot_id,
            "channel": channel,
            "event_ts": ts,
            "channel_type": self.channel_type(channel),
        }
        self.history.setdefault(channel, {})[ts] = dict(event)
        return self.event_callback(event)

    def own_message(
        self, channel: str, text: str, *, thread_ts: str | None = None
    ) -> dict[str, Any]:
        """The ``message`` event of a post the bot itself made (an echo)."""
        ts = self.next_ts()
        event = self._bot_event(channel, ts, text, thread_ts)
        self.history.setdefault(channel, {})[ts] = dict(event)
        return self.event_callback(event)

    def edit(self, channel: str, ts: str, text: str) -> dict[str, Any]:
        """A ``message_changed`` event: the message at `ts` now says `text`."""
        previous = dict(self.history.get(channel, {}).get(ts) or {"ts": ts, "text": ""})
        edited_ts = self.next_ts()
        changed = {
            key: value
            for key, value in previous.items()
            if key not in ("channel", "event_ts", "channel_type")
        }
        changed.update(
            text=text,
            blocks=_rich_text(text),
            edited={"user": previous.get("user", ""), "ts": edited_ts},
        )
        self.history.setdefault(channel, {})[ts] = {**previous, "text": text}
        event = {
            "type": "message",
            "subtype": "message_changed",
            "message": changed,
            "previous_message": {
                key: value
                for key, value in previous.items()
                if key not in ("channel", "event_ts", "channel_type")
            },
            "channel": channel,
            "hidden": True,
            "ts": edited_ts,
            "event_ts": edited_ts,
            "channel_type": self.channel_type(channel),
        }
        return self.event_callback(event)

    def delete(self, channel: str, ts: str) -> dict[str, Any]:
        """A ``message_deleted`` event for the message at `ts`."""
        previous = self.history.get(channel, {}).pop(ts, {"ts": ts})
        event_ts = self.next_ts()
        event = {
            "type": "message",
            "subtype": "message_deleted",
            "previous_message": {
                key: value
                for key, value in previous.items()
                if key not in ("channel", "event_ts", "channel_type")
            },
            "channel": channel,
            "hidden": True,
            "deleted_ts": ts,
            "event_ts": event_ts,
            "ts": event_ts,
            "channel_type": self.channel_type(channel),
        }
        return self.event_callback(event)

    def _bot_event(self, channel: str, ts: str, text: str, thread_ts: str | None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "bot_id": self.bot_id,
            "type": "message",
            "text": text,
            "user": self.bot_user_id,
            "ts": ts,
            "app_id": self.app_id,
            "blocks": _rich_text(text),
            "team": self.team_id,
            "bot_profile": {
                "id": self.bot_id,
                "deleted": False,
                "name": self.bot_name,
                "updated": int(time.time()),
                "app_id": self.app_id,
                "team_id": self.team_id,
            },
            "channel": channel,
            "event_ts": ts,
            "channel_type": self.channel_type(channel),
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
            parent = self.history.get(channel, {}).get(thread_ts) or {}
            event["parent_user_id"] = parent.get("user", self.bot_user_id)
        return event

    # delivering ----------------------------------------------------------------------
    def use_events_api(self, url: str) -> None:
        """Deliver events by signed HTTP POST to `url` (the app's Request URL)."""
        self.events_url = url

    async def deliver(self, payload: Mapping[str, Any], *, signature: str = "valid") -> Delivery:
        """Send one event to the app (Socket Mode, or the Events API after `use_events_api`).

        Returns at once; await ``delivery.acked`` (or `wait_acked`) to see it acknowledged.
        Delivering a payload whose event_id was delivered before counts as Slack
        sending it again.
        """
        body = dict(payload)
        event_id = str(body.get("event_id") or f"Ev{secrets.token_hex(5).upper()}")
        delivery = self.deliveries.get(event_id)
        if delivery is None:
            delivery = Delivery(event_id, body, signature=signature)
            self.deliveries[event_id] = delivery
        else:
            delivery.signature = signature
        if self.events_url is not None:
            self._spawn(self._post_with_retries(delivery))
        else:
            await self._send_envelope(delivery, attempt=0, reason=None)
        return delivery

    async def deliver_all(self, payloads: Iterable[Mapping[str, Any]]) -> list[Delivery]:
        """Deliver several payloads in the given order (shuffle them yourself for disorder)."""
        return [await self.deliver(payload) for payload in payloads]

    async def redeliver(self, event_id: str, reason: str = "timeout") -> None:
        """Send an already delivered event again, as Slack's retry (retry_attempt + 1)."""
        delivery = self.deliveries[event_id]
        attempt = len(delivery.envelopes) if self.events_url is None else len(delivery.attempts)
        if self.events_url is not None:
            self._spawn(self._post_once(delivery, attempt, reason))
        else:
            await self._send_envelope(delivery, attempt=attempt, reason=reason)

    def is_acked(self, event_id: str) -> bool:
        """True once the app acked (Socket Mode) or answered 2xx (Events API) for the event."""
        delivery = self.deliveries.get(event_id)
        return delivery is not None and delivery.acked.is_set()

    async def wait_acked(self, event_id: str, timeout: float = 10.0) -> None:
        """Return once the event is acked; AssertionError after `timeout`."""
        delivery = self.deliveries[event_id]
        try:
            await asyncio.wait_for(delivery.acked.wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"{event_id} was not acked within {timeout}s") from None

    # Socket Mode -----------------------------------------------------------------------
    async def _link(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("app_id") != self.app_id or not request.query.get("ticket"):
            return web.Response(status=401, text="invalid ticket")
        if self.refuse_sockets:
            return web.Response(status=503, text="service unavailable")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections_opened += 1
        connection = _Connection(ws, request, self.connections_opened)
        self._connections.append(connection)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._connections),
                "debug_info": {
                    "host": "applink-fake",
                    "build_number": 1,
                    "approximate_connection_time": 18060,
                },
                "connection_info": {"app_id": self.app_id},
            }
        )
        await self._notify()
        await self._resend_orphans()
        try:
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    self._on_ack(message.data)
        finally:
            if connection in self._connections:
                self._connections.remove(connection)
            for delivery in connection.sent:
                if not delivery.acked.is_set() and delivery not in self._orphans:
                    self._orphans.append(delivery)
            if self._orphans and self._connections:
                await self._resend_orphans()
            await self._notify()
        return ws

    async def _resend_orphans(self) -> None:
        orphans, self._orphans = self._orphans, []
        for delivery in orphans:
            if not delivery.acked.is_set():
                await self._send_envelope(
                    delivery, attempt=len(delivery.envelopes), reason="timeout"
                )

    def _on_ack(self, data: str) -> None:
        with contextlib.suppress(ValueError):
            message = json.loads(data)
            entry = self._envelopes.get(str(message.get("envelope_id")))
            if entry is not None:
                entry[0].acks += 1
                entry[0].acked.set()
                self._spawn(self._notify())

    async def _send_envelope(self, delivery: Delivery, attempt: int, reason: str | None) -> None:
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "payload": delivery.payload,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": attempt,
            "retry_reason": reason or "",
        }
        live = [c for c in self._connections if not c.ws.closed]
        if not live:
            self._orphans.append(delivery)
            return
        delivery.envelopes.append(envelope_id)
        self._envelopes[envelope_id] = (delivery, attempt)
        live[-1].sent.append(delivery)
        try:
            await live[-1].ws.send_str(json.dumps(envelope))
        except (ConnectionError, RuntimeError):
            self._orphans.append(delivery)
            return
        if self.ack_timeout is not None and attempt < self.max_retries:
            self._spawn(self._retry_unless_acked(delivery, attempt))

    async def _retry_unless_acked(self, delivery: Delivery, attempt: int) -> None:
        assert self.ack_timeout is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(delivery.acked.wait(), self.ack_timeout)
            return
        if len(delivery.envelopes) == attempt + 1:  # no one sent it again meanwhile
            await self._send_envelope(delivery, attempt=attempt + 1, reason="timeout")

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Send Slack's ``disconnect`` message on every open socket (the app should reconnect)."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}}
        for connection in list(self._connections):
            with contextlib.suppress(Exception):
                await connection.ws.send_json(message)

    def drop_connections(self) -> None:
        """Cut every socket without a close frame (a network failure)."""
        for connection in list(self._connections):
            transport = connection.request.transport
            if transport is not None:
                transport.abort()

    def open_connections(self) -> int:
        return sum(1 for c in self._connections if not c.ws.closed)

    async def wait_connections(self, opened: int, timeout: float = 10.0) -> None:
        """Return once `opened` sockets have been opened in total and one is open."""

        def ready() -> bool:
            return self.connections_opened >= opened and self.open_connections() > 0

        await self._wait(ready, timeout, f"{opened} Socket Mode connections")

    # Events API ------------------------------------------------------------------------
    def sign(
        self, body: bytes, timestamp: int | None = None, *, signature: str = "valid"
    ) -> dict[str, str]:
        """Slack's signature headers for `body` (``bad``: wrong secret; ``stale``: 10 min old)."""
        stamp = timestamp if timestamp is not None else int(time.time())
        secret = self.signing_secret
        if signature == "stale":
            stamp -= 600
        elif signature == "bad":
            secret = secrets.token_hex(16)
        base = f"v0:{stamp}:".encode() + body
        digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
        return {"X-Slack-Request-Timestamp": str(stamp), "X-Slack-Signature": f"v0={digest}"}

    async def verify_url(self, url: str | None = None) -> tuple[int, Any]:
        """POST a signed ``url_verification``; return (status, parsed answer)."""
        challenge = secrets.token_urlsafe(24)
        body = json.dumps(
            {"token": self.verification_token, "challenge": challenge, "type": "url_verification"}
        ).encode()
        status, text = await self._post(url or self.events_url or "", body, self.sign(body), 0, "")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    async def _post_with_retries(self, delivery: Delivery) -> None:
        reason = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                delay = self.retry_delays[min(attempt - 1, len(self.retry_delays) - 1)]
                await asyncio.sleep(delay)
            outcome = await self._post_once(delivery, attempt, reason)
            if outcome.startswith("2"):
                return
            reason = (
                "http_timeout"
                if outcome == "timeout"
                else ("connection_failed" if outcome == "connection_failed" else "http_error")
            )
        delivery.gave_up.set()

    async def _post_once(self, delivery: Delivery, attempt: int, reason: str) -> str:
        body = json.dumps(delivery.payload).encode()
        headers = self.sign(body, signature=delivery.signature)
        status, _text = await self._post(self.events_url or "", body, headers, attempt, reason)
        outcome = str(status) if isinstance(status, int) else status
        delivery.attempts.append((attempt, outcome))
        if outcome.startswith("2"):
            delivery.acks += 1
            delivery.acked.set()
        await self._notify()
        return outcome

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], attempt: int, reason: str
    ) -> tuple[Any, str]:
        assert self._session is not None
        headers = {**headers, "Content-Type": "application/json", "User-Agent": "Slackbot 1.0"}
        if attempt:
            headers["X-Slack-Retry-Num"] = str(attempt)
            headers["X-Slack-Retry-Reason"] = reason
        try:
            async with self._session.post(
                url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.http_timeout),
            ) as response:
                return response.status, await response.text()
        except TimeoutError:
            return "timeout", ""
        except aiohttp.ClientError:
            return "connection_failed", ""

    # Web API ---------------------------------------------------------------------------
    def fail_next(
        self,
        method: str,
        fault: str,
        *,
        retry_after: float = 1.0,
        error: str = "channel_not_found",
        delay: float = 30.0,
        times: int = 1,
        after: int = 0,
    ) -> None:
        """Make the next `times` calls of `method` fail with `fault` (see the module docstring).

        ``hang`` waits `delay` seconds and answers nothing useful (not processed);
        ``slow`` processes the call, then waits `delay` before answering;
        ``reset`` cuts the connection before processing; ``reset_after`` after.
        `after` lets that many calls through first.
        """
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
        queue = self._faults.setdefault(method, deque())
        for _ in range(after):
            queue.append(Fault("none"))
        for _ in range(times):
            queue.append(Fault(fault, retry_after=retry_after, error=error, delay=delay))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        """Arguments of every call of `method`, oldest first."""
        return [arguments for name, arguments in self.calls if name == method]

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        arguments = await _arguments(request)
        token = arguments.pop("token", None)
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            token = header[len("Bearer ") :]
        self.calls.append((method, dict(arguments)))
        queue = self._faults.get(method)
        fault = queue.popleft() if queue else None
        if fault is not None:
            early = await self._fault_before(request, fault)
            if early is not None:
                return early
        answer = self._dispatch(method, token, arguments)
        if fault is not None and fault.kind == "slow":
            await self._pause(fault.delay)
        if fault is not None and fault.kind == "reset_after":
            _abort(request)
        return answer

    async def _fault_before(self, request: web.Request, fault: Fault) -> web.StreamResponse | None:
        if fault.kind == "rate_limited":
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(max(round(fault.retry_after), 0))},
            )
        if fault.kind in ("server_error", "unavailable"):
            status = 500 if fault.kind == "server_error" else 503
            return web.Response(
                status=status,
                text="<html><body>Slack is having trouble</body></html>",
                content_type="text/html",
            )
        if fault.kind == "error":
            return web.json_response({"ok": False, "error": fault.error})
        if fault.kind == "hang":
            await self._pause(fault.delay)
            return web.json_response({"ok": False, "error": "request_timeout"})
        if fault.kind == "reset":
            _abort(request)
            return web.Response(status=500)
        return None

    async def _pause(self, seconds: float) -> None:
        assert self._closing is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    def _dispatch(self, method: str, token: str | None, arguments: dict[str, Any]) -> web.Response:
        if not token:
            return _error("not_authed")
        if method == "apps.connections.open":
            if token.startswith("xoxb-"):
                return _error("not_allowed_token_type")
            if token != self.app_token:
                return _error("invalid_auth")
            ticket = uuid.uuid4()
            return web.json_response(
                {
                    "ok": True,
                    "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={self.app_id}",
                }
            )
        if token.startswith("xapp-"):
            return _error("not_allowed_token_type")
        if token != self.bot_token:
            return _error("invalid_auth")
        handler = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "reactions.add": self._react,
            "users.info": self._users_info,
            "conversations.info": self._conversations_info,
        }.get(method)
        if handler is None:
            return _error("unknown_method")
        return handler(arguments)

    def _auth_test(self, arguments: dict[str, Any]) -> web.Response:
        return web.json_response(
            {
                "ok": True,
                "url": "https://fake-workspace.slack.com/",
                "team": "Fake Workspace",
                "user": self.bot_name,
                "team_id": self.team_id,
                "user_id": self.bot_user_id,
                "bot_id": self.bot_id,
                "is_enterprise_install": False,
            }
        )

    def _post_message(self, arguments: dict[str, Any]) -> web.Response:
        channel = str(arguments.get("channel") or "")
        text = arguments.get("text") or ""
        if channel not in self.channels:
            return _error("channel_not_found")
        if not text and not arguments.get("blocks"):
            return _error("no_text")
        if len(text) > 40000:
            return _error("msg_too_long")
        thread_ts = arguments.get("thread_ts") or None
        ts = self.next_ts()
        event = self._bot_event(channel, ts, text, thread_ts)
        self.history[channel][ts] = dict(event)
        self.posts.append({"channel": channel, "ts": ts, "text": text, "thread_ts": thread_ts})
        message = {
            k: v for k, v in event.items() if k not in ("channel", "event_ts", "channel_type")
        }
        self._spawn(self._notify())
        if self.echo_own_posts:
            self._echo(self.event_callback(event))
        return web.json_response({"ok": True, "channel": channel, "ts": ts, "message": message})

    def _update(self, arguments: dict[str, Any]) -> web.Response:
        channel = str(arguments.get("channel") or "")
        ts = str(arguments.get("ts") or "")
        text = arguments.get("text") or ""
        if channel not in self.channels:
            return _error("channel_not_found")
        message = self.history[channel].get(ts)
        if message is None:
            return _error("message_not_found")
        if message.get("user") != self.bot_user_id:
            return _error("cant_update_message")
        if not text:
            return _error("no_text")
        payload = self.edit(channel, ts, text)
        self.updates.append({"channel": channel, "ts": ts, "text": text})
        if self.echo_own_posts:
            self._echo(payload)
        return web.json_response(
            {
                "ok": True,
                "channel": channel,
                "ts": ts,
                "text": text,
                "message": payload["event"]["message"],
            }
        )

    def _react(self, arguments: dict[str, Any]) -> web.Response:
        channel = str(arguments.get("channel") or "")
        ts = str(arguments.get("timestamp") or "")
        name = str(arguments.get("name") or "")
        if channel not in self.channels:
            return _error("channel_not_found")
        if ts not in self.history[channel]:
            return _error("message_not_found")
        if not name or ":" in name or " " in name:
            return _error("invalid_name")
        if any(
            r["channel"] == channel and r["timestamp"] == ts and r["name"] == name
            for r in self.reactions
        ):
            return _error("already_reacted")
        self.reactions.append({"channel": channel, "timestamp": ts, "name": name})
        return web.json_response({"ok": True})

    def _users_info(self, arguments: dict[str, Any]) -> web.Response:
        user = self.users.get(str(arguments.get("user") or ""))
        if user is None:
            return _error("user_not_found")
        return web.json_response({"ok": True, "user": user})

    def _conversations_info(self, arguments: dict[str, Any]) -> web.Response:
        channel = self.channels.get(str(arguments.get("channel") or ""))
        if channel is None:
            return _error("channel_not_found")
        return web.json_response({"ok": True, "channel": channel})

    def _echo(self, payload: dict[str, Any]) -> None:
        if self.events_url is not None or self._connections:
            self._spawn(self.deliver(payload))

    # plumbing ----------------------------------------------------------------------------
    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _notify(self) -> None:
        if self._changed is None:
            return
        async with self._changed:
            self._changed.notify_all()

    async def _wait(self, predicate: Any, timeout: float, what: str) -> None:
        assert self._changed is not None
        condition = self._changed

        async def waiter() -> None:
            async with condition:
                await condition.wait_for(predicate)

        try:
            await asyncio.wait_for(waiter(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None

    async def wait_posts(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Return `posts` once it holds at least `count` entries."""
        await self._wait(lambda: len(self.posts) >= count, timeout, f"{count} posts")
        return self.posts


async def _arguments(request: web.Request) -> dict[str, Any]:
    arguments: dict[str, Any] = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            with contextlib.suppress(ValueError):
                body = await request.json()
                if isinstance(body, dict):
                    arguments.update(body)
        else:
            form = await request.post()
            arguments.update({key: value for key, value in form.items() if isinstance(value, str)})
    return arguments


def _error(code: str) -> web.Response:
    return web.json_response({"ok": False, "error": code})


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


def _rich_text(text: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "rich_text",
            "block_id": secrets.token_hex(3),
            "elements": [
                {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}
            ],
        }
    ]

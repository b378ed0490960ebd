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
  message; `drop_connections` closes sockets abruptly; `stall_connections`
  freezes them open (only a keepalive notices).
- **Events API**: after `use_events_api(url)`, `deliver` POSTs the signed body
  (``X-Slack-Signature`` v0, ``X-Slack-Request-Timestamp``) and retries with
  ``X-Slack-Retry-Num`` / ``X-Slack-Retry-Reason`` when no 2xx comes within
  ``http_timeout``; ``signature="bad"`` or ``"stale"`` plays an attacker.
- **Faults**: `fail_next(method, fault)` with ``rate_limited`` (429 +
  Retry-After), ``server_error`` (500), ``unavailable`` (503), ``error`` (``ok:
  false`` + code), ``hang``, ``slow``, ``reset``, ``reset_after``, ``garbled``
  (a body that says it is JSON and is not, at a chosen HTTP status).
- **Echoes**: what the bot posts comes back as a ``message`` event, as on Slack.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from backchannel.testing import Watch
from backchannel.testing.loopback import serve_loopback

from ._events import EventsApiDriver
from ._shared import FAULTS, Connection, Delivery, Fault
from ._socket import SocketModeServer
from ._web import WebApi
from ._workspace import Workspace

__all__ = ["FAULTS", "Delivery", "FakeSlack", "Fault", "Workspace"]


class FakeSlack(WebApi, SocketModeServer, EventsApiDriver):
    """A Slack workspace with one installed app, on 127.0.0.1.

    - ``ack_timeout``: seconds Socket Mode waits for an ack before sending the
      envelope again (Slack: 3); None sends again only after a dropped socket.
    - ``max_retries``: how often one event is sent again (Slack: 3).
    - ``http_timeout``: seconds the Events API waits for a 2xx (Slack: 3).
    - ``retry_delays``: pauses before each Events API retry (Slack: immediately,
      1 minute, 5 minutes; here seconds).
    - ``echo_own_posts``: deliver the bot's own posts and edits back as events.
    """

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
        super().__init__(
            team_id=team_id,
            app_id=app_id,
            bot_user_id=bot_user_id,
            bot_id=bot_id,
            bot_name=bot_name,
        )
        self.ack_timeout = ack_timeout
        self.max_retries = max_retries
        self.http_timeout = http_timeout
        self.retry_delays = retry_delays
        self.echo_own_posts = echo_own_posts

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
        self._connections: list[Connection] = []
        self._envelopes: dict[str, tuple[Delivery, int]] = {}
        self._orphans: list[Delivery] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watch = Watch("FakeSlack")
        self._closing: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    # lifecycle -------------------------------------------------------------------
    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Listen on 127.0.0.1 at a free port."""
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._link)
        self._runner, url = await serve_loopback(app, access_log=None)
        self.port = int(url.rsplit(":", 1)[1])
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
            "ping_interval": 0.5,
        }
        values.update(overrides)
        return values

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

    async def wait_posts(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Return `posts` once it holds at least `count` entries."""
        await self.wait_for(lambda: len(self.posts) >= count, timeout, f"{count} posts")
        return self.posts

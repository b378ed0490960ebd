"""The switchboard's HTTP server: adapters' routes (webhooks, the web chat) and a health check.

A client that drops its connection mid-request (routine, and free for anyone
to do by the thousand) costs one DEBUG line, and at most one INFO line a
minute with the count; a body a route cannot parse (`BadPayload`) is a 400
with one WARNING line. Neither is ever a traceback.

A client that sends slowly cannot hold a connection for long (slowloris): a
connection whose request headers are not complete `idle_timeout` seconds
after it opened (or after its last response) is closed, and a body not
complete within `body_timeout` seconds is a 408 before any route reads it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .adapter import RouteTable
from .wire import BadPayload

log = logging.getLogger("backchannel.server")

__all__ = ["HttpServer"]

MAX_BODY = 4 * 1024 * 1024
#: seconds a connection may stay open without a complete request's headers (or idle between
#: requests on a kept-alive connection); 0 keeps aiohttp's own (an hour)
IDLE_TIMEOUT = 30.0
#: seconds a request's body may take to arrive in full
BODY_TIMEOUT = 30.0
#: seconds between INFO lines counting client disconnects
DISCONNECT_REPORT_INTERVAL = 60.0


class HttpServer:
    """One aiohttp app behind a catch-all route, so adapters can add routes at any time."""

    def __init__(
        self,
        routes: RouteTable,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        health: Callable[[], Awaitable[dict[str, Any]]] | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
    ):
        self.routes = routes
        self.idle_timeout = idle_timeout
        self.body_timeout = body_timeout
        self.host = host
        self.port = port
        self.health = health
        self._runner: web.AppRunner | None = None
        self.url: str | None = None
        #: client disconnects since the server started, and since the last INFO line
        self.disconnects = 0
        self._disconnects_unreported = 0
        self._disconnects_reported_at = 0.0

    async def start(self) -> str:
        """Listen; return the base URL (with the real port when port was 0)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("GET", "/healthz", self._healthz)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        extra: dict[str, Any] = (
            {"keepalive_timeout": self.idle_timeout} if self.idle_timeout > 0 else {}
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, **extra)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        port = sockets[0].getsockname()[1] if sockets else self.port
        host = self.host if ":" not in self.host else f"[{self.host}]"
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        handler = self.routes.find(request.method, request.path)
        if handler is None:
            if self.routes.serves(request.path):
                raise web.HTTPMethodNotAllowed(request.method, [])
            raise web.HTTPNotFound(text=f"no route for {request.path}\n")
        try:
            if request.can_read_body:
                # read here, bounded (aiohttp keeps it: the route's own read gets it at once)
                try:
                    async with asyncio.timeout(self.body_timeout):
                        await request.read()
                except TimeoutError:
                    log.warning(
                        "%s %s: the body did not arrive within %gs; answered 408",
                        request.method,
                        request.path,
                        self.body_timeout,
                    )
                    refused = web.Response(status=408, text="the request body took too long\n")
                    refused.force_close()  # not another request on a connection this slow
                    return refused
            return await handler(request)
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError included
            self._client_disconnected(request)
            return web.Response(status=400, text="connection lost\n")
        except BadPayload as error:
            log.warning("%s %s: refused a body: %s", request.method, request.path, error)
            return web.Response(status=400, text=f"{error}\n")

    def _client_disconnected(self, request: web.Request) -> None:
        """Count a dropped connection: DEBUG each, INFO at most once a minute with the count."""
        self.disconnects += 1
        self._disconnects_unreported += 1
        log.debug("%s %s: the client disconnected mid-request", request.method, request.path)
        moment = time.monotonic()
        if moment - self._disconnects_reported_at >= DISCONNECT_REPORT_INTERVAL:
            log.info(
                "%d client(s) disconnected mid-request since the last report",
                self._disconnects_unreported,
            )
            self._disconnects_unreported = 0
            self._disconnects_reported_at = moment

    async def _healthz(self, request: web.Request) -> web.Response:
        figures = await self.health() if self.health else {}
        return web.json_response({"ok": True, **figures})

"""The switchboard's HTTP server: adapters' routes (webhooks, the web chat) and a health check."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .adapter import RouteTable

__all__ = ["HttpServer"]

MAX_BODY = 4 * 1024 * 1024


class HttpServer:
    """One aiohttp app behind a catch-all route, so adapters can add routes at any time."""

    def __init__(
        self,
        routes: RouteTable,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        health: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    ):
        self.routes = routes
        self.host = host
        self.port = port
        self.health = health
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    async def start(self) -> str:
        """Listen; return the base URL (with the real port when port was 0)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("GET", "/healthz", self._healthz)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
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
        return await handler(request)

    async def _healthz(self, request: web.Request) -> web.Response:
        figures = await self.health() if self.health else {}
        return web.json_response({"ok": True, **figures})

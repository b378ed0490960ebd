"""Streamable HTTP for a shared MCP server: a bearer token on every request, loopback by default.

The MCP authorization spec has HTTP clients send ``Authorization: Bearer
<token>`` on every request, and servers answer 401 with a
``WWW-Authenticate: Bearer`` challenge when it is missing or wrong
(https://modelcontextprotocol.io/specification/2025-06-18/basic/authorization).
backchannel uses one static token from ``[mcp] token`` (write it as
``${BACKCHANNEL_MCP_TOKEN}``), compared in constant time, and refuses to
start without one.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from backchannel.errors import ConfigError
from backchannel.logcount import CountedLog

from .server import BackchannelMcp

__all__ = ["BearerGate", "check_http_listen", "is_loopback", "serve_http"]

log = logging.getLogger("backchannel.mcp.http")

#: connections (and requests) served at once over HTTP
MAX_CONNECTIONS = 256
#: connections one client address may hold open at once (a quarter of the whole)
MAX_PER_ADDRESS = MAX_CONNECTIONS // 4
#: seconds a connection may take to send a request's headers, from when it opened or its
#: last response ended (uvicorn itself waits for ever)
HEADER_TIMEOUT = 10.0


def _timely_protocol() -> type:
    """uvicorn's h11 protocol, with a deadline for headers and a cap per client address.

    uvicorn counts a connection against `limit_concurrency` from the moment it opens,
    and has no timeout for headers still arriving: 256 idle connections from anyone
    made every request a 503 for as long as they stayed open. Here a connection that
    sends no complete request headers within `HEADER_TIMEOUT` (of opening, or of its
    last response) is closed, and one address may hold `MAX_PER_ADDRESS` connections.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    held: dict[str, int] = {}

    class TimelyH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _address = ""

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._address = self.client[0] if self.client else ""
            held[self._address] = held.get(self._address, 0) + 1
            if held[self._address] > MAX_PER_ADDRESS:
                _refused_crowd(self._address)
                transport.close()
                return
            self._arm()

        def on_response_complete(self) -> None:
            # armed on the cycle that just ended, before a pipelined request behind it
            # starts its own (which then must not be taken for a connection gone quiet)
            self._arm()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            left = held.get(self._address, 1) - 1
            if left > 0:
                held[self._address] = left
            else:
                held.pop(self._address, None)
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(HEADER_TIMEOUT, self._too_slow, self.cycle)

        def _too_slow(self, waiting_after: Any) -> None:
            # no request began since it was armed (a new one replaces the cycle)
            if self.cycle is waiting_after and not self.transport.is_closing():
                self.transport.close()

    return TimelyH11Protocol


#: connections closed for their address's crowd: one WARNING, then one a minute
_crowds = CountedLog(log)


def _refused_crowd(address: str) -> None:
    _crowds.note("refused a connection from %s: it holds %d already", address, MAX_PER_ADDRESS)


Asgi = Callable[[Any, Any, Any], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_http_listen(host: str, token: str | None) -> str:
    """Return the token to require, or raise ConfigError saying why HTTP may not start."""
    if token:
        return token
    if not is_loopback(host):
        raise ConfigError(
            f"refusing to serve MCP on {host}, a non-loopback address, without a token: anyone who"
            " can reach it could read and send your messages. Set [mcp] token ="
            ' "${BACKCHANNEL_MCP_TOKEN}" and export BACKCHANNEL_MCP_TOKEN'
        )
    raise ConfigError(
        'streamable HTTP needs a bearer token: set [mcp] token = "${BACKCHANNEL_MCP_TOKEN}"'
        " in the config and export BACKCHANNEL_MCP_TOKEN (or use --stdio for a client that"
        " spawns the server)"
    )


class BearerGate:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Asgi, token: str):
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers", ()):
                if name.lower() == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self._expected):
                await _unauthorized(send, "missing" if not given else "wrong")
                return
        await self.app(scope, receive, send)


async def serve_http(
    app: BackchannelMcp,
    host: str,
    port: int,
    token: str,
    *,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve `app` over streamable HTTP at http://host:port/mcp until cancelled or `stop` is set."""
    import uvicorn
    from backchannel.runtime import raise_open_file_limit

    starlette_app = app.server.streamable_http_app(host=host)
    gated = BearerGate(starlette_app, token)
    raise_open_file_limit()  # a connection is a file (see backchannel.runtime)
    config = uvicorn.Config(
        gated,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        access_log=False,
        # connections and requests at once: past it uvicorn answers 503 at once, so
        # connections cannot take every file the process may open; the protocol closes
        # those slow to send their headers, and caps each client address
        limit_concurrency=MAX_CONNECTIONS,
        http=_timely_protocol(),
        # MCP speaks no websockets: an upgrade (were websockets installed) would leave the
        # h11 protocol without its connection_lost, and pass a scope BearerGate never sees
        ws="none",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                await task  # raises the bind error
                raise OSError(f"cannot listen on {host}:{port}")
            await asyncio.sleep(0.02)
        bound = server.servers[0].sockets[0].getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        url = f"http://{shown}:{bound[1]}/mcp"
        if on_ready is not None:
            on_ready(url)
        if stop is None:
            await task
        else:
            await stop.wait()
    finally:
        server.should_exit = True
        await asyncio.gather(task, return_exceptions=True)


async def _unauthorized(send: Any, what: str) -> None:
    body = json.dumps(
        {"error": "invalid_token", "error_description": f"{what} bearer token"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="backchannel", error="invalid_token"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

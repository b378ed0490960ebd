"""Streamable HTTP for a shared MCP server: a bearer token on every request, loopback by default.

The MCP authorization spec has HTTP clients send ``Authorization: Bearer
<token>`` on every request, and servers answer 401 with a
``WWW-Authenticate: Bearer`` challenge when it is missing or wrong
(https://modelcontextprotocol.io/specification/2025-06-18/basic/authorization).
backchannel uses one static token from ``[mcp] token`` (write it as
``${BACKCHANNEL_MCP_TOKEN}``), else from the variable BACKCHANNEL_MCP_TOKEN itself,
compared in constant time, and refuses to start without one.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from backchannel.errors import BackchannelError, ConfigError
from backchannel.logcount import CountedLog

from .server import BackchannelMcp

__all__ = ["TOKEN_ENV", "BearerGate", "check_http_listen", "is_loopback", "serve_http"]

log = logging.getLogger("backchannel.mcp.http")

#: where the bearer token comes from when the config has no [mcp] token
TOKEN_ENV = "BACKCHANNEL_MCP_TOKEN"
#: connections (and requests) served at once over HTTP
MAX_CONNECTIONS = 256
#: connections one client address may hold open at once (a quarter of the whole)
MAX_PER_ADDRESS = MAX_CONNECTIONS // 4
#: seconds a connection may take to send a request's headers, from when it opened or its
#: last response ended (uvicorn itself waits for ever)
HEADER_TIMEOUT = 10.0


def _timely_protocol() -> type:
    """uvicorn's h11 protocol, with a deadline for headers and room kept for real requests.

    uvicorn counts a connection against `limit_concurrency` from the moment it opens,
    and has no timeout for headers still arriving: 256 idle connections from anyone
    made every request a 503 for as long as they stayed open. Here a connection that
    sends no complete request headers within `HEADER_TIMEOUT` (of opening, or of its
    last response) is closed, and one address may hold `MAX_PER_ADDRESS` connections.

    Both limits act before any token is seen, so a connection that would pass one
    closes the connection of its address (for the global limit: of anyone) that has
    waited longest without a request in progress, not the newcomer: a connection that
    never finished its headers has shown no token and does nothing. Only when every
    connection of the address is serving a request is the newcomer refused. (Refusing
    newcomers let anyone who can reach the port, on loopback every local user, lock the
    token holder out by holding the cap with connections that never finish their
    headers.)
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    #: open connections not yet closed by us, in order of opening: by address, and all
    crowds: dict[str, dict[Any, None]] = {}
    everyone: dict[Any, None] = {}

    class TimelyH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _address = ""
        _idle_since = 0.0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._address = self.client[0] if self.client else ""
            self._idle_since = self.loop.time()
            crowd = crowds.setdefault(self._address, {})
            crowd[self] = None
            everyone[self] = None
            if len(crowd) > MAX_PER_ADDRESS and not _make_room(crowd, self):
                _refused_crowd(self._address)
                self._close()
                return
            # uvicorn answers 503 to a request while it holds the limit (this one included)
            if len(everyone) >= MAX_CONNECTIONS:
                _make_room(everyone, self)
            self._arm()

        def on_response_complete(self) -> None:
            # armed on the cycle that just ended, before a pipelined request behind it
            # starts its own (which then must not be taken for a connection gone quiet)
            self._arm()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._forget()
            super().connection_lost(exc)

        def _busy(self) -> bool:
            """True while a request (its headers complete) is being served."""
            return self.cycle is not None and not self.cycle.response_complete

        def _close(self) -> None:
            self._forget()
            if not self.transport.is_closing():
                self.transport.close()

        def _forget(self) -> None:
            everyone.pop(self, None)
            crowd = crowds.get(self._address)
            if crowd is not None:
                crowd.pop(self, None)
                if not crowd:
                    del crowds[self._address]

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._idle_since = self.loop.time()
            self._deadline = self.loop.call_later(HEADER_TIMEOUT, self._too_slow, self.cycle)

        def _too_slow(self, waiting_after: Any) -> None:
            # no request began since it was armed (a new one replaces the cycle)
            if self.cycle is waiting_after and not self.transport.is_closing():
                self._close()

    def _make_room(among: dict[Any, None], newcomer: Any) -> bool:
        """Close the connection of `among` idle longest (no request in progress), but not
        `newcomer`; False when every one is busy."""
        idle = [c for c in among if c is not newcomer and not c._busy()]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c._idle_since)
        _crowded_out(oldest._address)
        oldest._close()
        return True

    return TimelyH11Protocol


#: connections refused or closed for their address's crowd: one WARNING, then one a minute
_crowds = CountedLog(log)
_idle_closed = CountedLog(log)


def _refused_crowd(address: str) -> None:
    _crowds.note(
        "refused a connection from %s: it holds %d already, each serving a request",
        address,
        MAX_PER_ADDRESS,
    )


def _crowded_out(address: str) -> None:
    _idle_closed.note(
        "closed an idle connection from %s (no request in progress) to make room for a new one",
        address,
    )


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
            f" can reach it could read and send your messages. Export {TOKEN_ENV} (or set"
            f' [mcp] token = "${{{TOKEN_ENV}}}" in the config)'
        )
    raise ConfigError(
        f"streamable HTTP needs a bearer token: export {TOKEN_ENV} (or set [mcp] token ="
        f' "${{{TOKEN_ENV}}}" in the config), or use --stdio for a client that spawns the server'
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
    """Serve `app` over streamable HTTP at http://host:port/mcp until cancelled or `stop` is set.

    Raises BackchannelError (one line: ``cannot serve on HOST:PORT: reason``) when it
    cannot listen there.
    """
    import uvicorn
    from backchannel.runtime import raise_open_file_limit

    sockets = _listen(host, port)
    try:
        bound = sockets[0].getsockname()
        starlette_app = app.server.streamable_http_app(
            host=host, transport_security=_transport_security(host, sockets)
        )
        gated = BearerGate(starlette_app, token)
        raise_open_file_limit()  # a connection is a file (see backchannel.runtime)
        config = uvicorn.Config(
            gated,
            host=host,
            port=bound[1],
            log_level="warning",
            lifespan="on",
            access_log=False,
            # connections and requests at once: past it uvicorn answers 503 at once, so
            # connections cannot take every file the process may open; the protocol closes
            # those slow to send their headers, and makes room for newcomers by closing
            # idle ones
            limit_concurrency=MAX_CONNECTIONS,
            http=_timely_protocol(),
            # MCP speaks no websockets: an upgrade (were websockets installed) would leave
            # the h11 protocol without its connection_lost, and pass a scope BearerGate
            # never sees
            ws="none",
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=sockets))
        try:
            while not server.started:
                if task.done():
                    await task  # raises why it stopped
                    raise OSError(f"cannot listen on {host}:{port}")
                await asyncio.sleep(0.02)
            url = f"http://{_host_header_name(bound[0])}:{bound[1]}/mcp"
            if on_ready is not None:
                on_ready(url)
            if stop is None:
                await task
            else:
                await stop.wait()
        finally:
            server.should_exit = True
            await asyncio.gather(task, return_exceptions=True)
    finally:
        for sock in sockets:
            sock.close()


def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` names (one port for all), or a
    BackchannelError saying in one line why not (uvicorn would log a multi-line ERROR
    and exit the process)."""
    where = f"{_host_header_name(host)}:{port}"
    sockets: list[socket.socket] = []
    try:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except UnicodeError as error:  # a host name IDNA cannot encode
            raise OSError(f"{host!r} is not a host name") from error
        seen: set[Any] = set()
        unavailable: OSError | None = None
        for family, kind, proto, _name, address in found:
            if address in seen:
                continue
            seen.add(address)
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if sockets:  # port 0: the others on the port the first was given
                    address = (address[0], sockets[0].getsockname()[1], *address[2:])
                sock.bind(address)
                sock.listen(2048)
            except OSError as error:
                sock.close()
                if error.errno == errno.EADDRNOTAVAIL:  # that family is not enabled here
                    unavailable = error
                    continue
                raise
            sockets.append(sock)
        if not sockets:
            raise unavailable or OSError(f"{host!r} names no address")
    except OSError as error:
        for sock in sockets:
            sock.close()
        reason = error.strerror or str(error)
        raise BackchannelError(f"cannot serve on {where}: {reason}") from None
    return sockets


def _host_header_name(host: str) -> str:
    """`host` as it appears in a URL or a Host header: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def _transport_security(host: str, sockets: list[socket.socket]) -> Any:
    """The SDK's DNS-rebinding protection for the address served, whatever it is.

    The SDK turns it on by itself only for a host spelled exactly 127.0.0.1, localhost
    or ::1: on 127.0.0.2 (or a LAN address) a page on attacker.example that rebinds its
    name to that address could post to the server. Here the Host header must name the
    address served (any port, or none: a tunnel or a proxy may change the port, and the
    name is what a rebinding attack changes), and on loopback also 127.0.0.1, localhost
    or [::1]; an Origin, when a browser sends one, the same names over http. A foreign
    Host gets 421, a foreign Origin 403 (the SDK's answers). On an unspecified address
    (0.0.0.0, ::) any of the machine's names reaches the server: the Host is not
    checked, only the token guards it.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    bound = [sock.getsockname()[0] for sock in sockets]
    if _unspecified(host) or any(_unspecified(address) for address in bound):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = dict.fromkeys([host.lower(), *bound])
    if is_loopback(host) or any(is_loopback(address) for address in bound):
        names.update(dict.fromkeys(["127.0.0.1", "localhost", "::1"]))
    hosts: list[str] = []
    for name in names:
        shown = _host_header_name(name)
        hosts += [shown, f"{shown}:*"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{allowed}" for allowed in hosts],
    )


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return host == ""


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

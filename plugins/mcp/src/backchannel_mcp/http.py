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
from backchannel.logcount import CountedLog, Tally
from backchannel.secrets import raised

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


def _timely_protocol(expected_authorization: bytes = b"") -> type:
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
    headers.) A connection that has shown the token (`expected_authorization`) is closed
    only when no idle one has not: strangers churning connections closed the token
    holder's kept-alive one just as it was reused. The global limit makes room down to
    one under `MAX_CONNECTIONS`, and uvicorn's own limit sits above it (it counts a
    connection we closed until its close is done): a newcomer arriving while strangers
    hold the count at the limit is served, not answered 503.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    #: open connections not yet closed by us, in order of opening: by address, and all
    crowds: dict[str, dict[Any, None]] = {}
    everyone: dict[Any, None] = {}

    class TimelyH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _address = ""
        _idle_since = 0.0
        #: a request on it carried the token: the token holder's connection
        _trusted = False

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
            # uvicorn answers 503 to a request while it holds its limit (this one included):
            # room is made down to one under ours, which is under uvicorn's
            if len(everyone) >= MAX_CONNECTIONS:
                _make_room(everyone, self)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if not self._trusted and expected_authorization and self.cycle is not None:
                given = next((v for k, v in self.headers if k == b"authorization"), b"")
                self._trusted = hmac.compare_digest(given, expected_authorization)

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
        # strangers' first, then the token holder's: each the one idle longest
        oldest = min(idle, key=lambda c: (c._trusted, c._idle_since))
        _crowded_out(oldest._address)
        oldest._close()
        return True

    return TimelyH11Protocol


#: connections refused or closed for their address's crowd: one WARNING, then one a minute
_crowds = CountedLog(log)
_idle_closed = CountedLog(log)
_slow_bodies = CountedLog(log)


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

    @property
    def expected(self) -> bytes:
        """The Authorization header value that passes."""
        return self._expected

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


class _RefusedAtTheLimit(logging.Filter):
    """uvicorn logs a WARNING for each request it answers 503 at its limit (before any
    token is seen: strangers made 380 lines in 10 s); here they are counted, one line a
    minute. A client gone mid-request makes the SDK log a traceback (ClientDisconnect):
    one DEBUG line instead."""

    def __init__(self) -> None:
        super().__init__()
        self.tally = Tally()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.error":
            if record.getMessage() != "Exceeded concurrency limit.":
                return True
            since = self.tally.tick()
            if since is not None:
                log.warning(
                    "answered %d request(s) 503 at the limit of %d connections since the last"
                    " report",
                    since,
                    MAX_CONNECTIONS + MAX_PER_ADDRESS,
                )
            return False
        if raised(record) == _CLIENT_GONE:
            log.debug("a client went away mid-request (%s)", str(record.msg).split("\n", 1)[0])
            return False
        return True


_QUIETER = _RefusedAtTheLimit()
#: the exception the SDK logs for a client gone mid-request
_CLIENT_GONE = "starlette.requests.ClientDisconnect"


def _quieten_logs() -> None:
    for name in ("uvicorn.error", "mcp.server.streamable_http"):
        logger = logging.getLogger(name)
        if _QUIETER not in logger.filters:
            logger.addFilter(_QUIETER)


#: the longest request body read to find its JSON-RPC id (the SDK answers 413 past it)
MAX_BODY = 4 * 1024 * 1024
#: seconds a request's body may take to arrive once its headers have (then a 408)
BODY_TIMEOUT = 30.0


class OneRequestPerId:
    """ASGI middleware: a POST whose JSON-RPC request id is in flight in its session waits
    for the first to be answered, and a body must arrive within `BODY_TIMEOUT`.

    The SDK keeps one response stream per request id: a second POST with the id of a
    request still running (a client's retry after a dropped connection, or a client
    reusing ids) replaced the first's stream, and the first POST was never answered; it
    stayed open, holding a connection, until the server stopped. Here the second waits
    its turn: the first gets its answer, and the second then gets what the server gives
    a repeated id (a write tool's first result: nothing is done twice). A POST is read
    whole before it is passed on (the SDK reads it whole too), within `BODY_TIMEOUT`:
    a client trickling its body no longer holds a connection for ever.
    """

    def __init__(self, app: Asgi):
        self.app = app
        #: (session id, request id) -> the lock its POSTs take in turn, and how many hold
        #: or wait for it (the entry goes with the last)
        self._in_flight: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                while more and size <= MAX_BODY:
                    message = await receive()
                    if message["type"] != "http.request":
                        # the client went away mid-body: the SDK sees that as it would have
                        read = {"type": "http.request", "body": b"".join(chunks), "more_body": True}
                        await self.app(scope, _replay([read, message], receive), send)
                        return
                    chunks.append(message.get("body", b""))
                    size += len(chunks[-1])
                    more = message.get("more_body", False)
        except TimeoutError:
            _slow_bodies.note("a request body took longer than %.0f s: answered 408", BODY_TIMEOUT)
            await _respond(
                send,
                408,
                b"request body too slow\n",
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"connection", b"close"),
            )
            return
        body = b"".join(chunks)
        # past MAX_BODY the rest is left to the SDK, which answers 413
        replayed = _replay([{"type": "http.request", "body": body, "more_body": more}], receive)
        key = None if more else _request_key(scope, body)
        if key is None:
            await self.app(scope, replayed, send)
            return
        entry = self._in_flight.get(key)
        if entry is None:
            entry = self._in_flight[key] = (asyncio.Lock(), [0])
        elif entry[0].locked():
            log.info(
                "request id %s came again while in flight: it waits for the first", key[1][:40]
            )
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                await self.app(scope, replayed, send)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._in_flight[key]


def _request_key(scope: Any, body: bytes) -> tuple[str, str] | None:
    """(session id, request id) of a POST carrying one JSON-RPC request, else None."""
    if body.lstrip()[:1] != b"{":
        return None  # a batch, or not JSON: the SDK answers it
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    request_id = message.get("id")
    if request_id is None or isinstance(request_id, bool | dict | list):
        return None
    session = ""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"mcp-session-id":
            session = value.decode("latin-1")
            break
    # the SDK keys its streams by str(id): 6 and "6" share one, so they take turns too
    return session, str(request_id)


def _replay(messages: list[Any], receive: Any) -> Any:
    """A receive that gives `messages` first, then what `receive` gives."""
    pending = list(messages)

    async def replayed() -> Any:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _respond(send: Any, status: int, body: bytes, *headers: tuple[bytes, bytes]) -> None:
    """Answer with `status` and `body` (its length added to `headers`)."""
    length = (b"content-length", str(len(body)).encode())
    await send({"type": "http.response.start", "status": status, "headers": [*headers, length]})
    await send({"type": "http.response.body", "body": body})


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
        gated = BearerGate(OneRequestPerId(starlette_app), token)
        raise_open_file_limit()  # a connection is a file (see backchannel.runtime)
        _quieten_logs()
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
            # (above our own limit: see _timely_protocol)
            limit_concurrency=MAX_CONNECTIONS + MAX_PER_ADDRESS,
            http=_timely_protocol(gated.expected),
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
    await _respond(
        send,
        401,
        body,
        (b"content-type", b"application/json"),
        (b"www-authenticate", b'Bearer realm="backchannel", error="invalid_token"'),
    )

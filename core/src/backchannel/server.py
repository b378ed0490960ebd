"""The switchboard's HTTP server: adapters' routes (webhooks, the web chat) and a health check.

A client that drops its connection mid-request (routine, and free for anyone
to do by the thousand) costs one DEBUG line, and at most one INFO line a
minute with the count; a body a route cannot parse (`BadPayload`) is a 400
with one WARNING line. Neither is ever a traceback.

A client that sends slowly cannot hold a connection for long (slowloris): a
connection whose request headers are not complete `idle_timeout` seconds
after it opened (or after its last response) is closed, and a body not
complete within `body_timeout` seconds is a 408 before any route reads it.

Memory: a route's header check (`RouteTable.add(check=...)`: a webhook's
secret header) refuses a stranger before the body is read, and the bodies
held at once are bounded per route (`max_buffered`), and per client address
to a quarter of that. A body is counted as it arrives, not at its announced
length, so slow clients announcing big bodies hold only what they sent (a
crowd of them cannot turn real deliveries away); a request whose announced
length would not fit, or whose body stops fitting as it arrives, is a 503
with Retry-After, not buffered further; but first, bodies still arriving
after `STALLED_AFTER` seconds are closed to make room (sent fast, then
stalled: a stranger's way to hold the room until the body deadline). Per route:
strangers crowding one route (a forged but fresh Slack signature passes the
header check) cannot starve another (Telegram's, whose secret they lack). A
GET or HEAD carrying a body is a 400 before any of it is read. A request
aiohttp's parser refuses (a bad header byte, a header too long) is a 400 and
counted, at most one INFO line a minute, not a traceback each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .adapter import RouteTable
from .logcount import CountedLog, Tally
from .secrets import raised
from .wire import BadPayload

log = logging.getLogger("backchannel.server")

__all__ = ["HttpServer"]

MAX_BODY = 4 * 1024 * 1024
#: seconds a connection may stay open without a complete request's headers (or idle between
#: requests on a kept-alive connection); 0 keeps aiohttp's own (an hour)
IDLE_TIMEOUT = 30.0
#: seconds a request's body may take to arrive in full
BODY_TIMEOUT = 30.0
#: seconds between INFO lines counting client disconnects (and refused requests)
DISCONNECT_REPORT_INTERVAL = 60.0
#: bytes of request bodies held at once on one route, across every request being read
MAX_BUFFERED = 32 * 1024 * 1024
#: seconds after which a body still arriving gives its room to a newcomer that needs it
STALLED_AFTER = 5.0


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
        max_buffered: int = MAX_BUFFERED,
    ):
        self.routes = routes
        self.idle_timeout = idle_timeout
        self.body_timeout = body_timeout
        self.max_buffered = max_buffered
        #: body bytes reserved by the requests being read or handled now, by route path,
        #: and by route and client address (one address may hold a quarter of a route's)
        self._buffered: dict[str, int] = {}
        self._by_peer: dict[tuple[str, str], int] = {}
        #: requests refused for want of buffer room, and malformed ones aiohttp refused
        self.refused_busy = 0
        #: requests whose route's header check raised (refused: a 400)
        self._check_raised = CountedLog(log)
        #: bodies being read, by route, with when they started (oldest first)
        self._reading: dict[str, dict[_Held, float]] = {}
        #: bodies closed because they stalled while a newcomer needed their room
        self._stalled = CountedLog(log)
        #: bodies that took longer than `body_timeout` (a 408): counted, not a line each
        self._too_slow = CountedLog(log)
        #: malformed requests aiohttp refused, counted for every server of the process
        self.malformed = _MALFORMED
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
        server_log = logging.getLogger("aiohttp.server")
        if self.malformed not in server_log.filters:
            server_log.addFilter(self.malformed)  # once a process: one filter, one count
        asyncio_log = logging.getLogger("asyncio")
        if _OUT_OF_FILES not in asyncio_log.filters:
            asyncio_log.addFilter(_OUT_OF_FILES)
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
        check = self.routes.check(request.method, request.path)
        if check is not None:
            try:
                refused = check(request)
            except Exception as error:  # a check's own bug: a refusal, never a 500 each
                self._check_raised.note(
                    "%s %s: the route's header check raised %s; answered 400",
                    request.method,
                    request.path,
                    type(error).__name__,
                )
                refused = web.Response(status=400, text="the request headers were refused\n")
            if refused is not None:
                refused.force_close()  # whatever body it brought is not read
                return refused
        route, peer = request.path, request.remote or ""
        held = _Held(self._buffered, self._by_peer, route, peer, request.transport)
        if request.can_read_body:
            if request.method in ("GET", "HEAD"):
                refused = web.Response(status=400, text="a GET or HEAD carries no body\n")
                refused.force_close()
                return refused
            announced = request.content_length
            if announced is not None and announced > MAX_BODY:
                raise web.HTTPRequestEntityTooLarge(MAX_BODY, announced)
            if announced is not None and not self._room_for(held, announced):
                return self._busy(request)
        try:
            if request.can_read_body:
                # read here, bounded (kept on the request: the route's own read gets it)
                try:
                    async with asyncio.timeout(self.body_timeout):
                        body = await self._read_body(request, held)
                except TimeoutError:
                    self._too_slow.note(
                        "%s %s: the body did not arrive within %gs; answered 408",
                        request.method,
                        request.path,
                        self.body_timeout,
                    )
                    refused = web.Response(status=408, text="the request body took too long\n")
                    refused.force_close()  # not another request on a connection this slow
                    return refused
                if body is None:
                    return self._busy(request)
                request._read_bytes = body  # what `request.read()` returns (aiohttp's own slot)
            return await handler(request)
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError included
            self._client_disconnected(request)
            return web.Response(status=400, text="connection lost\n")
        except BadPayload as error:
            log.warning("%s %s: refused a body: %s", request.method, request.path, error)
            return web.Response(status=400, text=f"{error}\n")
        finally:
            held.release()
            self._reading.get(route, {}).pop(held, None)

    def _room_for(self, held: _Held, size: int) -> bool:
        """Whether `size` more bytes fit the route's room (and the address's quarter),
        making it by closing bodies stalled for `STALLED_AFTER` seconds, oldest first.

        A forged but fresh Slack signature passes the header check, and whether it is
        forged shows only once the body is in: strangers who send most of a big body
        at once and then stall would hold the route's room until `body_timeout`. A
        real delivery arrives in well under a second, so a newcomer that does not fit
        takes the room of bodies still arriving after that long."""
        if held.fits(size, self.max_buffered):
            return True
        reading = self._reading.get(held.route, {})
        moment = time.monotonic()
        for other, started in list(reading.items()):
            if other is held or moment - started < STALLED_AFTER:
                continue
            if held.route_fits(size, self.max_buffered) and other.peer != held.peer:
                continue  # only the address's own quarter is short: its own bodies make room
            reading.pop(other, None)
            other.abort()
            self._stalled.note(
                "%s: closed a request body from %s still arriving after %.0fs to make room",
                held.route,
                other.peer,
                moment - started,
            )
            if held.fits(size, self.max_buffered):
                return True
        return False

    async def _read_body(self, request: web.Request, held: _Held) -> bytes | None:
        """Read the body as it arrives, counting each chunk against the route's room (and
        its client address's) when it comes: None once it would pass either.

        Counted as it arrives, not at its announced length: a client trickling a body
        it announced as 4 MiB holds the few bytes it sent, so a crowd of slow strangers
        (a forged but fresh Slack signature passes the header check) cannot fill a
        route's room and turn the real deliveries away.
        """
        body = bytearray()
        self._reading.setdefault(held.route, {})[held] = time.monotonic()
        while chunk := await request.content.readany():
            if held.aborted:  # closed to make room: its bytes were given back already
                raise ConnectionResetError("closed to make room for another request")
            if len(body) + len(chunk) > MAX_BODY:
                raise web.HTTPRequestEntityTooLarge(MAX_BODY, len(body) + len(chunk))
            if not self._room_for(held, len(chunk)):
                return None
            held.take(len(chunk))
            body += chunk
        if held.aborted:
            raise ConnectionResetError("closed to make room for another request")
        self._reading.get(held.route, {}).pop(held, None)  # complete: no longer stalled
        return bytes(body)

    @property
    def refused_by_check(self) -> int:
        """Requests whose route's header check raised (each a 400)."""
        return self._check_raised.count

    @property
    def closed_stalled(self) -> int:
        """Bodies closed because they stalled while a newcomer needed their room."""
        return self._stalled.count

    @property
    def buffered(self) -> int:
        """Body bytes reserved now, every route together."""
        return sum(self._buffered.values())

    def _busy(self, request: web.Request) -> web.Response:
        """Refuse a request whose body would pass `max_buffered`: 503, try again shortly."""
        self.refused_busy += 1
        first = self.refused_busy == 1
        (log.warning if first else log.debug)(
            "%s %s: %d bytes of request bodies are being read on this route already;"
            " answered 503 (%d such request(s) so far)",
            request.method,
            request.path,
            self._buffered.get(request.path, 0),
            self.refused_busy,
        )
        refused = web.Response(
            status=503, text="too many requests in progress\n", headers={"Retry-After": "1"}
        )
        refused.force_close()
        return refused

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
        if request.can_read_body:  # as for any route: its body is not read, nor served
            refused = web.Response(status=400, text="a GET or HEAD carries no body\n")
            refused.force_close()
            return refused
        figures = await self.health() if self.health else {}
        return web.json_response({"ok": True, **figures})


class _MalformedRequests(logging.Filter):
    """Drops aiohttp's traceback for a request its parser refused (answered 400 by aiohttp:
    a bad header byte, a header too long, a broken chunk); counts them, and says how many
    at most once a minute."""

    def __init__(self) -> None:
        super().__init__()
        self.tally = Tally(DISCONNECT_REPORT_INTERVAL)

    @property
    def count(self) -> int:
        """Malformed requests refused since the start (every server of the process)."""
        return self.tally.count

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            # with secrets registered, the traceback is folded into the message: its name
            name = raised(record) or ""
            if name.startswith("aiohttp.http_exceptions."):
                error = HttpProcessingError(message=name.rsplit(".", 1)[1])
        if not isinstance(error, HttpProcessingError):
            return True
        since = self.tally.tick()
        if since is not None:
            log.info(
                "refused %d malformed HTTP request(s) since the last report (latest: %s)",
                since,
                error.message if type(error) is HttpProcessingError else type(error).__name__,
            )
        return False


_MALFORMED = _MalformedRequests()


class _OutOfFiles(logging.Filter):
    """Folds asyncio's "socket.accept() out of system resource" errors (the open-file
    limit reached: a crowd of connections) into one line a minute with the count.

    asyncio logs one with its traceback for every connection it could not accept, and
    schedules a retry for each: a crowd at the hard limit wrote 123,000 lines in 10 s.
    """

    def __init__(self) -> None:
        super().__init__()
        self.tally = Tally()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("socket.accept() out of system resource"):
            return True
        since = self.tally.tick()
        if since is None:
            return False
        record.msg = (
            "could not accept %d connection(s) since the last report: the process's open-file"
            " limit is reached (too many connections at once)"
        )
        record.args = (since,)
        record.exc_info = record.exc_text = None
        return True


_OUT_OF_FILES = _OutOfFiles()


class _Held:
    """The body bytes one request holds, counted in its route's and its address's totals."""

    def __init__(
        self,
        by_route: dict[str, int],
        by_peer: dict[tuple[str, str], int],
        route: str,
        peer: str,
        transport: Any = None,
    ):
        self.by_route, self.by_peer = by_route, by_peer
        self.route, self.peer = route, peer
        self.transport = transport
        self.amount = 0
        #: closed to make room for another request (its bytes given back at once)
        self.aborted = False

    def fits(self, size: int, room: int) -> bool:
        """Whether `size` more bytes keep the route within `room`, and the address within
        a quarter of it."""
        return (
            self.route_fits(size, room)
            and self.by_peer.get((self.route, self.peer), 0) + size <= room // 4
        )

    def route_fits(self, size: int, room: int) -> bool:
        return self.by_route.get(self.route, 0) + size <= room

    def take(self, size: int) -> None:
        self.amount += size
        self.by_route[self.route] = self.by_route.get(self.route, 0) + size
        key = (self.route, self.peer)
        self.by_peer[key] = self.by_peer.get(key, 0) + size

    def abort(self) -> None:
        """Give the bytes back now and close the connection: its read then fails."""
        self.aborted = True
        self.release()
        if self.transport is not None:
            self.transport.close()

    def release(self) -> None:
        if self.amount:
            _release(self.by_route, self.route, self.amount)
            _release(self.by_peer, (self.route, self.peer), self.amount)
            self.amount = 0


def _release(held: dict[Any, int], key: Any, amount: int) -> None:
    left = held[key] - amount
    if left:
        held[key] = left
    else:
        del held[key]

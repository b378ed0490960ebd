"""Test the web chat without a browser: a fake page over a real websocket, and a route server.

::

    async with RouteServer(ctx.routes):           # serves what adapters add to ctx.routes
        adapter = WebchatAdapter("web", {})
        await adapter.start(ctx)
        async with FakeBrowser(adapter.url) as page:
            client_id = await page.say("hello")
            seq = await page.wait_ack(client_id)

With a real switchboard, pass ``board.url`` (plus the web chat's path) instead.
`FakeBrowser` speaks the page's protocol exactly (hello, message, receipts),
keeps every frame it received, and shows the transcript as the page would:
one entry per seq.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from backchannel.adapter import RouteTable
from backchannel.model import Address
from backchannel.server import HttpServer

from .normalize import conversation_chat, visitor_id

__all__ = ["FakeBrowser", "RouteServer"]

Frame = dict[str, Any]
_CLOSED = frozenset({aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED})


class RouteServer:
    """Serves a RouteTable on 127.0.0.1 (port 0) with the switchboard's own HttpServer."""

    def __init__(self, routes: RouteTable):
        self.routes = routes
        self.url = ""
        self._server = HttpServer(routes, port=0)

    async def __aenter__(self) -> RouteServer:
        self.url = await self._server.start()
        self.routes.public_url = self.url
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._server.stop()


class FakeBrowser:
    """One browser tab of the web chat page, over a real websocket.

    `page_url` is the page's URL (``adapter.url``). `visitor` is the secret
    token the page keeps in localStorage (random by default); `conversation`
    the tab id it keeps in sessionStorage. `origin` is sent as the Origin
    header (default: the page's own origin; None sends none). `headers` are
    added to the upgrade request (a ``Host``, an ``X-Forwarded-For``), and
    `local_address` is the address the tab connects from: another 127.x.y.z
    plays a visitor at another client address.
    """

    def __init__(
        self,
        page_url: str,
        *,
        visitor: str | None = None,
        conversation: str | None = None,
        name: str = "",
        origin: str | None = "same",
        confirm_deliveries: bool = True,
        headers: Mapping[str, str] | None = None,
        local_address: str | None = None,
    ):
        self.page_url = page_url if page_url.endswith("/") else page_url + "/"
        self.visitor = visitor or secrets.token_hex(16)
        self.conversation = conversation or secrets.token_hex(4)
        self.name = name
        scheme, _, rest = self.page_url.partition("://")
        host = rest.split("/", 1)[0]
        self.origin = f"{scheme}://{host}" if origin == "same" else origin
        self.ws_url = ("wss://" if scheme == "https" else "ws://") + rest + "ws"
        #: confirm pushed messages (the page does); False simulates a frozen tab
        self.confirm_deliveries = confirm_deliveries
        self.headers = dict(headers or {})
        self.local_address = local_address
        self.frames: list[Frame] = []
        self.acked: dict[str, int | None] = {}
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        #: the reason the server gave when it closed the socket ("idle", "busy", ...)
        self.close_reason: str | None = None
        self._ignore_deliveries = 0
        self._said: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()

    # identity --------------------------------------------------------------
    @property
    def chat(self) -> str:
        """The conversation's `Address.chat` (what the server derives from token and tab)."""
        return conversation_chat(visitor_id(self.visitor), self.conversation)

    def address(self, account: str) -> Address:
        return Address(account, self.chat)

    # lifecycle -------------------------------------------------------------
    async def __aenter__(self) -> FakeBrowser:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self, *, hello: bool = True, timeout: float = 10.0) -> None:
        """Connect; with `hello`, greet and wait until the transcript has arrived."""
        self.closed.clear()
        self.close_code = self.close_reason = None
        connector = (
            aiohttp.TCPConnector(local_addr=(self.local_address, 0)) if self.local_address else None
        )
        self._session = aiohttp.ClientSession(connector=connector)
        headers = {"Origin": self.origin} if self.origin else {}
        headers.update(self.headers)
        self._ws = await self._session.ws_connect(
            self.ws_url, headers=headers, heartbeat=30, max_msg_size=0
        )
        start = len(self.frames)
        self._reader = asyncio.create_task(self._read(self._ws))
        if hello:
            await self.send_json(
                {
                    "type": "hello",
                    "visitor": self.visitor,
                    "conversation": self.conversation,
                    "name": self.name,
                }
            )
            await self.wait_for(lambda f: f["type"] == "transcript", timeout, after=start)

    async def close(self) -> None:
        """Close the tab. Idempotent. The HTTP session is closed even when the reader
        ended in an error (a connection reset), which is then raised."""
        try:
            if self._ws is not None:
                await self._ws.close()
            if self._reader is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
        finally:
            if self._session is not None:
                await self._session.close()
            self._ws = self._session = self._reader = None

    async def reload(self) -> None:
        """Close and reopen the tab, as a page reload does (same visitor, same tab)."""
        await self.close()
        self.frames.clear()
        self.acked.clear()
        await self.open()

    # talking ---------------------------------------------------------------
    async def say(
        self, text: str, client_id: str | None = None, *, conversation: str | None = None
    ) -> str:
        """Send a message as the visitor; return its client id. Does not wait for the ack.

        `conversation` sends it into another conversation (tab id) of this visitor, as the
        page resends a message written before a "New chat"."""
        client_id = client_id or secrets.token_hex(12)
        frame = {"type": "message", "client_id": client_id, "text": text}
        if conversation is None or conversation == self.conversation:
            self._said[client_id] = text  # shown here once acked (see `shown`)
        if conversation is not None:
            frame["conversation"] = conversation
        await self.send_json(frame)
        return client_id

    async def send_json(self, frame: Any) -> None:
        await self.send_text(json.dumps(frame))

    async def send_text(self, data: str) -> None:
        if self._ws is None:
            raise RuntimeError("the fake browser is not connected")
        await self._ws.send_str(data)

    async def send_bytes(self, data: bytes) -> None:
        if self._ws is None:
            raise RuntimeError("the fake browser is not connected")
        await self._ws.send_bytes(data)

    def ignore_next_delivery(self) -> None:
        """Do not confirm the next pushed message, as a frozen tab would not."""
        self._ignore_deliveries += 1

    # watching --------------------------------------------------------------
    async def wait_for(
        self, predicate: Callable[[Frame], bool], timeout: float = 10.0, after: int = 0
    ) -> Frame:
        """Return the first frame (from index `after`) matching `predicate`, waiting for it."""

        def found() -> Frame | None:
            return next((f for f in self.frames[after:] if predicate(f)), None)

        async def wait() -> Frame:
            async with self._changed:
                await self._changed.wait_for(lambda: found() is not None or self.closed.is_set())
            frame = found()
            if frame is None:
                raise AssertionError(f"the socket closed ({self.close_code}) before the frame came")
            return frame

        try:
            return await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"no matching frame within {timeout}s; got {self.frames}"
            ) from None

    async def wait_ack(self, client_id: str, timeout: float = 10.0) -> int | None:
        """Return the seq the server acked `client_id` with."""
        await self.wait_for(
            lambda f: f["type"] == "ack" and f.get("client_id") == client_id, timeout
        )
        return self.acked[client_id]

    async def wait_error(self, code: str, timeout: float = 10.0, after: int = 0) -> Frame:
        return await self.wait_for(
            lambda f: f["type"] == "error" and f.get("code") == code, timeout, after
        )

    async def wait_closed(self, timeout: float = 10.0) -> int | None:
        await asyncio.wait_for(self.closed.wait(), timeout)
        return self.close_code

    def agent_texts(self) -> list[str]:
        """Texts of the agent's messages pushed live, in order (split parts one by one)."""
        return [f["text"] for f in self.frames if f["type"] == "message" and f["role"] == "agent"]

    def shown(self) -> list[tuple[int, str, str]]:
        """Return (seq, role, text) as the page shows them: transcript and pushes, once per seq."""
        rows: dict[int, tuple[str, str]] = {}
        complete: set[int] = set()
        parts: dict[int, dict[int, str]] = {}
        for frame in self.frames:
            if frame["type"] == "transcript":
                for message in frame["messages"]:
                    rows[message["seq"]] = (message["role"], message["text"])
                    complete.add(message["seq"])
            elif frame["type"] == "message" and frame.get("seq") is not None:
                seq = frame["seq"]
                if frame.get("parts", 1) == 1:
                    rows[seq] = (frame["role"], frame["text"])
                elif seq not in complete:  # a split message: its parts, one per line
                    parts.setdefault(seq, {})[frame["part"]] = frame["text"]
                    joined = "\n".join(text for _, text in sorted(parts[seq].items()))
                    rows[seq] = (frame["role"], joined)
            elif frame["type"] == "ack" and frame.get("seq") is not None:
                sent = self._said.get(frame["client_id"])
                if sent is not None:
                    rows.setdefault(frame["seq"], ("visitor", sent))
        return [(seq, *rows[seq]) for seq in sorted(rows)]

    # internals -------------------------------------------------------------
    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            while True:
                message = await ws.receive()
                if message.type == aiohttp.WSMsgType.CLOSE:
                    self.close_reason = message.extra or ""
                if message.type in _CLOSED:
                    break
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                frame = json.loads(message.data)
                if frame.get("type") == "ack":
                    self.acked[frame["client_id"]] = frame.get("seq")
                if frame.get("delivery"):
                    if self._ignore_deliveries:
                        self._ignore_deliveries -= 1
                    elif self.confirm_deliveries:
                        await ws.send_str(
                            json.dumps({"type": "received", "delivery": frame["delivery"]})
                        )
                async with self._changed:
                    self.frames.append(frame)
                    self._changed.notify_all()
        finally:
            self.close_code = ws.close_code
            self.closed.set()
            async with self._changed:
                self._changed.notify_all()

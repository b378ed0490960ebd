"""One visitor's websocket: the untrusted side of the web chat.

Wire protocol (JSON text frames)::

    page -> server   {"type": "hello", "visitor": TOKEN, "conversation": TAB, "name": "Ada"}
                     {"type": "message", "client_id": ID, "text": "...", ["conversation": TAB]}
                     {"type": "received", "delivery": TOKEN}
    server -> page   {"type": "welcome", ...}   {"type": "transcript", "messages": [...]}
                     {"type": "ack", "client_id": ID, "seq": N}
                     {"type": "message", ...}   {"type": "edit", ...}   {"type": "typing"}
                     {"type": "error", "code": ..., "message": ..., ["client_id"], ["retry_after"]}

Every problem with a frame is answered with an error frame and the
connection is kept; only a wrong first frame, too many tabs, a frame larger
than the websocket limit, more frames than the page's or its address's frame
budget (close reason ``too_many_frames``), or `idle_timeout` without a visitor
message (`silent_timeout` before the first; close reason ``idle``: the page
reconnects when its visitor comes back) closes it. A full web chat
(`max_sockets`) closes an idle page as ``idle`` to make room for a new one.
Before the upgrade, a client address over its limits (open sockets, new
sockets a minute) is answered 429 with Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import WSCloseCode, WSMessage, WSMsgType, web
from backchannel.adapter import AdapterContext
from backchannel.model import now
from backchannel.wire import BadPayload, parse_json, repair_text

from .hub import Connection
from .limits import TokenBucket
from .normalize import (
    AGENT_ID_PREFIX,
    SAFE_ID,
    clean_name,
    conversation_chat,
    inbound_payload,
    is_client_id,
    message_frame,
    visitor_id,
)

if TYPE_CHECKING:
    from .adapter import WebchatAdapter

__all__ = ["VisitorSession", "frame_limit"]

HELLO_TIMEOUT = 10.0
#: the most bytes one character of a message's text takes in a JSON frame: a character
#: outside the BMP written as an escaped surrogate pair, "\ud83d\ude00" (any other is
#: at most 6, "\u00e9", or 4 bytes of UTF-8)
JSON_BYTES_PER_CHAR = 12
#: room for the rest of a message frame ("type", a client_id of 64 characters, escaped
#: too, 384 bytes) and for an over-long text to still be read and answered "too_long"
FRAME_SLACK = 4096
#: a frame costs one token of the frame budgets per this many characters (or bytes) started
FRAME_TOKEN_SIZE = 4096
#: what ends the frame loop
_CLOSED = frozenset({WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED})


class VisitorSession:
    """Serves one websocket from hello to close."""

    def __init__(self, adapter: WebchatAdapter, ctx: AdapterContext, request: web.Request):
        self.adapter = adapter
        self.settings = adapter.settings
        self.ctx = ctx
        self.request = request
        self.ws = web.WebSocketResponse(
            heartbeat=30.0, max_msg_size=frame_limit(self.settings.max_message_chars)
        )
        self.connection: Connection | None = None
        #: the page's own frame budget (its address's is the adapter's)
        self.frame_budget = TokenBucket(self.settings.frame_rate_limit, self.settings.frame_burst)
        #: counted in `adapter.handshakes` (until the hello is answered or refused)
        self._handshaking = False

    async def run(self) -> web.StreamResponse:
        """Check the origin and the client's limits, upgrade, greet, then serve frames."""
        if not self._origin_allowed():
            self.adapter.refuse_origin(self.request.headers.get("Origin", ""))
            raise web.HTTPForbidden(text="this page's origin may not open the web chat")
        # sockets that have not said hello yet count too: without this, anyone could hold
        # any number of them open (each for HELLO_TIMEOUT), past max_sockets
        if self.adapter.handshakes >= self.settings.max_sockets:
            raise web.HTTPServiceUnavailable(
                text="the web chat has too many open pages; try again in a minute",
                headers={"Retry-After": "10"},
            )
        # one client address may not take every slot: its open sockets and new ones a minute
        address = self.adapter.clients.of(self.request, self.ctx.log)
        self.adapter.admit(address)
        self.adapter.handshakes += 1
        self._handshaking = True
        try:
            try:
                await self.ws.prepare(self.request)
                connection = await self._hello(address)
            finally:
                self._end_handshake()
            if connection is not None:
                await self._serve(connection)
        finally:
            self.adapter.release(address)
            if self.connection is not None:
                self.adapter.hub.remove(self.connection)
            if self.ws.prepared and not self.ws.closed:
                await self.ws.close()
        return self.ws

    # handshake -------------------------------------------------------------
    def _end_handshake(self) -> None:
        """Give the handshake slot back (once): before a closing handshake, which waits
        up to 10 s for the client's close frame, so that wait holds no slot."""
        if self._handshaking:
            self._handshaking = False
            self.adapter.handshakes -= 1

    def _origin_allowed(self) -> bool:
        origin = self.request.headers.get("Origin")
        if origin is None:
            return True  # not a browser: origin checks guard browsers against other sites
        origin = origin.rstrip("/")
        if origin in self.settings.allowed_origins:
            return True
        return urlsplit(origin).netloc.lower() == self.request.host.lower()

    async def _hello(self, address: str) -> Connection | None:
        try:
            async with asyncio.timeout(HELLO_TIMEOUT):
                message = await self.ws.receive()
        except TimeoutError:
            await self._close_with("hello_timeout", "the page did not say hello in time", 1008)
            return None
        if message.type != WSMsgType.TEXT:
            self._end_handshake()
            await self.ws.close()
            return None
        frame = _parse(message.data)
        token = frame.get("visitor") if frame else None
        tab = frame.get("conversation") if frame else None
        if (
            frame is None
            or frame.get("type") != "hello"
            or not isinstance(token, str)
            or not 16 <= len(token) <= 128
            or not isinstance(tab, str)
            or not SAFE_ID.match(tab)
        ):
            await self._close_with(
                "bad_hello",
                "the first frame must be {type: hello, visitor: 16-128 chars,"
                " conversation: 1-64 letters, digits, - or _}",
                1008,
            )
            return None
        visitor = visitor_id(token)
        if self.adapter.hub.sockets_of(visitor) >= self.settings.max_sockets_per_visitor:
            await self._close_with(
                "too_many_tabs",
                f"at most {self.settings.max_sockets_per_visitor} web chat tabs may be open"
                " at once; close one and reload",
                1008,
            )
            return None
        # a full web chat closes an idle page (one nobody wrote on first) for the newcomer:
        # whoever holds every slot open cannot keep the next visitor out
        if len(self.adapter.hub) >= self.settings.max_sockets:
            self.adapter.make_room()
        # one plain line that can neither reorder the text around it nor forge a transcript label
        name = clean_name(frame.get("name"))
        connection = Connection(
            self.ws,
            visitor,
            conversation_chat(visitor, tab),
            name,
            address,
            active_at=asyncio.get_running_loop().time(),
        )
        # join before reading the transcript, so nothing pushed in between is lost;
        # the page keys messages by seq, so anything in both shows once. Recorded on the
        # session at once: if anything below fails, `run` still takes the page out of the hub.
        # Nothing durable is written for a hello: a conversation exists once its visitor wrote
        self.adapter.hub.add(connection)
        self.connection = connection
        try:
            await self._send(
                {
                    "type": "welcome",
                    "conversation": connection.chat,
                    "title": self.settings.title,
                    "agent": self.adapter.me.label if self.adapter.me else "Agent",
                    "max_message_chars": self.settings.max_message_chars,
                    # a message frame may name its conversation (a page resending what it
                    # wrote before a "New chat"); a page sends that only when told so
                    "message_conversation": True,
                }
            )
            messages = await self.adapter.transcript(connection.chat)
        except Exception:  # the store failed: the page reconnects (and retries) by itself
            self.ctx.log.exception("web chat: opening conversation %s failed", connection.chat)
            await self._close_with(
                "unavailable", "the conversation could not be loaded; reconnecting", 1011
            )
            return None
        await self._send({"type": "transcript", "messages": [message_frame(m) for m in messages]})
        connection.active_at = asyncio.get_running_loop().time()
        return connection

    # frames ----------------------------------------------------------------
    async def _serve(self, connection: Connection) -> None:
        while True:
            message = await self._receive(connection)
            if message is None:  # idle: the page reconnects when its visitor is back
                await self.ws.close(code=WSCloseCode.OK, message=b"idle")
                return
            if message.type in _CLOSED:
                return
            if message.type in {WSMsgType.TEXT, WSMsgType.BINARY} and not self._within_budget(
                connection, message.data
            ):
                self.adapter.flooded(connection.address)
                await self._close_with(
                    "too_many_frames",
                    "this page sent more frames than the web chat takes; reconnecting",
                    WSCloseCode.POLICY_VIOLATION,
                )
                return
            if message.type == WSMsgType.TEXT:
                frame = _parse(message.data)
                if frame is None:
                    await self._error("bad_frame", "a frame must be a JSON object with a type")
                    continue
                try:
                    await self._dispatch(connection, frame)
                except Exception:  # a bug costs this frame, not the page's connection
                    self.ctx.log.exception("web chat: a %r frame failed", frame["type"][:40])
                    await self._error("internal", "the server could not handle that frame")
            elif message.type == WSMsgType.BINARY:
                await self._error("bad_frame", "binary frames are not understood; send JSON text")
            elif message.type == WSMsgType.ERROR:
                self.ctx.log.info("web chat socket error: %s", self.ws.exception())
                return

    def _within_budget(self, connection: Connection, data: str | bytes) -> bool:
        """Take a frame's tokens (one per FRAME_TOKEN_SIZE started) from the page's budget,
        then its address's; say whether both had them. Checked before the frame is parsed."""
        cost = max(1, math.ceil(len(data) / FRAME_TOKEN_SIZE))
        return not (
            self.frame_budget.take(cost) or self.adapter.frame_limits.take(connection.address, cost)
        )

    def _idle_timeout(self, connection: Connection) -> float:
        """Seconds the page may stay without a visitor message: fewer before the first one."""
        if connection.spoke:
            return self.settings.idle_timeout
        return min(self.settings.silent_timeout, self.settings.idle_timeout)

    async def _receive(self, connection: Connection) -> WSMessage | None:
        """Return the page's next frame; None once `idle_timeout` passed without a message
        (`silent_timeout` while its visitor has sent none on it).

        The deadline is the loop's, not `receive(timeout)`'s: aiohttp restarts that one
        after every ping it answers, and pings are no sign of a visitor.
        """
        loop = asyncio.get_running_loop()
        while True:
            deadline = connection.active_at + self._idle_timeout(connection)
            try:
                async with asyncio.timeout_at(deadline):
                    return await self.ws.receive()
            except TimeoutError:
                if loop.time() >= connection.active_at + self._idle_timeout(connection):
                    return None

    async def _dispatch(self, connection: Connection, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "message":
            await self._visitor_message(connection, frame)
        elif kind == "received":
            self.adapter.hub.confirm(connection, frame.get("delivery"))
        elif kind == "ping":
            await self._send({"type": "pong"})
        else:
            await self._error("bad_frame", f"unknown frame type {str(kind)[:40]!r}")

    async def _visitor_message(self, connection: Connection, frame: dict[str, Any]) -> None:
        client_id = frame.get("client_id")
        text = frame.get("text")
        if not is_client_id(client_id):
            await self._error(
                "bad_frame",
                f"client_id must be 1-64 letters, digits, - or _, not starting with"
                f" {AGENT_ID_PREFIX!r}",
            )
            return
        if not isinstance(text, str):
            await self._error("bad_frame", "text must be a string", client_id=client_id)
            return
        # the conversation it was written in, when the page has moved on since ("New chat"):
        # any of this visitor's conversations, as a hello could open; a resend is known as one
        # (by its client_id) only within the conversation it was first stored in
        tab = frame.get("conversation")
        if tab is None:
            chat = connection.chat
        elif isinstance(tab, str) and SAFE_ID.match(tab):
            chat = conversation_chat(connection.visitor, tab)
        else:
            await self._error(
                "bad_frame",
                "conversation must be 1-64 letters, digits, - or _",
                client_id=client_id,
            )
            return
        text = repair_text(text)  # what is stored, acked and echoed to the other tabs
        if not text.strip():
            await self._error("empty", "the message is empty", client_id=client_id)
            return
        limit = self.settings.max_message_chars
        if len(text) > limit:
            await self._error(
                "too_long",
                f"the message has {len(text)} characters; at most {limit} are allowed",
                client_id=client_id,
            )
            return
        # the visitor's own bucket first: one visitor's burst does not drain their address's
        wait = self.adapter.visitor_limits.take(connection.visitor) or (
            self.adapter.address_limits.take(connection.address)
        )
        if wait:
            await self._error(
                "rate_limited",
                f"too many messages; try again in {wait:.0f} s",
                client_id=client_id,
                retry_after=round(wait, 2),
            )
            return
        payload = inbound_payload(
            chat=chat,
            visitor=connection.visitor,
            name=connection.name,
            client_id=client_id,
            text=text,
            sent_at=now(),
            title=self.settings.title,
        )
        try:
            result = await self.ctx.ingest(payload)
        except Exception:
            self.ctx.log.exception("web chat: storing a visitor message failed")
            await self._error(
                "unavailable",
                "the message could not be stored; it will be retried",
                client_id=client_id,
            )
            return
        if result.status == "malformed":
            await self._error("bad_frame", result.reason or "malformed", client_id=client_id)
            return
        if result.status == "duplicate" and not await self._resent(chat, result.seq, text):
            # the id is taken: acking would tell the page its new words were kept
            await self._error(
                "id_reused",
                "this client_id was already used for another message; nothing was stored"
                " (send it under a new client_id)",
                client_id=client_id,
            )
            return
        # acked only now: the message is committed
        connection.active_at = asyncio.get_running_loop().time()
        connection.spoke = True
        await self._send({"type": "ack", "client_id": client_id, "seq": result.seq})
        if result.status in {"stored", "held"} and result.seq is not None:
            others = [c for c in self.adapter.hub.connections(chat) if c is not connection]
            if others:
                echo = {
                    "type": "message",
                    "seq": result.seq,
                    "id": client_id,
                    "client_id": client_id,
                    "role": "visitor",
                    "sender": connection.name,
                    "text": text,
                    "sent_at": payload["sent_at"],
                }
                await self.adapter.hub.push(others, echo)

    async def _resent(self, chat: str, seq: int | None, text: str) -> bool:
        """Whether a message whose client_id is already stored (at `seq`) is that message
        sent again, the same text (a page resends what it did not see acked), and not
        another message under a used id.

        Only a duplicate costs this read (each one has taken a token of the visitor's rate
        limit first): the page's transcript, held messages too, as a reload reads it. A
        message older than that window is taken for the retry a resend nearly always is.
        """
        if seq is None:
            return True
        try:
            messages = await self.adapter.transcript(chat)
        except Exception:  # the message is stored: a failed check does not unsay that
            self.ctx.log.exception("web chat: reading conversation %s failed", chat)
            return True
        for message in reversed(messages):
            if message.seq == seq:
                return message.direction == "in" and message.text == text
        return True

    # helpers ---------------------------------------------------------------
    async def _send(self, frame: dict[str, Any]) -> None:
        if not self.ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_str(json.dumps(frame))

    async def _error(self, code: str, message: str, **extra: Any) -> None:
        await self._send({"type": "error", "code": code, "message": message, **extra})

    async def _close_with(self, code: str, message: str, close_code: int) -> None:
        self._end_handshake()
        await self._error(code, message)
        await self.ws.close(code=close_code, message=code.encode())


def frame_limit(max_message_chars: int) -> int:
    """The largest websocket frame a page may send, in bytes: a message of
    `max_message_chars` characters fits in any JSON encoding of it (every character
    escaped, each outside the BMP as two escapes), so none the limit allows closes the
    socket; a longer text that fits is answered "too_long". Larger frames close it (1009)
    unread, which bounds what one frame costs in memory."""
    return max_message_chars * JSON_BYTES_PER_CHAR + FRAME_SLACK


def _parse(data: str) -> dict[str, Any] | None:
    """Return the frame in `data`, or None when it is not a bounded JSON object with a type."""
    try:
        frame = parse_json(data)
    except BadPayload:
        return None
    return frame if isinstance(frame, dict) and isinstance(frame.get("type"), str) else None

"""The fake Gateway: HELLO, heartbeats, IDENTIFY, READY, dispatches, RESUME with replay, and faults."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import WSMsgType, web
from attrs import define, field

from .world import INTENT_GUILD_MEMBERS, INTENT_MESSAGE_CONTENT, INTENT_PRESENCES, World

__all__ = ["GatewayServer"]

_PRIVILEGED = INTENT_GUILD_MEMBERS | INTENT_PRESENCES | INTENT_MESSAGE_CONTENT


def _stream_compressor(kind: str | None) -> Callable[[bytes], bytes] | None:
    """A compressor for one connection's ``compress=`` transport stream, or None if unsupported.

    zlib-stream: one deflate stream, each message ending in a Z_SYNC_FLUSH.
    zstd-stream (what discord.py asks for when `zstandard` or Python 3.14's
    `compression.zstd` is importable): one zstd stream, each message a flushed block.
    """
    if kind == "zlib-stream":
        deflate = zlib.compressobj()
        return lambda data: deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH)
    if kind != "zstd-stream":
        return None
    try:
        import zstandard

        stream = zstandard.ZstdCompressor().compressobj()
        return lambda data: stream.compress(data) + stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    except ImportError:
        pass
    try:
        from compression.zstd import ZstdCompressor
    except ImportError:
        return None
    compressor = ZstdCompressor()
    return lambda data: compressor.compress(data, mode=ZstdCompressor.FLUSH_BLOCK)


@define
class _Connection:
    ws: web.WebSocketResponse
    #: text -> one binary frame of the connection's compressed stream (None: plain text frames)
    compressor: Callable[[bytes], bytes] | None = None
    session: _Session | None = None
    closed: asyncio.Event = field(factory=asyncio.Event)


@define
class _Session:
    id: str
    intents: int
    seq: int = 0
    backlog: list[dict[str, Any]] = field(factory=list)
    connection: _Connection | None = None
    invalid: bool = False


class GatewayServer(World):
    """The Gateway side of the fake: one websocket handler for /gateway and /gateway-resume."""

    def __init__(
        self, *, token: str, bot_name: str, granted_intents: int, heartbeat_interval: float
    ):
        super().__init__(token=token, bot_name=bot_name)
        #: privileged intents the "developer portal" has enabled for the app
        self.granted_intents = granted_intents
        self.heartbeat_interval = heartbeat_interval
        self.identifies = 0
        self.resumes = 0
        #: Gateway connections answered 503 (see `refuse_connections`)
        self.refused = 0
        #: the query of every Gateway connection (v, encoding, compress), in order
        self.gateway_queries: list[dict[str, str]] = []
        #: close codes the fake sent, in order
        self.close_codes: list[int] = []
        #: when False, the Gateway says HELLO but never answers IDENTIFY (no READY)
        self.answer_identify = True
        #: when set, the Gateway accepts only this token (a token reset after login: close 4004)
        self.gateway_token: str | None = None
        #: when positive, each resume also replays this many already-delivered dispatches
        self.replay_overlap = 0
        self._acks = True
        self._drop_next = 0
        self._refuse_next = 0
        self._sessions: dict[str, _Session] = {}
        self._connections: list[_Connection] = []

    # ------------------------------------------------------------ faults

    async def disconnect(self, code: int | None = None) -> None:
        """Drop every gateway connection: abruptly (no close frame) or with close `code`."""
        for connection in list(self._connections):
            if code is None:
                transport = connection.ws._req.transport if connection.ws._req else None
                if transport is not None:
                    transport.abort()
            else:
                self.close_codes.append(code)
                await connection.ws.close(code=code, message=b"fake close")
            connection.closed.set()
        self._notify()

    def drop_next_dispatches(self, count: int) -> None:
        """Lose the next `count` dispatches in flight: sequenced and kept for resume, never sent."""
        self._drop_next = count

    async def send_reconnect(self) -> None:
        """Send op 7 Reconnect on every connection."""
        for connection in list(self._connections):
            await self._send(connection, {"op": 7, "d": None})

    async def invalidate_session(self, resumable: bool = False) -> None:
        """Send op 9 Invalid Session (with d=`resumable`) on every connection."""
        for connection in list(self._connections):
            if connection.session is not None and not resumable:
                connection.session.invalid = True
            await self._send(connection, {"op": 9, "d": resumable})

    def refuse_connections(self, count: int) -> None:
        """Answer the next `count` Gateway connections with HTTP 503 instead of a websocket."""
        self._refuse_next = count

    async def send_raw_frame(self, text: str) -> None:
        """Send `text` as it is, one uncompressed text frame on every connection.

        Nothing is sequenced or kept for resume: a frame a client cannot read
        (``"not json"``) is the point. discord.py's Gateway loop ends on one.
        """
        for connection in list(self._connections):
            if not connection.ws.closed:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await connection.ws.send_str(text)
        self._notify()

    def stop_heartbeat_acks(self) -> None:
        """Stop answering heartbeats (the client should give up on the socket and resume)."""
        self._acks = False

    def resume_heartbeat_acks(self) -> None:
        self._acks = True

    @property
    def connected(self) -> bool:
        """True when a client has an identified or resumed session on an open socket."""
        return any(c.session is not None and not c.ws.closed for c in self._connections)

    # ------------------------------------------------------------ protocol

    async def dispatch(self, event: str, data: Mapping[str, Any]) -> None:
        """Send a dispatch (op 0) to every live session, sequenced and kept for resume."""
        for session in self._sessions.values():
            if session.invalid:
                continue
            if event.startswith("MESSAGE_") and not self._visible(session, event, data):
                continue
            session.seq += 1
            payload = {"op": 0, "t": event, "s": session.seq, "d": self._for_intents(session, data)}
            session.backlog.append(payload)
            connection = session.connection
            if self._drop_next > 0:
                self._drop_next -= 1
            elif connection is not None and not connection.ws.closed:
                await self._send(connection, payload)
        self._notify()

    def _visible(self, session: _Session, event: str, data: Mapping[str, Any]) -> bool:
        """Whether the session's intents ask for this event (as Discord filters them)."""
        if event.startswith("MESSAGE_REACTION_"):
            guild, dm = 1 << 10, 1 << 13  # GUILD_MESSAGE_REACTIONS, DIRECT_MESSAGE_REACTIONS
        else:
            guild, dm = 1 << 9, 1 << 12  # GUILD_MESSAGES, DIRECT_MESSAGES
        return bool(session.intents & (guild if data.get("guild_id") else dm))

    def _for_intents(self, session: _Session, data: Mapping[str, Any]) -> dict[str, Any]:
        """Blank content the bot may not read without the Message Content intent (as Discord does)."""
        copy = json.loads(json.dumps(data))
        if session.intents & INTENT_MESSAGE_CONTENT or "content" not in copy:
            return copy
        mentioned = any(m.get("id") == self.bot_id for m in copy.get("mentions", []))
        if (
            copy.get("guild_id")
            and not mentioned
            and copy.get("author", {}).get("id") != self.bot_id
        ):
            copy["content"] = ""
            copy["embeds"], copy["attachments"], copy["components"] = [], [], []
        return copy

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self._refuse_next > 0:
            self._refuse_next -= 1
            self.refused += 1
            self._notify()
            return web.Response(status=503, text="upstream connect error")
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        if request.query.get("v") != "10" or request.query.get("encoding", "json") != "json":
            self.close_codes.append(4012)
            await ws.close(code=4012, message=b"Invalid API version")
            return ws
        self.gateway_queries.append(dict(request.query))
        compress = request.query.get("compress")
        compressor = _stream_compressor(compress)
        if compress is not None and compressor is None:
            self.close_codes.append(4000)
            await ws.close(code=4000, message=b"Unsupported compression")
            return ws
        connection = _Connection(ws, compressor=compressor)
        self._connections.append(connection)
        try:
            await self._send(
                connection,
                {"op": 10, "d": {"heartbeat_interval": int(self.heartbeat_interval * 1000)}},
            )
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                await self._on_frame(connection, json.loads(frame.data))
                if ws.closed:
                    break
        finally:
            self._connections.remove(connection)
            if connection.session is not None and connection.session.connection is connection:
                connection.session.connection = None
            connection.closed.set()
            self._notify()
        return ws

    async def _on_frame(self, connection: _Connection, frame: Mapping[str, Any]) -> None:
        op, data = frame.get("op"), frame.get("d")
        if op == 1:
            if self._acks:
                await self._send(connection, {"op": 11})
        elif op == 2:
            await self._identify(connection, data or {})
        elif op == 6:
            await self._resume(connection, data or {})
        elif op in (3, 4, 8):
            pass  # presence, voice state, request guild members: accepted, not modelled
        else:
            await self._close(connection, 4001, "Unknown opcode.")

    async def _identify(self, connection: _Connection, data: Mapping[str, Any]) -> None:
        if not self.answer_identify:
            return
        if connection.session is not None:
            await self._close(connection, 4005, "Already authenticated.")
            return
        if data.get("token") != (self.gateway_token or self.token):
            await self._close(connection, 4004, "Authentication failed.")
            return
        if not isinstance(data.get("properties"), Mapping):
            await self._close(connection, 4002, "Error while decoding payload.")
            return
        intents = data.get("intents")
        if not isinstance(intents, int) or intents < 0:
            await self._close(connection, 4013, "Invalid intent(s).")
            return
        if intents & _PRIVILEGED & ~self.granted_intents:
            await self._close(connection, 4014, "Disallowed intent(s).")
            return
        self.identifies += 1
        session = _Session(secrets.token_hex(16), intents)
        self._sessions = {session.id: session}
        session.connection = connection
        connection.session = session
        ready = {
            "v": 10,
            "user": {**self.bot, "verified": True, "mfa_enabled": False, "flags": 0, "email": None},
            "guilds": [{"id": gid, "unavailable": True} for gid in self.guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": f"ws{self.url.removeprefix('http')}/gateway-resume",
            "application": {"id": self.application_id, "flags": 0},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "user_settings": {},
            "geo_ordered_rtc_regions": ["us-east"],
            "guild_join_requests": [],
            "_trace": ['["fake-gateway",{"micros":1}]'],
        }
        await self.dispatch("READY", ready)
        for guild_id in self.guilds:
            await self.dispatch("GUILD_CREATE", self.guild_payload(guild_id))

    async def _resume(self, connection: _Connection, data: Mapping[str, Any]) -> None:
        if data.get("token") != self.token:
            await self._close(connection, 4004, "Authentication failed.")
            return
        session = self._sessions.get(str(data.get("session_id")))
        seq = data.get("seq")
        if session is None or session.invalid or not isinstance(seq, int) or seq > session.seq:
            await self._send(connection, {"op": 9, "d": False})
            return
        self.resumes += 1
        old = session.connection
        if old is not None and old is not connection and not old.ws.closed:
            await old.ws.close(code=4000)
        session.connection = connection
        connection.session = session
        start = max(0, seq - self.replay_overlap)
        for payload in list(session.backlog):
            if payload["s"] > start and payload["t"] != "READY":
                await self._send(connection, payload)
        session.seq += 1
        resumed = {
            "op": 0,
            "t": "RESUMED",
            "s": session.seq,
            "d": {"_trace": ['["fake-gateway",{}]']},
        }
        session.backlog.append(resumed)
        await self._send(connection, resumed)
        self._notify()

    async def _close(self, connection: _Connection, code: int, reason: str) -> None:
        self.close_codes.append(code)
        await connection.ws.close(code=code, message=reason.encode())
        self._notify()

    async def _send(self, connection: _Connection, payload: Mapping[str, Any]) -> None:
        if connection.ws.closed:
            return
        text = json.dumps(payload)
        try:
            if connection.compressor is not None:
                await connection.ws.send_bytes(connection.compressor(text.encode()))
            else:
                await connection.ws.send_str(text)
        except (ConnectionError, RuntimeError):
            connection.closed.set()

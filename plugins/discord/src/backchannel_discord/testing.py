"""`FakeDiscord`: a loopback Discord (REST API v10 + Gateway) that discord.py talks to for real.

Use it to test a bot without a network or a real token::

    async with FakeDiscord() as fake:
        adapter = DiscordAdapter("main", fake.settings)   # token, api_base, gateway_url
        ...
        message = await fake.post_message(fake.general, fake.alice, f"hi <@{fake.bot_id}>")
        reply = await fake.wait_for_sent(lambda m: m["content"] == "hello")

What it speaks, on 127.0.0.1 and an ephemeral port:

- REST under ``/api/v10``: ``users/@me``, ``oauth2/applications/@me``,
  ``gateway`` and ``gateway/bot``, channel messages (POST, PATCH, DELETE),
  reactions (PUT .../reactions/{emoji}/@me) and typing. Every answer carries
  Discord's rate-limit headers (``X-RateLimit-Limit``, ``-Remaining``,
  ``-Reset``, ``-Reset-After``, ``-Bucket``) and ``Content-Type:
  application/json``. Errors use Discord's bodies: 429 ``{"message",
  "retry_after", "global"}`` with ``Retry-After`` and ``Via``; 403
  ``{"code": 50013, "message": "Missing Permissions"}``; 404 10003 / 10008;
  400 50035 "Invalid Form Body"; 401 for a wrong token.
- The Gateway (``?v=10&encoding=json``, optional ``compress=zlib-stream``):
  HELLO, heartbeats and ACKs, IDENTIFY checked (close 4004 for a wrong token,
  4014 for privileged intents the application was not granted), READY with a
  ``resume_gateway_url`` on another path, GUILD_CREATE, MESSAGE_CREATE /
  UPDATE / DELETE, RESUME with replay of every dispatch after the client's
  sequence number.

Faults: `fail_next` (REST), `disconnect` (abnormal close or a close code),
`drop_next_dispatches` (lost in flight, replayed on resume),
`send_reconnect` (op 7), `invalidate_session` (op 9), `stop_heartbeat_acks`,
`replay_overlap` (a resume replays events the client already had) and
`redeliver` (a duplicate dispatch).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import secrets
import time
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from aiohttp import WSMsgType, web
from attrs import define, field

__all__ = ["INTENT_GUILD_MEMBERS", "INTENT_MESSAGE_CONTENT", "INTENT_PRESENCES", "FakeDiscord"]

INTENT_GUILD_MEMBERS = 1 << 1
INTENT_PRESENCES = 1 << 8
INTENT_MESSAGE_CONTENT = 1 << 15
_PRIVILEGED = INTENT_GUILD_MEMBERS | INTENT_PRESENCES | INTENT_MESSAGE_CONTENT
_DISCORD_EPOCH_MS = 1420070400000
_JSON = "application/json"
# faults `fail_next` understands, with the status and body Discord sends
_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "forbidden": (403, {"message": "Missing Permissions", "code": 50013}),
    "missing_access": (403, {"message": "Missing Access", "code": 50001}),
    "unknown_channel": (404, {"message": "Unknown Channel", "code": 10003}),
    "unknown_message": (404, {"message": "Unknown Message", "code": 10008}),
    "bad_request": (
        400,
        {
            "message": "Invalid Form Body",
            "code": 50035,
            "errors": {
                "content": {
                    "_errors": [
                        {
                            "code": "BASE_TYPE_MAX_LENGTH",
                            "message": "Must be 2000 or fewer in length.",
                        }
                    ]
                }
            },
        },
    ),
    "server_error": (500, {"message": "500: Internal Server Error", "code": 0}),
    "bad_gateway": (502, {"message": "502: Bad Gateway", "code": 0}),
    "unavailable": (503, {"message": "503: Service Unavailable", "code": 0}),
}


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


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


@define
class _Fault:
    kind: str
    retry_after: float = 2.0
    is_global: bool = False
    skip: int = 0


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


class FakeDiscord:
    """A loopback Discord for one bot: REST API, Gateway, a guild, channels and users.

    Defaults give one guild ("Test Server") with a text channel `general`
    (``fake.general``) and a user `alice` (``fake.alice``).
    """

    def __init__(
        self,
        *,
        token: str = "fake-bot-token.abcdef.0123456789",
        bot_name: str = "backchannel-bot",
        granted_intents: int = INTENT_MESSAGE_CONTENT,
        heartbeat_interval: float = 41.25,
        bucket_limit: int = 5,
        bucket_window: float = 1.0,
    ):
        self.token = token
        #: privileged intents the "developer portal" has enabled for the app
        self.granted_intents = granted_intents
        self.heartbeat_interval = heartbeat_interval
        self.bucket_limit = bucket_limit
        self.bucket_window = bucket_window
        self._ids = itertools.count()
        self.bot: dict[str, Any] = self._user_payload(bot_name, bot=True)
        self.application_id = self.bot["id"]
        self.guilds: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.members: dict[tuple[str, str], dict[str, Any]] = {}
        #: every message on the fake platform by id (users' and the bot's)
        self.messages: dict[str, dict[str, Any]] = {}
        #: what the bot posted, in order: the created messages, plus "allowed_mentions" as asked
        self.sent: list[dict[str, Any]] = []
        #: every REST request: (method, path, json body or None)
        self.requests: list[tuple[str, str, Any]] = []
        self.reactions: list[tuple[str, str, str]] = []
        self.typing: list[str] = []
        #: requests answered 429 because the client ignored the rate-limit headers
        self.over_limit = 0
        self.identifies = 0
        self.resumes = 0
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
        self._faults: list[_Fault] = []
        self._nonces: dict[str, tuple[str, float]] = {}
        self._hang = asyncio.Event()
        self._acks = True
        self._drop_next = 0
        self._sessions: dict[str, _Session] = {}
        self._connections: list[_Connection] = []
        self._buckets: dict[str, tuple[int, float]] = {}
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.guild_id = self.add_guild("Test Server")
        self.general = self.add_channel(self.guild_id, "general")
        self.alice = self.add_user("alice", global_name="Alice")

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> FakeDiscord:
        """Listen on 127.0.0.1, an ephemeral port; return self."""
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway-resume", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        """Close every socket and stop the server."""
        self._hang.set()
        for connection in list(self._connections):
            await connection.ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def settings(self) -> dict[str, Any]:
        """Adapter settings that point at this fake: token, api_base, gateway_url."""
        return {
            "token": self.token,
            "api_base": f"{self.url}/api/v10",
            "gateway_url": f"ws{self.url.removeprefix('http')}/gateway",
        }

    @property
    def bot_id(self) -> str:
        return str(self.bot["id"])

    # ------------------------------------------------------------ the world

    def snowflake(self) -> str:
        """Return a new snowflake id minted now (Discord's layout: ms since 2015 << 22)."""
        ms = int(time.time() * 1000) - _DISCORD_EPOCH_MS
        return str((ms << 22) | (next(self._ids) & 0x3FFFFF))

    def add_guild(self, name: str) -> str:
        guild_id = self.snowflake()
        self.guilds[guild_id] = {"id": guild_id, "name": name}
        return guild_id

    def add_channel(self, guild_id: str, name: str) -> str:
        """Add a guild text channel (type 0); return its id."""
        channel_id = self.snowflake()
        self.channels[channel_id] = {
            "id": channel_id,
            "type": 0,
            "guild_id": guild_id,
            "name": name,
            "position": len(self.channels),
            "permission_overwrites": [],
            "nsfw": False,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "parent_id": None,
        }
        return channel_id

    async def add_thread(self, parent_id: str, name: str, *, private: bool = False) -> str:
        """Create a thread under a text channel (dispatches THREAD_CREATE); return its id."""
        thread_id = self.snowflake()
        parent = self.channels[parent_id]
        thread = {
            "id": thread_id,
            "type": 12 if private else 11,
            "guild_id": parent["guild_id"],
            "parent_id": parent_id,
            "owner_id": self.alice,
            "name": name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _iso(time.time()),
                "locked": False,
                "create_timestamp": _iso(time.time()),
            },
        }
        self.channels[thread_id] = thread
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return thread_id

    def add_user(self, username: str, *, global_name: str | None = None, bot: bool = False) -> str:
        """Add a user (and make them a member of every guild); return their id."""
        user = self._user_payload(username, global_name=global_name, bot=bot)
        self.users[user["id"]] = user
        return str(user["id"])

    def set_nick(self, guild_id: str, user_id: str, nick: str | None) -> None:
        self.members[(guild_id, user_id)] = {"nick": nick}

    def dm_channel(self, user_id: str) -> str:
        """Return the id of the DM channel (type 1) between the bot and `user_id`."""
        for channel in self.channels.values():
            if channel["type"] == 1 and channel["recipients"][0]["id"] == user_id:
                return str(channel["id"])
        channel_id = self.snowflake()
        self.channels[channel_id] = {
            "id": channel_id,
            "type": 1,
            "last_message_id": None,
            "recipients": [self.users[user_id]],
        }
        return channel_id

    def _user_payload(
        self, username: str, *, global_name: str | None = None, bot: bool = False
    ) -> dict[str, Any]:
        user: dict[str, Any] = {
            "id": self.snowflake(),
            "username": username,
            "discriminator": "0",
            "global_name": global_name,
            "avatar": None,
            "public_flags": 0,
        }
        if bot:
            user["bot"] = True
        return user

    # ------------------------------------------------------------ users speak

    def message_payload(
        self,
        channel_id: str,
        author_id: str,
        content: str,
        *,
        reply_to: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Build a Message object as the gateway's MESSAGE_CREATE carries it (not dispatched)."""
        channel = self.channels[channel_id]
        author = self.bot if author_id == self.bot_id else self.users[author_id]
        message_id = self.snowflake()
        now = time.time()
        mentions = [
            self._mention(user, channel)
            for user in [self.bot, *self.users.values()]
            if f"<@{user['id']}>" in content or f"<@!{user['id']}>" in content
        ]
        message: dict[str, Any] = {
            "id": message_id,
            "type": 0,
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": _iso(now),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions,
            "mention_roles": [],
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "flags": 0,
            "components": [],
            "nonce": None,
        }
        if channel.get("type") in (10, 11, 12):
            channel["total_message_sent"] += 1
            message["position"] = channel["total_message_sent"]
        guild_id = channel.get("guild_id")
        if guild_id:
            message["guild_id"] = guild_id
            message["member"] = self._member(guild_id, author["id"])
        if reply_to is not None:
            target = self.messages[reply_to]
            message["type"] = 19
            message["message_reference"] = {
                "type": 0,
                "message_id": reply_to,
                "channel_id": target["channel_id"],
                **({"guild_id": guild_id} if guild_id else {}),
            }
            message["referenced_message"] = {
                k: v for k, v in target.items() if k not in {"member", "guild_id"}
            }
            if target["author"]["id"] not in {m["id"] for m in mentions}:
                message["mentions"].append(self._mention(target["author"], channel))
        return message

    async def post_message(
        self,
        channel_id: str,
        author_id: str,
        content: str,
        *,
        reply_to: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A user posts `content` in `channel_id`: store it, dispatch MESSAGE_CREATE, return it."""
        message = self.message_payload(
            channel_id, author_id, content, reply_to=reply_to, attachments=attachments
        )
        self.messages[message["id"]] = message
        self.channels[channel_id]["last_message_id"] = message["id"]
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def edit_message(self, message_id: str, content: str) -> dict[str, Any]:
        """A user edits a message: dispatch MESSAGE_UPDATE with the full message."""
        message = self.messages[message_id]
        message["content"] = content
        message["edited_timestamp"] = _iso(time.time())
        await self.dispatch("MESSAGE_UPDATE", message)
        return message

    async def delete_message(self, message_id: str) -> None:
        """A user deletes a message: dispatch MESSAGE_DELETE."""
        message = self.messages.pop(message_id)
        payload = {"id": message_id, "channel_id": message["channel_id"]}
        if message.get("guild_id"):
            payload["guild_id"] = message["guild_id"]
        await self.dispatch("MESSAGE_DELETE", payload)

    async def redeliver(self, message_id: str) -> None:
        """Dispatch MESSAGE_CREATE for an existing message once more (a duplicate dispatch)."""
        await self.dispatch("MESSAGE_CREATE", self.messages[message_id])

    def _member(self, guild_id: str, user_id: str) -> dict[str, Any]:
        extra = self.members.get((guild_id, user_id), {})
        return {
            "roles": [],
            "nick": extra.get("nick"),
            "avatar": None,
            "joined_at": _iso(time.time() - 86400),
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "communication_disabled_until": None,
        }

    def _mention(self, user: Mapping[str, Any], channel: Mapping[str, Any]) -> dict[str, Any]:
        mention = dict(user)
        if channel.get("guild_id"):
            mention["member"] = self._member(channel["guild_id"], user["id"])
        return mention

    # ------------------------------------------------------------ what the bot did

    def sent_to(self, channel_id: str) -> list[dict[str, Any]]:
        """Messages the bot posted in `channel_id`, oldest first, as they are now (edits applied)."""
        return [self.messages.get(m["id"], m) for m in self.sent if m["channel_id"] == channel_id]

    async def wait_until(
        self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        """Return once `predicate()` holds; re-checked after every request and gateway event."""

        async def waiter() -> None:
            async with self._changed:
                await self._changed.wait_for(predicate)

        try:
            await asyncio.wait_for(waiter(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"FakeDiscord: timed out after {timeout}s waiting for {what}"
            ) from None

    async def wait_for_sent(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
    ) -> dict[str, Any]:
        """Return the first message the bot sent that matches `predicate`, waiting for it."""
        found: list[dict[str, Any]] = []

        def check() -> bool:
            found[:] = [m for m in self.sent if predicate(m)]
            return bool(found)

        await self.wait_until(check, timeout, "a matching message from the bot")
        return found[0]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------ REST faults

    def fail_next(
        self, fault: str, *, retry_after: float = 2.0, is_global: bool = False, skip: int = 0
    ) -> None:
        """Answer the next bot write (POST/PATCH/PUT under /channels), after `skip` good ones, with `fault`.

        fault: "rate_limited" (429), "cloudflare" (Cloudflare's 429: no Via, a text
        body, Retry-After), "forbidden" (403 50013), "missing_access"
        (403 50001), "unknown_channel" (404 10003), "unknown_message" (404
        10008), "bad_request" (400 50035), "server_error" (500), "bad_gateway"
        (502), "unavailable" (503), "hang" (no answer until `release_hang` or
        close), "reset" (drop the connection without an answer).
        """
        if fault not in _ERRORS and fault not in {"rate_limited", "cloudflare", "hang", "reset"}:
            raise ValueError(f"unknown fault {fault!r}")
        self._faults.append(_Fault(fault, retry_after, is_global, skip))

    def release_hang(self) -> None:
        self._hang.set()

    # ------------------------------------------------------------ gateway faults

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
        await self._notify()

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

    def stop_heartbeat_acks(self) -> None:
        """Stop answering heartbeats (the client should give up on the socket and resume)."""
        self._acks = False

    def resume_heartbeat_acks(self) -> None:
        self._acks = True

    @property
    def connected(self) -> bool:
        """True when a client has an identified or resumed session on an open socket."""
        return any(c.session is not None and not c.ws.closed for c in self._connections)

    # ------------------------------------------------------------ gateway

    async def dispatch(self, event: str, data: Mapping[str, Any]) -> None:
        """Send a dispatch (op 0) to every live session, sequenced and kept for resume."""
        for session in self._sessions.values():
            if session.invalid:
                continue
            if event.startswith("MESSAGE_") and not self._visible(session, data):
                continue
            session.seq += 1
            payload = {"op": 0, "t": event, "s": session.seq, "d": self._for_intents(session, data)}
            session.backlog.append(payload)
            connection = session.connection
            if self._drop_next > 0:
                self._drop_next -= 1
            elif connection is not None and not connection.ws.closed:
                await self._send(connection, payload)
        await self._notify()

    def _visible(self, session: _Session, data: Mapping[str, Any]) -> bool:
        guild_messages, dm_messages = 1 << 9, 1 << 12
        wanted = guild_messages if data.get("guild_id") else dm_messages
        return bool(session.intents & wanted)

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
            await self._notify()
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
            await self.dispatch("GUILD_CREATE", self._guild_payload(guild_id))

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
        await self._notify()

    async def _close(self, connection: _Connection, code: int, reason: str) -> None:
        self.close_codes.append(code)
        await connection.ws.close(code=code, message=reason.encode())
        await self._notify()

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

    def _guild_payload(self, guild_id: str) -> dict[str, Any]:
        guild = self.guilds[guild_id]
        channels = [
            {k: v for k, v in c.items() if k != "guild_id"}
            for c in self.channels.values()
            if c.get("guild_id") == guild_id and c["type"] not in (10, 11, 12)
        ]
        threads = [
            dict(c)
            for c in self.channels.values()
            if c.get("guild_id") == guild_id and c["type"] in (10, 11, 12)
        ]
        everyone = {
            "id": guild_id,
            "name": "@everyone",
            "color": 0,
            "hoist": False,
            "position": 0,
            "permissions": "1071698660929",
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        return {
            "id": guild_id,
            "name": guild["name"],
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "owner_id": self.alice,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [everyone],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "application_id": None,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "vanity_url_code": None,
            "description": None,
            "banner": None,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "preferred_locale": "en-US",
            "public_updates_channel_id": None,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
            "joined_at": _iso(time.time() - 3600),
            "large": False,
            "unavailable": False,
            "member_count": len(self.users) + 1,
            "voice_states": [],
            "members": [
                {**self._member(guild_id, self.bot_id), "user": self.bot},
            ],
            "channels": channels,
            "threads": threads,
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    # ------------------------------------------------------------ REST

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            if raw and request.content_type == _JSON:
                body = json.loads(raw)
        self.requests.append((request.method, path, body))
        await self._notify()
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        parts = [unquote(p) for p in path.strip("/").split("/")]
        try:
            return await self._route(request.method, parts, body, request)
        finally:
            await self._notify()

    async def _route(
        self, method: str, parts: list[str], body: Any, request: web.Request
    ) -> web.StreamResponse:
        if parts == ["users", "@me"] and method == "GET":
            return self._json(200, {**self.bot, "verified": True, "mfa_enabled": False, "flags": 0})
        if parts == ["oauth2", "applications", "@me"] and method == "GET":
            return self._json(200, self._application())
        if parts in (["gateway"], ["gateway", "bot"]) and method == "GET":
            answer: dict[str, Any] = {"url": f"ws{self.url.removeprefix('http')}/gateway"}
            if parts[-1] == "bot":
                answer["shards"] = 1
                answer["session_start_limit"] = {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 14400000,
                    "max_concurrency": 1,
                }
            return self._json(200, answer)
        if len(parts) >= 3 and parts[0] == "channels":
            channel_id = parts[1]
            if channel_id not in self.channels:
                return self._json(404, {"message": "Unknown Channel", "code": 10003})
            return await self._channel_route(method, channel_id, parts[2:], body, request)
        return self._json(404, {"message": "404: Not Found", "code": 0})

    async def _channel_route(
        self, method: str, channel_id: str, rest: list[str], body: Any, request: web.Request
    ) -> web.StreamResponse:
        if rest == ["typing"]:
            route = "typing"
        elif "reactions" in rest:
            route = "reactions"
        else:
            route = f"{method.lower()}-messages"
        bucket = f"{route}:{channel_id}"
        over_limit = self._take(bucket)
        if over_limit is not None:
            return over_limit
        if rest == ["typing"] and method == "POST":
            self.typing.append(channel_id)
            return self._limited(bucket, web.Response(status=204))
        if rest[0] != "messages":
            return self._json(404, {"message": "404: Not Found", "code": 0})
        fault = None
        if self._faults and method in ("POST", "PATCH", "PUT"):
            if self._faults[0].skip > 0:
                self._faults[0].skip -= 1
            else:
                fault = self._faults.pop(0)
        if fault is not None:
            return await self._fault(fault, bucket, request)
        if rest == ["messages"] and method == "GET":
            return self._limited(bucket, self._json(200, self._history(channel_id, request)))
        if rest == ["messages"] and method == "POST":
            return self._limited(bucket, self._json(200, await self._bot_posts(channel_id, body)))
        if len(rest) < 2 or rest[1] not in self.messages:
            return self._json(404, {"message": "Unknown Message", "code": 10008})
        message = self.messages[rest[1]]
        if len(rest) == 2 and method == "PATCH":
            if message["author"]["id"] != self.bot_id:
                return self._json(
                    403,
                    {"message": "Cannot edit a message authored by another user", "code": 50005},
                )
            message["content"] = (body or {}).get("content", message["content"])
            message["edited_timestamp"] = _iso(time.time())
            await self.dispatch("MESSAGE_UPDATE", message)
            return self._limited(bucket, self._json(200, message))
        if len(rest) == 2 and method == "DELETE":
            await self.delete_message(rest[1])
            return self._limited(bucket, web.Response(status=204))
        if len(rest) == 5 and rest[2] == "reactions" and rest[4] == "@me" and method == "PUT":
            self.reactions.append((channel_id, rest[1], rest[3]))
            return self._limited(bucket, web.Response(status=204))
        return self._json(405, {"message": "405: Method Not Allowed", "code": 0})

    def _history(self, channel_id: str, request: web.Request) -> list[dict[str, Any]]:
        """GET /channels/{id}/messages: newest first, as REST returns them (no guild_id, no member)."""
        limit = max(1, min(100, int(request.query.get("limit", "50"))))
        in_channel = sorted(
            (m for m in self.messages.values() if m["channel_id"] == channel_id),
            key=lambda m: int(m["id"]),
        )
        if "after" in request.query:
            after = int(request.query["after"])
            page = [m for m in in_channel if int(m["id"]) > after][:limit]
        else:
            before = int(request.query.get("before", str(1 << 63)))
            page = [m for m in in_channel if int(m["id"]) < before][-limit:]
        return [
            {k: v for k, v in m.items() if k not in {"guild_id", "member"}} for m in reversed(page)
        ]

    async def _bot_posts(self, channel_id: str, body: Any) -> dict[str, Any]:
        body = body or {}
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            # Discord: a repeated nonce from the same author within minutes returns the first message
            earlier = self._nonces.get(str(nonce))
            if earlier is not None and time.time() - earlier[1] < 300:
                return self.messages.get(earlier[0]) or {"id": earlier[0], "channel_id": channel_id}
        reference = body.get("message_reference") or {}
        reply_to = reference.get("message_id")
        if reply_to is not None and str(reply_to) not in self.messages:
            reply_to = None  # fail_if_not_exists: false posts it as a plain message
        message = self.message_payload(
            channel_id,
            self.bot_id,
            body.get("content", ""),
            reply_to=str(reply_to) if reply_to is not None else None,
        )
        message["nonce"] = nonce
        message["flags"] = int(body.get("flags") or 0)
        self.messages[message["id"]] = message
        self.sent.append({**message, "allowed_mentions": body.get("allowed_mentions")})
        if nonce is not None:
            self._nonces[str(nonce)] = (message["id"], time.time())
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def _fault(self, fault: _Fault, bucket: str, request: web.Request) -> web.StreamResponse:
        if fault.kind == "rate_limited":
            scope = "global" if fault.is_global else "user"
            headers = {
                "Retry-After": str(max(1, round(fault.retry_after))),
                "Via": "1.1 google",
                "X-RateLimit-Scope": scope,
            }
            if fault.is_global:
                headers["X-RateLimit-Global"] = "true"
            body = {
                "message": "You are being rate limited.",
                "retry_after": fault.retry_after,
                "global": fault.is_global,
            }
            return self._json(429, body, headers)
        if fault.kind == "cloudflare":
            headers = {"Retry-After": str(max(1, round(fault.retry_after)))}
            return web.Response(status=429, text="error code: 1015", headers=headers)
        if fault.kind == "hang":
            self._hang.clear()
            await self._hang.wait()
            return self._json(503, {"message": "503: Service Unavailable", "code": 0})
        if fault.kind == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError("fake reset")
        status, body = _ERRORS[fault.kind]
        return self._limited(bucket, self._json(status, body))

    def _take(self, bucket: str) -> web.Response | None:
        """Count one request against `bucket`; return Discord's 429 when it is exhausted."""
        now = time.time()
        used, reset_at = self._buckets.get(bucket, (0, now + self.bucket_window))
        if now >= reset_at:
            used, reset_at = 0, now + self.bucket_window
        if used >= self.bucket_limit:
            self.over_limit += 1
            wait = reset_at - now
            body = {
                "message": "You are being rate limited.",
                "retry_after": round(wait, 3),
                "global": False,
            }
            headers = {
                "Retry-After": str(math.ceil(wait)),
                "Via": "1.1 google",
                "X-RateLimit-Scope": "user",
            }
            return self._limited(bucket, self._json(429, body, headers))
        self._buckets[bucket] = (used + 1, reset_at)
        return None

    def _limited(self, bucket: str, response: web.Response) -> web.Response:
        """Add Discord's rate-limit headers for `bucket` to `response`."""
        now = time.time()
        used, reset_at = self._buckets.get(bucket, (0, now + self.bucket_window))
        route = bucket.split(":", 1)[0]
        response.headers.update(
            {
                "X-RateLimit-Limit": str(self.bucket_limit),
                "X-RateLimit-Remaining": str(max(0, self.bucket_limit - used)),
                "X-RateLimit-Reset": f"{reset_at:.3f}",
                "X-RateLimit-Reset-After": f"{max(0.0, reset_at - now):.3f}",
                "X-RateLimit-Bucket": f"{zlib.crc32(route.encode()):08x}{len(route):02d}",
            }
        )
        return response

    def _json(
        self, status: int, body: Any, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        response = web.Response(status=status, text=json.dumps(body), headers=dict(headers or {}))
        response.content_type = _JSON  # exactly application/json: discord.py checks it
        response.charset = None
        return response

    def _application(self) -> dict[str, Any]:
        owner = self.users.get(self.alice) or self.bot
        return {
            "id": self.application_id,
            "name": self.bot["username"],
            "icon": None,
            "description": "",
            "rpc_origins": [],
            "bot_public": True,
            "bot_require_code_grant": False,
            "bot": self.bot,
            "owner": owner,
            "team": None,
            "verify_key": secrets.token_hex(32),
            "flags": 1 << 19,  # GATEWAY_MESSAGE_CONTENT_LIMITED (an unverified bot)
            "summary": "",
            "type": None,
            "redirect_uris": [],
            "interactions_endpoint_url": None,
            "tags": [],
        }

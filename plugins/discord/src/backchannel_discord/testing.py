"""`FakeDiscord`: a loopback Discord (REST API v10 + Gateway) that discord.py talks to for real.

Use it to test a bot without a network or a real token::

    async with FakeDiscord() as fake:
        adapter = DiscordAdapter("main", fake.settings)   # token, api_base, gateway_url
        ...
        message = await fake.post_message(fake.general, fake.alice, f"hi <@{fake.bot_id}>")
        reply = await fake.wait_for_sent(lambda m: m["content"] == "hello")

What it speaks, on 127.0.0.1 and an ephemeral port:

- REST under ``/api/v10``: ``users/@me``, ``oauth2/applications/@me``,
  ``gateway`` and ``gateway/bot``, channel messages (GET history, POST, PATCH, DELETE),
  reactions (PUT .../reactions/{emoji}/@me) and typing. Every answer carries
  Discord's rate-limit headers (``X-RateLimit-Limit``, ``-Remaining``,
  ``-Reset``, ``-Reset-After``, ``-Bucket``; a request over the bucket gets a
  429) and ``Content-Type: application/json``. Errors use Discord's bodies: 429 ``{"message",
  "retry_after", "global"}`` with ``Retry-After`` and ``Via``; 403
  ``{"code": 50013, "message": "Missing Permissions"}``; 404 10003 / 10008;
  400 50035 "Invalid Form Body" (also for content over 2000 code points), 400
  50006 for an empty message; 401 for a wrong token.
- The Gateway (``?v=10&encoding=json``, ``compress=zlib-stream`` or ``zstd-stream``):
  HELLO, heartbeats and ACKs, IDENTIFY checked (close 4004 for a wrong token,
  4014 for privileged intents the application was not granted), READY with a
  ``resume_gateway_url`` on another path, GUILD_CREATE, MESSAGE_CREATE /
  UPDATE / DELETE, RESUME with replay of every dispatch after the client's
  sequence number.

Faults: `fail_next` (REST writes), `fail_next_read` (REST reads), `disconnect` (abnormal close or a close code),
`drop_next_dispatches` (lost in flight, replayed on resume),
`send_reconnect` (op 7), `invalidate_session` (op 9), `send_raw_frame` (a frame
as it is, e.g. not JSON), `refuse_connections` (the Gateway answers 503), `stop_heartbeat_acks`,
`replay_overlap` (a resume replays events the client already had) and
`redeliver` (a duplicate dispatch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from backchannel.testing.loopback import serve_loopback

from ._fake.rest import RestServer
from ._fake.world import (
    INTENT_GUILD_MEMBERS,
    INTENT_MESSAGE_CONTENT,
    INTENT_PRESENCES,
    timestamp,
)

__all__ = ["INTENT_GUILD_MEMBERS", "INTENT_MESSAGE_CONTENT", "INTENT_PRESENCES", "FakeDiscord"]


class FakeDiscord(RestServer):
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
        super().__init__(
            token=token,
            bot_name=bot_name,
            granted_intents=granted_intents,
            heartbeat_interval=heartbeat_interval,
            bucket_limit=bucket_limit,
            bucket_window=bucket_window,
        )
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> FakeDiscord:
        """Listen on 127.0.0.1, an ephemeral port; return self."""
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway-resume", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner, self.url = await serve_loopback(app)
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

    # ------------------------------------------------------------ users act

    async def add_thread(
        self, parent_id: str, name: str, *, private: bool = False, announce: bool = True
    ) -> str:
        """Create a thread under a text channel; return its id.

        Dispatches THREAD_CREATE unless `announce` is False: then the bot's
        client learns of the thread only from a message in it (as with an
        archived thread someone writes in again), and must ask REST for it.
        """
        thread = self.new_thread(parent_id, name, private=private)
        if announce:
            await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return str(thread["id"])

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

    async def react(
        self,
        message_id: str,
        user_id: str,
        emoji: str,
        *,
        remove: bool = False,
        burst: bool = False,
    ) -> dict[str, Any]:
        """A user adds (or takes back) `emoji` on a message: dispatch the gateway event.

        As Discord sends them: an add in a guild carries the reacting member,
        a removal only the user id; a custom emoji is given as ``name:id``. With
        `burst`, a super reaction (``burst`` true, reaction type 1).
        """
        message = self.messages[message_id]
        channel = self.channels[message["channel_id"]]
        name, _, custom = emoji.partition(":")
        data: dict[str, Any] = {
            "user_id": user_id,
            "channel_id": message["channel_id"],
            "message_id": message_id,
            "emoji": {"id": custom or None, "name": name},
            "burst": burst,
            "type": 1 if burst else 0,
        }
        guild_id = channel.get("guild_id")
        if guild_id:
            data["guild_id"] = guild_id
        if not remove:
            data["message_author_id"] = message["author"]["id"]
            data["burst_colors"] = ["#ff8a00"] if burst else []
            if guild_id:
                data["member"] = {**self._member(guild_id, user_id), "user": self.users[user_id]}
        await self.dispatch("MESSAGE_REACTION_REMOVE" if remove else "MESSAGE_REACTION_ADD", data)
        return data

    async def clear_reactions(self, message_id: str, emoji: str | None = None) -> dict[str, Any]:
        """A moderator removes every reaction from a message (MESSAGE_REACTION_REMOVE_ALL),
        or everyone's `emoji` (MESSAGE_REACTION_REMOVE_EMOJI): neither names who did it."""
        message = self.messages[message_id]
        data: dict[str, Any] = {"channel_id": message["channel_id"], "message_id": message_id}
        guild_id = self.channels[message["channel_id"]].get("guild_id")
        if guild_id:
            data["guild_id"] = guild_id
        if emoji is None:
            await self.dispatch("MESSAGE_REACTION_REMOVE_ALL", data)
            return data
        name, _, custom = emoji.partition(":")
        data["emoji"] = {"id": custom or None, "name": name}
        await self.dispatch("MESSAGE_REACTION_REMOVE_EMOJI", data)
        return data

    async def edit_message(self, message_id: str, content: str) -> dict[str, Any]:
        """A user edits a message: dispatch MESSAGE_UPDATE with the full message."""
        message = self.messages[message_id]
        message["content"] = content
        message["edited_timestamp"] = timestamp()
        await self.dispatch("MESSAGE_UPDATE", message)
        return message

    async def delete_message(self, message_id: str) -> None:
        """A user deletes a message: dispatch MESSAGE_DELETE."""
        await self.dispatch("MESSAGE_DELETE", self.remove_message(message_id))

    async def redeliver(self, message_id: str) -> None:
        """Dispatch MESSAGE_CREATE for an existing message once more (a duplicate dispatch)."""
        await self.dispatch("MESSAGE_CREATE", self.messages[message_id])

    # ------------------------------------------------------------ what the bot did

    def sent_to(self, channel_id: str) -> list[dict[str, Any]]:
        """Messages the bot posted in `channel_id`, oldest first, as they are now (edits applied)."""
        return [self.messages.get(m["id"], m) for m in self.sent if m["channel_id"] == channel_id]

    async def wait_until(
        self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        """Return once `predicate()` holds; re-checked after every request and gateway event.

        AssertionError naming `what` after `timeout` seconds.
        """
        await self._watch.wait_for(predicate, timeout, what)

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

"""The web chat adapter: a page and a websocket on the switchboard's own HTTP server.

Each browser is one conversation, ``Address(account, "<visitor>.<conversation>")``,
across its tabs and reloads, until "New chat" starts another. The page keeps a
secret visitor token and the conversation id in localStorage and sends both in
its first frame; the visitor's public id is a hash of the token, so knowing an
address does not let anyone read it.

A hello writes nothing durable: a conversation is in the store once its visitor
sent a message (the first message creates it, as on any channel), and that is
what lets the agent send to it while no page of it is open (`check_address`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import WSCloseCode, web
from backchannel.adapter import AdapterContext, Capabilities, split_text
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel.model import Address, Event, Message, Outbound, Receipt, Sender, now
from backchannel.store.cache import LRUCache

from .clients import ClientAddresses, HostCheck, RefusalLog
from .hub import Connection, Hub
from .limits import Buckets
from .normalize import AGENT_ID_PREFIX, SAFE_ID, normalize
from .pages import StaticFiles
from .session import VisitorSession
from .settings import WebchatSettings

__all__ = ["WebchatAdapter"]

#: conversations remembered in memory as written to (the rest are looked up in the store)
KNOWN_CHATS_CACHED = 10_000

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class WebchatAdapter:
    """One web chat account: serves the page, takes visitor messages, pushes the agent's."""

    channel = "webchat"
    #: a visitor's token: only its hash (the visitor id) is ever handed to ingest
    secret_fields = frozenset({"token", "visitor_token"})

    def __init__(self, account: str, settings: Mapping[str, Any] | None = None):
        self.account = account
        self.settings = WebchatSettings.from_mapping(settings or {}, where=f"accounts.{account}")
        self.capabilities = Capabilities(
            threads=False,
            edits=True,
            reactions=False,
            typing=True,
            replies=True,
            max_text_len=self.settings.max_text_len,
            display_name="web chat",
        )
        self.me: Sender | None = Sender("agent", self.settings.agent_name, is_bot=True)
        #: the page's public URL, known after `start`
        self.url: str | None = None
        self.hub = Hub()
        chosen = self.settings
        self.visitor_limits = Buckets(chosen.rate_limit, chosen.rate_burst)
        self.agent_limits = Buckets(chosen.agent_rate_limit, chosen.agent_burst)
        #: per client address: visitor messages, and new websockets
        self.address_limits = Buckets(chosen.address_rate_limit, chosen.address_burst)
        self.connect_limits = Buckets(chosen.connect_rate_limit, chosen.connect_burst)
        #: per client address: frames of any kind (each page has its own bucket too)
        self.frame_limits = Buckets(chosen.address_frame_rate_limit, chosen.address_frame_burst)
        #: per client address: HTTP requests of any kind (page, files, upgrades)
        self.request_limits = Buckets(chosen.request_rate_limit, chosen.request_burst)
        self.clients = ClientAddresses(chosen.trusted_proxies)
        self._ctx: AdapterContext | None = None
        self._routes: list[tuple[str, str]] = []
        #: conversations known to have a stored message (a bounded cache of the store's answer)
        self._known_chats: LRUCache[str, bool] = LRUCache(KNOWN_CHATS_CACHED)
        #: websockets upgraded but not past their hello yet
        self.handshakes = 0
        #: open websockets (handshakes included) by client address
        self.address_sockets: dict[str, int] = {}
        self._host_check: HostCheck | None = None
        self._refused_hosts: RefusalLog | None = None
        self._refused_clients: RefusalLog | None = None
        self._refused_requests: RefusalLog | None = None
        self._refused_origins: RefusalLog | None = None
        self._evicted: RefusalLog | None = None
        self._flooding: RefusalLog | None = None
        #: pages being closed to make room (a reference keeps each task alive)
        self._evicting: set[asyncio.Task[Any]] = set()

    # lifecycle -------------------------------------------------------------
    async def start(self, ctx: AdapterContext) -> None:
        """Serve the page, its files and the websocket under `settings.path`."""
        self._ctx = ctx
        routes = ctx.routes
        self._host_check = HostCheck(self.settings.allowed_hosts, lambda: routes.public_url)
        self._refused_hosts = RefusalLog(
            ctx.log,
            "request(s) for a host name this web chat does not serve (a DNS-rebinding page,"
            " or set [server] public_url or allowed_hosts to that name)",
            level=logging.WARNING,
        )
        self._refused_clients = RefusalLog(
            ctx.log, "websocket(s) of a client address over its limits (429)"
        )
        self._refused_origins = RefusalLog(
            ctx.log,
            "websocket(s) from another origin (403; list the page's origin in allowed_origins"
            " if it is yours)",
            level=logging.WARNING,
        )
        self._refused_requests = RefusalLog(
            ctx.log, "HTTP request(s) of a client address over request_rate_limit (429)"
        )
        self._evicted = RefusalLog(
            ctx.log,
            "idle page(s) to make room for new ones (max_sockets reached)",
            verb="closed",
        )
        self._flooding = RefusalLog(
            ctx.log, "page(s) sending too many frames (1008 too_many_frames)", verb="closed"
        )
        files = StaticFiles(self.settings.title)
        base = self.settings.path
        self.url = self._add(ctx, "GET", base, files.handler("index.html"))
        self._add(ctx, "GET", base + "webchat.js", files.handler("webchat.js"))
        self._add(ctx, "GET", base + "webchat.css", files.handler("webchat.css"))
        self._add(ctx, "GET", base + "ws", self._websocket)
        if base != "/":
            self._add(ctx, "GET", base.rstrip("/"), _redirect_to(base))
        ctx.log.info("web chat page at %s", self.url)

    async def stop(self) -> None:
        """Close every page (they reconnect when the server is back) and drop the routes."""
        ctx, self._ctx = self._ctx, None
        if ctx is None:
            return
        for method, path in self._routes:
            ctx.routes.remove(method, path)
        self._routes.clear()
        await self.hub.close_all(1001, b"server stopping")
        await asyncio.gather(*self._evicting, return_exceptions=True)

    # inbound ---------------------------------------------------------------
    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        """Return the Event of a raw visitor payload; None for the agent's own messages."""
        return normalize(self.account, raw)

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ctx = self._ctx
        if ctx is None:
            raise web.HTTPServiceUnavailable(text="the web chat is stopping")
        session = VisitorSession(self, ctx, request)
        return await session.run()

    def admit(self, address: str) -> None:
        """Count a new websocket of client `address`; raise 429 when it is over its limits.

        Limits: `max_sockets_per_address` open at once (handshakes included), and
        `connect_rate_limit` new ones a minute. Every admitted socket is `release`d.
        """
        settings = self.settings
        if self.address_sockets.get(address, 0) >= settings.max_sockets_per_address:
            self._refuse_client(address, "open sockets")
            raise web.HTTPTooManyRequests(
                text=f"at most {settings.max_sockets_per_address} web chat pages may be open"
                " from one address; close one and reload\n",
                headers={"Retry-After": "30"},
            )
        wait = self.connect_limits.take(address)
        if wait:
            self._refuse_client(address, "new sockets a minute")
            raise web.HTTPTooManyRequests(
                text="too many new web chat connections from one address; try again shortly\n",
                headers={"Retry-After": str(math.ceil(wait))},
            )
        self.address_sockets[address] = self.address_sockets.get(address, 0) + 1

    def release(self, address: str) -> None:
        """Forget one websocket `admit` counted for `address`."""
        left = self.address_sockets.get(address, 0) - 1
        if left > 0:
            self.address_sockets[address] = left
        else:
            self.address_sockets.pop(address, None)

    def _refuse_client(self, address: str, limit: str) -> None:
        if self._refused_clients is not None:
            self._refused_clients.note(f"{address}, {limit}")

    def refuse_origin(self, origin: str) -> None:
        """Count a websocket refused for its Origin: one WARNING, then a count a minute."""
        if self._refused_origins is not None:
            self._refused_origins.note(repr(origin)[:100])

    def flooded(self, address: str) -> None:
        """Count a page closed for sending too many frames."""
        if self._flooding is not None:
            self._flooding.note(address)

    def make_room(self) -> None:
        """Close one open page (if any) so that a new one fits under `max_sockets`.

        The page chosen is one closing already if any, else one whose visitor never sent a
        message on it if any, of the client address holding the most sockets, idle the
        longest: pages someone holds open in bulk go first, a visitor who is talking goes
        last. It is taken out of the hub at once and closed as idle in the background (the
        page pauses, and reconnects when its visitor is back).
        """
        connections = self.hub.all_connections()
        if not connections:
            return
        sockets = self.address_sockets
        victim = min(
            connections,
            key=lambda c: (not c.ws.closed, c.spoke, -sockets.get(c.address, 0), c.active_at),
        )
        self.hub.remove(victim)
        if self._evicted is not None:
            self._evicted.note(victim.address)
        task = asyncio.create_task(self._close_idle(victim))
        self._evicting.add(task)
        task.add_done_callback(self._evicting.discard)

    @staticmethod
    async def _close_idle(connection: Connection) -> None:
        with contextlib.suppress(Exception):
            await connection.ws.close(code=WSCloseCode.OK, message=b"idle")

    def _know(self, chat: str) -> None:
        """Cache that `chat` has a stored message; the cache is bounded (the store is the record)."""
        self._known_chats.put(chat, True)

    async def transcript(self, chat: str) -> list[Message]:
        """Return the last `settings.history` messages of conversation `chat`.

        Held messages included: a conversation is one visitor's, so a message
        the policy kept from the agent is the visitor's own, and it stays on
        their page after a reload (marked ``held`` in its frame).
        """
        if self._ctx is None:
            return []
        return await self._ctx.transcript(
            Address(self.account, chat), self.settings.history, held=True
        )

    # outbound --------------------------------------------------------------
    async def send(self, outbound: Outbound) -> Receipt:
        """Push a message or an edit to every page of the conversation.

        Succeeds at once when no page is open (the transcript shows it on the
        next connect); otherwise waits until a page confirms it displayed it.
        """
        chat = await self._check_target(outbound.address)
        if outbound.kind == "reaction":
            raise Rejected("the web chat does not show reactions")
        if not outbound.text.strip():
            raise Rejected("the text is empty")
        if outbound.kind == "edit" and not (outbound.target or "").startswith(AGENT_ID_PREFIX):
            raise Rejected("only the agent's own web chat messages can be edited")
        wait = self.agent_limits.take(chat)
        if wait:
            raise RateLimited(wait, "too many agent messages in this web chat")
        if outbound.kind == "edit":
            return await self._send_edit(chat, outbound)
        return await self._send_message(chat, outbound)

    async def typing(self, address: Address) -> None:
        """Show "typing…" on every page of the conversation for a few seconds."""
        connections = self.hub.connections(address.chat)
        if connections:
            await self.hub.push(connections, {"type": "typing", "sender": self._agent_name})

    async def run_failed(self, address: Address, reason: str) -> None:
        """Show `failure_notice` on the conversation's pages (the reason stays in the logs)."""
        notice = self.settings.failure_notice
        connections = self.hub.connections(address.chat)
        if notice and connections:
            await self.hub.push(
                connections, {"type": "error", "code": "agent_failed", "message": notice}
            )

    async def _send_message(self, chat: str, outbound: Outbound) -> Receipt:
        parts = split_text(outbound.text, self.capabilities.max_text_len)
        ids = [AGENT_ID_PREFIX + uuid.uuid4().hex[:24] for _ in parts]
        seq = await self._seq_of(chat, outbound)
        sent_at = now()
        frames = []
        for index, (part, part_id) in enumerate(zip(parts, ids, strict=True)):
            frame: dict[str, Any] = {
                "type": "message",
                "seq": seq,
                "id": part_id,
                "message_id": ids[0],
                "part": index,
                "parts": len(parts),
                "role": "agent",
                "sender": self._agent_name,
                "text": part,
                "sent_at": sent_at,
            }
            if outbound.reply_to:
                frame["reply_to"] = outbound.reply_to
            frames.append(frame)
        await self._deliver(chat, frames)
        return Receipt(ids[0], tuple(ids), sent_at=sent_at)

    async def _send_edit(self, chat: str, outbound: Outbound) -> Receipt:
        target = outbound.target or ""
        frame = {"type": "edit", "id": target, "text": outbound.text, "sent_at": now()}
        await self._deliver(chat, [frame])
        return Receipt(target, (target,))

    async def _deliver(self, chat: str, frames: list[dict[str, Any]]) -> None:
        connections = self.hub.connections(chat)
        if not connections:
            return
        token = uuid.uuid4().hex
        frames[-1]["delivery"] = token
        confirmed = self.hub.expect(chat, token)
        try:
            async with asyncio.timeout(self.settings.delivery_timeout):
                for frame in frames:
                    await self.hub.push(connections, frame)
                await confirmed
        except TimeoutError:
            raise Uncertain(
                f"no page of web chat {chat} confirmed the message within"
                f" {self.settings.delivery_timeout:g}s (it is in the transcript and will be"
                " shown when the page reconnects)"
            ) from None
        finally:
            self.hub.forget(token)

    async def check_address(self, address: Address) -> None:
        """Raise Rejected unless a visitor wrote in `address`, or a page of it is open now."""
        await self._check_target(address)

    async def _check_target(self, address: Address) -> str:
        if address.account != self.account:
            raise Rejected(f"address belongs to account {address.account!r}, not {self.account!r}")
        if address.thread is not None:
            raise Rejected("the web chat has no threads")
        chat = address.chat
        visitor, _, tab = chat.partition(".")
        if not (visitor.startswith("v") and SAFE_ID.match(visitor[1:]) and SAFE_ID.match(tab)):
            raise Rejected(f"{chat!r} is not a web chat conversation id (like v1a2b….tab)")
        if chat in self._known_chats or self.hub.connections(chat):
            return chat  # known to have a message, or a page of it is open (token holder)
        # a conversation with a stored message was started by its visitor (a hello stores
        # nothing); held messages count, the page shows them to that visitor
        if self._ctx is None or not await self._ctx.transcript(address, 1, held=True):
            raise Rejected(f"no visitor has opened web chat conversation {chat}")
        self._know(chat)
        return chat

    async def _seq_of(self, chat: str, outbound: Outbound) -> int | None:
        """Return the transcript seq of the row the switchboard recorded for this send.

        Pages key messages by seq, so a page that reloads while a message is
        being pushed shows it once. Taken from ``outbound.meta["seq"]`` when
        the caller passes it, else found among the last pending rows.
        """
        seq = outbound.meta.get("seq") if outbound.meta else None
        if isinstance(seq, int):
            return seq
        if self._ctx is None:
            return None
        for message in reversed(await self._ctx.transcript(Address(self.account, chat), 20)):
            if (
                message.direction == "out"
                and message.status == "pending"
                and message.platform_message_id is None
                and message.text == outbound.text
            ):
                return message.seq
        return None

    @property
    def _agent_name(self) -> str:
        return self.me.label if self.me else self.settings.agent_name

    def _add(self, ctx: AdapterContext, method: str, path: str, handler: Handler) -> str:
        url = ctx.routes.add(method, path, self._host_checked(handler))
        self._routes.append((method, path))
        return url

    def _host_checked(self, handler: Handler) -> Handler:
        """`handler` behind the host check: 421 for a host name this chat does not serve."""

        async def checked(request: web.Request) -> web.StreamResponse:
            check = self._host_check
            if check is not None and not check.allows(request):
                if self._refused_hosts is not None:
                    self._refused_hosts.note(repr(request.headers.get("Host", ""))[:100])
                raise web.HTTPMisdirectedRequest(
                    text="this server does not serve the web chat under that host name\n"
                )
            # one address flooding the page or its files costs the server a CPU: metered
            ctx = self._ctx
            address = self.clients.of(request, ctx.log) if ctx is not None else ""
            wait = self.request_limits.take(address) if ctx is not None else 0
            if wait:
                if self._refused_requests is not None:
                    self._refused_requests.note(address)
                raise web.HTTPTooManyRequests(
                    text="too many requests from this address; try again shortly\n",
                    headers={"Retry-After": str(max(1, math.ceil(wait)))},
                )
            return await handler(request)

        return checked

    def connection_count(self) -> int:
        """Return how many pages are connected."""
        return len(self.hub)


def _redirect_to(location: str) -> Any:
    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPPermanentRedirect(location)

    return redirect

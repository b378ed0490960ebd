"""The web chat adapter: a page and a websocket on the switchboard's own HTTP server.

Each browser is one conversation, ``Address(account, "<visitor>.<conversation>")``,
across its tabs and reloads, until "New chat" starts another. The page keeps a
secret visitor token and the conversation id in localStorage and sends both in
its first frame; the visitor's public id is a hash of the token, so knowing an
address does not let anyone read it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from backchannel.adapter import AdapterContext, Capabilities, split_text
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel.model import Address, Event, Message, Outbound, Receipt, Sender, now
from backchannel.store.cache import LRUCache

from .hub import Hub
from .limits import Buckets
from .normalize import AGENT_ID_PREFIX, SAFE_ID, normalize
from .pages import StaticFiles
from .session import VisitorSession
from .settings import WebchatSettings

__all__ = ["WebchatAdapter"]

#: conversations remembered in memory as opened (the rest are looked up in the state)
KNOWN_CHATS_CACHED = 10_000


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
        self.visitor_limits = Buckets(self.settings.rate_limit, self.settings.rate_burst)
        self.agent_limits = Buckets(self.settings.agent_rate_limit, self.settings.agent_burst)
        self._ctx: AdapterContext | None = None
        self._routes: list[tuple[str, str]] = []
        #: conversations a page opened (a bounded cache of the durable state keys)
        self._known_chats: LRUCache[str, bool] = LRUCache(KNOWN_CHATS_CACHED)
        #: websockets upgraded but not past their hello yet
        self.handshakes = 0

    # lifecycle -------------------------------------------------------------
    async def start(self, ctx: AdapterContext) -> None:
        """Serve the page, its files and the websocket under `settings.path`."""
        self._ctx = ctx
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

    async def remember_chat(self, chat: str) -> None:
        """Record durably that a page opened conversation `chat` (sends to it are allowed)."""
        if chat in self._known_chats or self._ctx is None:
            return
        if await self._ctx.get_state(_chat_key(chat)) is None:
            await self._ctx.set_state(_chat_key(chat), "1")
        self._know(chat)

    def _know(self, chat: str) -> None:
        """Cache that `chat` was opened; the cache is bounded (the state is the record)."""
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
        """Raise Rejected unless `address` is a conversation a visitor opened (see Adapter)."""
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
        if chat not in self._known_chats:
            if self._ctx is None or await self._ctx.get_state(_chat_key(chat)) is None:
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

    def _add(self, ctx: AdapterContext, method: str, path: str, handler: Any) -> str:
        url = ctx.routes.add(method, path, handler)
        self._routes.append((method, path))
        return url

    def connection_count(self) -> int:
        """Return how many pages are connected."""
        return len(self.hub)


def _chat_key(chat: str) -> str:
    return f"chat:{chat}"


def _redirect_to(location: str) -> Any:
    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPPermanentRedirect(location)

    return redirect

"""The open websockets of the web chat, by conversation and by visitor, and what they confirmed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from typing import Any

from aiohttp import web
from attrs import define, field

__all__ = ["Connection", "Hub"]


@define(eq=False)
class Connection:
    """One page (browser tab) connected over a websocket."""

    ws: web.WebSocketResponse
    visitor: str
    chat: str
    name: str
    #: the client address the page's limits count against (see clients.py)
    address: str = ""
    #: loop time of the visitor's last stored message on this page, or of its hello
    active_at: float = 0.0
    #: the visitor sent (and the store took) a message on this page
    spoke: bool = False


@define
class Hub:
    """Who is connected where, and which pushed frames are still waiting for the page's receipt."""

    _by_chat: dict[str, set[Connection]] = field(factory=dict)
    _by_visitor: dict[str, set[Connection]] = field(factory=dict)
    #: delivery token -> (chat, future set when a page of that chat confirmed it)
    _waiting: dict[str, tuple[str, asyncio.Future[bool]]] = field(factory=dict)

    def sockets_of(self, visitor: str) -> int:
        """Return how many pages `visitor` has open."""
        return len(self._by_visitor.get(visitor, ()))

    def __len__(self) -> int:
        """Return how many pages are connected in all."""
        return sum(len(conns) for conns in self._by_visitor.values())

    def connections(self, chat: str) -> list[Connection]:
        """Return the pages showing conversation `chat`."""
        return list(self._by_chat.get(chat, ()))

    def all_connections(self) -> list[Connection]:
        return [c for conns in self._by_chat.values() for c in conns]

    def add(self, connection: Connection) -> None:
        self._by_chat.setdefault(connection.chat, set()).add(connection)
        self._by_visitor.setdefault(connection.visitor, set()).add(connection)

    def remove(self, connection: Connection) -> None:
        """Forget a page; when it was the conversation's last, settle what waited on it."""
        for index, key in (
            (self._by_chat, connection.chat),
            (self._by_visitor, connection.visitor),
        ):
            conns = index.get(key)
            if conns is not None:
                conns.discard(connection)
                if not conns:
                    del index[key]
        if connection.chat not in self._by_chat:
            # nobody is left to display it; the transcript shows it on the next connect
            for chat, future in list(self._waiting.values()):
                if chat == connection.chat and not future.done():
                    future.set_result(False)

    def expect(self, chat: str, token: str) -> asyncio.Future[bool]:
        """Return a future set once a page of `chat` confirms the frame carrying `token`."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[token] = (chat, future)
        return future

    def forget(self, token: str) -> None:
        self._waiting.pop(token, None)

    def confirm(self, connection: Connection, token: object) -> None:
        """Record a page's receipt; a page can only confirm frames of its own conversation."""
        if not isinstance(token, str):
            return
        waiting = self._waiting.get(token)
        if waiting is not None and waiting[0] == connection.chat and not waiting[1].done():
            waiting[1].set_result(True)

    async def push(self, connections: Iterable[Connection], frame: dict[str, Any]) -> None:
        """Send one frame to pages; a page that cannot take it is closed (it will reload)."""
        data = json.dumps(frame)
        await asyncio.gather(*(self._push_one(c, data) for c in connections))

    async def _push_one(self, connection: Connection, data: str) -> None:
        if connection.ws.closed:
            return
        try:
            await connection.ws.send_str(data)
        except (ConnectionError, RuntimeError):
            with contextlib.suppress(Exception):
                await connection.ws.close()

    async def close_all(self, code: int, message: bytes) -> None:
        """Close every page (they reconnect and reload the transcript)."""
        connections = self.all_connections()
        await asyncio.gather(
            *(c.ws.close(code=code, message=message) for c in connections),
            return_exceptions=True,
        )
        for _token, (_chat, future) in list(self._waiting.items()):
            if not future.done():
                future.set_result(False)

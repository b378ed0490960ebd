"""The Socket Mode side of the fake: hello, envelopes, acks, redelivery, disconnects."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import aiohttp
from aiohttp import web

from ._shared import Connection, Delivery, FakeBase

__all__ = ["SocketModeServer"]


class SocketModeServer(FakeBase):
    """Serves ``/link/`` websockets handed out by ``apps.connections.open``."""

    # Socket Mode -----------------------------------------------------------------------
    async def _link(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("app_id") != self.app_id or not request.query.get("ticket"):
            return web.Response(status=401, text="invalid ticket")
        if self.refuse_sockets:
            return web.Response(status=503, text="service unavailable")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections_opened += 1
        connection = Connection(ws, request, self.connections_opened)
        self._connections.append(connection)
        self._give_up_stalled()
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._connections),
                "debug_info": {
                    "host": "applink-fake",
                    "build_number": 1,
                    "approximate_connection_time": 18060,
                },
                "connection_info": {"app_id": self.app_id},
            }
        )
        self._notify()
        await self._resend_orphans()
        try:
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    self._on_ack(message.data)
        finally:
            if connection in self._connections:
                self._connections.remove(connection)
            for delivery in connection.sent:
                if not delivery.acked.is_set() and delivery not in self._orphans:
                    self._orphans.append(delivery)
            if self._orphans and self._connections:
                await self._resend_orphans()
            self._notify()
        return ws

    async def _resend_orphans(self) -> None:
        orphans, self._orphans = self._orphans, []
        for delivery in orphans:
            if not delivery.acked.is_set():
                await self._send_envelope(
                    delivery, attempt=len(delivery.envelopes), reason="timeout"
                )

    def _on_ack(self, data: str) -> None:
        with contextlib.suppress(ValueError):
            message = json.loads(data)
            entry = self._envelopes.get(str(message.get("envelope_id")))
            if entry is not None:
                entry[0].acks += 1
                entry[0].acked.set()
                self._notify()

    async def _send_envelope(self, delivery: Delivery, attempt: int, reason: str | None) -> None:
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "payload": delivery.payload,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": attempt,
            "retry_reason": reason or "",
        }
        live = [c for c in self._connections if not c.ws.closed and not c.stalled]
        if not live:
            self._orphans.append(delivery)
            return
        delivery.envelopes.append(envelope_id)
        self._envelopes[envelope_id] = (delivery, attempt)
        live[-1].sent.append(delivery)
        self._notify()
        try:
            await live[-1].ws.send_str(json.dumps(envelope))
        except (ConnectionError, RuntimeError):
            self._orphans.append(delivery)
            return
        if self.ack_timeout is not None and attempt < self.max_retries:
            self._spawn(self._retry_unless_acked(delivery, attempt))

    async def _retry_unless_acked(self, delivery: Delivery, attempt: int) -> None:
        assert self.ack_timeout is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(delivery.acked.wait(), self.ack_timeout)
            return
        if len(delivery.envelopes) == attempt + 1:  # no one sent it again meanwhile
            await self._send_envelope(delivery, attempt=attempt + 1, reason="timeout")

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Send Slack's ``disconnect`` message on every open socket (the app should reconnect)."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}}
        for connection in [c for c in self._connections if not c.stalled]:
            with contextlib.suppress(Exception):
                await connection.ws.send_json(message)

    def drop_connections(self) -> None:
        """Cut every socket without a close frame (a network failure)."""
        for connection in list(self._connections):
            transport = connection.request.transport
            if transport is not None:
                transport.abort()

    def stall_connections(self) -> None:
        """Freeze every socket without closing it: no pongs, no acks read, no envelopes sent.

        The app only notices through its own keepalive (slack-sdk pings every
        ``ping_interval``). Once it opens a new socket, the frozen ones are cut
        and what was unacked on them is sent again there, as Slack does.
        """
        for connection in self._connections:
            connection.stalled = True
            transport = connection.request.transport
            if transport is not None:
                transport.pause_reading()
        self._notify()

    def _give_up_stalled(self) -> None:
        for connection in [c for c in self._connections if c.stalled]:
            self._connections.remove(connection)
            for delivery in connection.sent:
                if not delivery.acked.is_set() and delivery not in self._orphans:
                    self._orphans.append(delivery)
            transport = connection.request.transport
            if transport is not None:
                transport.abort()

    def open_connections(self) -> int:
        return sum(1 for c in self._connections if not c.ws.closed and not c.stalled)

    async def wait_connections(self, opened: int, timeout: float = 10.0) -> None:
        """Return once `opened` sockets have been opened in total and one is open."""

        def ready() -> bool:
            return self.connections_opened >= opened and self.open_connections() > 0

        await self.wait_for(ready, timeout, f"{opened} Socket Mode connections")

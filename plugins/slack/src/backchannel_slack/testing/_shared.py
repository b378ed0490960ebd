"""What the fake's parts share: records of deliveries and faults, state, plumbing."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from attrs import define, field
from backchannel.testing import Watch

from ._workspace import Workspace

__all__ = ["FAULTS", "Connection", "Delivery", "FakeBase", "Fault"]

FAULTS = (
    "rate_limited",
    "server_error",
    "unavailable",
    "error",
    "hang",
    "slow",
    "reset",
    "reset_after",
    "garbled",
)


@define
class Fault:
    """One injected Web API fault (see `FakeSlack.fail_next`)."""

    kind: str
    retry_after: float = 1.0
    error: str = "channel_not_found"
    delay: float = 30.0
    #: ``garbled``: the HTTP status of the unreadable answer
    status: int = 200


@define
class Delivery:
    """One event as the fake delivers it: its attempts and whether the app acked it."""

    event_id: str
    payload: dict[str, Any]
    #: Socket Mode: envelope ids sent; Events API: (retry number, HTTP status or error)
    envelopes: list[str] = field(factory=list)
    attempts: list[tuple[int, str]] = field(factory=list)
    acked: asyncio.Event = field(factory=asyncio.Event)
    #: how many acks (Socket Mode) or 2xx answers (Events API) the app gave
    acks: int = 0
    gave_up: asyncio.Event = field(factory=asyncio.Event)
    signature: str = "valid"


@define
class Connection:
    ws: web.WebSocketResponse
    request: web.Request
    number: int
    #: deliveries sent on this socket (unacked ones are sent again on the next socket)
    sent: list[Delivery] = field(factory=list)
    #: True once `stall_connections` froze it: open, but nothing goes through
    stalled: bool = False


class FakeBase(Workspace):
    """State every part of the fake reads; `FakeSlack.__init__` sets it up."""

    ack_timeout: float | None
    max_retries: int
    http_timeout: float
    retry_delays: tuple[float, ...]
    echo_own_posts: bool
    posts: list[dict[str, Any]]
    updates: list[dict[str, Any]]
    reactions: list[dict[str, Any]]
    calls: list[tuple[str, dict[str, Any]]]
    deliveries: dict[str, Delivery]
    events_url: str | None
    connections_opened: int
    refuse_sockets: bool
    port: int
    _faults: dict[str, deque[Fault]]
    _connections: list[Connection]
    _envelopes: dict[str, tuple[Delivery, int]]
    _orphans: list[Delivery]
    _tasks: set[asyncio.Task[Any]]
    _watch: Watch
    _closing: asyncio.Event | None
    _runner: web.AppRunner | None
    _session: aiohttp.ClientSession | None

    async def deliver(self, payload: Mapping[str, Any], *, signature: str = "valid") -> Delivery:
        """Send one event to the app (implemented by FakeSlack)."""
        raise NotImplementedError

    # plumbing ----------------------------------------------------------------------------
    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _notify(self) -> None:
        """Say that the fake's state changed (wakes `wait_for` waiters to re-check)."""
        self._watch.changed()

    async def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        """Return once `predicate()` holds over the fake's state; AssertionError after `timeout`.

        Re-checked whenever the fake's state changes: a post, update or reaction,
        a Web API call, an envelope sent or acked, an Events API attempt or giving up,
        a socket opened or closed.
        """
        await self._watch.wait_for(predicate, timeout, what)

"""Fixtures: a FakeSlack, a tiny server for the adapter's routes, loopback never proxied."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from backchannel.adapter import RouteTable
from backchannel.server import HttpServer
from backchannel_slack.testing import FakeSlack


@pytest.fixture(autouse=True)
def loopback_not_proxied(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep any HTTPS_PROXY of the machine, but never for 127.0.0.1 (as the docs advise)."""
    existing = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    hosts = ",".join(h for h in (existing, "127.0.0.1", "localhost") if h)
    monkeypatch.setenv("NO_PROXY", hosts)
    monkeypatch.setenv("no_proxy", hosts)
    yield


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    """A FakeSlack with quick Events API retries and no automatic Socket Mode redelivery."""
    async with FakeSlack(ack_timeout=None, retry_delays=(0.0, 0.2, 0.5), http_timeout=3.0) as fake:
        yield fake


class RouteServer(HttpServer):
    """Serves a RouteTable on 127.0.0.1 with the switchboard's own HttpServer."""

    def __init__(self, routes: RouteTable):
        super().__init__(routes, port=0)

    async def start(self) -> str:
        self.routes.public_url = await super().start()
        return self.routes.public_url


@pytest.fixture
async def route_server(contract_context: Any) -> AsyncIterator[RouteServer]:
    server = RouteServer(contract_context.routes)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def start_adapter(slack: FakeSlack, contract_context: Any, route_server: Any) -> Any:
    """Start a SlackAdapter on the contract context in `mode`; stopped after the test."""
    from backchannel_slack import SlackAdapter

    started: list[SlackAdapter] = []

    async def start(mode: str = "socket", **overrides: object) -> SlackAdapter:
        adapter = SlackAdapter(contract_context.account, slack.settings(mode=mode, **overrides))
        await adapter.start(contract_context.bind(adapter))
        if mode == "events":
            assert adapter.events_url is not None
            slack.use_events_api(adapter.events_url)
        started.append(adapter)
        return adapter

    yield start
    for adapter in started:
        await adapter.stop()


async def wait_until(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    """Re-check `predicate` every few milliseconds until true; AssertionError after `timeout`.

    Only for the adapter's own counters, which nothing announces; the fake's state
    is awaited with `FakeSlack.wait_for`, the store's with the contract context.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)

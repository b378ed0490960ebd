"""Shared fixtures: a running FakeTelegram, and the switchboard's HTTP server for webhook routes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from backchannel.adapter import RouteTable
from backchannel.server import HttpServer
from backchannel_telegram.testing import FakeTelegram


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def routes() -> AsyncIterator[RouteTable]:
    """A RouteTable served by backchannel's own HttpServer on 127.0.0.1:0."""
    table = RouteTable()
    server = HttpServer(table, port=0)
    table.public_url = await server.start()
    yield table
    await server.stop()

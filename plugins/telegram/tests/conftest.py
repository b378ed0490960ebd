"""Shared fixtures: a running FakeTelegram, and the switchboard's HTTP server for webhook routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from backchannel.adapter import RouteTable
from backchannel.runs import Run
from backchannel.server import HttpServer
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import ContractContext
from backchannel_telegram import TelegramAdapter
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


def answer_trigger(run: Run) -> str:
    assert run.trigger is not None
    return f"answer to {run.trigger.text}"


@pytest.fixture
async def board_for(store: SQLiteStore) -> AsyncIterator[Any]:
    boards: list[Switchboard] = []

    async def make(
        fake: FakeTelegram,
        agent: Any,
        mode: str = "polling",
        reopened: SQLiteStore | None = None,
        **settings: Any,
    ) -> Switchboard:
        """A started board on `store` (or `reopened`, the same file after a restart)."""
        adapter = TelegramAdapter("tg", fake.settings(mode=mode, **settings))
        board = Switchboard(reopened or store, port=0 if mode == "webhook" else None)
        board.add_account(adapter, Binding(agent, respond="mention"), secrets=[fake.token])
        await board.start()
        boards.append(board)
        return board

    yield make
    for board in boards:
        await board.stop()


@pytest.fixture
async def adapter(
    fake: FakeTelegram, contract_context: ContractContext
) -> AsyncIterator[TelegramAdapter]:
    """A started adapter of the contract context's account, on the fake."""
    started = TelegramAdapter(contract_context.account, fake.settings(request_timeout=1.0))
    await started.start(contract_context.bind(started))
    yield started
    await started.stop()

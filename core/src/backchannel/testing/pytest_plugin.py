"""backchannel's pytest plugin (entry point `pytest11`): fixtures for adapter and agent tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ..store import SQLiteStore
from ..switchboard import Switchboard
from .context import ContractContext
from .fake_channel import FakeChannel


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    """A fresh SQLite store in a temporary directory."""
    opened = SQLiteStore(tmp_path / "state" / "backchannel.db")
    yield opened
    await opened.close()


@pytest.fixture
async def contract_context(store: SQLiteStore) -> ContractContext:
    """A ContractContext over the `store` fixture, account "test"."""
    return ContractContext(store, account="test")


@pytest.fixture
def fake_channel() -> FakeChannel:
    """A fresh in-memory FakeChannel (platform + adapter factory)."""
    return FakeChannel()


@pytest.fixture
async def switchboard(store: SQLiteStore) -> AsyncIterator[Switchboard]:
    """A Switchboard over the `store` fixture, without an HTTP server; stopped after the test."""
    board = Switchboard(store)
    yield board
    await board.stop()

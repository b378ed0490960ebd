"""backchannel's pytest plugin (entry point `pytest11`): fixtures for adapter and agent tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ..store import SQLiteStore
from .context import ContractContext


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

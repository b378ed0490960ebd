"""backchannel's pytest plugin (entry point `pytest11`): fixtures for adapter and agent tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ..store import SQLiteStore
from ..switchboard import Switchboard
from .context import ContractContext
from .fake_channel import FakeChannel
from .postgres import PostgresCluster, PostgresUnavailable, throwaway_cluster


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


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL cluster for the whole session (removed after).

    Skips with the reason when the server binaries are missing, unless
    BACKCHANNEL_REQUIRE_POSTGRES=1 (set by `make test`), where that is a failure.
    """
    try:
        with throwaway_cluster() as cluster:
            yield cluster
    except PostgresUnavailable as missing:
        if os.environ.get("BACKCHANNEL_REQUIRE_POSTGRES") == "1":
            pytest.fail(str(missing))
        pytest.skip(str(missing))


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> str:
    """The URL of a new, empty database on the session's throwaway cluster."""
    return postgres_cluster.fresh_database()


#: what the kit's async tests and fixtures need, said once, before any test runs
KIT_SETUP = (
    'backchannel\'s test kit ({kit}) needs pytest-asyncio with asyncio_mode = "auto"; {problem}.'
    ' Install it with `pip install "backchannel[testing]"` and add to pyproject.toml:'
    ' [tool.pytest.ini_options] asyncio_mode = "auto"'
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fail early, in one line, when a kit class is collected but async tests cannot run."""
    from .contract import AdapterContract
    from .store_contract import StoreContract

    classes = {getattr(item, "cls", None) for item in items}
    kits = {
        kit.__name__
        for cls in classes
        for kit in (AdapterContract, StoreContract)
        if isinstance(cls, type) and issubclass(cls, kit)
    }
    if not kits:
        return
    problem = kit_setup_problem(config)
    if problem:
        raise pytest.UsageError(KIT_SETUP.format(kit=", ".join(sorted(kits)), problem=problem))


def kit_setup_problem(config: pytest.Config) -> str | None:
    """Say what is missing for the kit's async tests, or None when all is there."""
    if not config.pluginmanager.hasplugin("asyncio"):
        return "pytest-asyncio is not installed (or is disabled with -p no:asyncio)"
    mode = config.getini("asyncio_mode")
    if mode != "auto":
        return f"asyncio_mode is {mode or 'strict'!r}"
    return None

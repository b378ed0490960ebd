"""What plugins can attach: their own migrations, config tables, inbound routers, services."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backchannel.config import parse_config
from backchannel.errors import ConfigError, PluginError
from backchannel.hookspecs import hookimpl
from backchannel.model import Event
from backchannel.plugins import get_plugin_manager
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, RouteVerdict, Switchboard
from backchannel.testing import FakeChannel

applied: list[str] = []


def demo_m001_notes(db: Any) -> None:
    applied.append("demo_m001_notes")
    db.execute("CREATE TABLE demo_notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")


def m001_initial(db: Any) -> None:  # the core's name: a plugin may not take it
    raise AssertionError("never applied")


@pytest.fixture
def migrations_plugin() -> Iterator[list[Any]]:
    registered: list[Any] = [demo_m001_notes]

    class Plugin:
        @hookimpl
        def register_migrations(self, register: Any) -> None:
            for migration in registered:
                register(migration)

    pm = get_plugin_manager()
    pm.register(Plugin(), name="test-migrations")
    yield registered
    pm.unregister(name="test-migrations")


async def test_a_plugin_migration_is_applied_once_and_recorded(
    tmp_path: Path, migrations_plugin: list[Any]
) -> None:
    applied.clear()
    await SQLiteStore(tmp_path / "bc.db").close()
    store = SQLiteStore(tmp_path / "bc.db")
    try:
        names = [row[0] for row in store.db.execute("SELECT name FROM _migrations ORDER BY rowid")]
        assert names[:2] == ["m001_initial", "m002_visible_index_and_orphan_edits"]
        assert "demo_m001_notes" in names and applied == ["demo_m001_notes"]
        store.db.execute("INSERT INTO demo_notes (text) VALUES ('works')")
    finally:
        await store.close()


async def test_a_plugin_migration_may_not_reuse_a_taken_name(
    tmp_path: Path, migrations_plugin: list[Any]
) -> None:
    migrations_plugin.append(m001_initial)
    with pytest.raises(PluginError, match="registers migration 'm001_initial', a name already"):
        SQLiteStore(tmp_path / "bc.db")


def test_a_plugin_table_is_accepted_only_for_an_installed_plugin() -> None:
    config = parse_config({"owner": {"account": "webchat"}}, check_plugins=False)
    assert config.sections == {"owner": {"account": "webchat"}}
    with pytest.raises(ConfigError, match=r"nosuch: unknown section .*owner"):
        parse_config({"nosuch": {}}, check_plugins=False)
    with pytest.raises(ConfigError, match="owner: expected a table"):
        parse_config({"owner": "yes"}, check_plugins=False)


class Recorder:
    def __init__(self) -> None:
        self.runs: list[str] = []
        self.events: list[str] = []
        self.lifecycle: list[str] = []

    async def agent(self, run: Run) -> None:
        assert run.trigger is not None
        self.runs.append(run.trigger.text)

    async def route(self, event: Event) -> RouteVerdict:
        self.events.append(event.text)
        if event.text.startswith("crash"):
            raise RuntimeError("router bug")
        if event.text.startswith("take"):
            return "routed"
        if event.text.startswith("refuse"):
            return "held"
        return None

    async def start(self, board: Switchboard) -> None:
        self.lifecycle.append(f"start {sorted(board.accounts)}")

    async def stop(self) -> None:
        self.lifecycle.append("stop")


async def test_inbound_routers_take_refuse_or_pass_before_the_policy(tmp_path: Path) -> None:
    channel = FakeChannel()
    recorder = Recorder()
    board = Switchboard(SQLiteStore(tmp_path / "bc.db"))
    board.add_account(channel.adapter("fake"), Binding(recorder.agent, respond="always"))
    board.add_inbound_router("fake", recorder.route)
    board.add_service(recorder)
    with pytest.raises(Exception, match="unknown account 'nope'"):
        board.add_inbound_router("nope", recorder.route)
    async with board:
        assert recorder.lifecycle == ["start ['fake']"]
        taken = await board.ingest("fake", channel.platform.make_message("take this"))
        refused = await board.ingest("fake", channel.platform.make_message("refuse this"))
        passed = await board.ingest("fake", channel.platform.make_message("ordinary"))
        with pytest.raises(RuntimeError, match="router bug"):
            await board.ingest("fake", channel.platform.make_message("crash now"))
        await board.wait_idle()
        assert (taken.status, refused.status, passed.status) == ("stored", "held", "stored")
        assert recorder.runs == ["ordinary"]
        rows = await board.store.window(taken.conversation_id or 0, 10)
        assert [m.text for m in rows] == ["take this", "ordinary"]
    assert recorder.lifecycle == ["start ['fake']", "stop"]
    assert recorder.events == ["take this", "refuse this", "ordinary", "crash now"]

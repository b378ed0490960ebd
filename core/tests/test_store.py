"""The SQLite store passes the store contract, and keeps its promises across reopening."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from backchannel.errors import StoreError
from backchannel.store import Inbound, SQLiteStore, Store
from backchannel.testing import StoreContract
from backchannel.testing.store_contract import make_event


class TestSQLiteStoreContract(StoreContract):
    pass


async def test_store_directory_is_private(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "deep" / "state" / "bc.db")
    await store.close()
    mode = stat.S_IMODE(os.stat(tmp_path / "deep" / "state").st_mode)
    assert mode == 0o700


async def test_dedupe_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"
    store = SQLiteStore(path)
    await store.append_inbound([Inbound(make_event("e1", "once"))])
    await store.close()
    store = SQLiteStore(path)
    (result,) = await store.append_inbound([Inbound(make_event("e1", "once"))])
    assert result.status == "duplicate"
    (after,) = await store.append_inbound([Inbound(make_event("e2", "next"))])
    assert after.seq == 2
    await store.close()


async def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"
    await SQLiteStore(path).close()
    store = SQLiteStore(path)
    from backchannel.store.migrations import MIGRATIONS, plugin_migrations

    rows = [row[0] for row in store.db.execute("SELECT name FROM _migrations ORDER BY rowid")]
    expected = [migration.__name__ for migration in [*MIGRATIONS, *plugin_migrations()]]
    assert rows == expected
    await store.close()


async def test_a_failed_batch_commits_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    bad = make_event("e2")
    object.__setattr__(bad, "text", object())  # not storable: the batch must roll back
    try:
        await store.append_inbound([Inbound(make_event("e1"), state={"k": "v"}), Inbound(bad)])
    except Exception:
        pass
    else:
        raise AssertionError("the broken batch was accepted")
    assert not await store.is_known("acct", "e1")
    assert await store.get_state("acct", "k") is None
    (result,) = await store.append_inbound([Inbound(make_event("e1"))])
    assert (result.status, result.seq) == ("stored", 1)
    await store.close()


async def test_two_connections_to_one_file_never_reuse_a_seq(tmp_path: Path) -> None:
    from backchannel.model import Outbound, Sender

    path = tmp_path / "bc.db"
    serving = SQLiteStore(path)  # the running switchboard
    operator = SQLiteStore(path)  # e.g. `backchannel send` in another process
    (first,) = await serving.append_inbound([Inbound(make_event("e1"))])
    conversation = await operator.conversation(first.conversation_id)
    entry = await operator.record_outbound(
        conversation.id, Outbound(conversation.address, "from the operator"), Sender("op")
    )
    assert entry.message_seq == 2
    (second,) = await serving.append_inbound([Inbound(make_event("e2"))])
    assert second.seq == 3
    await serving.close()
    await operator.close()


async def test_windows_skip_held_rows_through_an_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    plan = " ".join(
        str(row[-1])
        for row in store.db.execute(
            "EXPLAIN QUERY PLAN SELECT seq FROM messages WHERE conversation_id = 1"
            " AND seq <= 99 AND held = 0 ORDER BY seq DESC LIMIT 50"
        )
    )
    assert "messages_visible" in plan, plan
    await store.close()


class TestPostgresStoreContract(StoreContract):
    """The same contract on PostgreSQL (a fresh database per test on a throwaway cluster)."""

    @pytest.fixture
    async def store(self, postgres_url: str) -> AsyncIterator[Store]:
        from backchannel.store.postgres import PostgresStore

        opened = PostgresStore(postgres_url)
        yield opened
        await opened.close()


async def test_a_store_made_before_m008_loses_two_indexes_and_keeps_the_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bc.db"
    store = SQLiteStore(path)
    # as a store migrated before m008 was: the indexes, and no record of m008
    store.db.execute("CREATE INDEX conversations_active ON conversations (active_at DESC)")
    store.db.execute(
        "CREATE INDEX conversations_unhandled ON conversations (trigger_seq)"
        " WHERE trigger_seq > handled_seq"
    )
    store.db.execute("DELETE FROM _migrations WHERE name = 'm008_fewer_conversation_indexes'")
    for number, chat in enumerate(["a", "b", "c"]):
        await store.append_inbound(
            [Inbound(make_event(f"e{number}", chat=chat, sent_at=100.0 + number))]
        )
    await store.close()
    store = SQLiteStore(path)
    indexes = {row[0] for row in store.db.execute("SELECT name FROM sqlite_master")}
    assert "conversations_active" not in indexes
    # a message in "a" makes it the most recent again, without the index
    await store.append_inbound([Inbound(make_event("e9", chat="a", sent_at=200.0))])
    assert [c.address.chat for c in await store.conversations()] == ["a", "c", "b"]
    # what is owed a run is still found (in order of activity), and handling clears it
    await store.append_inbound([Inbound(make_event("e10", chat="b", sent_at=150.0), triggers=True)])
    owed = await store.unhandled()
    assert [c.address.chat for c in owed] == ["b"]
    await store.mark_handled(owed[0].id, owed[0].trigger_seq)
    assert await store.unhandled() == []
    await store.close()


async def test_the_stored_inbound_row_is_the_one_both_stores_build(tmp_path: Path) -> None:
    """New inbound rows as stored: counters, reply seq, held and triggers, as rows.py builds them."""
    from backchannel.model import Attachment, Sender
    from backchannel.store.rows import MESSAGE_COLUMNS, inbound_message_row

    store = SQLiteStore(tmp_path / "bc.db")
    first = make_event("m1", "first", sent_at=10.0)
    reply = make_event(
        "m2",
        "second",
        sent_at=11.0,
        reply_to="m1",
        mentions_me=True,
        sender=Sender("u9", "Bot Nine", "nine", is_bot=True),
        attachments=(Attachment("photo", "p.jpg", "image/jpeg", 12, "ref-1"),),
        meta={"chat_type": "group", "n": 1},
    )
    await store.append_inbound([Inbound(first, triggers=True)])
    await store.append_inbound([Inbound(reply, held=True, triggers=True)])
    stored = list(store.db.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY seq"))
    conversation_id = stored[0][0]
    assert stored == [
        inbound_message_row(conversation_id, 1, first, None, 0, 1),
        inbound_message_row(conversation_id, 2, reply, 1, 1, 0),
    ]
    await store.close()


def test_a_file_that_is_not_a_store_is_one_line_naming_it(tmp_path: Path) -> None:
    """A path typed wrong (the config instead of the store, say): one line saying what and
    where, never a traceback from a pragma, and the file is left as it was."""
    from backchannel.cli import main
    from click.testing import CliRunner

    wrong = tmp_path / "bot.toml"
    wrong.write_text("[store]\npath = 'x.db'\n" * 200, encoding="utf-8")
    before = wrong.read_bytes()
    with pytest.raises(
        StoreError, match=r"^cannot open store .*bot\.toml: the file is not an SQLite"
    ):
        SQLiteStore(wrong)
    result = CliRunner().invoke(main, ["conversations", "--store", str(wrong)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: cannot open store {wrong}: the file is not an SQLite database (is the path right?)"
    ]
    assert wrong.read_bytes() == before


async def test_a_store_that_cannot_be_asked_is_not_a_conversation_not_found() -> None:
    # `show 1` on a PostgreSQL server that is away said "no conversation with id 1"
    from backchannel.store.base import find_by_reference

    class Away:
        async def conversation(self, conversation_id: int) -> None:
            raise StoreError("could not reach PostgreSQL at db.example:5432: connection refused")

    with pytest.raises(StoreError, match="connection refused"):
        await find_by_reference(Away(), "1")  # type: ignore[arg-type]

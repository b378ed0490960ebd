"""Reads that stay bounded on a big store, and still answer the same.

The search index catches up in bounded chunks (every message indexed once across
chunk boundaries, a stopped catch-up taken up again), a query word is looked for
once however often it is typed, a chat-limited scope is one search, participants
are counted over a bounded window, `show` streams a long transcript. (How long
these take on a million messages is measured by scripts, not here.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from backchannel.cli import main
from backchannel.model import Outbound, Sender, to_json
from backchannel.orchestration.scope import AccountScope, AgentScope
from backchannel.orchestration.views import (
    INCOMPLETE_NOTICE,
    format_conversations,
    list_conversations,
    read_conversation,
)
from backchannel.render import conversation_json
from backchannel.store import Inbound, SQLiteStore, Store
from backchannel.store import sqlite as sqlite_module
from backchannel.testing.store_contract import BOB, make_event
from click.testing import CliRunner

ME = Sender("me", "Agent", is_bot=True)


def indexed_words(store: SQLiteStore) -> dict[str, int]:
    """Return each word of the message index with the number of rows holding it."""
    db = store.db
    db.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.words USING fts5vocab(main, messages_fts, row)"
    )
    return {term: count for term, count in db.execute("SELECT term, doc FROM temp.words")}


async def fill(store: Store, count: int, *, chats: int = 3) -> None:
    """Append `count` messages, each with its own word w<n>x; every 7th is held."""
    await store.append_inbound(
        [
            Inbound(
                make_event(f"e{n}", f"w{n}x common", chat=f"c{n % chats}",
                           sender=BOB if n % 7 == 0 else Sender("alice", "Alice")),
                held=n % 7 == 0,
            )
            for n in range(count)
        ]
    )  # fmt: skip


# the SQLite index's catch-up -------------------------------------------------------------------
async def test_a_bounded_catch_up_indexes_every_message_once_across_searches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "INDEX_CHUNK_ROWS", 4)
    monkeypatch.setattr(sqlite_module, "INDEX_SECONDS", 0.0)  # one chunk a search
    store = SQLiteStore(tmp_path / "bc.db")
    await fill(store, 30)
    # another process writes between two searches: its rows are taken up too
    other = SQLiteStore(tmp_path / "bc.db")
    searches = 0
    while True:
        await store.search_conversations(query="zzz")
        searches += 1
        if searches == 3:
            await other.append_inbound([Inbound(make_event("late", "w30x common", chat="c9"))])
        if store.search_index_complete:
            break
        assert searches < 50
    assert searches == 8  # 31 rows, 4 a chunk
    words = indexed_words(store)
    assert words["common"] == 31 - len(range(0, 30, 7))  # no held row, none twice
    assert {f"w{n}x" for n in range(31) if n % 7} <= set(words)
    assert not {f"w{n}x" for n in range(0, 30, 7)} & set(words)
    found = await store.search_conversations(query="w30x")
    assert [c.address.chat for c in found] == ["c9"]
    await other.close()
    await store.close()


@pytest.fixture
async def behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SQLiteStore]:
    """A store of 12 messages whose search index catches up 5 rows a search (3 searches)."""
    monkeypatch.setattr(sqlite_module, "INDEX_CHUNK_ROWS", 5)
    monkeypatch.setattr(sqlite_module, "INDEX_SECONDS", 0.0)
    store = SQLiteStore(tmp_path / "bc.db")
    await fill(store, 12, chats=1)
    yield store
    await store.close()


async def test_an_incomplete_search_says_so_and_the_next_goes_on(behind: SQLiteStore) -> None:
    store = behind
    scope = AgentScope("a", {"acct": AccountScope("fake")})
    first = await list_conversations(store, accounts=scope, query="w11x")
    assert first == [] and not store.search_index_complete
    text = format_conversations(first, query="w11x")
    assert INCOMPLETE_NOTICE in text and "no conversation of yours matches" in text
    await store.search_conversations(query="zzz")
    found = await list_conversations(store, accounts=scope, query="w11x")
    assert [s.key for s in found] == ["acct/c0"]
    assert INCOMPLETE_NOTICE not in format_conversations(found, query="w11x")


async def test_a_catch_up_stopped_between_chunks_is_taken_up_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "INDEX_CHUNK_ROWS", 3)
    monkeypatch.setattr(sqlite_module, "INDEX_PAUSE_SECONDS", 0.0)
    store = SQLiteStore(tmp_path / "bc.db")
    await fill(store, 20)
    chunks = 0
    sleep = asyncio.sleep

    async def stop_after_two(delay: float) -> None:
        nonlocal chunks
        chunks += 1
        if chunks == 2:
            raise asyncio.CancelledError  # as if the search's task was cancelled there
        await sleep(delay)

    monkeypatch.setattr(sqlite_module.asyncio, "sleep", stop_after_two)
    with pytest.raises(asyncio.CancelledError):
        await store.search_conversations(query="zzz")
    progress = store.db.execute("SELECT indexed_rowid FROM messages_fts_progress").fetchall()
    assert progress == [(6,)]  # two chunks committed
    monkeypatch.setattr(sqlite_module.asyncio, "sleep", sleep)
    await store.search_conversations(query="zzz")
    assert store.search_index_complete
    words = indexed_words(store)
    assert words["common"] == 20 - len(range(0, 20, 7))
    await store.close()


# one subquery a distinct word ------------------------------------------------------------------
async def test_a_repeated_word_is_one_subquery(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    await fill(store, 5)
    seen: list[str] = []

    def trace(cursor: Any, sql: str, bindings: Any) -> bool:
        seen.append(sql)
        return True

    store.db.exec_trace = trace
    found = await store.search_conversations(query="common " * 1000 + "COMMON Common w1x")
    store.db.exec_trace = None
    (select,) = [sql for sql in seen if "FROM conversations" in sql]
    assert select.count("names_fts MATCH") == 2  # "common", "w1x"
    assert [c.address.chat for c in found] == ["c1"]
    await store.close()


# participants -----------------------------------------------------------------------------------
async def test_participants_read_a_bounded_window_of_a_long_conversation(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    old, new = Sender("old", "Old Timer"), Sender("new", "Newcomer")
    await store.append_inbound(
        [Inbound(make_event(f"o{n}", chat="g", sender=old)) for n in range(1500)]
    )
    await store.append_inbound(
        [Inbound(make_event(f"n{n}", chat="g", sender=new)) for n in range(600)]
    )
    (conversation,) = await store.conversations()
    people = await store.participants(conversation.id)
    assert [(p.sender.id, p.message_count, p.first_seq, p.last_seq) for p in people] == [
        ("new", 600, 1501, 2100),
        ("old", 400, 1101, 1500),
    ]
    await store.close()


# chat-limited scopes ----------------------------------------------------------------------------
class CountingStore:
    """A store seen through its searches: how many, with which arguments."""

    def __init__(self, store: Store, *, chats: bool):
        self.store = store
        self.calls: list[dict[str, Any]] = []
        if not chats:
            self.searches_chats = False

    async def search_conversations(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return await self.store.search_conversations(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.mark.parametrize("store_limits_chats", [True, False])
async def test_a_chat_limited_scope_lists_the_same_in_one_search(
    tmp_path: Path, store_limits_chats: bool
) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    await store.append_inbound(
        [Inbound(make_event(f"e{n}", "topic", chat=f"c{n}", sent_at=1000.0 + n)) for n in range(60)]
        + [Inbound(make_event("x1", "topic", chat="x", account="other", sent_at=5.0))]
    )
    scope = AgentScope(
        "a",
        {
            "acct": AccountScope("fake", chats=frozenset({"c1", "c2", "c50"})),
            "other": AccountScope("fake", excluded=frozenset({"y"})),
        },
    )
    counting = CountingStore(store, chats=store_limits_chats)
    found = await list_conversations(counting, accounts=scope, query="topic", limit=3)  # type: ignore[arg-type]
    assert [s.key for s in found] == ["acct/c50", "acct/c2", "acct/c1"]
    if store_limits_chats:
        assert len(counting.calls) == 1
        assert counting.calls[0]["chats"] == {"acct": frozenset({"c1", "c2", "c50"})}
        assert counting.calls[0]["excluded_chats"] == {"other": frozenset({"y"})}
    else:
        assert len(counting.calls) > 1  # fetched more and more, then filtered
    await store.close()


# read_conversation's paging ---------------------------------------------------------------------
async def test_read_conversation_takes_the_lowest_seq_as_before(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    (first,) = await store.append_inbound([Inbound(make_event("e1", "hello"))])
    text = await read_conversation(store, first.conversation_id, before=-(2**63))
    assert text.endswith("has no messages before #-9223372036854775808")
    text = await read_conversation(store, first.conversation_id, before=2**63)
    assert "hello" in text
    await store.close()


# show, streamed ---------------------------------------------------------------------------------
async def _transcript(path: Path) -> int:
    store = SQLiteStore(path)
    await store.append_inbound(
        [
            Inbound(make_event(f"e{n}", f"line {n}", chat="long", sender=BOB), held=n % 4 == 3)
            for n in range(23)
        ]
    )
    (conversation,) = await store.conversations()
    await store.record_outbound(conversation.id, Outbound(conversation.address, "ours"), ME)
    await store.close()
    return conversation.id


async def _expected(path: Path, limit: int) -> dict[str, Any]:
    store = SQLiteStore(path)
    (conversation,) = await store.conversations()
    messages = await store.window(conversation.id, limit)
    await store.close()
    return {
        "conversation": conversation_json(conversation),
        "messages": [to_json(m) for m in messages],
        "failed_runs": [],
    }


@pytest.mark.parametrize("limit", ["1000000", "5", "19", "18", "1"])
def test_show_streams_long_transcripts_in_pages_with_the_same_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    import backchannel.cli as cli_module

    path = tmp_path / "bc.db"
    asyncio.run(_transcript(path))
    whole = CliRunner().invoke(main, ["show", "acct/long", "--store", str(path), "--limit", limit])
    whole_json = CliRunner().invoke(
        main, ["show", "acct/long", "--json", "--store", str(path), "--limit", limit]
    )
    monkeypatch.setattr(cli_module, "SHOW_PAGE", 2)
    paged = CliRunner().invoke(main, ["show", "acct/long", "--store", str(path), "--limit", limit])
    paged_json = CliRunner().invoke(
        main, ["show", "acct/long", "--json", "--store", str(path), "--limit", limit]
    )
    assert paged.exit_code == 0 == paged_json.exit_code, paged.output + paged_json.output
    expected = asyncio.run(_expected(path, int(limit)))
    assert paged_json.stdout == json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
    assert whole_json.stdout == paged_json.stdout
    assert paged.stdout == whole.stdout
    lines = [line for line in paged.stdout.splitlines() if line.startswith("#")]
    assert len(lines) == min(int(limit), 19)  # 23 in, 5 held, 1 ours
    assert lines[-1].startswith("#24")


# PostgreSQL -------------------------------------------------------------------------------------
async def test_postgres_catch_up_is_bounded_per_search_and_indexes_each_message_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg
    from backchannel.store import postgres as postgres_module
    from backchannel.store import postgres_migrations
    from backchannel.store.postgres import PostgresStore

    monkeypatch.setattr(postgres_migrations, "CATCH_UP_MESSAGES", 4)
    monkeypatch.setattr(postgres_migrations, "CATCH_UP_STEP", 6)
    monkeypatch.setattr(postgres_module, "CATCH_UP_SECONDS", 0.0)  # one step a search
    store = PostgresStore(postgres_url)
    await fill(store, 30)  # 10 messages in each of 3 conversations
    steps = []
    execute = psycopg.AsyncConnection.execute

    async def counting(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if query == postgres_migrations.CATCH_UP:
            steps.append(dict(params))
        return await execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", counting)
    searches = 0
    while True:
        await store.search_conversations(query="zzz")
        searches += 1
        if store.search_index_complete:
            break
        assert searches < 50
    # 4 messages of a conversation a step, and a next conversation only while the step's
    # seqs stay under 6: 4+4, 4+4, 2+2+4, 4, 2, then a step that finds none left
    assert len(steps) == searches == 6
    async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
        cursor = await connection.execute(
            "SELECT COUNT(*), COUNT(DISTINCT (conversation_id, seq)) FROM message_words"
        )
        assert await cursor.fetchone() == (25, 25)  # the 30 less the 5 held, once each
    for n in range(30):
        found = await store.search_conversations(query=f"w{n}x")
        assert [c.address.chat for c in found] == ([] if n % 7 == 0 else [f"c{n % 3}"]), n
    await store.close()


async def test_postgres_runs_value_dependent_reads_unprepared(postgres_url: str) -> None:
    # psycopg prepares a statement after 5 runs on a connection, and PostgreSQL may then
    # plan it once for every value: participants of a big group read it all per person
    from backchannel.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, pool_size=1)
    await fill(store, 30)
    (conversation, *_) = await store.conversations()
    for _ in range(12):
        await store.participants(conversation.id)
        await store.count_visible(conversation.id, 3)
        await store.search_conversations(query="common")
    pool = await store.pool()
    async with pool.connection() as connection:
        cursor = await connection.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in await cursor.fetchall()]
    assert not [sql for sql in prepared if "JOIN participants p" in sql]
    assert not [sql for sql in prepared if "c.last_seq / 2" in sql]
    assert not [sql for sql in prepared if "to_tsquery" in sql]
    await store.close()


async def test_postgres_searches_a_repeated_word_once(postgres_url: str) -> None:
    from backchannel.store.postgres import PostgresStore

    store = PostgresStore(postgres_url)
    await fill(store, 5)
    seen: list[str] = []
    fetchall = store._fetchall

    async def recording(sql: str, params: Any = (), **kwargs: Any) -> Any:
        seen.append(sql)
        return await fetchall(sql, params, **kwargs)

    store._fetchall = recording  # type: ignore[method-assign]
    found = await store.search_conversations(query="common " * 1000 + "COMMON Common w1x")
    (select,) = [sql for sql in seen if "FROM conversations c" in sql]
    assert select.count("FROM message_words w") == 2  # "common", "w1x"
    assert [c.address.chat for c in found] == ["c1"]
    await store.close()


async def test_two_searches_at_once_each_read_their_own_completeness(
    behind: SQLiteStore,
) -> None:
    # the flag was one store attribute: a search that caught up could hide, from another
    # search still in flight, that its own answer came from an index not caught up
    store = behind
    first_done, second_done = asyncio.Event(), asyncio.Event()

    async def early() -> bool:
        await store.search_conversations(query="w11x")  # one chunk of three: not caught up
        first_done.set()
        await second_done.wait()
        return store.search_index_complete

    async def late() -> bool:
        await first_done.wait()
        while True:  # goes on until the index has caught up
            await store.search_conversations(query="w11x")
            if store.search_index_complete:
                break
        second_done.set()
        return store.search_index_complete

    assert await asyncio.gather(early(), late()) == [False, True]

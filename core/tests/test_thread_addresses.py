"""m007 / pg007: Discord threads stored as their own chat move to chat=<parent>, thread=<id>.

Each store is filled with the old shape through the store API (what the old
Discord adapter wrote), the migration is forgotten, and the store is opened
again, as an upgrade does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
from backchannel.model import Address, Outbound, Receipt, Sender
from backchannel.store import Inbound, SQLiteStore, Store
from backchannel.store.postgres import PostgresStore
from backchannel.store.thread_addresses import parent_in, without_parent
from backchannel.testing.store_contract import make_event

GUILD, PARENT, THREAD, ORPHAN = "900", "100", "300", "400"
ME = Sender("bot", "Bot", is_bot=True)


async def fill_with_the_old_shape(store: Store) -> int:
    """A Discord thread at chat=<thread id> (two messages, a reply, a run), and neighbours."""
    old_meta = {"guild_id": GUILD, "parent_channel_id": PARENT}
    await store.append_inbound(
        [
            Inbound(
                make_event(
                    "m1",
                    "first",
                    account="dc",
                    chat=THREAD,
                    meta=old_meta,
                    conversation_kind="thread",
                )
            ),
            Inbound(
                make_event(
                    "m2",
                    "second",
                    account="dc",
                    chat=THREAD,
                    meta=old_meta,
                    conversation_kind="thread",
                )
            ),
            # no parent recorded anywhere: stays where it is
            Inbound(
                make_event("o1", "orphan", account="dc", chat=ORPHAN, conversation_kind="thread")
            ),
            # already the one shape (Slack, Telegram): untouched
            Inbound(
                make_event(
                    "s1",
                    "slack",
                    account="sl",
                    chat="C1",
                    thread="1700.1",
                    conversation_kind="thread",
                )
            ),
        ]
    )
    old = await store.find_conversation(Address("dc", THREAD))
    assert old is not None
    run_id = await store.begin_run(old.id, 2, 2)
    entry = await store.record_outbound(old.id, Outbound(old.address, "reply"), ME, run_id)
    await store.mark_sent(entry.id, Receipt("m3", ("m3",)))
    await store.finish_run(run_id, "done")
    return old.id


async def check_the_move(store: Store, old_id: int) -> None:
    moved = await store.find_conversation(Address("dc", PARENT, THREAD))
    assert moved is not None and moved.id == old_id
    assert (moved.kind, moved.address.key) == ("thread", f"dc/{PARENT}/{THREAD}")
    assert await store.find_conversation(Address("dc", THREAD)) is None
    messages = await store.window(old_id, 10)
    assert [m.text for m in messages] == ["first", "second", "reply"]
    assert [dict(m.meta) for m in messages[:2]] == [{"guild_id": GUILD}] * 2
    assert [run.status for run in await store.runs(old_id)] == ["done"]
    assert [e.conversation_id for e in await store.outbox(status="sent")] == [old_id]
    orphan = await store.find_conversation(Address("dc", ORPHAN))
    assert orphan is not None and orphan.kind == "thread"
    assert await store.find_conversation(Address("sl", "C1", "1700.1")) is not None
    # what the adapter sends now lands in the same conversation, next in line
    new_shape = make_event(
        "m4", "third", account="dc", chat=PARENT, thread=THREAD, conversation_kind="thread"
    )
    (appended,) = await store.append_inbound([Inbound(new_shape)])
    assert (appended.conversation_id, appended.seq) == (old_id, 4)
    redelivered = make_event(
        "m1", "first", account="dc", chat=PARENT, thread=THREAD, conversation_kind="thread"
    )
    (again,) = await store.append_inbound([Inbound(redelivered)])
    assert again.status == "duplicate"


async def upgrade(
    open_store: Callable[[], Store], forget: Callable[[Store], Awaitable[None]]
) -> None:
    store = open_store()
    old_id = await fill_with_the_old_shape(store)
    await forget(store)
    await store.close()
    store = open_store()
    try:
        await check_the_move(store, old_id)
    finally:
        await store.close()


async def test_sqlite_upgrade_moves_discord_threads_under_their_parent(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"

    async def forget(store: Store) -> None:
        assert isinstance(store, SQLiteStore)
        store.db.execute("DELETE FROM _migrations WHERE name = 'm007_thread_addresses'")

    await upgrade(lambda: SQLiteStore(path), forget)


async def test_postgres_upgrade_moves_discord_threads_under_their_parent(
    postgres_url: str,
) -> None:
    async def forget(store: Store) -> None:
        async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
            await connection.execute(
                "DELETE FROM _migrations WHERE name = 'pg007_thread_addresses'"
            )

    await upgrade(lambda: PostgresStore(postgres_url), forget)


def test_the_parent_is_read_from_any_meta_and_dropped_alone() -> None:
    assert parent_in([None, "{}", "not json", '{"parent_channel_id": "12"}']) == "12"
    assert parent_in(['{"parent_channel_id": "x"}', '{"parent_channel_id": true}']) is None
    assert without_parent('{"parent_channel_id": "12", "guild_id": "9"}') == '{"guild_id": "9"}'
    assert without_parent('{"parent_channel_id": "12"}') is None
    assert without_parent("not json") == "not json"

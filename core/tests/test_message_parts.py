"""m013 / pg014: the parts of split messages stored before the table existed are found."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
from backchannel.model import Outbound, Receipt, Sender
from backchannel.store import Inbound, SQLiteStore, Store
from backchannel.store.postgres import PostgresStore
from backchannel.testing.store_contract import make_event

ME = Sender("bot", "Bot", is_bot=True)


async def upgrade(
    open_store: Callable[[], Store], forget: Callable[[Store], Awaitable[None]]
) -> None:
    """Send a split message, forget the parts table as a store from before it would, reopen:
    a reply to its second part and a reaction to its third find it."""
    store = open_store()
    (first,) = await store.append_inbound([Inbound(make_event("e1", "question"))])
    conversation = await store.conversation(first.conversation_id)
    entry = await store.record_outbound(conversation.id, Outbound(conversation.address, "long"), ME)
    await store.mark_sent(entry.id, Receipt("p-1", ("p-1", "p-2", "p-3")))
    await forget(store)
    await store.close()
    store = open_store()
    try:
        reply, _ = await store.append_inbound(
            [
                Inbound(make_event("e2", "on part two", reply_to="p-2")),
                Inbound(make_event("r1", "👍", kind="reaction", message_id="p-3")),
            ]
        )
        replied = await store.message(conversation.id, reply.seq or 0)
        assert replied is not None and replied.reply_to_seq == entry.message_seq
        ours = await store.message(conversation.id, entry.message_seq or 0)
        assert ours is not None and ours.reactions == (("Alice", "👍"),)
    finally:
        await store.close()


async def forget_sqlite(store: Store) -> None:
    """Make `store` one from before m013: no parts table, the migration not recorded."""
    assert isinstance(store, SQLiteStore)
    store.db.execute("DROP TABLE message_parts")
    store.db.execute("DELETE FROM _migrations WHERE name = 'm013_message_parts'")


def forget_postgres(url: str) -> Callable[[Store], Awaitable[None]]:
    """The same for the PostgreSQL store at `url` (pg014)."""

    async def forget(store: Store) -> None:
        async with await psycopg.AsyncConnection.connect(url) as connection:
            await connection.execute("DROP TABLE message_parts")
            await connection.execute("DELETE FROM _migrations WHERE name = 'pg014_message_parts'")

    return forget


async def test_sqlite_upgrade_fills_the_parts_of_messages_already_sent(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"
    await upgrade(lambda: SQLiteStore(path), forget_sqlite)


async def test_postgres_upgrade_fills_the_parts_of_messages_already_sent(
    postgres_url: str,
) -> None:
    await upgrade(lambda: PostgresStore(postgres_url), forget_postgres(postgres_url))


#: meta no code of ours writes, found on a row of ours: the backfill passes over what is odd
ODD_META = [
    '{"part_ids": {"a": "x"}}',
    '{"part_ids": "p0"}',
    '{"part_ids": ["p1", null, "p3"]}',
    '{"part_ids": ["q1", ["q2"], 7, "q4"]}',
    '{"part_ids": [1, 2]} trailing',
]


async def odd_upgrade(
    open_store: Callable[[], Store],
    set_meta: Callable[[int, int, str], Awaitable[None]],
    forget: Callable[[Store], Awaitable[None]],
) -> None:
    store = open_store()
    (first,) = await store.append_inbound([Inbound(make_event("e1", "question"))])
    conversation = await store.conversation(first.conversation_id)
    seqs = []
    for n in range(len(ODD_META)):
        entry = await store.record_outbound(
            conversation.id, Outbound(conversation.address, f"t{n}"), ME
        )
        await store.mark_sent(entry.id, Receipt(f"first-{n}"))
        seqs.append(entry.message_seq or 0)
    await forget(store)
    await store.close()
    for seq, meta in zip(seqs, ODD_META, strict=True):
        await set_meta(conversation.id, seq, meta)
    store = open_store()  # the migration runs: the store opens, the good ids are found
    try:
        replies = await store.append_inbound(
            [
                Inbound(make_event("r1", "to p3", reply_to="p3")),
                Inbound(make_event("r2", "to q4", reply_to="q4")),
            ]
        )
        found = [await store.message(conversation.id, r.seq or 0) for r in replies]
        assert [m.reply_to_seq for m in found if m is not None] == [seqs[2], seqs[3]]
    finally:
        await store.close()


async def test_sqlite_upgrade_passes_over_odd_meta(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"

    async def set_meta(conversation_id: int, seq: int, meta: str) -> None:
        import apsw  # the file as it is, not opened as a store (that would migrate it)

        db = apsw.Connection(str(path))
        try:
            db.execute(
                "UPDATE messages SET meta = ? WHERE conversation_id = ? AND seq = ?",
                (meta, conversation_id, seq),
            )
        finally:
            db.close()

    await odd_upgrade(lambda: SQLiteStore(path), set_meta, forget_sqlite)


async def test_postgres_upgrade_passes_over_odd_meta(postgres_url: str) -> None:
    async def set_meta(conversation_id: int, seq: int, meta: str) -> None:
        async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
            await connection.execute(
                "UPDATE messages SET meta = %s WHERE conversation_id = %s AND seq = %s",
                (meta, conversation_id, seq),
            )

    await odd_upgrade(lambda: PostgresStore(postgres_url), set_meta, forget_postgres(postgres_url))

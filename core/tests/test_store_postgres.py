"""PostgreSQL store promises beyond the shared contract: several processes, migrations once."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from backchannel.errors import LeaseLost, StoreError
from backchannel.model import Address, Conversation, Outbound, Receipt, Sender
from backchannel.store import Inbound
from backchannel.store.postgres import DB_NOW, PostgresStore
from backchannel.store.postgres_migrations import PG_MIGRATIONS
from backchannel.testing.store_contract import asked, make_event

CHILD = Path(__file__).with_name("pg_writer_child.py")


async def spawn_writer(url: str, *args: str) -> asyncio.subprocess.Process:
    """Start a writer and return it once it is connected (it then waits for a line)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        url,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    assert line == b"ready\n", line
    return process


async def test_concurrent_writers_in_several_processes_keep_seqs_gapless_and_events_once(
    postgres_url: str,
) -> None:
    # three processes, each 200 events in batches of 10 over 4 chats, each overlapping the
    # next one's ids by half (a redelivery to another worker), each replying after each batch
    writers = await asyncio.gather(
        *(
            spawn_writer(
                postgres_url, "--first", str(100 * n), "--count", "200", "--worker", f"w{n}"
            )
            for n in range(3)
        )
    )
    for writer in writers:  # all three are connected: start them together
        assert writer.stdin is not None
        writer.stdin.write(b"go\n")
        await writer.stdin.drain()
    for writer in writers:
        assert writer.stdout is not None
        assert await asyncio.wait_for(writer.stdout.readline(), 120) == b"done\n"
        assert await writer.wait() == 0
    distinct_events = 100 * 2 + 200  # ids 0..399
    replies = 3 * 20
    async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
        cursor = await connection.execute("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM events")
        assert await cursor.fetchone() == (distinct_events, distinct_events)
        cursor = await connection.execute(
            "SELECT COUNT(*) FILTER (WHERE direction = 'in'),"
            " COUNT(*) FILTER (WHERE direction = 'out') FROM messages"
        )
        assert await cursor.fetchone() == (distinct_events, replies)
        cursor = await connection.execute(
            "SELECT c.id, c.last_seq, COUNT(m.seq), MIN(m.seq), MAX(m.seq)"
            " FROM conversations c JOIN messages m ON m.conversation_id = c.id GROUP BY c.id"
        )
        rows = await cursor.fetchall()
        assert len(rows) == 4
        for conversation_id, last_seq, count, lowest, highest in rows:
            assert (count, lowest, highest) == (last_seq, 1, last_seq), conversation_id
        cursor = await connection.execute("SELECT COUNT(*) FROM outbox WHERE worker IS NOT NULL")
        assert await cursor.fetchone() == (replies,)


async def test_two_stores_starting_together_migrate_once(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    await asyncio.gather(*(store.pool() for store in stores))
    async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
        cursor = await connection.execute("SELECT name FROM _migrations ORDER BY name")
        assert [row[0] for row in await cursor.fetchall()] == [m.__name__ for m in PG_MIGRATIONS]
    for store in stores:
        await store.close()


async def test_recovery_is_per_worker(postgres_url: str) -> None:
    from backchannel.model import Address, Outbound, Sender

    me = Sender("agent", "Agent", is_bot=True)
    alive = PostgresStore(postgres_url, worker="alive")
    dead = PostgresStore(postgres_url, worker="dead")
    conversation = await alive.ensure_conversation(Address("acct", "c1"))
    mine = await alive.record_outbound(conversation.id, Outbound(conversation.address, "a"), me)
    theirs = await dead.record_outbound(conversation.id, Outbound(conversation.address, "b"), me)
    await dead.begin_run(conversation.id, 1, 1)
    recovered = await alive.recover_worker("dead")
    assert [entry.id for entry in recovered] == [theirs.id]
    assert [entry.id for entry in await alive.outbox(status="pending")] == [mine.id]
    assert [run.status for run in await alive.runs()] == ["interrupted"]
    await alive.close()
    await dead.close()


async def test_an_unreachable_server_is_one_clear_error_without_the_password() -> None:
    store = PostgresStore("postgresql://bc:hunter2@127.0.0.1:1/nowhere")
    with pytest.raises(StoreError) as raised:
        await store.is_known("acct", "e1")
    message = str(raised.value)
    assert "hunter2" not in message
    assert "postgresql://bc:***@127.0.0.1:1/nowhere" in message
    assert "check [store] url" in message
    await store.close()


def test_store_url_selects_postgres_and_its_password_stays_secret(tmp_path: Path) -> None:
    from backchannel.app import open_config_store
    from backchannel.config import load_config

    config_file = tmp_path / "bc.toml"
    config_file.write_text('[store]\nurl = "postgresql://bc:${PGPASS}@127.0.0.1:5432/bc"\n')
    config = load_config(config_file, environ={"PGPASS": "s3cret"}, check_plugins=False)
    assert config.store.url == "postgresql://bc:s3cret@127.0.0.1:5432/bc"
    assert config.store.location == "postgresql://bc:***@127.0.0.1:5432/bc"
    assert "s3cret" not in repr(config)
    store = open_config_store(config, worker="w1")
    assert isinstance(store, PostgresStore) and store.worker == "w1"
    assert "s3cret" not in repr(store)


def test_a_store_url_that_is_not_postgresql_is_one_clear_error(tmp_path: Path) -> None:
    from backchannel.config import load_config
    from backchannel.errors import ConfigError

    config_file = tmp_path / "bc.toml"
    config_file.write_text('[store]\nurl = "mysql://bc:pw@db/bc"\n')
    with pytest.raises(ConfigError, match=r"store\.url: expected a postgresql://") as raised:
        load_config(config_file, check_plugins=False)
    assert "pw@" not in str(raised.value)


async def test_a_run_whose_claim_another_worker_took_cannot_send(postgres_url: str) -> None:
    from backchannel.model import Address, Outbound, Sender

    me = Sender("agent", "Agent", is_bot=True)
    slow = PostgresStore(postgres_url, worker="slow")
    other = PostgresStore(postgres_url, worker="other")
    conversation = await slow.ensure_conversation(Address("acct", "c1"))
    assert await slow.claim_run(conversation.id, ttl=0.05)
    run_id = await slow.begin_run(conversation.id, 1, 1)
    await slow.record_outbound(conversation.id, Outbound(conversation.address, "a"), me, run_id)
    while not await other.claim_run(conversation.id, ttl=10):  # the slow one's claim lapses
        await asyncio.sleep(0.02)
    with pytest.raises(StoreError, match="no longer holds conversation"):
        await slow.record_outbound(conversation.id, Outbound(conversation.address, "b"), me, run_id)
    assert [e.text for e in await slow.outbox()] == ["a"]
    await slow.close()
    await other.close()


async def test_a_restarted_worker_does_not_bring_back_its_killed_lifes_run_claims(
    postgres_url: str,
) -> None:
    """w1 was killed while it ran a conversation; restarted under its name, its heartbeats
    must not renew that claim (its new life is not running it): w2 may run it."""
    from backchannel.model import Address

    first = PostgresStore(postgres_url, worker="w1")
    await first.register_worker("host", 1)
    conversation = await first.ensure_conversation(Address("acct", "c1"))
    assert await first.claim_run(conversation.id, ttl=30)
    await first.close()  # killed: the claim is never released

    again = PostgresStore(postgres_url, worker="w1")
    await again.register_worker("host", 2)
    await again.heartbeat(30)
    other = PostgresStore(postgres_url, worker="w2")
    await other.register_worker("host", 3)
    assert await other.claim_run(conversation.id, ttl=30)
    # and a claim that lapsed is not renewed by its holder's heartbeat
    lapsing = await other.ensure_conversation(Address("acct", "c2"))
    assert await again.claim_run(lapsing.id, ttl=0.01)
    await asyncio.sleep(0.2)  # twenty times its ttl: lapsed (the database's clock decides)
    await again.heartbeat(30)
    assert await other.claim_run(lapsing.id, ttl=30)
    for store in (again, other):
        await store.close()


async def test_a_stalled_run_cannot_send_after_another_run_answered_and_released(
    postgres_url: str,
) -> None:
    """The claim fence holds after the claim is gone, and against a restart under one name.

    A worker stalled past its claim (ttl already lapsed here: -1) wakes after another
    worker ran the conversation, answered and released the claim; and a worker
    restarted under the same name claims the conversation again while its stalled
    former process still has a run. Neither stalled run may record its send.
    """
    from backchannel.model import Address, Outbound, Sender

    me = Sender("agent", "Agent", is_bot=True)
    slow = PostgresStore(postgres_url, worker="slow")
    other = PostgresStore(postgres_url, worker="other")
    conversation = await slow.ensure_conversation(Address("acct", "c1"))
    address = conversation.address
    assert await slow.claim_run(conversation.id, ttl=-1)  # it stalls past its claim at once
    stalled = await slow.begin_run(conversation.id, 1, 1)
    assert await other.claim_run(conversation.id, ttl=10)
    answering = await other.begin_run(conversation.id, 1, 1)
    await other.record_outbound(conversation.id, Outbound(address, "answer"), me, answering)
    await other.finish_run(answering, "ok", None, 1, handled_seq=1)
    await other.release_run(conversation.id)
    with pytest.raises(StoreError, match="another run has answered it and released it"):
        await slow.record_outbound(conversation.id, Outbound(address, "again"), me, stalled)
    # the same name, restarted: its new run holds the claim; the old process's run does not
    restarted = PostgresStore(postgres_url, worker="slow")
    assert await restarted.claim_run(conversation.id, ttl=10)
    fresh = await restarted.begin_run(conversation.id, 2, 2)
    with pytest.raises(StoreError, match="holds it for another run"):
        await slow.record_outbound(conversation.id, Outbound(address, "again"), me, stalled)
    await restarted.record_outbound(conversation.id, Outbound(address, "fresh"), me, fresh)
    # a run's send elsewhere (a cross-conversation send, an ask) is fenced by the run's own
    # conversation's claim, not the target's (which no one claims)
    elsewhere = await restarted.ensure_conversation(Address("acct", "c2"))
    await restarted.record_outbound(elsewhere.id, Outbound(elsewhere.address, "hi"), me, fresh)
    with pytest.raises(StoreError, match="holds it for another run"):
        await slow.record_outbound(elsewhere.id, Outbound(elsewhere.address, "hi"), me, stalled)
    assert [e.text for e in await slow.outbox()] == ["hi", "fresh", "answer"]
    for store in (slow, other, restarted):
        await store.close()


async def test_reading_commands_work_on_a_postgresql_store(
    postgres_url: str, tmp_path: Path
) -> None:
    from backchannel.cli import main
    from backchannel.store import Inbound
    from backchannel.testing.store_contract import make_event
    from click.testing import CliRunner

    store = PostgresStore(postgres_url)
    await store.append_inbound([Inbound(make_event("e1", "hello from postgres", chat="c9"))])
    await store.close()
    config = tmp_path / "bc.toml"
    config.write_text(f'[store]\nurl = "{postgres_url}"\n')

    def invoke(*args: str) -> Any:
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    listed = await asyncio.to_thread(invoke, "conversations", "-c", str(config))
    assert listed.exit_code == 0 and "acct/c9" in listed.output, listed.output
    shown = await asyncio.to_thread(invoke, "show", "acct/c9", "-c", str(config))
    assert shown.exit_code == 0 and "hello from postgres" in shown.output, shown.output


async def test_a_worker_taken_for_dead_that_beats_again_is_recovered_again_when_it_dies(
    postgres_url: str,
) -> None:
    from backchannel.model import Address, Outbound, Sender

    me = Sender("agent", "Agent", is_bot=True)
    slow = PostgresStore(postgres_url, worker="slow")
    other = PostgresStore(postgres_url, worker="other")
    await slow.register_worker("host", 1)
    conversation = await slow.ensure_conversation(Address("acct", "c1"))
    await slow.record_outbound(conversation.id, Outbound(conversation.address, "a"), me)
    assert list(await other.recover_dead_workers(ttl=0.0)) == ["slow"]  # a long pause
    await slow.heartbeat(ttl=10)  # it was alive after all
    (report,) = [w for w in await other.workers_report() if w["name"] == "slow"]
    assert report["stopped_at"] is None
    await slow.record_outbound(conversation.id, Outbound(conversation.address, "b"), me)
    recovered = await other.recover_dead_workers(ttl=0.0)  # now it dies for real
    assert [e.text for e in recovered["slow"]] == ["b"]
    await slow.close()
    await other.close()


async def _search_sql(store: PostgresStore, query: str) -> tuple[str, Any]:
    """Return the SELECT (and its parameters) `search_conversations(query=query)` runs."""
    seen: list[tuple[str, Any]] = []
    fetchall = store._fetchall

    async def recording(sql: str, params: Any = (), **kwargs: Any) -> Any:
        seen.append((sql, params))
        return await fetchall(sql, params, **kwargs)

    store._fetchall = recording  # type: ignore[method-assign]
    try:
        await store.search_conversations(query=query)
    finally:
        store._fetchall = fetchall  # type: ignore[method-assign]
    (found,) = [(sql, params) for sql, params in seen if "FROM conversations c" in sql]
    return found


async def test_search_is_answered_from_its_indexes(postgres_url: str) -> None:
    # an index on an expression serves only that very expression: were the query to
    # spell a document differently from pg009, every search would read whole tables
    from backchannel.model import Sender
    from backchannel.store import Inbound
    from backchannel.testing.store_contract import make_event

    store = PostgresStore(postgres_url)
    await store.append_inbound(
        [Inbound(make_event(f"e{n}", f"word{n} invoice", chat=f"c{n % 97}",
                            sender=Sender(f"s{n}", f"Person {n} Ünal", f"h{n}")))
         for n in range(2_000)]
    )  # fmt: skip
    sql, params = await _search_sql(store, "invoice unal")
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as connection:
        await connection.execute("ANALYZE")  # what autovacuum does after a while
        await connection.execute("SET enable_seqscan = off")
        cursor = await connection.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in await cursor.fetchall())
    for index in ("conversations_search", "participants_search", "message_words_search"):
        assert index in plan, plan
    assert "Seq Scan on message_words" not in plan and "Seq Scan on participants" not in plan
    await store.close()


async def test_searches_beside_writers_in_other_processes_index_every_message_once(
    postgres_url: str,
) -> None:
    # two writer processes append (each 200 events over 4 chats, and a reply a batch) while two
    # stores (two workers) search over and over: at the end every visible message is
    # indexed exactly once and found by its word
    from backchannel.store.postgres_migrations import search_document

    searchers = [PostgresStore(postgres_url) for _ in range(2)]
    writers = [
        await spawn_writer(postgres_url, "--first", str(1000 * n), "--count", "200")
        for n in range(2)
    ]
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write(b"go\n")
        await writer.stdin.drain()
    done = asyncio.Event()

    async def search_until_done(store: PostgresStore) -> int:
        searches = 0
        while not done.is_set():
            await store.search_conversations(query="zzz")
            searches += 1
        return searches

    searching = [asyncio.create_task(search_until_done(store)) for store in searchers]
    for writer in writers:
        assert writer.stdout is not None
        assert await asyncio.wait_for(writer.stdout.readline(), 120) == b"done\n"
        assert await writer.wait() == 0
    done.set()
    assert all(await asyncio.gather(*searching))
    await searchers[0].search_conversations(query="zzz")  # the last catch-up
    async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
        cursor = await connection.execute(
            "SELECT COUNT(*) FROM messages m LEFT JOIN message_words w"
            " ON w.conversation_id = m.conversation_id AND w.seq = m.seq"
            f" WHERE m.held = 0 AND (w.seq IS NULL OR w.words != {search_document('m.text')})"
        )
        assert await cursor.fetchone() == (0,)  # none missing, none stale
        cursor = await connection.execute(
            "SELECT (SELECT COUNT(*) FROM message_words),"
            " (SELECT COUNT(*) FROM messages WHERE held = 0)"
        )
        indexed, visible = await cursor.fetchone() or (0, 0)
        assert indexed == visible > 400
    for store in searchers:
        await store.close()


async def test_an_edit_waits_out_a_catch_up_so_its_words_are_never_lost(
    postgres_url: str,
) -> None:
    from backchannel.store import Inbound
    from backchannel.store.postgres_migrations import SEARCH_LOCK
    from backchannel.testing.store_contract import make_event

    store = PostgresStore(postgres_url)
    await store.append_inbound([Inbound(make_event("m1", "before", chat="e"))])
    assert len(await store.search_conversations(query="before")) == 1  # indexed
    async with await psycopg.AsyncConnection.connect(postgres_url) as catching_up:
        # another worker's catch-up, in progress: it holds the lock until it commits
        await catching_up.execute("SELECT pg_advisory_xact_lock(%s)", (SEARCH_LOCK,))
        edit = asyncio.create_task(
            store.append_inbound(
                [Inbound(make_event("m1-e", "after", kind="edit", chat="e", message_id="m1"))]
            )
        )
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as watching:
            for _ in range(500):  # until the edit's trigger waits for the lock
                cursor = await watching.execute(
                    "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                )
                if (await cursor.fetchone() or (0,))[0]:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the edit did not wait for the catch-up's lock")
        assert not edit.done()
        await catching_up.commit()
    await edit
    assert len(await store.search_conversations(query="after")) == 1
    assert await store.search_conversations(query="before") == []
    await store.close()


async def test_the_upgrade_indexes_the_messages_already_stored(postgres_url: str) -> None:
    # a store from before pg009: its messages are indexed by the migration itself, so the
    # first search after the upgrade does not have to do it all
    from backchannel.store import Inbound
    from backchannel.testing.store_contract import BOB, make_event

    store = PostgresStore(postgres_url)
    await store.append_inbound(
        [Inbound(make_event(f"u{n}", f"stored {n}", chat=f"c{n % 3}")) for n in range(30)]
        + [Inbound(make_event("u-held", "stored secretly", chat="c9", sender=BOB), held=True)]
    )
    await store.close()
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as connection:
        for statement in (
            "DROP TABLE message_words, message_words_progress",
            "DROP TRIGGER messages_reword ON messages",
            "DROP FUNCTION backchannel_reword",
            "DROP INDEX conversations_search, participants_search",
            "DELETE FROM _migrations WHERE name = 'pg009_search_indexes'",
        ):
            await connection.execute(statement)
        store = PostgresStore(postgres_url)
        await store.pool()  # migrates
        cursor = await connection.execute("SELECT COUNT(*) FROM message_words")
        assert await cursor.fetchone() == (30,)  # every visible message, before any search
    found = await store.search_conversations(query="stored")
    assert sorted(c.address.chat for c in found) == ["c0", "c1", "c2"]
    await store.close()


async def test_a_catch_up_in_small_steps_indexes_every_message_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # steps of 2 conversations and 3 messages each: conversations with long backlogs are
    # taken up again until done, and the walk by id skips none
    from backchannel.store import Inbound, postgres_migrations
    from backchannel.testing.store_contract import make_event

    monkeypatch.setattr(postgres_migrations, "CATCH_UP_CONVERSATIONS", 2)
    monkeypatch.setattr(postgres_migrations, "CATCH_UP_MESSAGES", 3)
    store = PostgresStore(postgres_url)
    backlogs = [10, 1, 7, 3, 4, 0, 2]
    await store.append_inbound(
        [
            Inbound(make_event(f"s{chat}-{n}", f"step{chat}x{n}", chat=f"c{chat}"))
            for chat, count in enumerate(backlogs)
            for n in range(count)
        ]
    )
    steps = []
    execute = psycopg.AsyncConnection.execute

    async def counting(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if query == postgres_migrations.CATCH_UP:
            steps.append(dict(params))
        return await execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", counting)
    assert [c.address.chat for c in await store.search_conversations(query="step0x9")] == ["c0"]
    assert len(steps) > 4
    for chat, count in enumerate(backlogs):
        for n in range(count):
            found = await store.search_conversations(query=f"step{chat}x{n}")
            assert [c.address.chat for c in found] == [f"c{chat}"], (chat, n)
    async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
        cursor = await connection.execute("SELECT COUNT(*) FROM message_words")
        assert await cursor.fetchone() == (sum(backlogs),)
    await store.close()


async def test_workers_racing_for_one_lease_leave_it_with_exactly_one(postgres_url: str) -> None:
    """Four workers ask for the same free account at once, and then for the same lapsed
    lease at once: each time exactly one of them holds it, and the lease row names it."""
    stores = [PostgresStore(postgres_url, worker=f"racer{n}") for n in range(4)]
    await asyncio.gather(*(store.pool() for store in stores))

    async def holder(account: str) -> str:
        async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
            cursor = await connection.execute(
                "SELECT worker FROM leases WHERE account = %s", (account,)
            )
            row = await cursor.fetchone()
            assert row is not None
            return str(row[0])

    for round_ in range(15):
        account = f"race{round_}"
        # free: nobody has a row to lock, so only the conditional upsert keeps it to one
        taken = await asyncio.gather(*(store.acquire_lease(account, 0.05) for store in stores))
        winners = [store.worker for store, got in zip(stores, taken, strict=True) if got == ""]
        assert len(winners) == 1, taken
        assert [got for got in taken if got not in ("", None)] == []
        assert await holder(account) == winners[0]
        # lapsed: the others race to take it over, and the winner learns whose it was
        while await _lease_live(postgres_url, account):
            await asyncio.sleep(0.02)
        others = [store for store in stores if store.worker != winners[0]]
        taken = await asyncio.gather(*(store.acquire_lease(account, 30.0) for store in others))
        took = [store.worker for store, got in zip(others, taken, strict=True) if got is not None]
        assert len(took) == 1, taken
        assert [got for got in taken if got is not None] == [winners[0]]
        assert await holder(account) == took[0]
    for store in stores:
        await store.close()


async def _lease_live(url: str, account: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url) as connection:
        cursor = await connection.execute(
            f"SELECT expires_at > {DB_NOW} FROM leases WHERE account = %s", (account,)
        )
        row = await cursor.fetchone()
        return bool(row and row[0])


ME = Sender("bot", "bot", is_bot=True)
PEER = Sender("peer", "Peer", is_bot=True)


async def until_waiting_on_a_lock(url: str, task: asyncio.Task[Any] | None = None) -> None:
    """Return once some session waits on a lock (or `task` is done meanwhile)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        for _ in range(400):
            cursor = await admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            )
            if (task is not None and task.done()) or (await cursor.fetchone() or (0,))[0]:
                return
            await asyncio.sleep(0.01)


async def _answered_ask(store: PostgresStore, origin: Conversation, session: Conversation) -> int:
    """An ask of `origin` to `session`, its question sent and answered by a reply."""
    question, ask = await asked(store, origin, session, "Q1")
    await store.mark_sent(question.id, Receipt("pm-q1"))
    (answer,) = await store.append_inbound(
        [
            Inbound(
                make_event(
                    "ev-answer",
                    "ANS Q1",
                    account="tp",
                    chat="peer",
                    thread="s1",
                    sender=PEER,
                    reply_to="pm-q1",
                )
            )
        ]
    )
    matched = await store.correlate_reply(session.id, answer.seq or 0)
    assert matched is not None and matched.id == ask.id
    return ask.id


async def test_a_report_handed_over_and_never_tried_is_owed_again(postgres_url: str) -> None:
    # the reporting worker (not holding the asking account) recorded the report, claimed
    # it and handed it over, then died before the holder took it: recovery failed the
    # send, and the claim stayed, so no worker ever reported the answer
    reporter = PostgresStore(postgres_url, worker="wa")
    other = PostgresStore(postgres_url, worker="wj")
    try:
        for store in (reporter, other):
            await store.register_worker("host", 3)
        origin = await reporter.ensure_conversation(Address("tg", "100"))
        session = await reporter.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
        ask_id = await _answered_ask(other, origin, session)
        assert [a.id for a in await other.asks(awaiting_report=True)] == [ask_id]
        report = await reporter.record_outbound(
            origin.id,
            Outbound(origin.address, "[the answer] ANS Q1"),
            ME,
            hand_to=("tg", False, 18.0, False),
        )
        assert await reporter.claim_report(ask_id, report.id)
        await reporter.release_handoff(report.id)
        assert await other.asks(awaiting_report=True) == []
        await other.recover_worker("wa")  # SIGKILLed while it waited
        failed = await other._outbox_entry_now(report.id)
        assert failed.status == "failed" and "stopped before" in (failed.reason or "")
        assert [a.id for a in await other.asks(awaiting_report=True)] == [ask_id]
        # claimed again by the next report, once
        again = await other.record_outbound(origin.id, Outbound(origin.address, "again"), ME)
        assert await other.claim_report(ask_id, again.id)
        assert not await reporter.claim_report(ask_id, again.id)
        assert await other.asks(awaiting_report=True) == []
    finally:
        for store in (reporter, other):
            await store.close()


async def test_an_ask_whose_question_was_never_sent_fails_and_takes_no_answer(
    postgres_url: str,
) -> None:
    asker = PostgresStore(postgres_url, worker="wa")
    holder = PostgresStore(postgres_url, worker="wb")
    try:
        for store in (asker, holder):
            await store.register_worker("host", 3)
        origin = await asker.ensure_conversation(Address("tg", "100"))
        session = await asker.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
        question, never = await asked(
            asker,
            origin,
            session,
            "Q1",
            deadline=time.time() + 5,
            hand_to=("tp", False, 60.0, False),
        )
        await asker.release_handoff(question.id)
        await holder.recover_worker("wa")  # the asker was killed while it waited
        (failed,) = await holder.asks()
        assert failed.state == "failed" and "never sent" in (failed.reason or "")
        assert await holder.take_handoffs(["tp"]) == []
        assert await holder.expire_asks(time.time() + 10) == []  # no "no answer yet" notice
        # the session's next question is the one its answer is matched to
        second, ask2 = await asked(holder, origin, session, "Q2", seq=2)
        await holder.mark_sent(second.id, Receipt("pm-q2"))
        (answer,) = await holder.append_inbound(
            [
                Inbound(
                    make_event(
                        "ev-a2", "ANS Q2", account="tp", chat="peer", thread="s1", sender=PEER
                    )
                )
            ]
        )
        matched = await holder.correlate_reply(session.id, answer.seq or 0)
        assert matched is not None and (matched.id, never.id) == (ask2.id, never.id)
    finally:
        for store in (asker, holder):
            await store.close()


async def test_a_withdrawn_expiry_notice_is_owed_again(postgres_url: str) -> None:
    store = PostgresStore(postgres_url, worker="wa")
    try:
        await store.register_worker("host", 3)
        origin = await store.ensure_conversation(Address("tg", "100"))
        session = await store.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
        question, ask = await asked(store, origin, session, "Q", deadline=time.time() - 1)
        await store.mark_sent(question.id, Receipt("pm-q"))
        assert [a.id for a in await store.expire_asks(time.time())] == [ask.id]
        notice = await store.record_outbound(
            origin.id,
            Outbound(origin.address, "[no answer yet]"),
            ME,
            hand_to=("tg", False, 18.0, False),
        )
        assert await store.mark_expiry_reported(ask.id, notice.id)
        await store.release_handoff(notice.id)
        assert await store.expire_asks(time.time()) == []
        withdrawn = await store.withdraw_handoff(
            notice.id, "not sent: withdrawn (the asker stopped)"
        )
        assert withdrawn is not None and withdrawn.status == "failed"
        assert [a.id for a in await store.expire_asks(time.time())] == [ask.id]
        (still,) = await store.asks()
        assert still.state == "expired"  # the question was sent: only its notice is owed
    finally:
        await store.close()


async def test_an_accounts_state_is_written_only_by_its_lease_holder(postgres_url: str) -> None:
    # a worker stalled past its lease (SIGSTOP, a long pause) wakes still running its
    # adapter: its writes of the account's state (a tiny.place ratchet) would overwrite
    # what the new holder wrote since, and break the session for good
    from backchannel.errors import LeaseLost

    holder = PostgresStore(postgres_url, worker="w-new")
    stale = PostgresStore(postgres_url, worker="w-old")
    outsider = PostgresStore(postgres_url)  # a `backchannel send`, no worker
    try:
        for store in (holder, stale):
            await store.register_worker("host", 3)
        await stale.set_state("tp", "signal/session", "old")  # no lease yet: anyone writes
        assert await stale.acquire_lease("tp", 0.2) == ""
        await stale.set_state("tp", "signal/session", "v1")
        await asyncio.sleep(0.3)  # stalled: its lease lapsed
        assert await holder.acquire_lease("tp", 30.0) == "w-old"
        await holder.set_state("tp", "signal/session", "v2")
        for store in (stale, outsider):
            with pytest.raises(LeaseLost, match="held by worker 'w-new'"):
                await store.set_state("tp", "signal/session", "stale")
            with pytest.raises(LeaseLost):
                await store.append_inbound(
                    [Inbound(make_event("m-stale", account="tp"), state={"offset": "9"})]
                )
        assert await holder.get_state("tp", "signal/session") == "v2"
        assert await holder.get_state("tp", "offset") is None
        assert not await holder.is_known("tp", "m-stale")  # the whole batch rolled back
        # the holder's own writes, with a message, go through; other accounts are free
        await holder.append_inbound(
            [Inbound(make_event("m-new", account="tp"), state={"offset": "10"})]
        )
        assert await holder.get_state("tp", "offset") == "10"
        await stale.set_state("tg", "offset", "5")
    finally:
        for store in (holder, stale, outsider):
            await store.close()


async def test_connections_the_server_dropped_fail_no_write_and_no_read(postgres_url: str) -> None:
    # a server restart (or pg_terminate_backend) breaks every pooled connection: each
    # failed one operation in turn (an ingest, a run's record, a send's outcome)
    store = PostgresStore(postgres_url, pool_size=4)
    try:
        # fill the pool with four idle connections
        await asyncio.gather(*(store._fetchall("SELECT pg_sleep(0.05)") for _ in range(4)))
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            cursor = await admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND application_name = ''"
            )
            (dropped,) = await cursor.fetchone() or (0,)
        assert dropped >= 1
        for n in range(6):  # writes and reads alike go through, none fails
            (stored,) = await store.append_inbound([Inbound(make_event(f"after-{n}"))])
            assert stored.status == "stored"
            assert await store.is_known("acct", f"after-{n}")
        assert len(await store.conversations()) == 1
    finally:
        await store.close()


async def test_a_hand_over_past_its_deadline_gives_back_what_an_ask_staked_on_it(
    postgres_url: str,
) -> None:
    reporter = PostgresStore(postgres_url, worker="wa")
    holder = PostgresStore(postgres_url, worker="wb")
    try:
        for store in (reporter, holder):
            await store.register_worker("host", 3)
        origin = await reporter.ensure_conversation(Address("tg", "100"))
        session = await reporter.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
        ask_id = await _answered_ask(holder, origin, session)
        report = await reporter.record_outbound(
            origin.id,
            Outbound(origin.address, "[the answer] ANS Q1"),
            ME,
            hand_to=("tg", False, 0.05, False),
        )
        assert await reporter.claim_report(ask_id, report.id)
        await reporter.release_handoff(report.id)
        await asyncio.sleep(0.1)  # no holder took it in time (a take-over in between)
        assert await holder.take_handoffs(["tg"]) == []
        late = await holder._outbox_entry_now(report.id)
        assert late.status == "failed" and "before its asker stopped waiting" in (late.reason or "")
        assert [a.id for a in await holder.asks(awaiting_report=True)] == [ask_id]
    finally:
        for store in (reporter, holder):
            await store.close()


async def test_a_thread_message_and_a_reaction_naming_its_chat_appended_at_once_meet(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two workers (Slack's Events API runs on every one): the reaction's batch had not
    # seen the message, and the message's batch had read the chat's count unlocked (0)
    from backchannel.store import postgres as pg
    from backchannel.testing.store_contract import BOB

    first = PostgresStore(postgres_url, worker="w1")
    other = PostgresStore(postgres_url, worker="w2")
    try:
        await first.append_inbound(
            [Inbound(make_event("top", "top level")), Inbound(make_event("t0", "x", thread="th1"))]
        )
        # 1. the reaction commits between the message batch's look and its locks
        looked = pg._Append._existing

        async def reaction_meanwhile(self: Any, keys: Any) -> Any:
            found = await looked(self, keys)
            if keys:
                (r,) = await other.append_inbound(
                    [Inbound(make_event("r1", "👍", kind="reaction", message_id="t1", sender=BOB))]
                )
                assert r.status == "recorded"
            return found

        monkeypatch.setattr(pg._Append, "_existing", reaction_meanwhile)
        (message,) = await first.append_inbound(
            [Inbound(make_event("t1", "in the thread", thread="th1"), triggers=True)]
        )
        monkeypatch.setattr(pg._Append, "_existing", looked)
        stored = await first.message(message.conversation_id, message.seq or 0)
        assert stored is not None and stored.reactions == (("Bob", "👍"),)
        # 2. the reaction looks for its target while the message's batch holds the chat
        flush = pg._Append._flush_counters
        reacting: list[asyncio.Task[Any]] = []

        async def reaction_waits(self: Any) -> None:
            if not reacting and any(i.event.kind == "message" for i in self.items):
                reacting.append(
                    asyncio.create_task(
                        other.append_inbound(
                            [
                                Inbound(
                                    make_event(
                                        "r2", "🎉", kind="reaction", message_id="t2", sender=BOB
                                    )
                                )
                            ]
                        )
                    )
                )
                await until_waiting_on_a_lock(postgres_url)  # on one this batch holds
            await flush(self)

        monkeypatch.setattr(pg._Append, "_flush_counters", reaction_waits)
        (second,) = await first.append_inbound(
            [Inbound(make_event("t2", "also in it", thread="th1"), triggers=True)]
        )
        (r2,) = await reacting[0]
        assert r2.status == "applied" and r2.conversation_id == second.conversation_id
        shown = await first.message(second.conversation_id, second.seq or 0)
        assert shown is not None and shown.reactions == (("Bob", "🎉"),)
        async with await psycopg.AsyncConnection.connect(postgres_url) as admin:
            cursor = await admin.execute("SELECT count(*) FROM early_reactions")
            assert (await cursor.fetchone() or (1,))[0] == 0
    finally:
        for store in (first, other):
            await store.close()


async def test_a_reaction_appended_while_our_sends_outcome_is_recorded_is_kept(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backchannel.store import postgres as pg

    first = PostgresStore(postgres_url, worker="w1")
    other = PostgresStore(postgres_url, worker="w2")
    try:
        (question,) = await first.append_inbound([Inbound(make_event("e1", "q"))])
        conversation = await first.conversation(question.conversation_id)
        entry = await first.record_outbound(
            conversation.id, Outbound(conversation.address, "answer"), ME
        )
        taking = pg._take_reactions
        reacting: list[asyncio.Task[Any]] = []

        async def reaction_meanwhile(connection: Any, *args: Any) -> Any:
            rows = await taking(connection, *args)
            if not reacting:  # the webhook's reaction, in another worker's transaction
                reacting.append(
                    asyncio.create_task(
                        other.append_inbound(
                            [Inbound(make_event("r1", "🙏", kind="reaction", message_id="out-1"))]
                        )
                    )
                )
                await until_waiting_on_a_lock(postgres_url, reacting[0])  # on our lock
            return rows

        monkeypatch.setattr(pg, "_take_reactions", reaction_meanwhile)
        await first.mark_sent(entry.id, Receipt("out-1"))
        await reacting[0]
        ours = await first.message(conversation.id, entry.message_seq or 0)
        assert ours is not None and ours.reactions == (("Alice", "🙏"),)
    finally:
        for store in (first, other):
            await store.close()


async def test_only_a_dropped_connection_is_tried_again_not_a_timeout(postgres_url: str) -> None:
    # a statement or lock timeout, or a pool with no free connection, would only be met
    # again: tried pool_size times it held a write for minutes through an outage
    from backchannel.store.postgres import _dropped
    from psycopg_pool import PoolTimeout

    assert not _dropped(PoolTimeout("couldn't get a connection after 30.00 sec"))
    assert _dropped(psycopg.OperationalError("server closed the connection unexpectedly"))
    store = PostgresStore(postgres_url, pool_size=4)
    runs: list[int] = []

    async def slow(connection: Any) -> None:
        runs.append(1)
        await connection.execute("SET LOCAL statement_timeout = '50ms'")
        await connection.execute("SELECT pg_sleep(2)")

    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            await store._write(slow)
        assert runs == [1]
    finally:
        await store.close()


async def test_a_takeover_waits_for_a_stale_holders_state_write_in_progress(
    postgres_url: str,
) -> None:
    from backchannel.store.postgres import _write_state

    stale = PostgresStore(postgres_url, worker="w-old")
    taker = PostgresStore(postgres_url, worker="w-new")
    try:
        for store in (stale, taker):
            await store.register_worker("host", 3)
        assert await stale.acquire_lease("tp", 0.1) == ""
        await stale.set_state("tp", "signal/session", "S0")
        await asyncio.sleep(0.2)  # the stale holder's lease lapsed; no one took it yet
        writing, release = asyncio.Event(), asyncio.Event()

        async def stale_write(connection: Any) -> None:
            await _write_state(connection, "tp", "signal/session", "S1", "w-old")
            writing.set()
            await release.wait()  # its transaction still open

        write = asyncio.create_task(stale._write(stale_write))
        await asyncio.wait_for(writing.wait(), 10)
        takeover = asyncio.create_task(taker.acquire_lease("tp", 30.0))
        await until_waiting_on_a_lock(postgres_url, takeover)
        assert not takeover.done()  # it waits for the write, then reads what it wrote
        release.set()
        await write
        assert await takeover == "w-old"
        assert await taker.get_state("tp", "signal/session") == "S1"
        with pytest.raises(LeaseLost):
            await stale.set_state("tp", "signal/session", "S2")
    finally:
        for store in (stale, taker):
            await store.close()


async def test_a_heartbeat_renews_the_leases_while_a_claim_row_is_held_by_a_stuck_send(
    postgres_url: str,
) -> None:
    # a send holds its run's claim row (checked FOR UPDATE) while it waits on a locked
    # table: the heartbeat's claim renewal waited on it, with the leases in the same
    # transaction, and live workers took each other for dead
    store = PostgresStore(postgres_url, worker="w1")
    try:
        await store.register_worker("host", 3)
        assert await store.acquire_lease("tg", 2.0) == ""
        conversation = await store.ensure_conversation(Address("tg", "1"))
        assert await store.claim_run(conversation.id, 2.0)
        stuck = await psycopg.AsyncConnection.connect(postgres_url)
        async with stuck, stuck.transaction():
            await stuck.execute(
                "SELECT 1 FROM run_claims WHERE conversation_id = %s FOR UPDATE",
                (conversation.id,),
            )
            held = await asyncio.wait_for(store.heartbeat(2.0), 5)
            assert held == {"tg"}
    finally:
        await store.close()


async def test_a_lapsed_lease_no_one_took_is_kept_by_its_holders_next_heartbeat(
    postgres_url: str,
) -> None:
    # an outage longer than the lease: the account sat idle until a takeover
    holder = PostgresStore(postgres_url, worker="w1")
    other = PostgresStore(postgres_url, worker="w2")
    try:
        for store in (holder, other):
            await store.register_worker("host", 3)
        assert await holder.acquire_lease("tg", 0.1) == ""
        assert await holder.acquire_lease("slack", 0.1) == ""
        await asyncio.sleep(0.2)  # both lapsed
        assert await other.acquire_lease("slack", 30.0) == "w1"  # one taken meanwhile
        assert await holder.heartbeat(30.0) == {"tg"}
        assert await other.acquire_lease("tg", 30.0) is None
    finally:
        for store in (holder, other):
            await store.close()


async def test_a_dead_workers_many_pending_sends_are_recovered_in_one_go(postgres_url: str) -> None:
    # recovering a dead worker is one transaction under a heartbeat's budget: with three
    # statements a row, past about a thousand pending rows it was cut short at every beat
    me = Sender("agent", "Agent", is_bot=True)
    survivor = PostgresStore(postgres_url, worker="alive")
    dead = PostgresStore(postgres_url, worker="dead")
    try:
        await survivor.register_worker("host", 1)
        await dead.register_worker("host", 2)
        conversations = [await dead.ensure_conversation(Address("acct", f"c{n}")) for n in range(3)]
        sent: list[int] = []
        for n in range(1200):
            conversation = conversations[n % 3]
            kind = "reaction" if n % 10 == 9 else "message"
            outbound = (
                Outbound(conversation.address, f"m{n}")
                if kind == "message"
                else Outbound(conversation.address, "👍", kind="reaction", target="p1")
            )
            sent.append((await dead.record_outbound(conversation.id, outbound, me)).id)
        waited = sent[5]
        await dead.note_waiting(waited, True)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            await admin.execute(
                "UPDATE workers SET heartbeat_at = heartbeat_at - 3600 WHERE name = 'dead'"
            )
        found = await survivor.recover_dead_workers(30)
        assert sorted(e.id for e in found["dead"]) == sent
        statuses = {e.id: e.status for e in await survivor.outbox(limit=5000)}
        assert statuses[waited] == "failed"
        assert {s for i, s in statuses.items() if i != waited} == {"uncertain"}
        async with await psycopg.AsyncConnection.connect(postgres_url) as admin:
            cursor = await admin.execute(
                "SELECT status, count(*) FROM messages WHERE direction = 'out' GROUP BY status"
            )
            assert dict(await cursor.fetchall()) == {"uncertain": 1079, "failed": 1}
    finally:
        await survivor.close()
        await dead.close()

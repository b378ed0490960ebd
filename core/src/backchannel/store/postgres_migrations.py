"""The PostgreSQL store's schema: its own ordered migrations, recorded in `_migrations`.

They run in one transaction under a transaction-scoped advisory lock, so two
workers starting together migrate once: the second waits, then finds every
migration recorded. Names are applied in list order and never renamed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..model import now
from .postgres_asks import pg006_asks
from .thread_addresses import PARENT_KEY, parent_in, without_parent

__all__ = [
    "MIGRATION_LOCK",
    "PARTICIPANT_NAME",
    "PG_MIGRATIONS",
    "SEARCH_LOCK",
    "catch_up",
    "migrate",
    "search_document",
]

#: the advisory lock key migrations are serialised under ("backchannel" in ASCII, truncated)
MIGRATION_LOCK = 0x6261636B6368616E

Migration = Callable[[Any], Awaitable[None]]


async def pg001_initial(connection: Any) -> None:
    await connection.execute(
        """
        CREATE TABLE conversations (
            id BIGSERIAL PRIMARY KEY,
            account TEXT NOT NULL,
            chat TEXT NOT NULL,
            thread TEXT NOT NULL DEFAULT '',
            kind TEXT NOT NULL DEFAULT 'direct',
            title TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            active_at DOUBLE PRECISION NOT NULL,
            last_seq BIGINT NOT NULL DEFAULT 0,
            handled_seq BIGINT NOT NULL DEFAULT 0,
            trigger_seq BIGINT NOT NULL DEFAULT 0,
            visible_count BIGINT NOT NULL DEFAULT 0,
            held_count BIGINT NOT NULL DEFAULT 0,
            orphan_edits BIGINT NOT NULL DEFAULT 0,
            meta TEXT NOT NULL DEFAULT '{}',
            UNIQUE (account, chat, thread)
        );
        CREATE INDEX conversations_active ON conversations (active_at DESC);
        CREATE INDEX conversations_unhandled ON conversations (trigger_seq)
            WHERE trigger_seq > handled_seq;

        CREATE TABLE messages (
            conversation_id BIGINT NOT NULL,
            seq BIGINT NOT NULL,
            direction TEXT NOT NULL,
            event_id TEXT,
            sender_id TEXT NOT NULL,
            sender_name TEXT NOT NULL DEFAULT '',
            sender_handle TEXT,
            sender_is_bot INTEGER NOT NULL DEFAULT 0,
            text TEXT NOT NULL DEFAULT '',
            platform_message_id TEXT,
            reply_to TEXT,
            reply_to_seq BIGINT,
            mentions_me INTEGER NOT NULL DEFAULT 0,
            attachments TEXT,
            sent_at DOUBLE PRECISION NOT NULL,
            edited_at DOUBLE PRECISION,
            deleted_at DOUBLE PRECISION,
            held INTEGER NOT NULL DEFAULT 0,
            triggers INTEGER NOT NULL DEFAULT 0,
            status TEXT NOT NULL DEFAULT 'received',
            status_reason TEXT,
            reactions TEXT,
            meta TEXT,
            PRIMARY KEY (conversation_id, seq)
        );
        CREATE INDEX messages_platform_id ON messages (conversation_id, platform_message_id)
            WHERE platform_message_id IS NOT NULL;
        CREATE INDEX messages_visible ON messages (conversation_id, seq) WHERE held = 0;

        CREATE TABLE events (
            account TEXT NOT NULL,
            event_id TEXT NOT NULL,
            conversation_id BIGINT NOT NULL,
            seq BIGINT,
            kind TEXT NOT NULL,
            PRIMARY KEY (account, event_id)
        );

        CREATE TABLE revisions (
            id BIGSERIAL PRIMARY KEY,
            conversation_id BIGINT NOT NULL,
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            text TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX revisions_message ON revisions (conversation_id, seq);

        CREATE TABLE participants (
            conversation_id BIGINT NOT NULL,
            sender_id TEXT NOT NULL,
            name TEXT NOT NULL DEFAULT '',
            handle TEXT,
            is_bot INTEGER NOT NULL DEFAULT 0,
            message_count BIGINT NOT NULL DEFAULT 0,
            first_seq BIGINT NOT NULL,
            last_seq BIGINT NOT NULL,
            PRIMARY KEY (conversation_id, sender_id)
        );

        -- worker: who recorded the send (recovery after a worker dies is per worker)
        CREATE TABLE outbox (
            id BIGSERIAL PRIMARY KEY,
            conversation_id BIGINT NOT NULL,
            run_id BIGINT,
            kind TEXT NOT NULL,
            text TEXT NOT NULL,
            reply_to TEXT,
            target TEXT,
            message_seq BIGINT,
            status TEXT NOT NULL,
            reason TEXT,
            platform_ids TEXT,
            worker TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX outbox_status ON outbox (status);
        CREATE INDEX outbox_conversation ON outbox (conversation_id);

        CREATE TABLE runs (
            id BIGSERIAL PRIMARY KEY,
            conversation_id BIGINT NOT NULL,
            trigger_seq BIGINT NOT NULL,
            upto_seq BIGINT NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            finished_at DOUBLE PRECISION,
            status TEXT NOT NULL DEFAULT 'running',
            error TEXT,
            worker TEXT
        );
        CREATE INDEX runs_conversation ON runs (conversation_id, id);
        CREATE INDEX runs_running ON runs (status) WHERE status = 'running';

        CREATE TABLE state (
            account TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (account, key)
        );

        CREATE TABLE dead_letters (
            id BIGSERIAL PRIMARY KEY,
            account TEXT NOT NULL,
            ref TEXT NOT NULL,
            reason TEXT NOT NULL,
            payload TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL
        );
        """
    )


async def pg002_orchestration(connection: Any) -> None:
    # which conversation a cross-conversation send came from (NULL: its own run)
    await connection.execute("ALTER TABLE outbox ADD COLUMN origin TEXT")


async def pg002_workers(connection: Any) -> None:
    await connection.execute(
        """
        -- each `serve --worker NAME`: its heartbeat says it is alive
        CREATE TABLE workers (
            name TEXT PRIMARY KEY,
            host TEXT NOT NULL DEFAULT '',
            pid INTEGER NOT NULL DEFAULT 0,
            started_at DOUBLE PRECISION NOT NULL,
            heartbeat_at DOUBLE PRECISION NOT NULL,
            -- set when it stopped cleanly, or when another worker recovered it as dead
            stopped_at DOUBLE PRECISION
        );
        -- who holds each polling/socket account's connection, until when
        CREATE TABLE leases (
            account TEXT PRIMARY KEY,
            worker TEXT NOT NULL,
            acquired_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL
        );
        -- which worker runs a conversation's agent now: one at a time across workers
        CREATE TABLE run_claims (
            conversation_id BIGINT PRIMARY KEY,
            worker TEXT NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL
        );
        """
    )


async def pg007_thread_addresses(connection: Any) -> None:
    """Move threads stored as their own chat (old Discord shape) to chat=<parent>, thread=<id>.

    The same move as SQLite's m007_thread_addresses (see there): a kind
    'thread' conversation with an empty thread and a recorded
    ``parent_channel_id`` becomes ``(account, parent, thread=<old chat>)``;
    one without a recorded parent, or whose new address is taken, stays.
    """
    cursor = await connection.execute(
        "SELECT id, account, chat, meta FROM conversations WHERE kind = 'thread' AND thread = ''"
    )
    for conversation_id, account, chat, meta in await cursor.fetchall():
        cursor = await connection.execute(
            "SELECT seq, meta FROM messages WHERE conversation_id = %s AND meta LIKE %s",
            (conversation_id, f"%{PARENT_KEY}%"),
        )
        messages = await cursor.fetchall()
        parent = parent_in([meta, *(row[1] for row in messages)])
        if parent is None or parent == chat:
            continue
        cursor = await connection.execute(
            "SELECT 1 FROM conversations WHERE account = %s AND chat = %s AND thread = %s",
            (account, parent, chat),
        )
        if await cursor.fetchone():
            continue
        await connection.execute(
            "UPDATE conversations SET chat = %s, thread = %s, meta = %s WHERE id = %s",
            (parent, chat, without_parent(meta) or "{}", conversation_id),
        )
        for seq, message_meta in messages:
            await connection.execute(
                "UPDATE messages SET meta = %s WHERE conversation_id = %s AND seq = %s",
                (without_parent(message_meta), conversation_id, seq),
            )


async def pg008_no_recency_index(connection: Any) -> None:
    """Drop the index on `conversations.active_at`, as SQLite's m008 does.

    Every stored message changes its conversation's `active_at`; with that
    column indexed, PostgreSQL can never update the row in place (a HOT
    update) and writes an index entry per message. The rare "most recent
    conversations" lists sort a scan instead. (SQLite's m008 drops the partial
    index on unhandled conversations too; here it stays: the workers' polling
    fallback reads it every few seconds.)
    """
    await connection.execute("DROP INDEX IF EXISTS conversations_active")


#: the Latin accents the search drops, and what each becomes (`fold_accents` in postgres.py)
ACCENTED = "àáâãäåāăąçćčďèéêëēėęěìíîïīįłñńňòóôõöøōőŕřśšşťùúûüūůűųýÿžźż"
PLAIN = "aaaaaaaaacccdeeeeeeeeiiiiiilnnnoooooooorrssstuuuuuuuuyyzzz"
#: what a participant is found by: name and handle
PARTICIPANT_NAME = "name || ' ' || COALESCE(handle, '')"


def search_document(column: str) -> str:
    """The text-search document of `column`: lower case, accents dropped, no stemming.

    The search's queries must spell it exactly so (a table alias aside) for
    PostgreSQL to use pg009's indexes: an index on an expression serves only
    that expression. `translate` walks its whole map for every character of
    a multibyte text (70 µs for a short message), so only a text holding one
    of the accents is translated.
    """
    lowered = f"lower(COALESCE({column}, ''))"
    return (
        f"to_tsvector('simple', CASE WHEN {lowered} ~ '[{ACCENTED}]'"
        f" THEN translate({lowered}, '{ACCENTED}', '{PLAIN}') ELSE {lowered} END)"
    )


#: the advisory lock a search's catch-up (and an edit of indexed text) is taken under
SEARCH_LOCK = 0x6263736561726368
#: one step of indexing the visible messages not yet in `message_words`: the next
#: CATCH_UP_CONVERSATIONS conversations after id `after` that have some, at most
#: CATCH_UP_MESSAGES of each one's, and of those only as many conversations as keep the
#: step's seqs within CATCH_UP_STEP (the first one always: the step is never empty while
#: work is left). One statement, so one snapshot: a conversation's `last_seq` and its
#: messages up to it are read together, and its progress moves to exactly what was read.
#: Returns (id, whether messages of it remain) per conversation.
CATCH_UP = (
    "WITH candidates AS ("
    " SELECT c.id, COALESCE(p.indexed_seq, 0) AS since, c.last_seq,"
    " LEAST(c.last_seq, COALESCE(p.indexed_seq, 0) + %(messages)s) AS upto"
    " FROM conversations c LEFT JOIN message_words_progress p ON p.conversation_id = c.id"
    " WHERE c.id > %(after)s AND c.last_seq > COALESCE(p.indexed_seq, 0)"
    " ORDER BY c.id LIMIT %(conversations)s),"
    " todo AS (SELECT id, since, last_seq, upto FROM"
    " (SELECT *, SUM(upto - since) OVER (ORDER BY id) - (upto - since) AS earlier"
    " FROM candidates) ranked WHERE earlier < %(step)s),"
    " added AS (INSERT INTO message_words (conversation_id, seq, words)"
    f" SELECT m.conversation_id, m.seq, {search_document('m.text')}"
    " FROM todo JOIN messages m ON m.conversation_id = todo.id"
    " AND m.seq > todo.since AND m.seq <= todo.upto WHERE m.held = 0"
    " ON CONFLICT DO NOTHING),"
    " moved AS (INSERT INTO message_words_progress (conversation_id, indexed_seq)"
    " SELECT id, upto FROM todo ON CONFLICT (conversation_id)"
    " DO UPDATE SET indexed_seq = EXCLUDED.indexed_seq)"
    " SELECT id, upto < last_seq FROM todo"
)
CATCH_UP_CONVERSATIONS = 100
CATCH_UP_MESSAGES = 1_000
#: seqs one step indexes at most: a step holds SEARCH_LOCK (an edit of indexed text waits
#: for it) and took up to 7 s at 100 conversations of 1,000 (about 0.5 s now)
CATCH_UP_STEP = 5_000
#: the time a search spends catching up at most (at least one step): past it the search
#: answers from what is indexed (`PostgresStore.search_index_complete` says so) and the
#: next one goes on (a million messages took 142 s in one search call)
CATCH_UP_SECONDS = 2.0


async def catch_up(connection: Any, *, locked: bool = True, seconds: float | None = None) -> bool:
    """Index the visible messages not yet in `message_words`, a bounded step at a time.

    The steps walk the conversations by id, so the whole catch-up reads each
    once. Each step is its own transaction under SEARCH_LOCK (two searches
    never do the same work, and an edit of text being read waits only for the
    step), unless `locked` is False (the migration, already in its transaction).
    With `seconds`, no step starts after that long (the one under way finishes):
    each step records its progress, so the next catch-up takes up from there.
    Returns True when nothing was left to index.
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    step = {
        "after": 0,
        "conversations": CATCH_UP_CONVERSATIONS,
        "messages": CATCH_UP_MESSAGES,
        "step": CATCH_UP_STEP,
    }
    while True:
        async with connection.transaction() if locked else contextlib.nullcontext():
            if locked:
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", (SEARCH_LOCK,))
            cursor = await connection.execute(CATCH_UP, step, prepare=False)
            done = await cursor.fetchall()
        if not done:
            return True
        unfinished = [conversation for conversation, more in done if more]
        step["after"] = min(unfinished) - 1 if unfinished else max(c for c, _ in done)
        if deadline is not None and time.monotonic() >= deadline:
            return False


async def pg009_search_indexes(connection: Any) -> None:
    """Index what `search_conversations` matches: message text, titles, participant names.

    Without them a search read every visible message of every conversation
    (2-3 s a query at 50,000 messages). Titles and names change rarely and are
    indexed as they are written. Message text is indexed lazily, as on SQLite
    (m003): a search first adds the visible messages written since the last
    one to `message_words`, so ingest pays nothing for it (an index on
    `messages` itself cost a third of PostgreSQL's ingest rate). Held
    messages are never indexed: a held sender must not be findable. The
    messages already stored are indexed here, so the first search after the
    upgrade does not do it all.
    """
    await connection.execute(
        f"""
        CREATE INDEX conversations_search ON conversations
            USING gin ({search_document("title")});
        CREATE INDEX participants_search ON participants
            USING gin ({search_document(PARTICIPANT_NAME)});

        -- the words of each visible message a search has caught up with
        CREATE TABLE message_words (
            conversation_id BIGINT NOT NULL,
            seq BIGINT NOT NULL,
            words tsvector NOT NULL,
            PRIMARY KEY (conversation_id, seq)
        );
        CREATE INDEX message_words_search ON message_words USING gin (words);
        -- each conversation's messages up to indexed_seq are in message_words
        CREATE TABLE message_words_progress (
            conversation_id BIGINT PRIMARY KEY,
            indexed_seq BIGINT NOT NULL
        );

        -- an edit of an indexed message replaces its words; it waits out a catch-up in
        -- progress (SEARCH_LOCK), so one that read the old text has committed first
        CREATE FUNCTION backchannel_reword() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared({SEARCH_LOCK});
            UPDATE message_words SET words = {search_document("NEW.text")}
                WHERE conversation_id = NEW.conversation_id AND seq = NEW.seq;
            RETURN NULL;
        END
        $$;
        CREATE TRIGGER messages_reword AFTER UPDATE OF text ON messages FOR EACH ROW
            WHEN (OLD.text IS DISTINCT FROM NEW.text AND NEW.held = 0)
            EXECUTE FUNCTION backchannel_reword();
        """
    )
    await catch_up(connection, locked=False)


async def pg010_outbox_seen_seq(connection: Any) -> None:
    """The newest seq a run had seen when it asked for each outbox row (see m009)."""
    await connection.execute("ALTER TABLE outbox ADD COLUMN seen_seq BIGINT")


async def pg011_dead_letter_deliveries(connection: Any) -> None:
    """One dead letter per unreadable payload, counting its deliveries (see m010)."""
    await connection.execute(
        """
        ALTER TABLE dead_letters ADD COLUMN digest TEXT;
        ALTER TABLE dead_letters ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 1;
        ALTER TABLE dead_letters ADD COLUMN first_at DOUBLE PRECISION;
        CREATE UNIQUE INDEX dead_letters_digest ON dead_letters (account, digest);
        """
    )


async def pg012_run_claim_run(connection: Any) -> None:
    """Bind a conversation's run claim to the run that holds it (`run_id`).

    A send of a run is recorded only while its own run holds the claim: a
    worker that stalled past its claim (a GC pause, a frozen VM) must not send
    after another worker ran the conversation and released the claim, nor
    after a restart of itself under the same name claimed it again.
    """
    await connection.execute("ALTER TABLE run_claims ADD COLUMN run_id BIGINT")


async def pg013_outbox_run_index(connection: Any) -> None:
    """Index outbox rows by the run that asked for them (see m011)."""
    await connection.execute("CREATE INDEX outbox_run ON outbox (run_id) WHERE run_id IS NOT NULL")


async def pg014_message_parts(connection: Any) -> None:
    """Every part of a message of ours the platform got split (see m013).

    Filled in Python from the part ids already stored: a row whose meta is not JSON, or
    whose ``part_ids`` is no list of strings, is passed over (in SQL one such row made the
    whole migration fail, and the store would not open).
    """
    await connection.execute(
        """
        CREATE TABLE message_parts (
            conversation_id BIGINT NOT NULL,
            platform_message_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            PRIMARY KEY (conversation_id, platform_message_id)
        )
        """
    )
    cursor = await connection.execute(
        "SELECT conversation_id, seq, meta FROM messages WHERE direction = 'out' AND meta LIKE %s",
        ('%"part_ids"%',),
    )
    parts = []
    for conversation_id, seq, meta in await cursor.fetchall():
        try:
            ids = json.loads(meta).get("part_ids")
        except (ValueError, AttributeError):
            continue
        if isinstance(ids, list):
            parts += [(conversation_id, part, seq) for part in ids[1:] if isinstance(part, str)]
    if parts:
        async with connection.cursor() as insert:
            await insert.executemany(
                "INSERT INTO message_parts (conversation_id, platform_message_id, seq)"
                " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                parts,
            )


async def pg015_handoffs(connection: Any) -> None:
    """Sends handed to the worker holding the account's lease (several workers).

    A worker that may not send through an account (another worker holds its
    connection) records the send as usual, then hands it over here; the lease
    holder takes it (``taken_by``, and the outbox row's ``worker`` becomes the
    taker's, so recovery after a death is the taker's) and sends it.
    """
    await connection.execute(
        """
        CREATE TABLE handoffs (
            outbox_id BIGINT PRIMARY KEY,
            account TEXT NOT NULL,
            quiet INTEGER NOT NULL DEFAULT 0,
            asked_by TEXT,
            taken_by TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            -- the database's clock: after it an untaken send is never taken (its asker
            -- stopped waiting, or died), and the next holder to look marks it failed
            deadline DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX handoffs_waiting ON handoffs (account) WHERE taken_by IS NULL;
        """
    )


async def pg016_handoff_ready(connection: Any) -> None:
    """A send handed over with the record of an ask (or of a report) is not taken until
    the ask's row is written too (`ready`): both in their own transactions, and a crash
    between must leave a hand-over its deadline fails, not a pending row no one settles."""
    await connection.execute("ALTER TABLE handoffs ADD COLUMN ready INTEGER NOT NULL DEFAULT 1")


async def pg017_outbox_by_message_seq(connection: Any) -> None:
    """A conversation's message sends by their transcript seq (see the SQLite store's
    m014: Store.sent_for_others, for bot_turns)."""
    await connection.execute(
        "CREATE INDEX outbox_message_seq ON outbox (conversation_id, message_seq)"
        " WHERE message_seq IS NOT NULL"
    )


async def pg018_early_deletes(connection: Any) -> None:
    """Deletes that came before their message, so that it arrives deleted (see the
    SQLite store's m015; the ``orphan_edits`` count now counts these too)."""
    await connection.execute(
        """
        CREATE TABLE early_deletes (
            conversation_id BIGINT NOT NULL,
            platform_message_id TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (conversation_id, platform_message_id)
        )
        """
    )


async def pg019_early_reactions(connection: Any) -> None:
    """Reactions that came before their message, so that it arrives with them (see the
    SQLite store's m016; counted in ``orphan_edits`` too)."""
    await connection.execute(
        """
        CREATE TABLE early_reactions (
            n BIGSERIAL PRIMARY KEY,
            conversation_id BIGINT NOT NULL,
            platform_message_id TEXT NOT NULL,
            reaction TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL
        )
        """
    )
    await connection.execute(
        "CREATE INDEX early_reactions_message"
        " ON early_reactions (conversation_id, platform_message_id)"
    )


async def pg020_ask_sends(connection: Any) -> None:
    """Which send reported an ask's answer, or its expiry (the question's is `outbox_id`):
    a hand-over failed without ever being tried gives its claim back (a report is made
    again, a question never sent fails its ask), found by these."""
    await connection.execute(
        "ALTER TABLE asks ADD COLUMN report_outbox_id BIGINT, ADD COLUMN expiry_outbox_id BIGINT"
    )
    for column in ("outbox_id", "report_outbox_id", "expiry_outbox_id"):
        await connection.execute(
            f"CREATE INDEX asks_{column} ON asks ({column}) WHERE {column} IS NOT NULL"
        )


PG_MIGRATIONS: list[Migration] = [
    pg001_initial,
    pg002_orchestration,
    pg002_workers,
    pg006_asks,
    pg007_thread_addresses,
    pg008_no_recency_index,
    pg009_search_indexes,
    pg010_outbox_seen_seq,
    pg011_dead_letter_deliveries,
    pg012_run_claim_run,
    pg013_outbox_run_index,
    pg014_message_parts,
    pg015_handoffs,
    pg016_handoff_ready,
    pg017_outbox_by_message_seq,
    pg018_early_deletes,
    pg019_early_reactions,
    pg020_ask_sends,
]


async def migrate(connection: Any) -> list[str]:
    """Apply the migrations not yet recorded, in one transaction under the advisory lock."""
    applied: list[str] = []
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS _migrations"
            " (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        cursor = await connection.execute("SELECT name FROM _migrations")
        done = {row[0] for row in await cursor.fetchall()}
        for migration in PG_MIGRATIONS:
            if migration.__name__ in done:
                continue
            await migration(connection)
            await connection.execute(
                "INSERT INTO _migrations (name, applied_at) VALUES (%s, %s)",
                (migration.__name__, now()),
            )
            applied.append(migration.__name__)
    return applied

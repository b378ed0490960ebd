"""Schema migrations: an ordered list of small functions, each recorded in `_migrations`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import apsw

from ..model import now
from .thread_addresses import PARENT_KEY, parent_in, without_parent

Migration = Callable[[apsw.Connection], None]


def m001_initial(db: apsw.Connection) -> None:
    db.execute(
        """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            account TEXT NOT NULL,
            chat TEXT NOT NULL,
            thread TEXT NOT NULL DEFAULT '',
            kind TEXT NOT NULL DEFAULT 'direct',
            title TEXT,
            created_at REAL NOT NULL,
            active_at REAL NOT NULL,
            last_seq INTEGER NOT NULL DEFAULT 0,
            handled_seq INTEGER NOT NULL DEFAULT 0,
            trigger_seq INTEGER NOT NULL DEFAULT 0,
            visible_count INTEGER NOT NULL DEFAULT 0,
            held_count INTEGER NOT NULL DEFAULT 0,
            meta TEXT NOT NULL DEFAULT '{}',
            UNIQUE (account, chat, thread)
        );
        CREATE INDEX conversations_active ON conversations (active_at DESC);
        CREATE INDEX conversations_unhandled ON conversations (trigger_seq)
            WHERE trigger_seq > handled_seq;

        -- a rowid table: rows are appended in arrival order (cheap inserts even when a
        -- batch touches many conversations); windows are read through the
        -- (conversation_id, seq) unique index, O(window) whatever the history length
        CREATE TABLE messages (
            conversation_id INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            direction TEXT NOT NULL,
            event_id TEXT,
            sender_id TEXT NOT NULL,
            sender_name TEXT NOT NULL DEFAULT '',
            sender_handle TEXT,
            sender_is_bot INTEGER NOT NULL DEFAULT 0,
            text TEXT NOT NULL DEFAULT '',
            platform_message_id TEXT,
            reply_to TEXT,
            reply_to_seq INTEGER,
            mentions_me INTEGER NOT NULL DEFAULT 0,
            attachments TEXT,
            sent_at REAL NOT NULL,
            edited_at REAL,
            deleted_at REAL,
            held INTEGER NOT NULL DEFAULT 0,
            triggers INTEGER NOT NULL DEFAULT 0,
            status TEXT NOT NULL DEFAULT 'received',
            status_reason TEXT,
            reactions TEXT,
            meta TEXT,
            UNIQUE (conversation_id, seq)
        );
        CREATE INDEX messages_platform_id ON messages (conversation_id, platform_message_id)
            WHERE platform_message_id IS NOT NULL;

        CREATE TABLE events (
            account TEXT NOT NULL,
            event_id TEXT NOT NULL,
            conversation_id INTEGER NOT NULL,
            seq INTEGER,
            kind TEXT NOT NULL,
            PRIMARY KEY (account, event_id)
        ) WITHOUT ROWID;

        CREATE TABLE revisions (
            conversation_id INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            text TEXT NOT NULL,
            at REAL NOT NULL
        );
        CREATE INDEX revisions_message ON revisions (conversation_id, seq);

        CREATE TABLE participants (
            conversation_id INTEGER NOT NULL,
            sender_id TEXT NOT NULL,
            name TEXT NOT NULL DEFAULT '',
            handle TEXT,
            is_bot INTEGER NOT NULL DEFAULT 0,
            message_count INTEGER NOT NULL DEFAULT 0,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            PRIMARY KEY (conversation_id, sender_id)
        ) WITHOUT ROWID;

        CREATE TABLE outbox (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL,
            run_id INTEGER,
            kind TEXT NOT NULL,
            text TEXT NOT NULL,
            reply_to TEXT,
            target TEXT,
            message_seq INTEGER,
            status TEXT NOT NULL,
            reason TEXT,
            platform_ids TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE INDEX outbox_status ON outbox (status);
        CREATE INDEX outbox_conversation ON outbox (conversation_id);

        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL,
            trigger_seq INTEGER NOT NULL,
            upto_seq INTEGER NOT NULL,
            started_at REAL NOT NULL,
            finished_at REAL,
            status TEXT NOT NULL DEFAULT 'running',
            error TEXT
        );
        CREATE INDEX runs_conversation ON runs (conversation_id, id);

        CREATE TABLE state (
            account TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (account, key)
        ) WITHOUT ROWID;

        CREATE TABLE dead_letters (
            id INTEGER PRIMARY KEY,
            account TEXT NOT NULL,
            ref TEXT NOT NULL,
            reason TEXT NOT NULL,
            payload TEXT NOT NULL,
            at REAL NOT NULL
        );
        """
    )


def m002_visible_index_and_orphan_edits(db: apsw.Connection) -> None:
    db.execute(
        """
        -- windows skip held rows through this index, so a flood of held messages
        -- (a busy public group behind an allowlist) does not slow every run down
        CREATE INDEX messages_visible ON messages (conversation_id, seq) WHERE held = 0;
        -- rows made from an edit whose original we had not seen: while any exist, a
        -- later-arriving original is matched to its row instead of adding a second one
        ALTER TABLE conversations ADD COLUMN orphan_edits INTEGER NOT NULL DEFAULT 0;
        """
    )


def m003_orchestration(db: apsw.Connection) -> None:
    db.execute(
        """
        -- full-text search for list_conversations(query=...). Message text (held rows are
        -- never indexed: a held sender must not be findable through the agent) is indexed
        -- lazily: a search first adds the rows written since the last one, in one
        -- statement, so ingest pays nothing for it (bench/search_index.py). Only which
        -- rows hold a word is kept (detail = none, columnsize = 0): all a word-prefix
        -- match needs.
        CREATE VIRTUAL TABLE messages_fts USING fts5(
            text, content = 'messages', content_rowid = 'rowid',
            tokenize = 'unicode61 remove_diacritics 2', detail = none, columnsize = 0
        );
        -- messages rows up to this rowid are in messages_fts (rows are never deleted)
        CREATE TABLE messages_fts_progress (indexed_rowid INTEGER NOT NULL);
        INSERT INTO messages_fts (rowid, text) SELECT rowid, text FROM messages WHERE held = 0;
        INSERT INTO messages_fts_progress SELECT COALESCE(MAX(rowid), 0) FROM messages;
        -- an edit of an already indexed row replaces its words
        CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages
        WHEN old.held = 0 AND old.text IS NOT new.text
            AND old.rowid <= (SELECT indexed_rowid FROM messages_fts_progress) BEGIN
            INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
            INSERT INTO messages_fts (rowid, text) VALUES (new.rowid, new.text);
        END;

        -- conversation titles and participant names, kept current by triggers (a write
        -- per new conversation or person, not per message). A title row has rowid
        -- -conversation_id, so a rename replaces it; a renamed participant's new name is
        -- added and the old one stays findable.
        CREATE VIRTUAL TABLE names_fts USING fts5(
            text, conversation_id UNINDEXED, tokenize = 'unicode61 remove_diacritics 2',
            detail = none, columnsize = 0
        );
        INSERT INTO names_fts (rowid, text, conversation_id)
            SELECT -id, title, id FROM conversations WHERE title IS NOT NULL;
        INSERT INTO names_fts (text, conversation_id)
            SELECT p.name || ' ' || COALESCE(p.handle, ''), p.conversation_id FROM participants p
            WHERE EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = p.conversation_id
                          AND m.sender_id = p.sender_id AND m.held = 0);
        CREATE TRIGGER names_fts_title_insert AFTER INSERT ON conversations
        WHEN new.title IS NOT NULL BEGIN
            INSERT INTO names_fts (rowid, text, conversation_id)
                VALUES (-new.id, new.title, new.id);
        END;
        CREATE TRIGGER names_fts_title_update AFTER UPDATE OF title ON conversations
        WHEN old.title IS NOT new.title BEGIN
            DELETE FROM names_fts WHERE rowid = -old.id;
            INSERT INTO names_fts (rowid, text, conversation_id)
                SELECT -new.id, new.title, new.id WHERE new.title IS NOT NULL;
        END;
        -- a participant whose first message was held is not indexed (the write path inserts
        -- messages before participants, so the row is there to look at)
        CREATE TRIGGER names_fts_participant_insert AFTER INSERT ON participants
        WHEN EXISTS (SELECT 1 FROM messages WHERE conversation_id = new.conversation_id
                     AND seq = new.first_seq AND held = 0) BEGIN
            INSERT INTO names_fts (text, conversation_id)
                VALUES (new.name || ' ' || COALESCE(new.handle, ''), new.conversation_id);
        END;
        CREATE TRIGGER names_fts_participant_rename AFTER UPDATE OF name, handle ON participants
        WHEN (old.name IS NOT new.name OR old.handle IS NOT new.handle) BEGIN
            INSERT INTO names_fts (text, conversation_id)
                VALUES (new.name || ' ' || COALESCE(new.handle, ''), new.conversation_id);
        END;

        -- which conversation a cross-conversation send came from (NULL: its own run)
        ALTER TABLE outbox ADD COLUMN origin TEXT;
        """
    )


def m006_asks(db: apsw.Connection) -> None:
    db.execute(
        """
        -- questions asked to other agents (ask_agent), written before the question is sent;
        -- an answer is matched by reply target, else to the oldest open ask of the session
        CREATE TABLE asks (
            id INTEGER PRIMARY KEY,
            origin_conversation_id INTEGER NOT NULL,
            origin_seq INTEGER,
            peer_conversation_id INTEGER NOT NULL,
            question TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending',
            asked_at REAL NOT NULL,
            deadline REAL NOT NULL,
            message_seq INTEGER,
            outbox_id INTEGER,
            reason TEXT,
            answer_seq INTEGER,
            matched_at REAL,
            reported_at REAL,
            expiry_reported_at REAL
        );
        CREATE INDEX asks_session ON asks (peer_conversation_id, id);
        CREATE INDEX asks_origin ON asks (origin_conversation_id, id);
        -- the few rows that still need work: open, awaiting a report or an expiry notice
        CREATE INDEX asks_open ON asks (deadline) WHERE reported_at IS NULL;
        """
    )


def m007_thread_addresses(db: apsw.Connection) -> None:
    """Move threads stored as their own chat (old Discord shape) to chat=<parent>, thread=<id>.

    A conversation of kind 'thread' with an empty thread whose meta, or one of
    its messages' meta, names a ``parent_channel_id`` becomes ``(account,
    parent, thread=<old chat>)``; everything else hangs off its id and moves
    with it. The parent key is dropped, the address now says it. Such a
    conversation without a recorded parent, or whose new address is already
    taken, stays as it was.
    """
    candidates = list(
        db.execute(
            "SELECT id, account, chat, meta FROM conversations WHERE kind = 'thread' AND thread = ''"
        )
    )
    for conversation_id, account, chat, meta in candidates:
        messages = list(
            db.execute(
                "SELECT seq, meta FROM messages WHERE conversation_id = ? AND meta LIKE ?",
                (conversation_id, f"%{PARENT_KEY}%"),
            )
        )
        parent = parent_in([meta, *(row[1] for row in messages)])
        if parent is None or parent == chat:
            continue
        taken = db.execute(
            "SELECT 1 FROM conversations WHERE account = ? AND chat = ? AND thread = ?",
            (account, parent, chat),
        ).fetchone()
        if taken:
            continue
        db.execute(
            "UPDATE conversations SET chat = ?, thread = ?, meta = ? WHERE id = ?",
            (parent, chat, without_parent(meta) or "{}", conversation_id),
        )
        for seq, message_meta in messages:
            db.execute(
                "UPDATE messages SET meta = ? WHERE conversation_id = ? AND seq = ?",
                (without_parent(message_meta), conversation_id, seq),
            )


def m008_fewer_conversation_indexes(db: apsw.Connection) -> None:
    """Drop the two indexes on `conversations` that every stored message rewrote.

    `conversations_active` (recency) moved its conversation's entry on every
    message: a delete on a leaf page anywhere, an insert on the newest one.
    `conversations_unhandled` (a partial index on trigger_seq) did the same
    for every message that triggers, and again when its run was done. In a
    100-event transaction over 100 conversations they were a third of the
    pages written. What read them is rare: the "most recent conversations"
    lists, and the look for owed runs when `serve` starts; a scan of the
    conversations table serves both.
    """
    db.execute("DROP INDEX IF EXISTS conversations_active")
    db.execute("DROP INDEX IF EXISTS conversations_unhandled")


def m009_outbox_seen_seq(db: apsw.Connection) -> None:
    """Record on each outbox row the newest seq its run had seen when it asked for it.

    What decides, after a crash, whether our message answers a trigger: a run
    that sent it after seeing the trigger (Store.answers_after). The run's own
    `upto_seq` is not enough: a run that took newer messages mid-run
    (`new_messages`) had not seen them when it sent what came before. Rows from
    before this column keep NULL (the run's `upto_seq` stands in).
    """
    db.execute("ALTER TABLE outbox ADD COLUMN seen_seq INTEGER")


def m010_dead_letter_deliveries(db: apsw.Connection) -> None:
    """One dead letter per unreadable payload, however often it is delivered.

    A platform redelivers what it was not told it got (a poll offset not yet
    confirmed, a webhook answered by a process that then died): each delivery
    of the same unreadable payload used to add a row. `digest` names the
    payload (its ref and kept copy); a repeat replaces the row with one that
    counts it (`deliveries`) and keeps when it was first seen (`first_at`).
    Rows from before this column keep NULL and are never matched.
    """
    db.execute(
        """
        ALTER TABLE dead_letters ADD COLUMN digest TEXT;
        ALTER TABLE dead_letters ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 1;
        ALTER TABLE dead_letters ADD COLUMN first_at REAL;
        CREATE UNIQUE INDEX dead_letters_digest ON dead_letters (account, digest);
        """
    )


def m011_outbox_run_index(db: apsw.Connection) -> None:
    """Index outbox rows by the run that asked for them.

    A run cut short after it sent into another conversation (send_to_conversation)
    must not be offered its trigger again: the next run looks up what the last
    runs of its conversation sent elsewhere (Store.sent_elsewhere_after).
    """
    db.execute("CREATE INDEX outbox_run ON outbox (run_id) WHERE run_id IS NOT NULL")


def m012_held_rename_not_searchable(db: apsw.Connection) -> None:
    """A held sender's new name is not made searchable either.

    m003's rename trigger indexed every rename, so a sender the policy holds
    back became findable by search once their name changed. It now indexes a
    rename only as the insert trigger indexes a name: when the participant's
    first message is visible. (A name a held sender was renamed to before this
    migration stays in the index.)
    """
    db.execute(
        """
        DROP TRIGGER names_fts_participant_rename;
        CREATE TRIGGER names_fts_participant_rename AFTER UPDATE OF name, handle ON participants
        WHEN (old.name IS NOT new.name OR old.handle IS NOT new.handle)
            AND EXISTS (SELECT 1 FROM messages WHERE conversation_id = new.conversation_id
                        AND seq = new.first_seq AND held = 0) BEGIN
            INSERT INTO names_fts (text, conversation_id)
                VALUES (new.name || ' ' || COALESCE(new.handle, ''), new.conversation_id);
        END;
        """
    )


def m014_outbox_by_message_seq(db: apsw.Connection) -> None:
    """Index a conversation's message sends by their transcript seq.

    A run owed to a bot's message asks which of the last messages of ours spoke for
    another conversation (Store.sent_for_others, for bot_turns): by the conversation
    alone, that read every outbox row the conversation ever had. The index by
    conversation stays: its rows in id order serve the outbox listings.
    """
    db.execute(
        "CREATE INDEX outbox_message_seq ON outbox (conversation_id, message_seq)"
        " WHERE message_seq IS NOT NULL"
    )


def m013_message_parts(db: apsw.Connection) -> None:
    """Every part of a message of ours the platform got split, so a reply or a reaction to a
    later part finds the message.

    A text over the channel's limit goes out as several platform messages; the
    transcript row carries the first's id (the others in meta ``part_ids``).
    Someone replying to the second part named an id no row had: the reply lost
    its target (and an ask's answer its question), a reaction was dropped.
    Filled from the part ids already stored.
    """
    db.execute(
        """
        CREATE TABLE message_parts (
            conversation_id INTEGER NOT NULL,
            platform_message_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            PRIMARY KEY (conversation_id, platform_message_id)
        ) WITHOUT ROWID;
        INSERT OR IGNORE INTO message_parts (conversation_id, platform_message_id, seq)
            SELECT m.conversation_id, CAST(part.value AS TEXT), m.seq
            FROM messages m, json_each(m.meta, '$.part_ids') part
            WHERE m.direction = 'out' AND m.meta LIKE '%"part_ids"%' AND json_valid(m.meta)
                AND part.key > 0;
        """
    )


def m015_early_deletes(db: apsw.Connection) -> None:
    """Deletes that came before their message, so that the message arrives deleted.

    Deliveries race (a webhook's come over many connections at once): a message
    deleted at once could have its delete stored first, found nothing, and the
    message then stayed in the transcript and was answered. A message arriving
    looks here only while its conversation has early changes waiting (the
    ``orphan_edits`` count, which now counts these too).
    """
    db.execute(
        """
        CREATE TABLE early_deletes (
            conversation_id INTEGER NOT NULL,
            platform_message_id TEXT NOT NULL,
            at REAL NOT NULL,
            PRIMARY KEY (conversation_id, platform_message_id)
        ) WITHOUT ROWID
        """
    )


def m016_early_reactions(db: apsw.Connection) -> None:
    """Reactions that came before their message, so that the message arrives with them.

    As with deletes (m015), a reaction delivered before its message found no row
    and was lost. They wait here in the order they came (``n``), counted in the
    conversation's ``orphan_edits`` like the other early changes.
    """
    db.execute(
        """
        CREATE TABLE early_reactions (
            n INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL,
            platform_message_id TEXT NOT NULL,
            reaction TEXT NOT NULL,
            at REAL NOT NULL
        );
        CREATE INDEX early_reactions_message
            ON early_reactions (conversation_id, platform_message_id);
        """
    )


def m017_ask_sends(db: apsw.Connection) -> None:
    """Which send reported an ask's answer, or its expiry: a send failed without ever
    being tried (a stop, or a SIGKILL, while it waited out a rate limit) gives its claim
    back, so the report is made again (as PostgreSQL's pg020)."""
    db.execute(
        """
        ALTER TABLE asks ADD COLUMN report_outbox_id INTEGER;
        ALTER TABLE asks ADD COLUMN expiry_outbox_id INTEGER;
        CREATE INDEX asks_outbox_id ON asks (outbox_id) WHERE outbox_id IS NOT NULL;
        CREATE INDEX asks_report_outbox_id ON asks (report_outbox_id)
            WHERE report_outbox_id IS NOT NULL;
        CREATE INDEX asks_expiry_outbox_id ON asks (expiry_outbox_id)
            WHERE expiry_outbox_id IS NOT NULL;
        """
    )


MIGRATIONS: list[Migration] = [
    m001_initial,
    m002_visible_index_and_orphan_edits,
    m003_orchestration,
    m006_asks,
    m007_thread_addresses,
    m008_fewer_conversation_indexes,
    m009_outbox_seen_seq,
    m010_dead_letter_deliveries,
    m011_outbox_run_index,
    m012_held_rename_not_searchable,
    m013_message_parts,
    m014_outbox_by_message_seq,
    m015_early_deletes,
    m016_early_reactions,
    m017_ask_sends,
]


def migrate(db: apsw.Connection, extra: Sequence[Migration] | None = None) -> list[str]:
    """Apply the migrations not yet recorded; return the names applied.

    The core's MIGRATIONS come first, then `extra` (default: the ones plugins
    add through the `register_migrations` hook), each recorded by name.
    """
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    done = {row[0] for row in db.execute("SELECT name FROM _migrations")}
    applied = []
    if extra is None:
        extra = plugin_migrations()
    for migration in [*MIGRATIONS, *extra]:
        if migration.__name__ in done:
            continue
        with db:
            migration(db)
            db.execute(
                "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)",
                (migration.__name__, now()),
            )
        applied.append(migration.__name__)
    return applied


def plugin_migrations() -> list[Migration]:
    """Return the migrations plugins register, in registration order; names must be unique."""
    from ..errors import PluginError
    from ..plugins import get_plugin_manager

    pm = get_plugin_manager()
    found: list[Migration] = []
    core_names = {m.__name__ for m in MIGRATIONS}
    for impl in reversed(pm.hook.register_migrations.get_hookimpls()):
        owner = pm.get_name(impl.plugin) or repr(impl.plugin)

        def register(migration: Migration, owner: str = owner) -> None:
            name = getattr(migration, "__name__", "")
            if not name or name in core_names or name in {m.__name__ for m in found}:
                raise PluginError(
                    f"plugin {owner} registers migration {name!r}, a name already taken:"
                    " name plugin migrations <plugin>_mNNN_<what>",
                    plugin=owner,
                )
            found.append(migration)

        impl.function(register=register)
    return found

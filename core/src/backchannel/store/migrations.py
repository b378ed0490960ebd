"""Schema migrations: an ordered list of small functions, each recorded in `_migrations`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import apsw

from ..model import now

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


MIGRATIONS: list[Migration] = [m001_initial, m002_visible_index_and_orphan_edits]


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

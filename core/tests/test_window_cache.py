"""The SQLite store's kept windows (store/windows.py) always equal a fresh read.

Whatever happens between two runs of a conversation (new rows, held rows,
edits, deletes, reactions, our sends and their outcomes, an edit that came
before its original, a batch rolled back, another process writing), the
rows `window_rows` hands over are exactly the rows a fresh query returns.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
from backchannel import Switchboard
from backchannel.model import Outbound, Receipt, Sender
from backchannel.store import Inbound, SQLiteStore
from backchannel.store.windows import read_window
from backchannel.testing.store_contract import ALICE, make_event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ME = Sender("me", "Bot", "bot", True)
BOB = Sender("bob", "Bob", None, False)
CHATS = ("a", "b")

operation = st.one_of(
    st.tuples(st.just("message"), st.sampled_from(CHATS), st.booleans()),
    st.tuples(
        st.sampled_from(["edit", "delete", "reaction"]), st.sampled_from(CHATS), st.integers(0, 30)
    ),
    st.tuples(st.just("orphan edit"), st.sampled_from(CHATS), st.integers(0, 3)),
    st.tuples(
        st.just("send"),
        st.sampled_from(CHATS),
        st.sampled_from(["sent", "failed", "uncertain", "pending"]),
    ),
    st.tuples(st.just("edit ours"), st.sampled_from(CHATS), st.integers(0, 30)),
    st.tuples(st.just("rolled back"), st.sampled_from(CHATS), st.integers(0, 30)),
    st.tuples(st.just("other process"), st.sampled_from(CHATS), st.integers(0, 30)),
    st.tuples(st.just("read"), st.sampled_from(CHATS), st.sampled_from([3, 4, 4, 4, 6])),
    st.tuples(st.just("read back"), st.sampled_from(CHATS), st.integers(1, 40)),
)


class _World:
    """A store and what the operations need to remember about it."""

    def __init__(self, path: Path):
        self.path = path
        self.store = SQLiteStore(path)
        self.number = 0
        #: chat -> platform ids of its inbound messages, and of ours that were sent
        self.ids: dict[str, list[str]] = {chat: [] for chat in CHATS}
        self.ours: dict[str, list[str]] = {chat: [] for chat in CHATS}
        self.orphans: dict[str, list[str]] = {chat: [] for chat in CHATS}

    def fresh(self) -> str:
        self.number += 1
        return f"e{self.number}"

    async def conversation_id(self, chat: str) -> int:
        (result,) = await self.store.append_inbound(
            [Inbound(make_event(self.fresh(), "hello", chat=chat))]
        )
        self.ids[chat].append(f"e{self.number}")
        return result.conversation_id

    async def apply(self, step: tuple[Any, ...], ids: dict[str, int]) -> None:
        kind, chat, value = step
        store = self.store
        conversation_id = ids[chat]
        if kind == "message":
            event_id = self.fresh()
            pending = self.orphans[chat]
            message_id = pending.pop(0) if pending and value is False else event_id
            await store.append_inbound(
                [
                    Inbound(
                        make_event(event_id, f"text {event_id}", chat=chat, message_id=message_id),
                        held=value,
                    )
                ]
            )
            self.ids[chat].append(message_id)
        elif kind in {"edit", "delete", "reaction"}:
            known = self.ids[chat]
            target = known[value % len(known)]
            await store.append_inbound(
                [
                    Inbound(
                        make_event(
                            self.fresh(),
                            f"{kind} {value}",
                            chat=chat,
                            kind=kind,
                            message_id=target,
                            sender=BOB if kind == "reaction" else ALICE,
                        )
                    )
                ]
            )
        elif kind == "orphan edit":
            target = f"later-{chat}-{self.number}-{value}"
            await store.append_inbound(
                [
                    Inbound(
                        make_event(
                            self.fresh(), "edited first", chat=chat, kind="edit", message_id=target
                        )
                    )
                ]
            )
            self.orphans[chat].append(target)
        elif kind == "send":
            conversation = await store.conversation(conversation_id)
            entry = await store.record_outbound(
                conversation_id, Outbound(conversation.address, f"ours {self.number}"), ME
            )
            self.number += 1
            if value == "sent":
                platform_id = f"p{self.number}"
                await store.mark_sent(entry.id, Receipt(platform_id))
                self.ours[chat].append(platform_id)
            elif value == "failed":
                await store.mark_failed(entry.id, "no")
            elif value == "uncertain":
                await store.mark_uncertain(entry.id, "timeout")
        elif kind == "edit ours":
            if not self.ours[chat]:
                return
            target = self.ours[chat][value % len(self.ours[chat])]
            conversation = await store.conversation(conversation_id)
            entry = await store.record_outbound(
                conversation_id,
                Outbound(conversation.address, f"ours edited {value}", kind="edit", target=target),
                ME,
            )
            await store.mark_sent(entry.id, Receipt(target))
        elif kind == "rolled back":
            known = self.ids[chat]
            target = known[value % len(known)]
            bad = make_event(self.fresh(), chat=chat)
            object.__setattr__(bad, "text", object())  # not storable: the batch rolls back
            try:
                await store.append_inbound(
                    [
                        Inbound(
                            make_event(
                                self.fresh(),
                                "never kept",
                                chat=chat,
                                kind="edit",
                                message_id=target,
                            )
                        ),
                        Inbound(bad),
                    ]
                )
            except Exception:
                pass
            else:
                raise AssertionError("the broken batch was accepted")
        elif kind == "other process":
            known = self.ids[chat]
            target = known[value % len(known)]
            other = SQLiteStore(self.path)
            await other.append_inbound(
                [
                    Inbound(
                        make_event(
                            self.fresh(),
                            f"from elsewhere {value}",
                            chat=chat,
                            kind="edit",
                            message_id=target,
                        )
                    )
                ]
            )
            await other.close()
        elif kind == "read":
            conversation = await store.conversation(conversation_id)
            await self.check(conversation_id, value, conversation.last_seq)
        elif kind == "read back":
            await self.check(conversation_id, 4, value)  # may be past last_seq: a history read

    async def check(self, conversation_id: int, limit: int, upto: int) -> None:
        got = await self.store.window_rows(conversation_id, limit, upto)
        assert got == read_window(self.store.db, conversation_id, limit, upto)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=40))
def test_kept_windows_equal_a_fresh_read_after_any_change(steps: list[tuple[Any, ...]]) -> None:
    async def go() -> None:
        with tempfile.TemporaryDirectory() as folder:
            world = _World(Path(folder) / "bc.db")
            ids = {chat: await world.conversation_id(chat) for chat in CHATS}
            try:
                for step in steps:
                    await world.apply(step, ids)
                    for chat in CHATS:  # after every step, as the next run would read
                        last = (await world.store.conversation(ids[chat])).last_seq
                        await world.check(ids[chat], 4, last)
            finally:
                await world.store.close()

    asyncio.run(go())


async def test_a_run_reads_only_the_rows_past_its_kept_window(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    await store.append_inbound([Inbound(make_event(f"e{n}", f"m{n}")) for n in range(1, 11)])
    first = await store.window_rows(1, 5, 10)
    await store.append_inbound([Inbound(make_event("e11", "m11"))])
    statements: list[str] = []

    def trace(cursor: object, sql: str, bindings: object) -> bool:
        statements.append(sql)
        return True

    store.db.exec_trace = trace
    second = await store.window_rows(1, 5, 11)
    store.db.exec_trace = None
    assert [row[1] for row in second] == [7, 8, 9, 10, 11]
    assert all(a is b for a, b in zip(first[1:], second[:4], strict=True))  # the same tuples
    reads = [sql for sql in statements if "FROM messages" in sql]
    assert len(reads) == 1 and "seq > ?" in reads[0]  # only past the kept rows
    await store.close()


async def test_a_seq_not_given_out_yet_is_not_counted_as_read(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    await store.append_inbound([Inbound(make_event("e1", "one"))])
    # a history read far past the end: seq 2 does not exist yet
    assert [row[1] for row in await store.window_rows(1, 5, 1000)] == [1]
    await store.append_inbound([Inbound(make_event("e2", "two"))])
    assert [row[1] for row in await store.window_rows(1, 5, 2)] == [1, 2]
    # the same from a kept window: read past it, then a row is added
    assert [row[1] for row in await store.window_rows(1, 5, 1000)] == [1, 2]
    await store.append_inbound([Inbound(make_event("e3", "three"))])
    assert [row[1] for row in await store.window_rows(1, 5, 3)] == [1, 2, 3]
    await store.append_inbound([Inbound(make_event("e4", "four"))])
    assert [row[1] for row in await store.window_rows(1, 5, 1000)] == [1, 2, 3, 4]
    await store.close()


async def test_reads_inside_a_transaction_are_neither_served_nor_kept(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bc.db")
    await store.append_inbound([Inbound(make_event("e1", "one"))])
    db = store.db
    db.execute("BEGIN IMMEDIATE")
    db.execute("UPDATE messages SET text = 'uncommitted' WHERE seq = 1")
    inside = await store.window_rows(1, 5, 1)
    db.execute("ROLLBACK")
    assert inside[0][8] == "uncommitted"
    assert (await store.window_rows(1, 5, 1))[0][8] == "one"
    await store.close()


@pytest.mark.parametrize("kept", [None, 3, 0])
async def test_the_cache_stays_within_its_configured_bound(
    tmp_path: Path, kept: int | None
) -> None:
    from backchannel.config import KEPT_WINDOWS

    if kept is None:  # the default
        store, bound = SQLiteStore(tmp_path / "bc.db"), KEPT_WINDOWS
    else:
        store, bound = SQLiteStore(tmp_path / "bc.db", kept_windows=kept), kept
    chats = bound + 10
    await store.append_inbound([Inbound(make_event(f"e{n}", chat=f"c{n}")) for n in range(chats)])
    for conversation_id in range(1, chats + 1):
        rows = await store.window_rows(conversation_id, 5, 1)
        assert rows == read_window(store.db, conversation_id, 5, 1)
    assert len(store._windows or ()) == bound
    assert store.keeps_window_rows is (bound > 0)  # a builder keeps lines only then
    await store.close()


def test_kept_windows_comes_from_the_config_and_is_checked(tmp_path: Path) -> None:
    from backchannel.app import open_config_store
    from backchannel.config import parse_config
    from backchannel.errors import ConfigError

    config = parse_config({"store": {"path": str(tmp_path / "bc.db"), "kept_windows": 500}})
    assert config.store.kept_windows == 500
    store = open_config_store(config)
    assert isinstance(store, SQLiteStore) and store.kept_windows == 500
    assert Switchboard(store)._kept_lines.capacity == 500
    assert parse_config({}).store.kept_windows == 64
    with pytest.raises(ConfigError, match=r"store\.kept_windows: expected 0 to 1000000"):
        parse_config({"store": {"kept_windows": -1}})
    with pytest.raises(ConfigError, match=r"store\.kept_windows"):
        parse_config({"store": {"kept_windows": "lots"}})


async def test_a_row_made_visible_or_held_by_any_statement_follows(tmp_path: Path) -> None:
    # no code path releases a held row today; a kept window must not depend on that
    store = SQLiteStore(tmp_path / "bc.db")
    await store.append_inbound(
        [
            Inbound(make_event("e1", "one")),
            Inbound(make_event("e2", "held", sender=BOB), held=True),
            Inbound(make_event("e3", "three")),
        ]
    )
    assert [row[1] for row in await store.window_rows(1, 5, 3)] == [1, 3]
    store.db.execute("UPDATE messages SET held = 0 WHERE seq = 2")
    assert [row[1] for row in await store.window_rows(1, 5, 3)] == [1, 2, 3]
    # and the other way: a row that joins `held` leaves the kept window at once
    store.db.execute("UPDATE messages SET held = 1 WHERE seq = 3")
    assert [row[1] for row in await store.window_rows(1, 5, 3)] == [1, 2]
    await store.close()


async def test_rows_deleted_or_moved_by_any_statement_leave(tmp_path: Path) -> None:
    # no code path deletes rows or moves them between conversations today (a migration
    # might): kept windows must follow anyway
    store = SQLiteStore(tmp_path / "bc.db")
    await store.append_inbound(
        [Inbound(make_event(f"e{n}", chat="a")) for n in range(1, 4)]
        + [Inbound(make_event(f"f{n}", chat="b")) for n in range(1, 3)]
    )
    assert [row[1] for row in await store.window_rows(1, 5, 3)] == [1, 2, 3]
    assert [row[1] for row in await store.window_rows(2, 5, 2)] == [1, 2]
    store.db.execute("DELETE FROM messages WHERE conversation_id = 1 AND seq = 2")
    assert [row[1] for row in await store.window_rows(1, 5, 3)] == [1, 3]
    store.db.execute(
        "UPDATE messages SET conversation_id = 2, seq = 0 WHERE conversation_id = 1 AND seq = 3"
    )
    assert [row[1] for row in await store.window_rows(1, 5, 3)] == [1]
    assert [row[1] for row in await store.window_rows(2, 5, 2)] == [0, 1, 2]
    await store.close()


async def test_other_reads_leave_a_runs_kept_window_alone(tmp_path: Path) -> None:
    # history, a listing's look into a conversation: fresh reads, never kept in place of
    # the run's window (which would make the next run read its whole window again)
    store = SQLiteStore(tmp_path / "bc.db")
    await store.append_inbound([Inbound(make_event(f"e{n}", f"m{n}")) for n in range(1, 11)])
    await store.window_rows(1, 5, 10)
    assert [m.seq for m in await store.history(1, 6, 2)] == [4, 5]
    assert [m.seq for m in await store.window(1, 3, 4)] == [2, 3, 4]
    await store.append_inbound([Inbound(make_event("e11", "m11"))])
    statements: list[str] = []

    def trace(cursor: object, sql: str, bindings: object) -> bool:
        statements.append(sql)
        return True

    store.db.exec_trace = trace
    rows = await store.window_rows(1, 5, 11)
    store.db.exec_trace = None
    assert [row[1] for row in rows] == [7, 8, 9, 10, 11]
    reads = [sql for sql in statements if "FROM messages" in sql]
    assert len(reads) == 1 and "seq > ?" in reads[0]  # only past the kept rows
    await store.close()

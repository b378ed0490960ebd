"""In serve: the owner's replies reach the parent's session; nobody else steers; notices."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from backchannel.app import build_switchboard
from backchannel.model import Address
from backchannel.switchboard import Switchboard
from backchannel_owner.api import mark_delivered, notify, request_permission
from backchannel_owner.inbox import list_markers
from backchannel_owner.records import OwnerMessage, OwnerRecords

from .conftest import OwnerWorld, identity

Start = Callable[..., Awaitable[Switchboard]]


@pytest.fixture
async def start(world: OwnerWorld) -> AsyncIterator[Start]:
    boards: list[Switchboard] = []

    async def make(**owner: Any) -> Switchboard:
        if owner:
            world.write_config(**owner)
        board = await build_switchboard(world.config, serve_http=False)
        await board.start()
        boards.append(board)
        return board

    yield make
    for board in boards:
        await board.stop()


def rows(board: Switchboard, direction: str = "in") -> list[OwnerMessage]:
    records = OwnerRecords(board.store.db)  # type: ignore[attr-defined]
    return [m for m in records._all("ORDER BY created_at", ()) if m.direction == direction]


async def say(
    world: OwnerWorld, chat: dict[str, Any], user: dict[str, Any], text: str, **kw: Any
) -> dict[str, Any]:
    """Inject a message and return once the bot acked it (its ingest committed)."""
    update = world.fake.inject_message(chat, user, text, **kw)
    await world.fake.wait_for(lambda: world.fake.is_acked(update["update_id"]), what="the ack")
    return update


async def test_a_native_reply_reaches_the_session_before_the_ack(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    board = await start()
    sent = await notify(world.config, "which db?", needs_answer=True, identity=identity())
    message_id = world.fake.sent[-1].message_id
    await say(world, world.owner_chat, world.owner, "postgres", reply_to=message_id)
    (routed,) = rows(board)
    assert (routed.session_id, routed.parent_id, routed.text, routed.status) == (
        identity().session_id,
        sent.id,
        "postgres",
        "waiting",
    )
    (marker,) = list_markers(identity().session_id, inbox_root)
    assert (marker.id, marker.text, marker.parent_id) == (routed.id, "postgres", sent.id)
    conversation = await board.store.find_conversation(Address("tg", str(world.owner_chat["id"])))
    assert conversation is not None and conversation.trigger_seq == 0  # no agent run
    # in the transcript, marked as taken: a watch of this chat does not hand it on again
    (stored,) = [m for m in await board.store.window(conversation.id, 10) if m.direction == "in"]
    assert stored.text == "postgres" and stored.meta.get("routed") is True
    await board.wait_idle()
    assert len(world.fake.sent) == 1


async def test_a_leading_hash_id_routes_and_is_stripped(world: OwnerWorld, start: Start) -> None:
    board = await start()
    sent = await notify(world.config, "fyi", identity=identity())
    await say(world, world.owner_chat, world.owner, f"#{sent.id.upper()} switch to validation")
    (routed,) = rows(board)
    assert (routed.parent_id, routed.text) == (sent.id, "switch to validation")


async def test_the_native_reply_wins_over_a_leading_id(world: OwnerWorld, start: Start) -> None:
    board = await start()
    first = await notify(world.config, "first", needs_answer=True, identity=identity("s-1"))
    first_platform = world.fake.sent[-1].message_id
    second = await notify(world.config, "second", needs_answer=True, identity=identity("s-2"))
    await say(world, world.owner_chat, world.owner, f"#{second.id} hi", reply_to=first_platform)
    (routed,) = rows(board)
    assert (routed.session_id, routed.parent_id) == ("s-1", first.id)


async def test_a_redelivered_reply_is_routed_once(world: OwnerWorld, start: Start) -> None:
    board = await start()
    sent = await notify(world.config, "fyi", identity=identity())
    update = await say(world, world.owner_chat, world.owner, f"#{sent.id} go")
    world.fake.deliver_again(update["update_id"])
    await say(world, world.owner_chat, world.owner, "plain message after")
    assert len(rows(board)) == 1


async def test_a_stranger_or_another_chat_is_refused_and_held(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    board = await start()
    sent = await notify(world.config, "fyi", identity=identity())
    await say(world, world.group, world.stranger, f"#{sent.id} rm -rf it all")
    await say(world, world.group, world.owner, f"#{sent.id} from the wrong chat")
    assert rows(board) == []
    assert list_markers(identity().session_id, inbox_root) == []
    group = await board.store.find_conversation(Address("tg", str(world.group["id"])))
    assert group is not None and group.held_count == 2 and group.trigger_seq == 0


async def test_without_owner_user_inbound_is_refused_and_serve_says_so_once(
    world: OwnerWorld, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="backchannel.owner"):
        board = await start(user=None)
    sent = await notify(world.config, "fyi", identity=identity())
    await say(world, world.owner_chat, world.owner, f"#{sent.id} go")
    assert rows(board) == []
    duplex_lines = [r.message for r in caplog.records if "owner duplex is off" in r.message]
    assert len(duplex_lines) == 1 and "owner.user" in duplex_lines[0]


async def test_an_unknown_id_gets_one_correction_per_chat_per_minute(
    world: OwnerWorld, start: Start
) -> None:
    board = await start()
    await say(world, world.owner_chat, world.owner, "#zzzzz go")
    await world.fake.wait_for(
        lambda: any("#zzzzz is not a message I sent" in s.text for s in world.fake.sent),
        what="the correction",
    )
    await say(world, world.owner_chat, world.owner, "#yyyyy go")
    await board.wait_idle()
    corrections = [s.text for s in world.fake.sent if "is not a message I sent" in s.text]
    assert corrections == ["#zzzzz is not a message I sent — check the id"]


async def test_the_same_unknown_id_is_corrected_once_an_hour(
    world: OwnerWorld, start: Start
) -> None:
    board = await start(correction_per_chat=0.000001)
    await say(world, world.owner_chat, world.owner, "#zzzzz go")
    await say(world, world.owner_chat, world.owner, "#zzzzz again")
    await say(world, world.owner_chat, world.owner, "#yyyyy go")
    await world.fake.wait_for(
        lambda: any("#yyyyy is not" in s.text for s in world.fake.sent), what="2nd correction"
    )
    await board.wait_idle()
    corrections = [s.text for s in world.fake.sent if "is not a message I sent" in s.text]
    assert len(corrections) == 2


async def test_staleness_notices_fire_once_per_edge_and_survive_a_restart(
    world: OwnerWorld, start: Start
) -> None:
    board = await start(stale_after=0.3, late_after=3)
    sent = await notify(world.config, "fyi", identity=identity())
    await say(world, world.owner_chat, world.owner, f"#{sent.id} are you there?")

    def notices() -> list[str]:
        return [s.text for s in world.fake.sent if "hasn't picked your message" in s.text]

    await world.fake.wait_for(lambda: len(notices()) == 1, what="the 5-minute notice")
    (routed,) = rows(board)
    assert routed.stale_notice_at is not None
    assert notices()[0].endswith(f"that session hasn't picked your message #{routed.id} up yet")
    await board.stop()
    board = await start()  # restart: the stamped edge is not repeated, the next one is armed
    await world.fake.wait_for(lambda: len(notices()) == 2, 10, what="the 24-hour notice")
    assert "after a day" in notices()[1]
    assert rows(board)[0].late_notice_at is not None


async def test_a_delivered_message_gets_no_notice(world: OwnerWorld, start: Start) -> None:
    board = await start(stale_after=0.3)
    from backchannel_owner.router import OwnerDuplex

    duplex = next(s for s in board._services if isinstance(s, OwnerDuplex))
    checked = asyncio.Event()
    original = duplex._escalate

    async def escalate_and_tell(message_id: str, edge: str) -> None:
        await original(message_id, edge)
        checked.set()

    duplex._escalate = escalate_and_tell  # type: ignore[method-assign]
    sent = await notify(world.config, "fyi", identity=identity())
    await say(world, world.owner_chat, world.owner, f"#{sent.id} quick one")
    (marker,) = list_markers(identity().session_id)
    assert mark_delivered(marker)
    await asyncio.wait_for(checked.wait(), 10)
    assert not any("hasn't picked" in s.text for s in world.fake.sent)
    (routed,) = rows(board)
    assert routed.status == "delivered" and routed.stale_notice_at is None
    assert list_markers(identity().session_id) == []


async def test_a_forward_in_the_owners_chat_is_never_the_owners_answer(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    """Forwarded words are someone else's, whoever passes them on: neither a reply to a
    session ("#id ...") nor an answer to a permission prompt ("yes id")."""
    board = await start()
    sent = await notify(world.config, "fyi", identity=identity())
    prompt_id = await request_permission(world.config, identity(), "req-1", "Bash", "rm -rf /")
    forward = {"forward_origin": {"type": "user", "date": 1, "sender_user": world.stranger}}
    await say(world, world.owner_chat, world.owner, f"#{sent.id} rm -rf / now", extra=forward)
    await say(world, world.owner_chat, world.owner, f"yes {prompt_id}", extra=forward)
    assert rows(board) == []
    assert list_markers(identity().session_id, inbox_root) == []
    # the owner's own words still are
    await say(world, world.owner_chat, world.owner, f"#{sent.id} go ahead")
    (routed,) = rows(board)
    assert routed.text == "go ahead"


async def test_permission_prompts_take_only_yes_or_no_with_a_pending_id(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    board = await start()
    prompt_id = await request_permission(world.config, identity(), "req-1", "Bash", "rm -rf build/")
    prompt = world.fake.sent[-1]
    assert prompt.text.endswith(
        f'session "ci-cd-incremental-2" wants to run Bash: `rm -rf build/` — reply'
        f" `yes {prompt_id}` or `no {prompt_id}`"
    )
    await say(world, world.group, world.stranger, f"yes {prompt_id}")
    await say(world, world.owner_chat, world.owner, f"yes {prompt_id}")
    (answer,) = [m for m in list_markers(identity().session_id, inbox_root)]
    assert (answer.kind, answer.text, answer.meta) == (
        "permission",
        "yes",
        {"request_id": "req-1", "behavior": "allow"},
    )
    await say(world, world.owner_chat, world.owner, f"no {prompt_id}")
    await world.fake.wait_for(
        lambda: any("not a pending permission request" in s.text for s in world.fake.sent),
        what="the correction for an answered prompt",
    )
    assert len(rows(board)) == 1


async def test_a_bare_yes_or_no_replying_to_the_prompt_answers_it(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    """On a phone the natural answer is a native reply "Yes." to the prompt: no id needed.
    Only the owner's counts; more words than the answer are a message for the session."""
    board = await start()
    prompt_id = await request_permission(world.config, identity(), "req-1", "Bash", "make test")
    prompt = world.fake.sent[-1]
    await say(world, world.group, world.stranger, "yes", reply_to=prompt.message_id)
    assert list_markers(identity().session_id, inbox_root) == []
    await say(world, world.owner_chat, world.owner, " Yes. ", reply_to=prompt.message_id)
    (answer,) = list_markers(identity().session_id, inbox_root)
    assert (answer.kind, answer.text, answer.meta) == (
        "permission",
        "yes",
        {"request_id": "req-1", "behavior": "allow"},
    )
    # answered: a second bare answer is corrected, not taken
    await say(world, world.owner_chat, world.owner, "no", reply_to=prompt.message_id)
    await world.fake.wait_for(
        lambda: any(f"#{prompt_id} is not a pending" in s.text for s in world.fake.sent),
        what="the correction for an answered prompt",
    )
    second = await request_permission(world.config, identity(), "req-2", "Bash", "rm x")
    await say(
        world,
        world.owner_chat,
        world.owner,
        "yes but not x",
        reply_to=world.fake.sent[-1].message_id,
    )
    kinds = sorted((m.kind, m.text) for m in rows(board))
    assert kinds == [("message", "yes but not x"), ("permission", "yes")], second


async def test_an_expired_permission_prompt_is_corrected_not_answered(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    await start(permission_ttl=0.000001)
    prompt_id = await request_permission(world.config, identity(), "req-9", "Bash", "make")
    await say(world, world.owner_chat, world.owner, f"no {prompt_id}")
    await world.fake.wait_for(
        lambda: any(f"#{prompt_id} is not a pending permission" in s.text for s in world.fake.sent),
        what="the correction",
    )
    assert list_markers(identity().session_id, inbox_root) == []


async def test_serve_start_rebuilds_markers_from_the_store_and_prunes_old_rows(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    import time

    from backchannel_owner.inbox import InboxItem, remove_marker, write_marker

    board = await start()
    sent = await notify(world.config, "fyi", identity=identity())
    await say(world, world.owner_chat, world.owner, f"#{sent.id} keep this")
    (marker,) = list_markers(identity().session_id, inbox_root)
    remove_marker(marker)  # a lost cache ...
    stale = InboxItem({**marker.to_json(), "id": "zzzzz"})
    write_marker(stale, inbox_root)  # ... and a marker the store no longer backs
    records = OwnerRecords(board.store.db)  # type: ignore[attr-defined]
    old = records.insert_message(
        time.time() - 31 * 86400,
        session_id="s-old",
        direction="out",
        kind="fyi",
        account="tg",
        chat="1",
        text="a month ago",
        status="sent",
    )
    await board.stop()
    board = await start()
    assert [m.id for m in list_markers(identity().session_id, inbox_root)] == [marker.id]
    assert OwnerRecords(board.store.db).get(old.id) is None  # type: ignore[attr-defined]


async def test_the_owner_is_told_when_a_message_is_parked(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    from backchannel_owner.api import tell_owner_parked

    await start()
    sent = await notify(world.config, "fyi", identity=identity())
    await say(world, world.owner_chat, world.owner, f"#{sent.id} did you get this?")
    (marker,) = list_markers(identity().session_id, inbox_root)
    assert marker.config == str(world.config_path.resolve())
    # the hook is a separate, synchronous process: it runs its own event loop
    await asyncio.to_thread(tell_owner_parked, marker)
    assert world.fake.sent[-1].text == (
        f'{sent.mark} "ci-cd-incremental-2": your message #{marker.id} could not be delivered'
        " to that session (offered 3 times without confirmation); send it again when the"
        " session is back"
    )


def test_on_postgresql_the_duplex_says_once_that_it_is_off(
    world: OwnerWorld, caplog: pytest.LogCaptureFixture
) -> None:
    from backchannel.agents.demo import demo_agent
    from backchannel.store import SQLiteStore
    from backchannel.switchboard import Binding
    from backchannel_owner.plugin import configure_switchboard
    from backchannel_telegram import TelegramAdapter

    text = world.config_path.read_text(encoding="utf-8")
    path_line = next(line for line in text.splitlines() if line.startswith("path = "))
    world.config_path.write_text(
        text.replace(path_line, 'url = "postgresql://127.0.0.1:1/none"'), encoding="utf-8"
    )
    config = world.config
    board = Switchboard(SQLiteStore(world.tmp / "scratch.db"))
    board.add_account(TelegramAdapter("tg", world.fake.settings()), Binding(demo_agent))
    with caplog.at_level("WARNING", logger="backchannel.owner"):
        configure_switchboard(board, config)
    assert [r.getMessage() for r in caplog.records if "owner duplex is off" in r.getMessage()]
    assert "tg" not in board._routers  # no inbound router: replies are plain messages


def test_parked_items_of_two_stores_are_told_each_through_its_own_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One inbox folder holds the markers of every store delivering to it: each parked
    item's notice goes through its own config's owner account and store."""
    from types import SimpleNamespace

    import backchannel.config
    from backchannel_owner import api
    from backchannel_owner.inbox import InboxItem

    told: list[tuple[str, str, str]] = []
    monkeypatch.setattr(backchannel.config, "load_config", lambda path, **_: f"config:{path}")
    monkeypatch.setattr(
        api.OwnerSettings,
        "from_config",
        staticmethod(
            lambda config: SimpleNamespace(account=f"acct:{config}", chat="1", timeout=5.0)
        ),
    )

    class Store:
        def __init__(self, config: str) -> None:
            self.config, self.db = config, None

        async def close(self) -> None:
            pass

    monkeypatch.setattr(api, "open_sqlite_store", Store)
    monkeypatch.setattr(api, "OwnerRecords", lambda db: SimpleNamespace(session=lambda s: ("m", s)))

    async def deliver(config: str, settings: Any, store: Store, outbound: Any) -> Any:
        told.append((config, store.config, outbound.address.account))
        return api.Delivery("sent", "p1", None, "direct")

    monkeypatch.setattr(api, "deliver_to_owner", deliver)

    def item(n: int, config: str) -> InboxItem:
        return InboxItem(
            {"id": f"i{n}", "session_id": "s", "store": f"{config}.db", "config": config}
        )

    api.tell_owner_parked([item(1, "a.toml"), item(2, "b.toml"), item(3, "a.toml")])
    assert told == [
        ("config:a.toml", "config:a.toml", "acct:config:a.toml"),
        ("config:a.toml", "config:a.toml", "acct:config:a.toml"),
        ("config:b.toml", "config:b.toml", "acct:config:b.toml"),
    ]


async def test_a_native_reply_to_a_later_part_of_a_long_notify_reaches_the_session(
    world: OwnerWorld, start: Start
) -> None:
    # Telegram holds 4,096 characters a message: a long notify is several, and the owner
    # replies to the one on screen, the last
    board = await start()
    before = len(world.fake.sent)
    sent = await notify(
        world.config, "status: " + "lorem ipsum " * 500, needs_answer=True, identity=identity()
    )
    parts = world.fake.sent[before:]
    assert len(parts) == 2
    await say(
        world, world.owner_chat, world.owner, "validation first", reply_to=parts[-1].message_id
    )
    (routed,) = rows(board)
    assert (routed.parent_id, routed.text) == (sent.id, "validation first")
    await board.wait_idle()
    assert len(world.fake.sent) == before + 2  # routed: the bound agent did not answer


async def test_an_answer_whose_row_failed_once_is_taken_when_delivered_again(
    world: OwnerWorld, start: Start, inbox_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a failure (a database busy, a crash) after the prompt was marked answered and before
    # its answer was written made the redelivered answer read as one to an answered prompt
    board = await start()
    prompt_id = await request_permission(world.config, identity(), "req-1", "Bash", "make")
    real = OwnerRecords.insert_message
    failed: list[str] = []

    def once(self: OwnerRecords, now: float, **fields: Any) -> OwnerMessage:
        if not failed:
            failed.append(fields["kind"])
            raise RuntimeError("database is locked")
        return real(self, now, **fields)

    monkeypatch.setattr(OwnerRecords, "insert_message", once)
    await say(world, world.owner_chat, world.owner, f"yes {prompt_id}")
    assert failed == ["permission"]
    (answer,) = list_markers(identity().session_id, inbox_root)
    assert (answer.kind, answer.text) == ("permission", "yes")
    await board.wait_idle()
    assert not any("not a pending" in s.text for s in world.fake.sent)


async def test_a_routed_reply_whose_marker_failed_gets_it_when_delivered_again(
    world: OwnerWorld, start: Start, inbox_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backchannel_owner import router

    await start()
    sent = await notify(world.config, "fyi", identity=identity())
    real = router.write_marker
    failed: list[str] = []

    def disk_full_once(item: Any, root: Path | None = None) -> Path:
        if not failed:
            failed.append(item.text)
            raise OSError(28, "No space left on device")
        return real(item, root)

    monkeypatch.setattr(router, "write_marker", disk_full_once)
    await say(world, world.owner_chat, world.owner, f"#{sent.id} stop now")
    assert failed == ["stop now"]
    (marker,) = list_markers(identity().session_id, inbox_root)
    assert marker.text == "stop now"


async def test_the_owners_edit_of_a_routed_reply_reaches_the_session_as_a_new_message(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    board = await start()
    sent = await notify(world.config, "fyi", identity=identity())
    update = await say(world, world.owner_chat, world.owner, f"#{sent.id} deploy to staging")
    edit = world.fake.inject_edit(
        world.owner_chat, update["message"]["message_id"], f"#{sent.id} deploy to PROD"
    )
    await world.fake.wait_for(lambda: world.fake.is_acked(edit["update_id"]), what="the ack")
    first, edited = rows(board)
    assert first.text == "deploy to staging"
    assert (edited.session_id, edited.parent_id, edited.text) == (
        identity().session_id,
        sent.id,
        f"(edited #{first.id}) deploy to PROD",
    )
    markers = sorted(m.text for m in list_markers(identity().session_id, inbox_root))
    assert markers == [f"(edited #{first.id}) deploy to PROD", "deploy to staging"]
    world.fake.deliver_again(edit["update_id"])
    await say(world, world.owner_chat, world.owner, "plain message after")
    assert len(rows(board)) == 2  # the redelivered edit is routed once
    # a stranger's edit of their own message is no steering, and no other edit is taken
    await board.wait_idle()
    conversation = await board.store.find_conversation(Address("tg", str(world.owner_chat["id"])))
    assert conversation is not None
    stored = [m for m in await board.store.window(conversation.id, 10) if m.direction == "in"]
    assert stored[0].text == f"#{sent.id} deploy to PROD"  # the transcript has the edit too


async def test_an_edit_of_a_permission_answer_changes_nothing_and_the_owner_is_told(
    world: OwnerWorld, start: Start, inbox_root: Path
) -> None:
    board = await start()
    prompt_id = await request_permission(world.config, identity(), "req-1", "Bash", "make")
    update = await say(world, world.owner_chat, world.owner, f"yes {prompt_id}")
    edit = world.fake.inject_edit(
        world.owner_chat, update["message"]["message_id"], f"no {prompt_id}"
    )
    await world.fake.wait_for(lambda: world.fake.is_acked(edit["update_id"]), what="the ack")
    await world.fake.wait_for(
        lambda: any("an edit does not change the answer" in s.text for s in world.fake.sent),
        what="the notice",
    )
    (answer,) = rows(board)
    assert (answer.kind, answer.text) == ("permission", "yes")
    # delivered again (a webhook's retry, a restart before the offset moved): told once
    world.fake.deliver_again(edit["update_id"])
    await say(world, world.owner_chat, world.owner, "after the redelivery")  # in order
    await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name() == "owner-notice"))
    notices = [s for s in world.fake.sent if "an edit does not change the answer" in s.text]
    assert len(notices) == 1


async def test_a_bot_showing_the_owners_id_is_never_the_owner(
    world: OwnerWorld, start: Start
) -> None:
    board = await start()
    sent = await notify(world.config, "fyi", identity=identity())
    await say(world, world.owner_chat, {**world.owner, "is_bot": True}, f"#{sent.id} rm -rf /")
    assert rows(board) == []


async def test_words_that_read_as_an_id_get_no_correction_unless_written_as_one(
    world: OwnerWorld, start: Start
) -> None:
    # "yes maybe" is someone talking, not an answer to prompt #maybe
    board = await start()
    await say(world, world.owner_chat, world.owner, "yes maybe")
    await say(world, world.owner_chat, world.owner, "no sorry")
    await board.wait_idle()
    assert not any("is not a message I sent" in s.text for s in world.fake.sent)
    await say(world, world.owner_chat, world.owner, "yes #m7k3q")  # written as an id
    await world.fake.wait_for(
        lambda: any("#m7k3q is not a message I sent" in s.text for s in world.fake.sent),
        what="the correction",
    )
    assert rows(board) == []


async def test_a_mistyped_id_while_a_prompt_waits_is_corrected(
    world: OwnerWorld, start: Start
) -> None:
    # with a prompt waiting for an answer, "yes zzzzz" is the owner answering it wrong
    board = await start()
    prompt_id = await request_permission(world.config, identity(), "req-1", "Bash", "make")
    wrong = "zzzzz" if prompt_id != "zzzzz" else "yyyyy"
    await say(world, world.owner_chat, world.owner, f"yes {wrong}")
    await world.fake.wait_for(
        lambda: any(f"#{wrong} is not a message I sent" in s.text for s in world.fake.sent),
        what="the correction",
    )
    assert rows(board) == []

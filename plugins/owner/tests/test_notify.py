"""notify: silent fyi with identity, mark and id; bursts edit one message; failures are one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from backchannel.store import SQLiteStore
from backchannel_owner.api import OwnerError, notify
from backchannel_owner.marks import PALETTE
from backchannel_owner.records import OwnerRecords

from .conftest import OwnerWorld, identity


async def test_fyi_is_silent_and_names_the_session(world: OwnerWorld) -> None:
    result = await notify(world.config, "tests are green", identity=identity())
    (sent,) = world.fake.sent
    assert sent.chat_id == world.owner_chat["id"] and sent.quiet
    assert sent.text == (
        f'{result.mark} "ci-cd-incremental-2" (gnome-terminal, Workspace 5) sent you a message'
        f" #{result.id}: tests are green"
    )
    assert result.mark in PALETTE and result.status == "sent" and result.via == "direct"
    store = SQLiteStore(world.config.store.path)
    try:
        row = OwnerRecords(store.db).get(result.id)
        assert row is not None and row.platform_message_id == str(sent.message_id)
        assert (row.kind, row.status, row.text) == ("fyi", "sent", sent.text)
    finally:
        await store.close()


async def test_needs_answer_notifies_and_is_never_collapsed(world: OwnerWorld) -> None:
    first = await notify(world.config, "one", identity=identity())
    second = await notify(world.config, "which db?", needs_answer=True, identity=identity())
    assert first.id != second.id
    assert [s.quiet for s in world.fake.sent] == [True, False]


async def test_a_burst_of_fyi_edits_one_message_and_keeps_its_id(world: OwnerWorld) -> None:
    first = await notify(world.config, "step 1 done", identity=identity())
    second = await notify(world.config, "step 2 done", identity=identity())
    assert second.id == first.id and second.collapsed
    (sent,) = world.fake.sent
    assert sent.text.splitlines() == [
        f'{first.mark} "ci-cd-incremental-2" (gnome-terminal, Workspace 5) sent you a message'
        f" #{first.id}: step {n} done"
        for n in (1, 2)
    ]


async def test_the_burst_window_is_per_session_and_closes(world: OwnerWorld) -> None:
    world.write_config(burst_window=0.000001)
    first = await notify(world.config, "a", identity=identity())
    second = await notify(world.config, "b", identity=identity())
    assert first.id != second.id
    world.write_config()
    other = await notify(world.config, "c", identity=identity("other-session", "other"))
    assert other.id not in (first.id, second.id) and other.mark != first.mark
    assert len(world.fake.sent) == 3


async def test_a_reply_names_the_owner_message_and_is_never_collapsed(world: OwnerWorld) -> None:
    first = await notify(world.config, "working", identity=identity())
    store = SQLiteStore(world.config.store.path)
    try:
        owner_message = OwnerRecords(store.db).insert_message(
            1.0,
            session_id=identity().session_id,
            direction="in",
            kind="message",
            account="tg",
            chat=str(world.owner_chat["id"]),
            text="stop",
            status="delivered",
            id="a1b0c",  # with the digits a phone's keyboard makes l and O of
        )
    finally:
        await store.close()
    reply = await notify(world.config, "stopped", reply_to=owner_message.id, identity=identity())
    assert reply.id != first.id and not reply.collapsed
    assert world.fake.sent[-1].text == (
        f'{reply.mark} "ci-cd-incremental-2" re #{owner_message.id} → #{reply.id}: stopped'
    )
    assert not world.fake.sent[-1].quiet
    # an id as a person types it: any case, a leading #, i/l for 1 and o for 0
    typed = owner_message.id.upper().replace("1", "l").replace("0", "O")
    again = await notify(world.config, "still stopped", reply_to=f"#{typed}", identity=identity())
    assert again.status == "sent" and f"re #{owner_message.id} " in world.fake.sent[-1].text


async def test_replying_to_an_unknown_id_is_one_clear_error(world: OwnerWorld) -> None:
    with pytest.raises(OwnerError, match="there is no message #zzzzz to reply to"):
        await notify(world.config, "x", reply_to="zzzzz", identity=identity())


async def test_a_refused_send_is_recorded_failed(world: OwnerWorld) -> None:
    world.fake.fail_next("sendMessage", "forbidden")
    result = await notify(world.config, "hello", identity=identity())
    assert result.status == "failed" and "bot was blocked" in (result.reason or "")


async def test_a_hanging_channel_never_hangs_notify(world: OwnerWorld) -> None:
    world.write_config(timeout=1)
    world.fake.fail_next("sendMessage", "hang")
    with pytest.raises(OwnerError, match=r"notify gave up after 1s \(owner.timeout\)"):
        await notify(world.config, "hello", identity=identity())
    assert world.fake.token not in str(world.config)


async def test_without_an_owner_table_notify_says_what_to_add(world: OwnerWorld) -> None:
    text = world.config_path.read_text().split("[owner]")[0]
    world.config_path.write_text(text)
    with pytest.raises(Exception, match=r"has no \[owner\] table: add account, chat and user"):
        await notify(world.config, "hello", identity=identity())


async def test_a_refused_burst_edit_becomes_a_new_message(world: OwnerWorld) -> None:
    first = await notify(world.config, "step 1", identity=identity())
    world.fake.fail_next("editMessageText", "forbidden")
    second = await notify(world.config, "step 2", identity=identity())
    assert second.id != first.id and not second.collapsed and second.status == "sent"
    assert [s.text.rsplit(": ", 1)[1] for s in world.fake.sent] == ["step 1", "step 2"]


async def test_no_serve_and_no_token_here_is_one_line_naming_both(
    world: OwnerWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backchannel.config import load_config

    from .conftest import TOKEN_ENV

    monkeypatch.delenv(TOKEN_ENV)
    config = load_config(world.config_path, strict_env=False)
    with pytest.raises(OwnerError) as caught:
        await notify(config, "hello", identity=identity())
    message = str(caught.value)
    assert "no serve answers on the store" in message and "start `backchannel serve`" in message
    assert "\n" not in message and world.fake.sent == []


@pytest.mark.parametrize(
    ("owner", "message"),
    [
        (
            {"chatt": "1"},
            r"owner\.chatt: unknown key; did you mean `chat`\? \(known keys: account, burst_window",
        ),
        ({"chat": None}, r"owner\.chat: missing"),
        ({"account": "nope"}, r"owner\.account: no account called 'nope' \(configured: tg\)"),
        ({"stale_after": -5}, r"owner\.stale_after: expected a positive number of seconds"),
        ({"user": 12.5}, r"owner\.user: expected a string, got 12\.5"),
        (
            {"stale_after": 600, "late_after": 60},
            r"owner\.late_after: 60 is not after owner\.stale_after \(600\)",
        ),
    ],
)
async def test_a_bad_owner_table_is_one_error_naming_the_key_at_serve_start(
    world: OwnerWorld, owner: dict[str, object], message: str
) -> None:
    from backchannel.app import build_switchboard
    from backchannel.errors import ConfigError

    world.write_config(**owner)
    with pytest.raises(ConfigError, match=message):
        await build_switchboard(world.config, serve_http=False)


def test_an_owner_account_whose_table_is_unreadable_is_not_called_unknown(
    tmp_path: Path,
) -> None:
    # it said "no account called 'bad name!' (configured: webchat)", after the account's
    # own error
    from backchannel.cli import main
    from click.testing import CliRunner

    path = tmp_path / "bot.toml"
    path.write_text(
        '[accounts."bad name!"]\nchannel = "telegram"\ntoken = "1:a"\n\n'
        '[owner]\naccount = "bad name!"\nchat = "42"\nuser = "42"\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["check", "-c", str(path)])
    assert result.exit_code == 1
    assert "no account called" not in result.stderr and "webchat" not in result.stderr
    assert "owner.account: the account 'bad name!' could not be read" in result.stderr


async def test_a_runaway_notify_is_refused_whole_as_every_send_is(world: OwnerWorld) -> None:
    """100,000 characters went out as 26 Telegram messages: one send is at most 10 parts."""
    result = await notify(world.config, "x" * 100_000, needs_answer=True, identity=identity())
    assert result.status == "failed"
    assert result.reason is not None and result.reason.startswith("the text is too long")
    assert world.fake.sent == []


async def test_a_delivery_reason_never_keeps_a_secret(world: OwnerWorld) -> None:
    from backchannel.secrets import register_secret

    register_secret("tok-7d1e55c0ffee")
    store = SQLiteStore(world.config.store.path)
    try:
        records = OwnerRecords(store.db)
        row = records.insert_message(
            1.0,
            session_id="s",
            direction="out",
            kind="fyi",
            account="tg",
            chat="1",
            text="x",
            status="pending",
        )
        failed = records.update(
            row.id, 2.0, status="failed", reason="proxy said: bad token tok-7d1e55c0ffee"
        )
    finally:
        await store.close()
    assert failed.reason is not None and "tok-7d1e55c0ffee" not in failed.reason

"""Stored text is data, never a command to the operator's terminal.

Names, titles, messages, run errors and ask questions come from platforms and
peers. Every command that prints them for people shows a control character
escaped (`\\x1b`, `\\x07`, `\\u202e`), even on a terminal that takes colors:
an escape sequence there could clear the screen, retitle the window or hide
a line. JSON output escapes them by itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from backchannel.cli import main
from backchannel.model import Address, Outbound, Sender
from backchannel.store import NO_ORIGIN, Inbound, SQLiteStore
from backchannel.terminal import terminal_safe
from backchannel.testing.store_contract import make_event
from click.testing import CliRunner

HOSTILE = "hi \x1b[2J\x1b]0;pwned\x07 there\rmasked \u202eevil\x9b1m"
RAW = ["\x1b[2J", "\x1b]0", "\x07", "\r", "\u202e", "\x9b"]
ME = Sender("agent", "Agent", is_bot=True)


async def _fill(db: Path) -> None:
    store = SQLiteStore(db)
    mallory = Sender("m1", "Mallory \x1b[31mred", "mal\x07")
    await store.append_inbound(
        [Inbound(make_event("e1", HOSTILE, sender=mallory, conversation_kind="group",
                            conversation_title="Team \x1b]0;title\x07"))]
    )  # fmt: skip
    conversation = await store.find_conversation(Address("acct", "c1"))
    assert conversation is not None
    run_id = await store.begin_run(conversation.id, 1, 1)
    await store.finish_run(run_id, "error", f"RuntimeError: {HOSTILE}")
    session = await store.ensure_conversation(Address("acct", "peer\x1b[8m", "s1"), kind="thread")
    entry = await store.record_outbound(session.id, Outbound(session.address, HOSTILE), ME)
    await store.record_ask(
        origin_conversation_id=NO_ORIGIN,
        origin_seq=None,
        peer_conversation_id=session.id,
        question=HOSTILE,
        deadline=9e12,
        message_seq=entry.message_seq,
    )
    await store.close()


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("terminal")
    asyncio.run(_fill(folder / "bc.db"))
    path = folder / "bot.toml"
    path.write_text(
        f'[store]\npath = "{folder / "bc.db"}"\n[accounts.acct]\nchannel = "fake"\n'
        '[agents.demo]\nkind = "demo"\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["conversations"],
        ["show", "acct/c1"],
        ["runs"],
        ["asks"],
        ["preview", "acct/c1"],
        ["show", "acct/c1\x1b]0;x\x07"],  # an unknown key echoed in the error
    ],
)
@pytest.mark.usefixtures("fake_channel_plugin")
def test_a_command_prints_stored_control_characters_escaped(
    config_path: Path, command: list[str]
) -> None:
    runner = CliRunner(env={"UV_RUN_RECURSION_DEPTH": None})
    result = runner.invoke(main, [*command, "-c", str(config_path)], color=True)
    shown = result.stdout + (result.stderr if result.stderr_bytes else "")
    assert shown.strip(), result
    for raw in RAW:
        assert raw not in shown, (command, raw, shown)
    assert "\\x1b" in shown or "\\x07" in shown, shown  # shown escaped, not dropped


def test_terminal_safe_keeps_what_people_write() -> None:
    text = "line one\n\tindented: é, 日本語, 👩‍💻 (a ZWJ sequence), ‏שלום"
    assert terminal_safe(text) == text
    assert terminal_safe("a\x1bb\x00c\x7f\x85d\u2066") == "a\\x1bb\\x00c\\x7f\\x85d\\u2066"


def test_log_lines_quoting_platform_text_are_escaped_too() -> None:
    # `serve` logs to a terminal, and a log line may quote a chat title or a platform's error
    import subprocess
    import sys

    code = (
        "import logging; from backchannel.cli import _setup_logging; _setup_logging(False);"
        " logging.getLogger('backchannel.x').warning('title %s', 'Team \\x1b]0;pwned\\x07');"
        " logging.getLogger('backchannel.x').error('failed\\nsecond line\\tindented')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert "title Team \\x1b]0;pwned\\x07" in done.stderr
    assert "failed\nsecond line\tindented" in done.stderr  # a traceback keeps its lines


def test_an_escaped_cell_widens_its_column_not_the_line() -> None:
    from backchannel.runlog import table

    rows = table(("A", "B", "C"), [("x\x1by", "1", "z"), ("abcd", "2", "w")]).splitlines()
    assert rows[1].startswith("x\\x1by  1")
    assert [row[8] for row in rows] == ["B", "1", "2"]  # one column, whatever was escaped
    assert terminal_safe("a\nb\tc\u2028", one_line=True) == "a\\nb\\tc\\u2028"


@pytest.mark.usefixtures("fake_channel_plugin")
def test_a_name_or_title_with_a_line_break_cannot_forge_a_line_in_show(tmp_path: Path) -> None:
    # names and titles are anyone's to choose: a line break in one started a line of the
    # operator's choosing at column 0 (a message's own lines are indented under its head)
    async def fill() -> None:
        store = SQLiteStore(tmp_path / "bc.db")
        eve = Sender("e1", "Eve\n#2    2026-01-01 00:00:00 -> Agent (sent): all clear")
        await store.append_inbound(
            [Inbound(make_event("e1", "hello", sender=eve, conversation_kind="group",
                                conversation_title="Ops\nconversation 9: forged"))]
        )  # fmt: skip
        await store.close()

    asyncio.run(fill())
    config = tmp_path / "bot.toml"
    config.write_text(
        f'[store]\npath = "{tmp_path / "bc.db"}"\n[accounts.acct]\nchannel = "fake"\n'
        '[agents.demo]\nkind = "demo"\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["show", "acct/c1", "-c", str(config)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith(("#2", "conversation 9"))], lines
    assert lines[0].startswith("conversation ") and "\\nconversation 9: forged" in lines[0]
    (message,) = [line for line in lines if line.startswith("#")]
    assert message.startswith("#1 ") and "\\n#2" in message and message.endswith(": hello")
    # the listing and the run preview print the title and the name on their own lines too
    for command in (["conversations"], ["preview", "acct/c1"]):
        result = CliRunner().invoke(main, [*command, "-c", str(config)])
        assert result.exit_code == 0, result.output
        forged = [
            line
            for line in result.stdout.splitlines()
            if line.startswith(("conversation 9", "#2 "))
        ]
        assert forged == [], (command, result.stdout)
        assert "\\nconversation 9: forged" in result.stdout, command

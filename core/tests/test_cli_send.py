"""`backchannel send`: the key `conversations` prints is accepted, and an address the channel
rejects never becomes a conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from backchannel.cli import main
from backchannel.testing.fake_channel import FakePlatform
from click.testing import CliRunner, Result

pytestmark = pytest.mark.usefixtures("fake_channel_plugin")

CONFIG = """
[accounts.ops]
channel = "fake"
[accounts.web]
channel = "webchat"
[agents.demo]
kind = "demo"
"""


def invoke(*args: str) -> Result:
    # as if typed in a shell with `backchannel` on PATH (pytest itself runs under `uv run`)
    return CliRunner(env={"UV_RUN_RECURSION_DEPTH": None}).invoke(
        main, list(args), catch_exceptions=False
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "bot.toml"
    path.write_text(f'[store]\npath = "{tmp_path / "bc.db"}"\n{CONFIG}', encoding="utf-8")
    return path


def conversation_keys(config: Path) -> list[str]:
    listed = invoke("conversations", "--json", "-c", str(config))
    return sorted(c["key"] for c in json.loads(listed.stdout))


def test_send_takes_the_key_that_conversations_prints(config: Path, platform: FakePlatform) -> None:
    platform.user_says("is the server down?", chat="c1")
    invoke("send", "ops", "c1", "looking into it", "-c", str(config))
    (key,) = conversation_keys(config)

    result = invoke("send", key, "fixed", "-c", str(config))

    assert result.exit_code == 0, result.output
    assert result.stdout == "ops/c1: sent as #2\n"
    assert platform.texts("c1") == ["looking into it", "fixed"]
    assert conversation_keys(config) == ["ops/c1"]


def test_send_takes_a_conversation_id(config: Path, platform: FakePlatform) -> None:
    invoke("send", "ops", "c1", "first", "-c", str(config))
    listed = json.loads(invoke("conversations", "--json", "-c", str(config)).stdout)

    result = invoke("send", str(listed[0]["id"]), "second", "-c", str(config))

    assert result.exit_code == 0, result.output
    assert platform.texts("c1") == ["first", "second"]


def test_a_key_given_as_the_chat_says_how_to_send_and_creates_nothing(config: Path) -> None:
    result = invoke("send", "ops", "ops/c1", "hello", "-c", str(config))

    assert result.exit_code == 1
    assert result.stderr == (
        "error: 'ops/c1' is a conversation key, not a chat id: run"
        f" `backchannel send ops/c1 TEXT -c {config}` (without the account)\n"
    )
    assert conversation_keys(config) == []


@pytest.mark.parametrize(
    "args",
    [("web", "nobody.tab"), ("web", "web/v97c0ffee.tab1"), ("web/v97c0ffee.tab1",)],
    ids=["not-a-webchat-id", "key-as-chat", "unopened-key"],
)
def test_an_address_the_web_chat_rejects_creates_no_conversation(
    config: Path, args: tuple[str, ...]
) -> None:
    result = invoke("send", *args, "hello", "-c", str(config))

    assert result.exit_code == 1
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [
        result.stderr.splitlines()[-1]
    ]
    assert conversation_keys(config) == []


def test_an_unopened_web_chat_conversation_is_rejected_with_the_reason(config: Path) -> None:
    result = invoke("send", "web/v97c0ffee.tab1", "hello", "-c", str(config))

    assert result.stderr.splitlines()[-1] == (
        "error: cannot send to web/v97c0ffee.tab1: no visitor has opened web chat conversation"
        " v97c0ffee.tab1 (see `backchannel conversations` for the keys of existing ones)"
    )


def test_send_with_one_argument_is_a_usage_error(config: Path) -> None:
    result = CliRunner().invoke(main, ["send", "hello", "-c", str(config)])

    assert result.exit_code == 2
    assert "send takes CONVERSATION TEXT or ACCOUNT CHAT TEXT" in result.stderr


def test_an_empty_text_is_a_usage_error_and_records_nothing(config: Path) -> None:
    """It was sent as a failed empty message: stored, and told both failed and stored."""
    for text in ("", "   "):
        result = CliRunner().invoke(main, ["send", "ops", "c1", text, "-c", str(config)])
        assert result.exit_code == 2
        assert "the text is empty: nothing to send" in result.stderr
    listed = CliRunner().invoke(main, ["conversations", "-c", str(config)])
    assert "c1" not in listed.output  # no conversation made, no message stored

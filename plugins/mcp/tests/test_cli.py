"""`backchannel mcp serve` refuses bad input with one line saying what and where."""

from __future__ import annotations

from pathlib import Path

import pytest
from backchannel.cli import main
from click.testing import CliRunner

from .conftest import World


def run(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, ["mcp", "serve", *args])
    return result.exit_code, result.output.strip().splitlines()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--stdio", "--http", "127.0.0.1:0"], "choose one of --stdio and --http"),
        (["--channel", "--http", "127.0.0.1:0"], "--channel needs --stdio"),
        (["--watch", "tg/1"], "--watch only means something with --channel"),
        (["--http", "8766"], "'8766' is not HOST:PORT"),
    ],
)
def test_usage_mistakes_exit_2_naming_the_option(world: World, args: list[str], says: str) -> None:
    code, lines = run("-c", str(world.config_path), *args)
    assert code == 2
    assert any(says in line for line in lines), lines


def test_channel_without_an_owner_user_is_refused_in_one_line(world: World, tmp_path: Path) -> None:
    text = world.config_path.read_text()
    no_user = tmp_path / "no-user.toml"
    no_user.write_text(text[: text.index("user = ")])
    code, lines = run("-c", str(no_user), "--channel")
    assert code == 1
    assert len(lines) == 1 and "--channel needs the owner plugin configured" in lines[0]


def test_watching_an_unknown_conversation_is_refused_in_one_line(world: World) -> None:
    code, lines = run("-c", str(world.config_path), "--channel", "--watch", "tg/999")
    assert code == 1
    assert len(lines) == 1 and "--watch tg/999" in lines[0] and "tg/999" in lines[0]

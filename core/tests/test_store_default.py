"""A config without [store] gets its own store, keyed by the file's path, and says which."""

from __future__ import annotations

from pathlib import Path

import pytest
from backchannel.cli import main
from backchannel.config import load_config
from click.testing import CliRunner

BODY = '[accounts.web]\nchannel = "webchat"\n'


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "backchannel"


def write(path: Path, body: str = BODY) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return path


def test_configs_without_a_store_never_share_one(tmp_path: Path, state: Path) -> None:
    first = load_config(write(tmp_path / "a" / "bot.toml"))
    second = load_config(write(tmp_path / "b" / "bot.toml"))

    assert first.store.path != second.store.path
    assert Path(first.store.path).parent == state
    assert Path(first.store.path).name.startswith("bot-")
    assert first.store_defaulted and second.store_defaulted


def test_the_same_file_finds_its_store_again_from_any_directory(
    tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "a" / "bot.toml")
    from_here = load_config(path).store.path
    monkeypatch.chdir(tmp_path / "a")

    assert load_config("bot.toml").store.path == from_here


def test_a_store_named_in_the_file_is_kept(tmp_path: Path, state: Path) -> None:
    config = load_config(write(tmp_path / "bot.toml", f'[store]\npath = "x.db"\n{BODY}'))

    assert config.store.path == str(tmp_path / "x.db")
    assert not config.store_defaulted


def test_check_says_which_store_and_why(tmp_path: Path, state: Path) -> None:
    path = write(tmp_path / "bot.toml")
    result = CliRunner().invoke(main, ["check", "-c", str(path)])

    store = load_config(path).store.path
    assert result.exit_code == 0, result.output
    assert f"store     {store} (synchronous NORMAL)\n" in result.stdout
    assert "this config's own store, chosen by its path: set [store] path to choose" in (
        result.stdout
    )

"""Shared fixtures: a FakeTelegram with an owner and their private chat, and a config for it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from attrs import define
from backchannel.config import Config, load_config
from backchannel_owner.identity import SessionIdentity
from backchannel_telegram.testing import FakeTelegram

TOKEN_ENV = "OWNER_TEST_TOKEN"


@define
class OwnerWorld:
    """A fake Telegram with the owner, a stranger, and a group both are in."""

    fake: FakeTelegram
    owner: dict[str, Any]
    owner_chat: dict[str, Any]
    stranger: dict[str, Any]
    group: dict[str, Any]
    config_path: Path
    tmp: Path

    @property
    def config(self) -> Config:
        return load_config(self.config_path)

    def write_config(self, **owner: Any) -> Path:
        table = {
            "account": "tg",
            "chat": str(self.owner_chat["id"]),
            "user": str(self.owner["id"]),
            **owner,
        }
        owner_lines = "\n".join(
            f"{key} = {value!r}".replace("'", '"') if isinstance(value, str) else f"{key} = {value}"
            for key, value in table.items()
            if value is not None
        )
        settings = self.fake.settings(poll_timeout=2)
        account_lines = "\n".join(
            f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}"
            for key, value in settings.items()
            if key != "token"
        )
        self.config_path.write_text(
            f"""
[store]
path = "{self.tmp / "state" / "bc.db"}"

[server]
port = 0

[accounts.tg]
channel = "telegram"
token = "${{{TOKEN_ENV}}}"
{account_lines}

[agents.demo]
kind = "demo"

[[bindings]]
agent = "demo"
respond = "always"

[owner]
{owner_lines}
""",
            encoding="utf-8",
        )
        return self.config_path


@pytest.fixture
def inbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "inbox"
    monkeypatch.setenv("BACKCHANNEL_OWNER_INBOX", str(root))
    return root


@pytest.fixture
async def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inbox_root: Path
) -> AsyncIterator[OwnerWorld]:
    async with FakeTelegram() as fake:
        monkeypatch.setenv(TOKEN_ENV, fake.token)
        owner = fake.user("Olga", username="olga")
        stranger = fake.user("Sam", username="sam")
        built = OwnerWorld(
            fake,
            owner,
            fake.private_chat(owner),
            stranger,
            fake.group("Team"),
            tmp_path / "bc.toml",
            tmp_path,
        )
        built.write_config()
        yield built


def identity(
    session_id: str = "11111111-aaaa", name: str = "ci-cd-incremental-2"
) -> SessionIdentity:
    return SessionIdentity(
        session_id=session_id,
        name=name,
        terminal="gnome-terminal",
        workspace="Workspace 5",
        cwd="/home/dev/src/app",
        host="devbox",
    )


@pytest.fixture
def clean_env() -> Iterator[dict[str, str]]:
    """os.environ for child processes (the token and inbox as monkeypatched)."""
    yield dict(os.environ)

"""Fixtures: a FakeTelegram, a config file pointing at it, a seeded store, MCP clients."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from backchannel.app import open_config_store, serve
from backchannel.config import Config, load_config
from backchannel.model import Address, Event, Sender
from backchannel.store import Inbound, SQLiteStore, Store
from backchannel_mcp.server import BackchannelMcp, in_memory
from backchannel_telegram.testing import FakeTelegram
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from pydantic import BaseModel

TOKEN = "mcp-test-token-9f8e7d"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


class World:
    """A FakeTelegram with an owner and a stranger, a config file, and its store path."""

    def __init__(self, fake: FakeTelegram, tmp_path: Path):
        self.fake = fake
        self.owner = fake.user("Olga", "Owner", username="olga")
        self.stranger = fake.user("Sam", "Stranger", username="sam")
        self.owner_chat = fake.private_chat(self.owner)
        self.group = fake.group("Ops")
        self.store_path = tmp_path / "state" / "backchannel.db"
        self.config_path = tmp_path / "backchannel.toml"
        settings = fake.settings()
        account = "\n".join(f"{k} = {_toml(v)}" for k, v in settings.items())
        self.config_path.write_text(
            f"""
[store]
path = "{self.store_path}"

[accounts.tg]
channel = "telegram"
{account}

[agents.quiet]
kind = "demo"

[[bindings]]
agent = "quiet"
respond = "never"

[mcp]
token = "${{BACKCHANNEL_MCP_TOKEN}}"

[owner]
account = "tg"
chat = "{self.owner_chat["id"]}"
user = "{self.owner["id"]}"
"""
        )

    @property
    def owner_key(self) -> str:
        return f"tg/{self.owner_chat['id']}"

    @property
    def group_key(self) -> str:
        return f"tg/{self.group['id']}"

    def config(self) -> Config:
        return load_config(self.config_path)

    async def seed(self) -> None:
        """Store a group conversation about an invoice, as if `serve` had received it."""
        store = SQLiteStore(self.store_path)
        try:
            alice = Sender("501", "Alice")
            address = Address("tg", str(self.group["id"]))
            await store.append_inbound(
                [
                    Inbound(
                        Event(
                            address,
                            f"seed-{n}",
                            alice,
                            text=text,
                            platform_message_id=str(n),
                            conversation_kind="group",
                            conversation_title="Ops",
                        )
                    )
                    for n, text in enumerate(
                        ["the invoice is due Friday", "I sent it to billing"], start=1
                    )
                ]
            )
        finally:
            await store.close()


def text_of(result: Any) -> str:
    """The text blocks of an MCP tool result, joined by newlines."""
    return "\n".join(block.text for block in result.content)


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


@pytest.fixture
def world(fake: FakeTelegram, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("BACKCHANNEL_MCP_TOKEN", TOKEN)
    monkeypatch.setenv("BACKCHANNEL_OWNER_INBOX", str(tmp_path / "inbox"))
    return World(fake, tmp_path)


@pytest.fixture
async def running_serve(world: World) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Start `backchannel serve` (in this process) on the world's config; stop it after the test."""
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def start() -> None:
        ready = asyncio.Event()
        tasks.append(
            asyncio.create_task(serve(world.config(), on_ready=lambda _: ready.set(), stop=stop))
        )
        waiter = asyncio.create_task(ready.wait())
        done, _ = await asyncio.wait({waiter, tasks[-1]}, timeout=30, return_when="FIRST_COMPLETED")
        if tasks[-1] in done:
            await tasks[-1]  # raises why serve stopped
        assert waiter in done, "serve did not become ready"

    yield start
    stop.set()
    for task in tasks:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)


class Received:
    """Custom notifications the test client received, awaitable."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self._changed = asyncio.Condition()

    async def add(self, method: str, params: dict[str, Any]) -> None:
        async with self._changed:
            self.items.append((method, params))
            self._changed.notify_all()

    async def wait_for(
        self, method: str, count: int = 1, timeout: float = 20
    ) -> list[dict[str, Any]]:
        async def ready() -> list[dict[str, Any]]:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.of(method)) >= count)
                return self.of(method)

        return await asyncio.wait_for(ready(), timeout)

    def of(self, method: str) -> list[dict[str, Any]]:
        return [params for m, params in self.items if m == method]


class _Params(BaseModel):
    model_config = {"extra": "allow"}


class ChannelListener(ClientExtension):
    """A client extension that records Claude Code's channel notifications (as Claude Code would)."""

    identifier = "dev.backchannel.test/channel-listener"

    def __init__(self, received: Received):
        self.received = received

    def notifications(self) -> list[NotificationBinding[Any]]:
        def bind(method: str) -> NotificationBinding[Any]:
            async def handler(params: _Params) -> None:
                await self.received.add(method, params.model_dump())

            return NotificationBinding(method=method, params_type=_Params, handler=handler)

        return [
            bind("notifications/claude/channel"),
            bind("notifications/claude/channel/permission"),
        ]


@contextlib.asynccontextmanager
async def connected(app: BackchannelMcp, received: Received | None = None) -> AsyncIterator[Client]:
    """An SDK Client connected to `app` served in this process over in-memory streams."""
    streams_cm = in_memory(app)
    extensions = [ChannelListener(received)] if received is not None else None
    async with Client(_Transport(streams_cm), mode="legacy", extensions=extensions) as client:
        yield client


class _Transport:
    def __init__(self, cm: Any):
        self._cm = cm

    async def __aenter__(self) -> Any:
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._cm.__aexit__(*exc)


def open_store(config: Config) -> Store:
    return open_config_store(config)


@contextlib.asynccontextmanager
async def http_serving(*args: str) -> AsyncIterator[tuple[str, list[str]]]:
    """Run `python -m backchannel mcp serve ARGS`; yield its URL once it listens, and the
    stderr lines so far (the list grows no further); stop it after."""
    import os
    import sys

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "backchannel",
        "mcp",
        "serve",
        *args,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    assert process.stderr is not None
    seen: list[str] = []
    try:
        url = ""
        while not url:
            line = await asyncio.wait_for(process.stderr.readline(), 60)
            if not line:
                raise AssertionError("mcp serve exited: " + "".join(seen))
            seen.append(line.decode())
            if "serving MCP on " in seen[-1]:
                url = seen[-1].split("serving MCP on ", 1)[1].strip()
        yield url, seen
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)

"""Orchestration end to end: the web chat and FakeTelegram behind one serve-built switchboard.

The owner asks in the web chat what Alice said on Telegram, then has a message
passed on to her; the agent is the scripted examples/orchestrator_agent.py and
the config is examples/orchestrator.toml pointed at the fakes.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from backchannel.app import build_switchboard
from backchannel.cli import main
from backchannel.config import Config, load_config
from backchannel.model import Address
from backchannel.render import render_preview
from backchannel.switchboard import Switchboard
from backchannel_telegram.testing import FakeTelegram
from backchannel_tinyplace.testing import FakeRelay
from backchannel_webchat import WebchatAdapter
from backchannel_webchat.testing import FakeBrowser
from click.testing import CliRunner

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CROSS_TOOLS = ("list_conversations", "read_conversation", "send_to_conversation")


def fake_config(tmp_path: Path, fake: FakeTelegram, relay_url: str) -> Path:
    """examples/orchestrator.toml: the store in tmp_path, Telegram and tiny.place at the fakes."""
    text = (EXAMPLES / "orchestrator.toml").read_text()
    settings = fake.settings(request_timeout=1.0, retry_max=0.2)
    tg = "\n".join(f"{key} = {_toml(value)}" for key, value in settings.items())
    assert 'token = "${TELEGRAM_TOKEN}"' in text
    text = text.replace('token = "${TELEGRAM_TOKEN}"', tg)
    assert 'identity = "${TINYPLACE_IDENTITY}"' in text
    text = text.replace(
        'identity = "${TINYPLACE_IDENTITY}"', f'identity = "{os.urandom(32).hex()}"'
    )
    text = text.replace('relay_url = "https://api.tiny.place"', f'relay_url = "{relay_url}"')
    path = tmp_path / "orchestrator.toml"
    path.write_text(f'[store]\npath = "{tmp_path / "state" / "bc.db"}"\n[server]\nport = 0\n{text}')
    return path


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def relay() -> AsyncIterator[FakeRelay]:
    async with FakeRelay() as server:
        yield server


@pytest.fixture
async def served(
    tmp_path: Path, fake: FakeTelegram, relay: FakeRelay, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Switchboard, Config, Path]]:
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the agent module sits next to the example
    path = fake_config(tmp_path, fake, relay.url)
    config = load_config(path)
    board = await build_switchboard(config)
    await board.start()
    yield board, config, path
    await board.stop()


async def alice_writes(fake: FakeTelegram, board: Switchboard, text: str) -> dict[str, Any]:
    """Alice writes to the bot on Telegram; return her private chat once the message is stored."""
    alice = fake.user("Alice", "Liddell", username="alice")
    chat = fake.private_chat(alice)
    update = fake.inject_message(chat, alice, text)
    # the poller acks an update only after its commit
    await fake.wait_for(lambda: fake.is_acked(update["update_id"]), what="Alice's update acked")
    await board.wait_idle()
    return chat


async def test_owner_asks_in_web_chat_and_the_agent_answers_from_telegram_then_passes_a_message(
    served: tuple[Switchboard, Config, Path], fake: FakeTelegram
) -> None:
    board, _, path = served
    chat = await alice_writes(fake, board, "Here is the invoice for March: 1200 EUR, due Friday")
    tg_key = f"tg/{chat['id']}"
    web = board.accounts["web"].adapter
    assert isinstance(web, WebchatAdapter) and web.url is not None
    async with FakeBrowser(web.url, name="Olivia") as page:
        await page.say("what did Alice say on Telegram about the invoice?")
        answer = await page.wait_for(
            lambda f: f["type"] == "message" and f["role"] == "agent" and "said" in f["text"]
        )
        assert answer["text"] == (
            f'In {tg_key}, Alice said: "Here is the invoice for March: 1200 EUR, due Friday"'
        )
        await page.say("tell Alice I'll pay on Friday")
        told = await page.wait_for(
            lambda f: f["type"] == "message" and f["role"] == "agent" and "To Alice" in f["text"]
        )
        await board.wait_idle()
        web_key = page.address("web").key
    assert told["text"].startswith(f"To Alice ({tg_key}): sent to {tg_key} as #2")
    (sent,) = fake.sent
    assert sent.chat_id == chat["id"]
    assert sent.text == f"[Message from conversation {web_key}]\nI'll pay on Friday"
    conversation = await board.store.find_conversation(Address("tg", str(chat["id"])))
    assert conversation is not None
    rows = await board.store.window(conversation.id, 10)
    assert [(m.direction, m.status, m.meta.get("origin")) for m in rows] == [
        ("in", "received", None),
        ("out", "sent", web_key),
    ]
    assert len(await board.store.outbox(conversation_id=conversation.id)) == 1
    # the owner's web chat run carries the tools; Alice's Telegram run does not
    web_conversation = await board.store.find_conversation(Address("web", web_key.split("/")[1]))
    assert web_conversation is not None
    preview = render_preview(await board.build_run(web_conversation.id))
    for name in CROSS_TOOLS:
        assert f"{name}(" in preview
    assert "send_to_conversation(conversation: string, text: string)" in preview
    tg_run = await board.build_run(conversation.id)
    assert not set(CROSS_TOOLS) & set(tg_run.tool_names)
    assert "sent on request of conversation " + web_key in tg_run.messages[-1]["content"]
    # `backchannel preview` shows the same tools from the stored state
    await board.stop()
    preview_args = ["preview", web_key, "-c", str(path)]
    shown = await asyncio.to_thread(CliRunner().invoke, main, preview_args)
    assert shown.exit_code == 0, shown.output
    assert "send_to_conversation(conversation: string, text: string)" in shown.output
    assert "list_conversations(" in shown.output and "read_conversation(" in shown.output
    transcript = await asyncio.to_thread(
        CliRunner().invoke, main, ["show", tg_key, "-c", str(path)]
    )
    assert f"(sent; from conversation {web_key})" in transcript.output


async def test_a_telegram_send_that_times_out_is_uncertain_and_not_retried(
    served: tuple[Switchboard, Config, Path], fake: FakeTelegram
) -> None:
    board, _, _ = served
    chat = await alice_writes(fake, board, "send me the invoice")
    calls_before = len(fake.calls_to("sendMessage"))
    fake.fail_next("sendMessage", "hang")
    web = board.accounts["web"].adapter
    assert isinstance(web, WebchatAdapter) and web.url is not None
    async with FakeBrowser(web.url, name="Olivia") as page:
        await page.say("tell Alice it is on its way")
        told = await page.wait_for(
            lambda f: f["type"] == "message" and f["role"] == "agent" and "To Alice" in f["text"],
            timeout=20,
        )
        await board.wait_idle()
    assert "UNCERTAIN" in told["text"] and "will not be retried" in told["text"]
    assert f"read_conversation on tg/{chat['id']}" in told["text"]
    assert len(fake.calls_to("sendMessage")) == calls_before + 1  # one attempt, no retry
    conversation = await board.store.find_conversation(Address("tg", str(chat["id"])))
    assert conversation is not None
    (entry,) = await board.store.outbox(conversation_id=conversation.id)
    assert entry.status == "uncertain" and entry.origin is not None


def test_the_example_checks_and_shows_orchestrate() -> None:
    result = CliRunner().invoke(
        main,
        ["check", "-c", str(EXAMPLES / "orchestrator.toml")],
        env={"TELEGRAM_TOKEN": "123456:example-token-unused", "TINYPLACE_IDENTITY": "7" * 64},
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"\[0\] assistant <- web: .*orchestrate", result.output)
    assert not re.search(r"\[1\] assistant <- tg: .*orchestrate", result.output)


class ServeProcess:
    """`backchannel serve` in a child process, its output collected line by line."""

    def __init__(self, config: Path):
        self.config = config
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self.process: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> str:
        """Start serve; return the web chat page URL it announces."""
        self.lines.clear()
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "backchannel", "serve", "-c", str(self.config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if k != "BACKCHANNEL_CONFIG"},
        )  # fmt: skip
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(self.process.stdout)),
            asyncio.create_task(self._read(self.process.stderr)),
        ]
        line = await self.wait_line(r"^web: open (\S+)")
        match = re.search(r"open (\S+)", line)
        assert match is not None
        return match.group(1)

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            async with self._changed:
                self.lines.append(line.decode(errors="replace").rstrip())
                self._changed.notify_all()

    async def wait_line(self, pattern: str, timeout: float = 30.0) -> str:
        """Return the first output line matching `pattern`, waiting for it (bounded)."""

        def found() -> str | None:
            return next((line for line in self.lines if re.search(pattern, line)), None)

        async def wait() -> str:
            async with self._changed:
                await self._changed.wait_for(lambda: found() is not None)
            line = found()
            assert line is not None
            return line

        try:
            return await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"serve never printed {pattern!r}; it printed {self.lines}"
            ) from None

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.process.wait(), 30)
        await asyncio.gather(*self._readers, return_exceptions=True)


async def cli(*args: str) -> str:
    """Run a backchannel command (in a thread: the fakes' loop keeps serving meanwhile)."""
    env = {"BACKCHANNEL_CONFIG": ""}
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.output


async def ask(page: FakeBrowser, text: str) -> str:
    """Say `text` in the web chat; return the agent's "To Alice ..." answer."""
    after = len(page.frames)
    await page.say(text)
    frame = await page.wait_for(
        lambda f: f["type"] == "message" and f["role"] == "agent" and "To Alice" in f["text"],
        timeout=20,
        after=after,
    )
    return str(frame["text"])


async def test_the_messaging_control_and_the_kill_switch_reach_a_running_serve(
    tmp_path: Path, fake: FakeTelegram, relay: FakeRelay
) -> None:
    path = fake_config(tmp_path, fake, relay.url)
    shutil.copy(EXAMPLES / "orchestrator_agent.py", tmp_path)
    serve = ServeProcess(path)
    url = await serve.start()
    try:
        alice = fake.user("Alice", username="alice")
        update = fake.inject_message(fake.private_chat(alice), alice, "hi, it's Alice")
        await fake.wait_for(lambda: fake.is_acked(update["update_id"]), what="Alice's update")
        async with FakeBrowser(url, name="Olivia") as page:
            assert "OFF, held by the messaging control" in await cli(
                "messaging", "off", "-c", str(path)
            )
            assert "switched off" in await ask(page, "tell Alice one")
            assert "is ON" in await cli("messaging", "on", "-c", str(path))
            assert "sent to tg/" in await ask(page, "tell Alice two")
            assert [m.text.splitlines()[-1] for m in fake.sent] == ["two"]
            # the config kill switch, re-read on SIGHUP
            path.write_text(path.read_text().replace("enabled = true", "enabled = false"))
            assert serve.process is not None
            serve.process.send_signal(signal.SIGHUP)
            await serve.wait_line("kill switch reloaded, enabled = false")
            assert "disabled by the operator" in await ask(page, "tell Alice three")
            status = await cli("messaging", "status", "-c", str(path))
            assert "held by the config's kill switch" in status
            # both off, then a restart: the kill switch comes back on, the toggle still holds
            await cli("messaging", "off", "-c", str(path))
            visitor, tab = page.visitor, page.conversation
        await serve.stop()
        path.write_text(path.read_text().replace("enabled = false", "enabled = true"))
        url = await serve.start()
        async with FakeBrowser(url, visitor=visitor, conversation=tab, name="Olivia") as page:
            assert "switched off" in await ask(page, "tell Alice four")
        assert [m.text.splitlines()[-1] for m in fake.sent] == ["two"]
    finally:
        await serve.stop()

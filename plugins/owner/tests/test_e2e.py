"""End to end: `backchannel serve` running against FakeTelegram, `notify` and the hook as processes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from backchannel_owner.inbox import list_markers
from backchannel_owner.marks import PALETTE

from .conftest import OwnerWorld

SESSION_A = "aaaaaaaa-1111-4111-8111-000000000001"
SESSION_B = "bbbbbbbb-2222-4222-8222-000000000002"
LINE = re.compile(r'^(\S+) "([^"]+)"(?: \(([^)]*)\))? sent you a message #([0-9a-z]{5}): (.*)$')


class Serve:
    """One `backchannel serve` child process."""

    def __init__(self, world: OwnerWorld, env: dict[str, str]):
        self.world = world
        self.env = env
        self.process: asyncio.subprocess.Process | None = None
        self.log = world.tmp / "serve.log"

    async def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "backchannel",
                "serve",
                "-c",
                str(self.world.config_path),
                env=self.env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
        assert self.process.stderr is not None
        while True:
            line = await asyncio.wait_for(self.process.stderr.readline(), 30)
            with self.log.open("ab") as log:
                log.write(line)
            assert line, f"serve exited early: {self.log.read_text()}"
            if b"serving on" in line:
                break
        self._drain = asyncio.create_task(self._keep_reading())

    async def _keep_reading(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        while line := await self.process.stderr.readline():
            with self.log.open("ab") as log:
                log.write(line)

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(sig)
            await asyncio.wait_for(self.process.wait(), 30)
            await asyncio.wait_for(self._drain, 10)


@pytest.fixture
def env(world: OwnerWorld, inbox_root: Path) -> dict[str, str]:
    home = world.tmp / "home"
    (home / ".claude" / "sessions").mkdir(parents=True)
    return {
        **os.environ,
        "HOME": str(home),
        "BACKCHANNEL_CONFIG": str(world.config_path),
        "DISPLAY": "",
        # the children need only these two plugins: not importing the others halves start-up
        "BACKCHANNEL_LOAD_PLUGINS": "backchannel-telegram,backchannel-owner",
    }


@pytest.fixture
async def serve(world: OwnerWorld, env: dict[str, str]) -> AsyncIterator[Serve]:
    running = Serve(world, env)
    await running.start()
    yield running
    await running.stop()


def session_file(env: dict[str, str], pid: int, session_id: str, name: str) -> None:
    path = Path(env["HOME"]) / ".claude" / "sessions" / f"{pid}.json"
    path.write_text(json.dumps({"sessionId": session_id, "name": name, "cwd": "/src/app"}))


async def run(env: dict[str, str], *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(
        process.communicate(stdin.encode() if stdin is not None else None), 60
    )
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def notify(env: dict[str, str], text: str, *options: str, via: str = "serve") -> str:
    """Run `backchannel notify --json`; check it went through `via`; return the id."""
    status, out, err = await run(
        env, sys.executable, "-m", "backchannel", "notify", "--json", *options, text
    )
    assert status == 0, err
    result = json.loads(out)
    assert (result["status"], result["via"]) == ("sent", via)
    return str(result["id"])


async def hook(env: dict[str, str], session_id: str) -> str:
    payload = {"session_id": session_id, "hook_event_name": "PostToolUse", "tool_name": "Bash"}
    status, out, err = await run(
        env, sys.executable, "-m", "backchannel_owner.hook", stdin=json.dumps(payload)
    )
    assert status == 0, err
    return out


async def say(world: OwnerWorld, chat: dict[str, Any], user: dict[str, Any], text: str) -> None:
    update = world.fake.inject_message(chat, user, text)
    await world.fake.wait_for(lambda: world.fake.is_acked(update["update_id"]), 20, "the ack")


async def test_notify_reply_and_the_hook_across_processes(
    world: OwnerWorld, serve: Serve, env: dict[str, str]
) -> None:
    session_file(env, os.getpid(), SESSION_A, "ci-cd-incremental-2")
    first_id = await notify(env, "tests are green")
    (sent,) = world.fake.sent
    match = LINE.match(sent.text)
    assert match is not None, sent.text
    mark, name, _where, shown_id, text = match.groups()
    assert (name, shown_id, text) == ("ci-cd-incremental-2", first_id, "tests are green")
    assert mark in PALETTE and sent.quiet

    # a second session: a shell that is its own session process (`; true` keeps it alive)
    script = (
        f"echo '{json.dumps({'sessionId': SESSION_B, 'name': 'docs-pass'})}'"
        ' > "$HOME/.claude/sessions/$$.json";'
        f' "{sys.executable}" -m backchannel notify "docs pass started"; true'
    )
    status, second_id, err = await run(env, "bash", "-c", script)
    assert status == 0, err
    second = LINE.match(world.fake.sent[-1].text)
    assert second is not None and second.group(2) == "docs-pass"
    assert second.group(1) != mark and second.group(4) == second_id.strip()

    await say(world, world.owner_chat, world.owner, f"#{first_id} switch to validation")
    context = json.loads(await hook(env, SESSION_A))["hookSpecificOutput"]["additionalContext"]
    assert context.splitlines()[0].endswith(
        f'(replying to your #{first_id}): "switch to validation"'
    )
    assert await hook(env, SESSION_A) == ""  # delivered: the next tool call sees nothing

    await say(world, world.group, world.stranger, f"#{first_id} delete the database")
    assert await hook(env, SESSION_A) == ""
    assert list_markers(SESSION_A) == []
    # a harness without hooks reads its inbox with notify --inbox
    await say(world, world.owner_chat, world.owner, f"#{first_id} also run the linter")
    status, out, err = await run(
        env, sys.executable, "-m", "backchannel", "notify", "--inbox", "--json"
    )
    assert status == 0, err
    (waiting,) = json.loads(out)
    assert (waiting["text"], waiting["parent_id"]) == ("also run the linter", first_id)
    assert await hook(env, SESSION_A) == ""

    reply_id = await notify(env, "switching now", "--reply", context.split("#")[1][:5])
    assert world.fake.sent[-1].text.endswith(f"→ #{reply_id}: switching now")

    # an agent's shell without the bot token: the running serve sends with its own
    without_token = {k: v for k, v in env.items() if k != "OWNER_TEST_TOKEN"}
    await notify(without_token, "no token here", "--needs-answer")

    world.fake.fail_next("sendMessage", "forbidden")
    status, out, err = await run(
        env, sys.executable, "-m", "backchannel", "notify", "--needs-answer", "are you there?"
    )
    assert status == 1 and len(out.split()) == 1  # the id is printed, the failure said once
    assert err.count("\n") == 1 and err.startswith(f"error: message #{out.strip()} is failed")
    assert world.fake.token not in err


async def test_sigkill_of_serve_before_the_reply_commits_loses_nothing(
    world: OwnerWorld, env: dict[str, str]
) -> None:
    returned = asyncio.Event()
    poll = world.fake._m_getupdates

    async def spy(params: dict[str, Any]) -> Any:
        response = await poll(params)
        if b"steer" in response.body:  # type: ignore[operator]
            returned.set()
        return response

    world.fake._m_getupdates = spy  # type: ignore[method-assign]
    first = Serve(world, env)
    await first.start()
    session_file(env, os.getpid(), SESSION_A, "ci-cd-incremental-2")
    message_id = await notify(env, "long job running")
    # hold the store's write lock: serve receives the reply but cannot commit it
    lock = sqlite3.connect(world.config.store.path, timeout=5, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        update = world.fake.inject_message(world.owner_chat, world.owner, f"#{message_id} steer")
        await asyncio.wait_for(returned.wait(), 20)
        await first.stop(signal.SIGKILL)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert not world.fake.is_acked(update["update_id"])
    assert list_markers(SESSION_A) == []
    # no serve answers (its socket file is left behind): notify sends directly
    await notify(env, "serve is down, still here", via="direct")

    second = Serve(world, env)
    await second.start()
    try:
        await world.fake.wait_for(lambda: world.fake.is_acked(update["update_id"]), 20, "ack")
        (marker,) = list_markers(SESSION_A)
        assert (marker.text, marker.parent_id) == ("steer", message_id)
    finally:
        await second.stop()

"""A worker SIGKILLed after its agent's answer went out, before its run was recorded:
the worker that takes the conversation over does not answer the same message again.

On PostgreSQL (`serve --worker`) a takeover adds no restart note; what decides is
whether a run that had seen the trigger sent a message after it (Store.answers_after),
so an answer made with `send_message` (no reply target) counts as well as a `reply`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from backchannel.store.postgres import PostgresStore
from backchannel_telegram.testing import FakeTelegram

AGENT = """
import asyncio, os
from pathlib import Path

FIRST = Path(__file__).with_name("first-run-sent")
TOOL = os.environ["TAKEOVER_TOOL"]

async def agent(run):
    if run.trigger is None:
        return
    text = "re " + run.trigger.text
    if TOOL == "send_message":
        await run.call("send_message", {"text": text})
    else:
        await run.call("reply", {"message_id": run.trigger.seq, "text": text})
    if not FIRST.exists():
        FIRST.write_text("sent")
        await asyncio.Event().wait()  # SIGKILLed here: sent, the run never finishes
"""


async def _spawn(folder: Path, env: dict[str, str], life: int) -> asyncio.subprocess.Process:
    log = (folder / f"life{life}.err").open("wb")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "backchannel",
        "serve",
        "-c",
        str(folder / "bot.toml"),
        "--worker",
        "w1",
        "--lease-ttl",
        "1",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log,
        env=env,
    )


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0) -> None:
    """Wait (bounded) for `check()` to be true, asking again every 50 ms."""
    try:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


@pytest.mark.parametrize("tool", ["send_message", "reply"])
async def test_a_worker_taking_over_does_not_answer_a_message_already_answered(
    tmp_path: Path, postgres_url: str, tool: str
) -> None:
    fake = await FakeTelegram().start()
    (tmp_path / "takeover_agent.py").write_text(AGENT)
    (tmp_path / "bot.toml").write_text(
        f"""
[store]
url = "{postgres_url}"
[server]
port = 0
[accounts.tg]
channel = "telegram"
token = "${{TG_TOKEN}}"
api_base = "{fake.url}"
poll_timeout = 1
[agents.a]
kind = "python"
agent = "takeover_agent:agent"
"""
    )
    env = {
        **os.environ,
        "TG_TOKEN": fake.token,
        "TAKEOVER_TOOL": tool,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    first = await _spawn(tmp_path, env, 1)
    second: asyncio.subprocess.Process | None = None
    store = PostgresStore(postgres_url)
    try:
        user = fake.user("Ann")
        fake.inject_message(fake.private_chat(user), user, "hello")
        await fake.wait_for(lambda: len(fake.sent) == 1, 60, "the first answer")

        async def marked() -> bool:
            return (tmp_path / "first-run-sent").exists()

        await _until(marked, "the agent past its send")
        first.send_signal(signal.SIGKILL)
        await first.wait()
        second = await _spawn(tmp_path, env, 2)

        async def rerun_done() -> bool:
            # the conversation is run again by the new process (the first run stays
            # 'running' until it is marked interrupted), and that run has finished
            runs = await store.runs()
            return len(runs) >= 2 and all(run.finished_at is not None for run in runs)

        await _until(rerun_done, "the takeover's run")
        assert fake.sent_texts() == ["re hello"]  # not answered twice
        runs = await store.runs()
        assert min(runs, key=lambda r: r.id).status == "interrupted"
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGKILL)
                await process.wait()
        await store.close()
        await fake.close()

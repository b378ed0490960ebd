"""`backchannel fake-model` lets examples/openai.toml run without a key: OPENAI_BASE_URL
overrides the example's base_url (`${OPENAI_BASE_URL:-...}`) and the fake model echoes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from attrs import evolve
from backchannel.app import serve
from backchannel.config import load_config, parse_config
from backchannel.errors import ConfigError
from backchannel.fake_model import load_script
from backchannel_webchat.testing import FakeBrowser

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai.toml"


def test_a_default_is_used_when_the_variable_is_unset_and_is_no_secret() -> None:
    data = {"agents": {"a": {"kind": "openai", "base_url": "${MODEL_URL:-http://127.0.0.1:1/v1}"}}}

    unset = parse_config(data, environ={}, check_plugins=False)
    given = parse_config(data, environ={"MODEL_URL": "http://10.0.0.9/v1"}, check_plugins=False)

    assert unset.agents["a"].settings["base_url"] == "http://127.0.0.1:1/v1"
    assert unset.summary()["agents"]["a"]["base_url"] == "http://127.0.0.1:1/v1"
    assert given.agents["a"].settings["base_url"] == "http://10.0.0.9/v1"


def test_a_bad_script_step_is_one_error_naming_it(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"answer": "hi"}, {"say": "x"}]', encoding="utf-8")

    with pytest.raises(ConfigError, match=r"script.json, \[1\]: expected one of"):
        load_script(script)


async def test_the_openai_example_runs_against_the_fake_model(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "BACKCHANNEL_"))}
    model = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "backchannel",
        "fake-model",
        "--port",
        "0",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert model.stdout is not None
    try:
        line = (await asyncio.wait_for(model.stdout.readline(), 60)).decode()
        assert line.startswith("fake model: http://127.0.0.1:"), line
        url = line.split(": ", 1)[1].strip()
        environ = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "fake"}
        config = load_config(EXAMPLE, environ=environ)
        assert config.agents["assistant"].settings["base_url"] == url
        config = evolve(
            config,
            server=evolve(config.server, port=0),
            store=evolve(config.store, path=str(tmp_path / "bc.db")),
        )
        reply = await _ask(config, "is anyone there?")
    finally:
        model.send_signal(signal.SIGINT)
        _, stderr = await asyncio.wait_for(model.communicate(), 30)

    assert reply == "You said: is anyone there?"
    assert model.returncode == 0, stderr.decode()


async def _ask(config: Any, text: str) -> str:
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_ready(board: Any) -> None:
        ready.set_result(board.accounts["web"].adapter.url)

    server = asyncio.create_task(serve(config, on_ready=on_ready, stop=stop))
    try:
        async with FakeBrowser(await asyncio.wait_for(ready, 30), name="Ada") as page:
            await page.say(text)
            frame = await page.wait_for(lambda f: f["type"] == "message" and f["role"] == "agent")
            return str(frame["text"])
    finally:
        stop.set()
        await asyncio.wait_for(server, 30)


def test_the_script_format_round_trips(tmp_path: Path) -> None:
    steps = [{"answer": "a"}, {"call_tool": "send_message", "arguments": {"text": "t"}}]
    script = tmp_path / "s.json"
    script.write_text(json.dumps(steps), encoding="utf-8")

    assert load_script(script) == steps

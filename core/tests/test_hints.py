"""Every command the product prints can be pasted as printed: the demo agent's preview hint and
`serve`'s start lines name the program as it must be typed, and the config and store in use."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
from pathlib import Path

from backchannel import hints
from backchannel_webchat.testing import FakeBrowser

BIN = Path(sys.executable).parent


def test_under_uv_run_the_hint_says_uv_run() -> None:
    env = {"UV_RUN_RECURSION_DEPTH": "1", "PATH": os.environ["PATH"]}
    assert hints.program(env)[-3:] == ("uv", "run", "backchannel")


def test_hints_carry_the_config_and_the_store() -> None:
    hints.use("my bot.toml", "/tmp/x.db", started_as=("uv", "run", "backchannel"))
    try:
        assert hints.command("preview", "web/v1.t") == (
            "uv run backchannel preview web/v1.t -c 'my bot.toml' --store /tmp/x.db"
        )
    finally:
        hints.use(None, started_as=("backchannel",))


def shell_env() -> dict[str, str]:
    """A shell where the virtualenv is activated: `backchannel` is on PATH, uv is not involved."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "BACKCHANNEL_"))}
    env = {k: v for k, v in env.items() if not k.startswith("OPENAI_")}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}


async def test_printed_commands_work_as_printed(tmp_path: Path) -> None:
    store = tmp_path / "state" / "bc.db"
    (tmp_path / "bot.toml").write_text(
        '[store]\npath = "state/bc.db"\n[server]\nport = 0\n'
        '[accounts.web]\nchannel = "webchat"\ntitle = "Support"\n',
        encoding="utf-8",
    )
    env = shell_env()
    process = await asyncio.create_subprocess_exec(
        BIN / "backchannel",
        "serve",
        "-c",
        "bot.toml",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        url = (await asyncio.wait_for(process.stdout.readline(), 30)).decode().split(" open ")[1]
        start_lines: list[str] = []
        while not any("in another terminal" in line for line in start_lines):
            start_lines.append((await asyncio.wait_for(process.stderr.readline(), 30)).decode())
        async with FakeBrowser(url.strip(), name="Ada") as page:
            await page.say("hello there")
            reply = await page.wait_for(lambda f: f["type"] == "message" and f["role"] == "agent")
    finally:
        process.terminate()
        await asyncio.wait_for(process.communicate(), 30)

    suggested = re.findall(r"`([^`]*backchannel [^`]*)`", "".join(start_lines) + reply["text"])
    assert f"backchannel preview web/{page.chat} -c bot.toml" in suggested
    assert "backchannel conversations -c bot.toml" in suggested
    results = await asyncio.gather(*(run_as_typed(c, tmp_path, env) for c in set(suggested)))
    assert [(command, code) for command, code, _ in results if code != 0] == [], results
    assert store.exists()


async def run_as_typed(command: str, cwd: Path, env: dict[str, str]) -> tuple[str, int, str]:
    process = await asyncio.create_subprocess_exec(
        *shlex.split(command),
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    return command, await process.wait(), stderr.decode()


def test_the_readme_says_how_to_run_the_cli_after_the_demo() -> None:
    from backchannel.cli import main

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## After the demo", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^uv run backchannel (\S+)", section, re.MULTILINE)
    assert commands, "the README's After the demo section shows `uv run backchannel ...`"
    assert set(commands) <= set(main.commands)
    assert "source .venv/bin/activate" in section

"""`make demo` as a newcomer runs it: PORT= is passed on, Ctrl-C stops it without a make error,
and it installs only what running needs (the dev tools come with `make test`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import aiohttp
import pytest
from backchannel.cli import main
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def newcomer_shell() -> dict[str, str]:
    """The environment of a fresh shell: no virtualenv active, not inside `uv run`."""
    venv = os.environ.get("VIRTUAL_ENV")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BACKCHANNEL_", "UV_", "VIRTUAL_ENV"))
    }
    paths = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in paths if not (venv and p.startswith(venv)))
    return env


async def test_ctrl_c_stops_make_demo_without_a_make_error(tmp_path: Path) -> None:
    env = newcomer_shell()
    process = await asyncio.create_subprocess_exec(
        "make",
        "-s",
        "demo",
        "PORT=0",
        f"STORE={tmp_path / 'demo.db'}",
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 120)).decode()
        assert " open http://127.0.0.1:" in line, line
        async with aiohttp.ClientSession() as http, http.get(line.split(" open ")[1]) as page:
            assert page.status == 200
    finally:
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does: the whole group gets it
        _, stderr = await asyncio.wait_for(process.communicate(), 60)

    text = stderr.decode()
    assert "make: ***" not in text, text
    assert text.rstrip().endswith("stopped"), text
    assert (tmp_path / "demo.db").exists()


def test_a_busy_port_under_make_says_how_to_pass_another() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner(env={"MAKELEVEL": "1"}).invoke(main, ["demo", "--port", str(port)])

    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].endswith(
        "(pick another port: make demo PORT=9000 (0 picks a free one))"
    )


def test_make_demo_installs_no_dev_tools() -> None:
    planned = subprocess.run(
        ["make", "-n", "demo"], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    syncs = [line for line in planned.splitlines() if " sync " in line]
    runs = [line for line in planned.splitlines() if " run " in line and "backchannel demo" in line]

    assert syncs and all("--no-dev" in line for line in syncs), planned
    assert runs and all("--no-sync" in line for line in runs), planned

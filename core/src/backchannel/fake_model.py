"""`backchannel fake-model`: an OpenAI-compatible server on 127.0.0.1 to try agents without a key.

It is the test suite's `FakeOpenAI`: the real chat-completions wire format,
answering from a script and then like an echoing model (it replies ``You
said: ...`` through the reply tool). Point an `openai` agent at it::

    backchannel fake-model --port 8000 &
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=fake \
        backchannel serve -c examples/openai.toml
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import click

from . import hints
from .errors import BackchannelError, ConfigError

__all__ = ["fake_model_command", "load_script"]


@click.command("fake-model")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0: any free."
)
@click.option("--api-key", help="Accept only this bearer key (default: any key, or none).")
@click.option(
    "--script",
    "script_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help='JSON list of answers to give first: {"answer": TEXT}, {"call_tool": NAME,'
    ' "arguments": {...}}, {"fail": STATUS, "message": TEXT}; then it echoes.',
)
def fake_model_command(port: int, api_key: str | None, script_path: Path | None) -> None:
    """Serve a fake OpenAI-compatible model on 127.0.0.1 (no key, no network) until Ctrl-C."""
    hints.use(None)
    steps = load_script(script_path) if script_path else []
    asyncio.run(_serve(port, api_key, steps))
    click.echo("stopped", err=True)


def load_script(path: Path) -> list[dict[str, Any]]:
    """Read and check a script file; raise ConfigError naming the file and the bad step."""
    try:
        steps = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("no such file", path=str(path)) from None
    except (OSError, ValueError) as error:
        raise ConfigError(f"not a JSON script: {error}", path=str(path)) from None
    if not isinstance(steps, list):
        raise ConfigError("expected a JSON list of steps", path=str(path))
    for index, step in enumerate(steps):
        if not (isinstance(step, dict) and len(set(step) & {"answer", "call_tool", "fail"}) == 1):
            raise ConfigError(
                'expected one of {"answer": ...}, {"call_tool": ..., "arguments": {...}},'
                ' {"fail": STATUS}',
                path=str(path),
                key=f"[{index}]",
            )
    return steps


async def _serve(port: int, api_key: str | None, steps: list[dict[str, Any]]) -> None:
    from .testing.fake_openai import FakeOpenAI

    fake = FakeOpenAI(api_key=api_key, listen_port=port)
    for step in steps:
        if "answer" in step:
            fake.answer(str(step["answer"]))
        elif "call_tool" in step:
            fake.call_tool(str(step["call_tool"]), step.get("arguments") or {})
        else:
            fake.fail(int(step["fail"]), str(step.get("message", "scripted failure")))
    fake.echo()
    try:
        url = await fake.start()
    except OSError as error:
        raise BackchannelError(
            f"cannot serve the fake model on 127.0.0.1:{port}: {error.strerror or error}"
            " (pick another with --port; 0 picks a free one)"
        ) from None
    click.echo(f"fake model: {url}")
    key = api_key or "fake"
    click.echo(
        f"try: OPENAI_BASE_URL={url} OPENAI_API_KEY={'***' if api_key else key}"
        f" {hints.command('serve', '-c', 'examples/openai.toml')}"
        f"  (or OPENAI_BASE_URL={url} {hints.command('demo')});"
        f" {len(steps)} scripted answer{'s' if len(steps) != 1 else ''}, then it echoes;"
        " press Ctrl-C to stop",
        err=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await fake.stop()

"""The demo agent counts what it was handed correctly, and the docs quote it as the code says it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backchannel import hints
from backchannel.app import serve
from backchannel.config import load_config
from backchannel_webchat.testing import FakeBrowser

REPO = Path(__file__).resolve().parents[2]
#: the conversation key the docs' samples use
DOC_KEY = "web/v726ba63c132858b9.6c368149"
REPLY = re.compile(r"I can see .*?an LLM agent would receive\.", re.DOTALL)


async def _talk(config_path: Path, visitor_says: list[str]) -> tuple[str, list[str]]:
    """Serve the web chat + demo agent, say each line from one tab; return (key, replies)."""
    config = load_config(config_path)
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_ready(board: Any) -> None:
        ready.set_result(board.accounts["web"].adapter.url)

    server = asyncio.create_task(serve(config, on_ready=on_ready, stop=stop))
    replies = []
    try:
        async with FakeBrowser(await asyncio.wait_for(ready, 30), name="Ada") as page:
            for text in visitor_says:
                seq = await page.wait_ack(await page.say(text))
                frame = await page.wait_for(_reply_to(seq or 0))
                replies.append(frame["text"])
            key = f"web/{page.chat}"
    finally:
        stop.set()
        await asyncio.wait_for(server, 30)
    return key, replies


def _reply_to(seq: int) -> Callable[[dict[str, Any]], bool]:
    return lambda frame: frame["type"] == "message" and frame.get("seq") == seq + 1


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "bot.toml"
    path.write_text(
        f'[store]\npath = "{tmp_path / "bc.db"}"\n[server]\nport = 0\n'
        '[accounts.web]\nchannel = "webchat"\ntitle = "Support"\n',
        encoding="utf-8",
    )
    return path


async def test_the_demo_agent_counts_the_visitors_messages_apart_from_its_own(
    tmp_path: Path,
) -> None:
    _, replies = await _talk(_config(tmp_path), ["one", "two", "three"])

    assert replies[2].startswith(
        'I can see 3 messages from 1 person in this direct chat "Support" on web chat,'
        " and 2 of mine."
    )


async def test_the_docs_quote_the_demo_agent_as_it_answers(tmp_path: Path) -> None:
    hints.use("bot.toml", started_as=("backchannel",))  # the docs' samples ran `serve -c bot.toml`
    try:
        key, replies = await _talk(_config(tmp_path), ["hello there", "what can you do?"])
    finally:
        hints.use(None, started_as=("backchannel",))
    generated = [reply.replace(key, DOC_KEY) for reply in replies]

    cli = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    agents = " ".join((REPO / "docs" / "agents.md").read_text(encoding="utf-8").split())
    # `show` and `preview` print both replies; agents.md quotes the second
    assert REPLY.findall(cli) == generated * 2
    assert REPLY.findall(agents) == generated[1:]

"""Ask another agent from the web chat, with no network: two deployments on a loopback relay.

    uv run python examples/ask_demo.py            # open the printed URL and type the hint
    uv run python examples/ask_demo.py --script   # the owner's side scripted: ask, print the report

Deployment A is examples/orchestrator.toml's shape: the web chat (the owner)
and a tiny.place identity, with the scripted agent of
examples/orchestrator_agent.py. Deployment B is another backchannel with its
own identity and store, whose agent answers questions in their session. The
relay is `FakeRelay` on 127.0.0.1 (the tiny.place wire format, real Signal
encryption); stores live in a temporary directory.

"ask <B's agent id> <question>" in the web chat makes A's agent call ask_agent;
B answers in the session; the answer is reported back into the web chat by a
reporter run (docs/orchestration.md, "Asking another agent").
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from backchannel import Run
from backchannel.app import build_switchboard
from backchannel.config import parse_config
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.testing import FakeRelay
from backchannel_webchat.testing import FakeBrowser

HERE = Path(__file__).resolve().parent


async def answering_agent(run: Run) -> None:
    """B's agent: answers each question in its session (a stand-in for a model)."""
    if run.trigger is not None:
        answer = f"B here. You asked: {run.trigger.text!r}. My answer: 42."
        await run.call("reply", {"message_id": run.trigger.seq, "text": answer})


def tinyplace(relay: FakeRelay) -> dict[str, Any]:
    return {
        "channel": "tinyplace",
        "identity": os.urandom(32).hex(),
        "relay_url": relay.url,
        "poll_interval": 0.1,
    }


async def demo(script: bool, directory: Path, port: int = 8765) -> str | None:
    """Start the relay, B and A; with `script`, ask once and return the reported answer."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # A's agent module sits next to this file
    async with FakeRelay() as relay:
        b_settings = tinyplace(relay)
        b = TinyplaceAdapter("b", b_settings)
        board_b = Switchboard(SQLiteStore(directory / "b.db"))
        board_b.add_account(b, Binding(agent=answering_agent, respond="mention"))
        config = parse_config(
            {
                "store": {"path": str(directory / "a.db")},
                "server": {"host": "127.0.0.1", "port": 0 if script else port},
                "accounts": {"web": {"channel": "webchat"}, "tp": tinyplace(relay)},
                "agents": {
                    "assistant": {"kind": "python", "agent": "orchestrator_agent:orchestrator"}
                },
                "bindings": [
                    {
                        "agent": "assistant",
                        "accounts": ["web"],
                        "respond": "always",
                        "orchestrate": True,
                    },
                    {"agent": "assistant", "accounts": ["tp"], "respond": "mention"},
                ],
            }
        )
        board_a = await build_switchboard(config)
        a = board_a.accounts["tp"].adapter
        relay.make_contacts(a.agent_id, b.agent_id)  # type: ignore[attr-defined]
        async with board_b, board_a:
            url = board_a.accounts["web"].adapter.url  # type: ignore[attr-defined]
            hint = f"ask {b.agent_id} what is the answer to everything?"
            if not script:
                print(f"web chat: {url}\ntype:     {hint}\n(Ctrl-C stops)", flush=True)
                await asyncio.Event().wait()
            async with FakeBrowser(url, name="Owner") as page:
                await page.say(hint)
                frame = await page.wait_for(
                    lambda f: f["type"] == "message" and "The answer came" in f["text"], 60
                )
                await board_a.wait_idle()
                return str(frame["text"])
    return None


def main() -> None:
    script = "--script" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as directory:
        try:
            answer = asyncio.run(demo(script, Path(directory)))
        except KeyboardInterrupt:
            return
    if answer is not None:
        print(answer)


if __name__ == "__main__":
    main()

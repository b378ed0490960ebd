"""The deployments of the ask tests: A (web chat + tiny.place, from a config) and peers B, C.

Shared by test_asks.py (in process) and asks_child.py (deployment A in its own
process, for the SIGKILL test). Everything is real except the relay
(FakeRelay) and the agents, which are scripted python agents calling tools.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from backchannel.config import Config, parse_config
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_webchat.normalize import conversation_chat, visitor_id
from tinyplace import LocalSigner

#: the owner's browser: the secret visitor token and the tab id its page keeps
OWNER_VISITOR = "5" * 32
OWNER_TAB = "owner-tab"
OWNER_CHAT = conversation_chat(visitor_id(OWNER_VISITOR), OWNER_TAB)


def agent_id_of(seed: bytes) -> str:
    """Return the tiny.place agent id of an identity seed."""
    return str(LocalSigner.from_seed(seed, siws=False).agent_id)


def tinyplace_settings(relay_url: str, seed: bytes, **extra: Any) -> dict[str, Any]:
    return {
        "identity": seed.hex(),
        "relay_url": relay_url,
        "poll_interval": 0.05,
        "request_timeout": 2.0,
        "prekey_pool": 4,
        **extra,
    }


def config_a(
    relay_url: str, seed: bytes, db: Path, *, port: int = 0, **orchestration: Any
) -> Config:
    """Deployment A: the owner's web chat is the master conversation; tiny.place for peers."""
    data: dict[str, Any] = {
        "store": {"path": str(db)},
        "server": {"host": "127.0.0.1", "port": port},
        "accounts": {
            "web": {"channel": "webchat"},
            "tp": {"channel": "tinyplace", **tinyplace_settings(relay_url, seed)},
        },
        "agents": {"assistant": {"kind": "demo"}},
        "bindings": [
            {"agent": "assistant", "accounts": ["web"], "chats": [OWNER_CHAT], "master": True,
             "orchestrate": True, "respond": "always"},
            {"agent": "assistant", "accounts": ["tp"], "respond": "mention"},
        ],
        "orchestration": orchestration,
    }  # fmt: skip
    return parse_config(data, check_plugins=False)


class OwnerAgent:
    """A's agent. In the web chat, "ask PEER QUESTION" calls ask_agent; a reporter run relays.

    Every run is recorded; `asked` holds ask_agent's results, `session_runs` any run
    in a tiny.place conversation (a correlated answer must not cause one).
    """

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.asked: list[str] = []
        self.session_runs: list[Run] = []
        self.reporter_runs: list[Run] = []
        self.changed = asyncio.Event()

    async def __call__(self, run: Run) -> None:
        self.runs.append(run)
        try:
            await self._act(run)
        finally:
            self.changed.set()

    async def _act(self, run: Run) -> None:
        if run.tool_names == ["send_message"]:  # a reporter run: relay the answer
            self.reporter_runs.append(run)
            answer = run.messages[-1]["content"].split("\n", 1)[1]
            await run.call("send_message", {"text": f"Answer received: {answer}"})
            return
        if run.conversation.address.account != "web":
            self.session_runs.append(run)
            return
        trigger = run.trigger
        if trigger is not None and trigger.text.startswith("ask "):
            _, peer, question = trigger.text.split(" ", 2)
            result = await run.call("ask_agent", {"peer": peer, "question": question})
            self.asked.append(result)
            print(f"ASKED {result}", flush=True)

    async def wait(self, predicate: Any, timeout: float = 20.0) -> None:
        """Return once `predicate()` holds (re-checked after every run)."""
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


class PeerAgent:
    """A peer deployment's agent: answers each question in its session.

    `use_reply` answers with `reply` (the envelope carries tp.in_reply_to),
    else with send_message (no reply target: correlation falls back to the
    oldest open ask). `hold` delays the answer until it is set.
    """

    def __init__(
        self,
        name: str,
        *,
        use_reply: bool = True,
        hold: asyncio.Event | None = None,
        text: str | None = None,
    ):
        self.name = name
        self.use_reply = use_reply
        self.hold = hold
        self.text = text
        self.questions: list[str] = []
        self.got_question = asyncio.Event()

    async def __call__(self, run: Run) -> None:
        trigger = run.trigger
        if trigger is None:
            return
        self.questions.append(trigger.text)
        self.got_question.set()
        if self.hold is not None:
            await self.hold.wait()
        answer = self.text or f"{self.name} answers: {trigger.text.upper()}"
        if self.use_reply:
            await run.call("reply", {"message_id": trigger.seq, "text": answer})
        else:
            await run.call("send_message", {"text": answer})


async def start_peer(
    relay_url: str, directory: Path, name: str, agent: PeerAgent
) -> tuple[Switchboard, TinyplaceAdapter]:
    """Start a peer deployment (its own store and identity) answering with `agent`."""
    adapter = TinyplaceAdapter(name, tinyplace_settings(relay_url, os.urandom(32)))
    board = Switchboard(SQLiteStore(directory / name / "backchannel.db"))
    board.add_account(adapter, Binding(agent=agent, respond="mention"))
    await board.start()
    return board, adapter

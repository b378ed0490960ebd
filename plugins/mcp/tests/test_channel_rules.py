"""The channel's rules, driven directly: delivery only after the write, durable cursors,
verdicts and corrections across sessions, and the owner plugin's API (a test double)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from backchannel.config import Config, McpConfig, default_config
from backchannel.model import Address, Conversation, Event, Sender
from backchannel.store import Inbound, SQLiteStore
from backchannel_mcp.channel import CHANNEL_EVENT, PERMISSION_VERDICT, Channel, PermissionRequest
from backchannel_mcp.owner import OwnerGate, OwnerMessage
from backchannel_mcp.sending import SendOutcome
from backchannel_mcp.server import BackchannelMcp
from backchannel_mcp.tools import ToolBox

from .conftest import connected

OWNER = Sender("42", "Olga")
STRANGER = Sender("66", "Sam")
GATE = OwnerGate("tg", "42", "42")
_ids = itertools.count(1)


class Sent:
    """A `send` stand-in: records what the channel sent to the owner."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def __call__(
        self, config: Config, conversation: Conversation, text: str, **kw: Any
    ) -> SendOutcome:
        self.texts.append(text)
        return SendOutcome("sent", conversation.address.key, seq=len(self.texts))


class Writes:
    """A `write` stand-in: records notifications; can be told to fail like a closed pipe."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self.failing = False

    async def __call__(self, method: str, params: Any) -> None:
        if self.failing:
            raise ConnectionResetError("client pipe closed")
        self.items.append((method, dict(params)))

    def of(self, method: str) -> list[dict[str, Any]]:
        return [p for m, p in self.items if m == method]


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = SQLiteStore(tmp_path / "bc.db")
    yield opened
    await opened.close()


def config() -> Config:
    base = default_config(store_path=":memory:")
    from attrs import evolve
    from backchannel.config import AccountConfig

    accounts = {**base.accounts, "tg": AccountConfig("tg", "telegram")}
    return evolve(base, accounts=accounts, mcp=McpConfig(None, "tg", "42", "42"))


async def write_in(store: SQLiteStore, sender: Sender, text: str, chat: str = "42") -> None:
    n = next(_ids)
    await store.append_inbound(
        [
            Inbound(
                Event(Address("tg", chat), f"e{n}", sender, text=text, platform_message_id=str(n))
            )
        ]
    )


def channel(store: SQLiteStore, sent: Sent, **kw: Any) -> Channel:
    return Channel(
        config(), store, GATE, session_name=kw.pop("session_name", "s1"), send=sent, **kw
    )


async def start(ch: Channel, writes: Writes) -> list[Conversation]:
    return await ch.attach(writes)


async def test_a_push_that_cannot_be_written_is_not_marked_and_goes_out_next_time(
    store: SQLiteStore,
) -> None:
    await write_in(store, OWNER, "old news")
    sent, writes = Sent(), Writes()
    ch = channel(store, sent, watch=["tg/42"])
    watched = await start(ch, writes)
    await write_in(store, OWNER, "ship it")
    writes.failing = True
    with pytest.raises(ConnectionResetError):
        await ch.poll_once(watched)
    writes.failing = False
    await ch.poll_once(watched)
    await ch.poll_once(watched)
    assert [p["content"] for p in writes.of(CHANNEL_EVENT)] == ["[#2] Olga: ship it"]


async def test_a_restarted_session_does_not_push_what_it_already_pushed(store: SQLiteStore) -> None:
    await write_in(store, OWNER, "first")
    sent, writes = Sent(), Writes()
    ch = channel(store, sent, watch=["tg/42"])
    watched = await start(ch, writes)
    await write_in(store, OWNER, "second")
    await ch.poll_once(watched)
    again = Writes()
    restarted = channel(store, sent, watch=["tg/42"])
    watched = await start(restarted, again)
    await write_in(store, OWNER, "third")
    await restarted.poll_once(watched)
    assert [p["content"] for p in writes.of(CHANNEL_EVENT)] == ["[#2] Olga: second"]
    assert [p["content"] for p in again.of(CHANNEL_EVENT)] == ["[#3] Olga: third"]


async def test_no_denies_and_an_expired_id_is_corrected(store: SQLiteStore) -> None:
    await write_in(store, OWNER, "hi")
    sent, writes = Sent(), Writes()
    ch = channel(store, sent)
    await start(ch, writes)
    await ch.poll_once([])
    await ch.permission_requested(
        PermissionRequest.model_validate({"request_id": "abcde", "tool_name": "Write"})
    )
    await ch.permission_requested(
        PermissionRequest.model_validate({"request_id": "fghij", "tool_name": "Bash"})
    )
    ch.open_requests["fghij"] = time.time() - 1  # expired
    await write_in(store, OWNER, "no abcde")
    await write_in(store, STRANGER, "yes fghij", chat="42")  # not the owner: ignored
    await write_in(store, OWNER, "yes fghij")
    await ch.poll_once([])
    assert writes.of(PERMISSION_VERDICT) == [{"request_id": "abcde", "behavior": "deny"}]
    assert sent.texts[:2] == [
        '🔐 session "s1" wants to run Write — reply `yes abcde` or `no abcde`',
        '🔐 session "s1" wants to run Bash — reply `yes fghij` or `no fghij`',
    ]
    assert len(sent.texts) == 3 and "`fghij` is not an open permission request" in sent.texts[2]
    assert writes.of(CHANNEL_EVENT) == []  # verdicts and corrections are never pushed as chat


async def test_another_sessions_id_is_left_to_it_and_corrected_once_when_unknown(
    store: SQLiteStore,
) -> None:
    await write_in(store, OWNER, "hi")
    sent_one, sent_two = Sent(), Sent()
    one, two = (
        channel(store, sent_one, session_name="one"),
        channel(store, sent_two, session_name="two"),
    )
    w1, w2 = Writes(), Writes()
    await start(one, w1)
    await start(two, w2)
    await one.poll_once([])
    await two.poll_once([])
    await one.permission_requested(
        PermissionRequest.model_validate({"request_id": "kmnpq", "tool_name": "Bash"})
    )
    await write_in(store, OWNER, "yes kmnpq")
    await write_in(store, OWNER, "yes zzzzz")
    await two.poll_once([])
    await one.poll_once([])
    assert w1.of(PERMISSION_VERDICT) == [{"request_id": "kmnpq", "behavior": "allow"}]
    assert w2.of(PERMISSION_VERDICT) == []
    corrections = [
        t for t in sent_one.texts + sent_two.texts if "not an open permission request" in t
    ]
    assert len(corrections) == 1 and "`zzzzz`" in corrections[0]


class OwnerDouble:
    """Stands in for the owner plugin's API (issue 12) in tests."""

    session_name = "ci-cd-incremental-2"
    mark = "🦊"

    def __init__(self) -> None:
        self.queue = [
            OwnerMessage(
                "m9x2c", "hold off, do the validation slice first", "tg/42", "Olga", 7, "m7k3q"
            )
        ]
        self.delivered: list[str] = []
        self.notified: list[tuple[str, bool]] = []

    async def notify(self, text: str, *, needs_answer: bool) -> str:
        self.notified.append((text, needs_answer))
        return "sent to your owner as #m8b1p"

    async def inbox_text(self) -> str:
        return "no messages from your owner"

    async def reply(self, id: str, text: str) -> str:
        return f"answered #{id}"

    async def pending(self) -> list[OwnerMessage]:
        return [m for m in self.queue if m.id not in self.delivered]

    async def mark_delivered(self, id: str) -> None:
        self.delivered.append(id)


async def test_routed_owner_replies_are_pushed_then_marked_delivered(store: SQLiteStore) -> None:
    owner = OwnerDouble()
    sent, writes = Sent(), Writes()
    ch = channel(store, sent, owner_api=owner)
    await start(ch, writes)
    writes.failing = True
    with pytest.raises(ConnectionResetError):
        await ch.poll_once([])
    assert owner.delivered == []
    writes.failing = False
    await ch.poll_once([])
    await ch.poll_once([])
    (pushed,) = writes.of(CHANNEL_EVENT)
    assert pushed == {
        "content": "hold off, do the validation slice first",
        "meta": {
            "channel": "telegram",
            "conversation": "tg/42",
            "sender": "Olga",
            "message_id": "m9x2c",
        },
    }
    assert owner.delivered == ["m9x2c"]


async def test_the_owner_tools_appear_with_the_owner_api_and_call_it(store: SQLiteStore) -> None:
    owner = OwnerDouble()
    async with connected(BackchannelMcp(ToolBox(config(), store, owner=owner))) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names[-3:] == ["notify_owner", "owner_inbox", "reply_to_owner"]
        result = await client.call_tool(
            "notify_owner", {"text": "tests pass", "needs_answer": True}
        )
        assert result.content[0].text == "sent to your owner as #m8b1p"  # type: ignore[union-attr]
    assert owner.notified == [("tests pass", True)]

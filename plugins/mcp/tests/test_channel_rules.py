"""The channel's own rules, driven directly with a double of the owner API: delivery only
after the write, durable cursors for --watch, the sender gate, permission hand-off."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from attrs import evolve
from backchannel.config import AccountConfig, Config, default_config
from backchannel.model import Address, Event, Sender
from backchannel.store import Inbound, SQLiteStore
from backchannel_mcp.channel import CHANNEL_EVENT, PERMISSION_VERDICT, Channel, PermissionRequest
from backchannel_mcp.owner import OwnerGate, OwnerMessage
from backchannel_mcp.server import BackchannelMcp
from backchannel_mcp.tools import ToolBox

from .conftest import connected

OWNER = Sender("42", "Olga")
STRANGER = Sender("66", "Sam")
GATE = OwnerGate("tg", "42", "42")
_ids = itertools.count(1)


class Writes:
    """A `write` stand-in: records notifications; can fail like a closed pipe."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self.failing = False

    async def __call__(self, method: str, params: Any) -> None:
        if self.failing:
            raise ConnectionResetError("client pipe closed")
        self.items.append((method, dict(params)))

    def of(self, method: str) -> list[dict[str, Any]]:
        return [p for m, p in self.items if m == method]


class OwnerDouble:
    """Stands in for `backchannel_owner.api` (the owner plugin) for one session."""

    session_name = "ci-cd-incremental-2"
    account = "tg"
    chat = "42"

    def __init__(self, *items: OwnerMessage) -> None:
        self.queue = list(items)
        self.log: list[str] = []
        self.permissions: list[tuple[str, str, str]] = []
        self.notified: list[tuple[str, bool]] = []

    async def notify(self, text: str, *, needs_answer: bool) -> str:
        self.notified.append((text, needs_answer))
        return "sent: your owner sees it as #m8b1p"

    async def reply(self, id: str, text: str) -> str:
        return f"answered #{id}"

    async def request_permission(self, request_id: str, tool_name: str, description: str) -> str:
        self.permissions.append((request_id, tool_name, description))
        return "p4x2z"

    def pending(self) -> list[OwnerMessage]:
        return list(self.queue)

    def mark_attempt(self, id: str) -> None:
        self.log.append(f"attempt {id}")

    def mark_delivered(self, id: str) -> None:
        self.log.append(f"delivered {id}")
        self.queue = [m for m in self.queue if m.id != id]


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = SQLiteStore(tmp_path / "bc.db")
    yield opened
    await opened.close()


def config() -> Config:
    base = default_config(store_path=":memory:")
    return evolve(base, accounts={**base.accounts, "tg": AccountConfig("tg", "telegram")})


async def write_in(store: SQLiteStore, sender: Sender, text: str, chat: str = "42") -> None:
    n = next(_ids)
    event = Event(Address("tg", chat), f"e{n}", sender, text=text, platform_message_id=str(n))
    await store.append_inbound([Inbound(event)])


def channel(store: SQLiteStore, owner: OwnerDouble, **kw: Any) -> Channel:
    return Channel(config(), store, GATE, owner, **kw)


REPLY = OwnerMessage("m9x2c", "hold off, do the validation slice first", replying_to="m7k3q")
ALLOW = OwnerMessage(
    "q1w2e", "yes", kind="permission", meta={"request_id": "abcde", "behavior": "allow"}
)


async def test_a_push_that_cannot_be_written_is_not_marked_delivered_and_goes_out_next_time(
    store: SQLiteStore,
) -> None:
    owner, writes = OwnerDouble(REPLY), Writes()
    ch = channel(store, owner)
    watched = await ch.attach(writes)
    writes.failing = True
    with pytest.raises(ConnectionResetError):
        await ch.poll_once(watched)
    assert owner.log == ["attempt m9x2c"]
    writes.failing = False
    await ch.poll_once(watched)
    await ch.poll_once(watched)
    (pushed,) = writes.of(CHANNEL_EVENT)
    assert pushed == {
        "content": "[#m9x2c] owner (replying to #m7k3q): hold off, do the validation slice first",
        "meta": {
            "channel": "telegram",
            "conversation": "tg/42",
            "sender": "owner",
            "message_id": "m9x2c",
        },
    }
    assert owner.log == ["attempt m9x2c", "attempt m9x2c", "delivered m9x2c"]


async def test_a_permission_answer_becomes_the_verdict_notification(store: SQLiteStore) -> None:
    owner, writes = OwnerDouble(ALLOW), Writes()
    ch = channel(store, owner)
    await ch.poll_once(await ch.attach(writes))
    assert writes.items == [(PERMISSION_VERDICT, {"request_id": "abcde", "behavior": "allow"})]
    assert owner.log == ["attempt q1w2e", "delivered q1w2e"]


async def test_a_permission_request_is_forwarded_and_a_malformed_id_ignored(
    store: SQLiteStore,
) -> None:
    owner = OwnerDouble()
    ch = channel(store, owner)

    def request(**params: str) -> PermissionRequest:
        return PermissionRequest.model_validate(params)

    await ch.permission_requested(
        request(request_id="ABCDE", tool_name="Bash", input_preview='{"command":\n "ls"}')
    )
    await ch.permission_requested(request(request_id="ab1de", tool_name="Bash"))
    await ch.permission_requested(request(request_id="fghij", tool_name="Write", description="x"))
    assert owner.permissions == [
        ("abcde", "Bash", '{"command": "ls"}'),
        ("fghij", "Write", "x"),
    ]


async def test_watch_pushes_only_the_owner_in_the_owners_chat_and_survives_a_restart(
    store: SQLiteStore,
) -> None:
    await write_in(store, OWNER, "before the session")
    await write_in(store, OWNER, "in the group, before", chat="-100")
    owner, writes = OwnerDouble(), Writes()
    ch = channel(store, owner, watch=["tg/42", "tg/-100"])
    watched = await ch.attach(writes)
    await write_in(store, STRANGER, "yes abcde", chat="-100")
    await write_in(store, OWNER, "the owner, but in a group", chat="-100")
    await write_in(store, OWNER, "second")
    await ch.poll_once(watched)
    again = Writes()
    restarted = channel(store, owner, watch=["tg/42"])
    watched = await restarted.attach(again)
    await write_in(store, OWNER, "third")
    await restarted.poll_once(watched)
    assert [p["content"] for p in writes.of(CHANNEL_EVENT)] == ["[#2] Olga: second"]
    assert [p["content"] for p in again.of(CHANNEL_EVENT)] == ["[#3] Olga: third"]
    assert ch.refused == 2


async def test_watch_does_not_push_again_what_the_owner_plugin_routed(store: SQLiteStore) -> None:
    await write_in(store, OWNER, "before the session")
    owner, writes = OwnerDouble(), Writes()
    ch = channel(store, owner, watch=["tg/42"])
    watched = await ch.attach(writes)
    event = Event(
        Address("tg", "42"), "e-routed", OWNER, text="#m7k3q use main", meta={"routed": True}
    )
    await store.append_inbound([Inbound(event)])
    await write_in(store, OWNER, "a plain message")
    await ch.poll_once(watched)
    await ch.poll_once(watched)
    assert [p["content"] for p in writes.of(CHANNEL_EVENT)] == ["[#3] Olga: a plain message"]


async def test_the_owner_tools_call_the_owner_api_and_the_inbox_marks_what_it_shows(
    store: SQLiteStore,
) -> None:
    owner = OwnerDouble(REPLY, ALLOW)
    async with connected(BackchannelMcp(ToolBox(config(), store, owner=owner))) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names[-3:] == ["notify_owner", "owner_inbox", "reply_to_owner"]
        told = await client.call_tool("notify_owner", {"text": "tests pass", "needs_answer": True})
        assert told.content[0].text == "sent: your owner sees it as #m8b1p"  # type: ignore[union-attr]
        inbox = (await client.call_tool("owner_inbox", {})).content[0].text  # type: ignore[union-attr]
        assert inbox.splitlines()[0] == (
            "Owner sent you a message #m9x2c (replying to your #m7k3q):"
            ' "hold off, do the validation slice first"'
        )
        assert "not a system instruction" in inbox
    assert owner.notified == [("tests pass", True)]
    assert owner.log == [
        "attempt m9x2c",
        "delivered m9x2c",
    ]  # the permission item is not the model's


async def test_pushes_after_the_client_has_gone_are_not_marked_delivered(
    store: SQLiteStore,
) -> None:
    """A backlog is being pushed when the client closes its end (EOF on the server's input):
    what the server could not write any more stays owed, and every push marked delivered
    is one the client read. (The SDK's own notify drops a notification to a closed
    connection without raising: 94 of 200 owner messages were lost that way.)"""
    import anyio
    import mcp_types as types
    from mcp.shared.memory import create_client_server_memory_streams
    from mcp.shared.message import SessionMessage

    backlog = [OwnerMessage(f"m{n:04d}", f"message {n}") for n in range(60)]
    owner = OwnerDouble(*backlog)
    app = BackchannelMcp(ToolBox(config(), store, owner=owner), channel=channel(store, owner))
    read: list[str] = []
    async with (
        create_client_server_memory_streams() as ((from_server, to_server), server_streams),
        anyio.create_task_group() as group,
    ):
        group.start_soon(app.serve_streams, *server_streams)

        async def send(message: Any) -> None:
            await to_server.send(SessionMessage(message=message))

        await send(
            types.JSONRPCRequest(
                jsonrpc="2.0",
                id=1,
                method="initialize",
                params={
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            )
        )
        await from_server.receive()  # the handshake's answer
        await send(types.JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized"))
        async for item in from_server:
            message = getattr(item, "message", None)
            if getattr(message, "method", None) == CHANNEL_EVENT:
                read.append(message.params["meta"]["message_id"])  # type: ignore[union-attr]
                if len(read) == 3:
                    await to_server.aclose()  # the client leaves mid-backlog; reads what is out
        group.cancel_scope.cancel()
    delivered = [line.split()[1] for line in owner.log if line.startswith("delivered")]
    assert len(read) >= 3 and len(delivered) < len(backlog)
    assert set(delivered) <= set(read), sorted(set(delivered) - set(read))[:5]
    # and what is left goes out next time
    assert [m.id for m in owner.pending()] == [m.id for m in backlog if m.id not in delivered]

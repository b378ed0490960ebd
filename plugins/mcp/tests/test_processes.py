"""`backchannel mcp serve` as a real subprocess: stdio, and streamable HTTP behind a bearer token.

Sends go through a running `serve` (the control socket) when there is one.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2 as httpx
import pytest
from backchannel.model import Address
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from .conftest import (
    TOKEN,
    ChannelListener,
    Received,
    World,
    http_serving,
    open_store,
    text_of,
)


def serve_args(world: World, *more: str) -> list[str]:
    return ["-m", "backchannel", "mcp", "serve", "-c", str(world.config_path), *more]


async def test_stdio_subprocess_reads_sends_through_serve_and_pushes_the_owners_reply(
    world: World, running_serve: Callable[[], Awaitable[None]]
) -> None:
    """What Claude Code does: spawn `mcp serve --stdio --channel`, use the tools, get a push."""
    await world.seed()
    await running_serve()
    params = StdioServerParameters(
        command=sys.executable,
        args=serve_args(world, "--stdio", "--channel"),
        env=dict(os.environ),
    )
    received = Received()
    fake = world.fake
    async with Client(params, mode="legacy", extensions=[ChannelListener(received)]) as client:
        assert "claude/channel" in (client.server_capabilities.experimental or {})
        names = [t.name for t in (await client.list_tools()).tools]
        assert "read_conversation" in names and "notify_owner" in names
        read = text_of(
            await client.call_tool("read_conversation", {"conversation": world.group_key})
        )
        assert "[#1] Alice: the invoice is due Friday" in read
        sent = await client.call_tool(
            "send_message", {"conversation": world.group_key, "text": "via serve"}
        )
        assert text_of(sent) == f"sent to {world.group_key} as #3", text_of(sent)
        reacted = await client.call_tool(
            "react", {"conversation": world.group_key, "message": 3, "emoji": "👍"}
        )
        assert text_of(reacted) == f"reaction done in {world.group_key}", text_of(reacted)
        told = text_of(await client.call_tool("notify_owner", {"text": "sent the invoice note"}))
        found = re.search(r"#(\w{5})", told)
        assert found is not None, told
        update = fake.inject_message(
            world.owner_chat, world.owner, f"#{found.group(1)} thanks, now the tests"
        )
        await fake.wait_for(lambda: fake.is_acked(update["update_id"]), what="the owner's reply")
        (pushed,) = await received.wait_for("notifications/claude/channel", timeout=30)
        assert pushed["content"].endswith(
            f"owner (replying to #{found.group(1)}): thanks, now the tests"
        )
    assert [m.text for m in fake.sent][:1] == ["via serve"] and len(fake.sent) == 2
    assert [(chat, message) for chat, message, _ in fake.reactions] == [
        (world.group["id"], fake.sent[0].message_id)
    ]
    store = open_store(world.config())
    try:
        conversation = await store.find_conversation(Address("tg", str(world.group["id"])))
        assert conversation is not None
        rows = [m for m in await store.window(conversation.id, 10) if m.direction == "out"]
        assert [(m.text, m.status) for m in rows] == [("via serve", "sent")]
    finally:
        await store.close()


@pytest.fixture
async def http_server(world: World) -> AsyncIterator[str]:
    """Start `backchannel mcp serve --http 127.0.0.1:0`; yield its URL once it listens."""
    async with http_serving("-c", str(world.config_path), "--http", "127.0.0.1:0") as (url, _):
        yield url


async def test_http_needs_the_token_and_refuses_a_wrong_one(world: World, http_server: str) -> None:
    await world.seed()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(http_server, http_client=http), mode="legacy") as client,
    ):
        read = text_of(
            await client.call_tool("read_conversation", {"conversation": world.group_key})
        )
        assert "I sent it to billing" in read
    async with httpx.AsyncClient() as http:
        for given in ({}, {"Authorization": "Bearer not-the-token"}):
            answer = await http.post(
                http_server,
                headers={**given, "Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            )
            assert answer.status_code == 401
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert TOKEN not in answer.text


def test_http_on_a_public_address_without_a_token_is_refused(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backchannel.cli import main
    from click.testing import CliRunner

    monkeypatch.setenv("BACKCHANNEL_MCP_TOKEN", "")
    result = CliRunner().invoke(
        main, ["mcp", "serve", "-c", str(world.config_path), "--http", "0.0.0.0:0"]
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "refusing to serve MCP on 0.0.0.0" in lines[0], result.output
    assert not world.store_path.exists()  # refused before anything was opened

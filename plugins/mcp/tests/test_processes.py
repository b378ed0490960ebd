"""`backchannel mcp serve` as a real subprocess: stdio, and streamable HTTP behind a bearer token.

Sends go through a running `serve` (the control socket) when there is one.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2 as httpx
import pytest
from backchannel.model import Address
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from .conftest import TOKEN, World, open_store


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def serve_args(world: World, *more: str) -> list[str]:
    return ["-m", "backchannel", "mcp", "serve", "-c", str(world.config_path), *more]


async def test_stdio_subprocess_reads_and_sends_through_the_running_serve(
    world: World, running_serve: Callable[[], Awaitable[None]]
) -> None:
    await world.seed()
    await running_serve()
    params = StdioServerParameters(
        command=sys.executable, args=serve_args(world, "--stdio"), env=dict(os.environ)
    )
    async with Client(params, mode="legacy") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert "read_conversation" in names and "send_message" in names
        read = text_of(
            await client.call_tool("read_conversation", {"conversation": world.group_key})
        )
        assert "[#1] Alice: the invoice is due Friday" in read
        sent = await client.call_tool(
            "send_message", {"conversation": world.group_key, "text": "via serve"}
        )
        assert text_of(sent) == f"sent to {world.group_key} as #3", text_of(sent)
    assert [m.text for m in world.fake.sent] == ["via serve"]
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
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *serve_args(world, "--http", "127.0.0.1:0"),
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    assert process.stderr is not None
    url = ""
    seen: list[str] = []
    try:
        while not url:
            line = await asyncio.wait_for(process.stderr.readline(), 60)
            if not line:
                raise AssertionError("mcp serve exited: " + "".join(seen))
            seen.append(line.decode())
            if "serving MCP on " in seen[-1]:
                url = seen[-1].split("serving MCP on ", 1)[1].strip()
        yield url
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


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


async def test_http_on_a_public_address_without_a_token_is_refused(world: World) -> None:
    env = {k: v for k, v in os.environ.items() if k != "BACKCHANNEL_MCP_TOKEN"}
    env["BACKCHANNEL_MCP_TOKEN"] = ""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *serve_args(world, "--http", "0.0.0.0:0"),
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "refusing to serve MCP on 0.0.0.0" in lines[0]

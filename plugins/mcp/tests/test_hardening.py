"""Hostile and broken input from an MCP client: null, huge and broken arguments, bad stdio lines."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import anyio
import pytest
from backchannel_mcp.server import BackchannelMcp
from backchannel_mcp.tools import ToolBox

from .conftest import World, connected, open_store, text_of


async def test_null_for_an_optional_argument_means_its_default(world: World) -> None:
    await world.seed()
    config = world.config()
    store = open_store(config)
    try:
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            listed = await client.call_tool(
                "list_conversations", {"query": None, "channel": None, "limit": None}
            )
            assert not listed.is_error and world.group_key in text_of(listed)
            read = await client.call_tool(
                "read_conversation", {"conversation": world.group_key, "before": None}
            )
            assert not read.is_error and "[#2] Alice: I sent it to billing" in text_of(read)
            # a required argument stays required
            missing = await client.call_tool("read_conversation", {"conversation": None})
            assert missing.is_error and "conversation must be a string" in text_of(missing)
    finally:
        await store.close()


async def test_numbers_no_store_can_hold_are_one_line_errors_not_tracebacks(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.seed()
    config = world.config()
    store = open_store(config)
    huge = 10**30
    try:
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            calls: list[tuple[str, dict[str, Any], str]] = [
                ("reply", {"conversation": world.group_key, "message": huge, "text": "x"}, "message is out of range"),
                ("react", {"conversation": world.group_key, "message": -huge, "emoji": "👍"}, "message is out of range"),
                ("read_conversation", {"conversation": world.group_key, "before": huge}, "before is out of range"),
                ("read_conversation", {"conversation": str(huge)}, f"no conversation '{huge}'"),
                ("send_message", {"conversation": f"#{huge}", "text": "x"}, "refused: there is no conversation"),
            ]  # fmt: skip
            for name, arguments, said in calls:
                result = await client.call_tool(name, arguments)
                assert result.is_error, (name, text_of(result))
                assert said in text_of(result) and "\n" not in text_of(result)
            # a limit past any store's integers is refused like the ids; a large one is clamped
            listed = await client.call_tool("list_conversations", {"limit": huge})
            assert listed.is_error and "limit is out of range" in text_of(listed)
            listed = await client.call_tool("list_conversations", {"limit": 10**9})
            assert not listed.is_error and world.group_key in text_of(listed)
    finally:
        await store.close()
    assert world.fake.sent == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_half_a_surrogate_pair_in_a_text_is_repaired_and_sent(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.seed()
    config = world.config()
    store = open_store(config)
    try:
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            result = await client.call_tool(
                "send_message", {"conversation": world.group_key, "text": "paid \ud83d"}
            )
            assert text_of(result) == f"sent to {world.group_key} as #3"
    finally:
        await store.close()
    assert [m.text for m in world.fake.sent] == ["paid \ufffd"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class Lines:
    """stdin and stdout for the SDK's stdio transport, in memory: lines in, lines out."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[str](100)
        self.out: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()

    def feed(self, *lines: str) -> None:
        for line in lines:
            self._send.send_nowait(line + "\n")

    def end(self) -> None:
        self._send.close()

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def write(self, text: str) -> None:
        async with self._changed:
            self.out.extend(json.loads(line) for line in text.splitlines() if line.strip())
            self._changed.notify_all()

    async def flush(self) -> None:
        pass

    async def answer(self, request_id: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next((m for m in self.out if m.get("id") == request_id), None)

        async def wait() -> dict[str, Any]:
            async with self._changed:
                await self._changed.wait_for(lambda: found() is not None)
            answer = found()
            assert answer is not None
            return answer

        return await asyncio.wait_for(wait(), 20)


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message)


async def test_stdio_lines_the_sdk_cannot_parse_are_answered_or_dropped_and_serving_goes_on(
    world: World,
) -> None:
    from mcp.server.stdio import stdio_server

    await world.seed()
    config = world.config()
    store = open_store(config)
    lines = Lines()
    try:
        async with stdio_server(stdin=lines, stdout=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            app = BackchannelMcp(ToolBox(config, store))
            serving = asyncio.create_task(app.serve_streams(read_stream, write_stream))
            lines.feed(
                request(
                    1,
                    "initialize",
                    {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"},
                    },
                )
            )
            await lines.answer(1)
            query = {"name": "list_conversations", "arguments": {"query": "billing\ud800"}}
            lines.feed(
                json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                "garbage that is not JSON",
                "[[[[",
                request(2, "tools/call", query),  # json.dumps writes "\ud800": pydantic refuses it
                json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": "\ud800"}),
                request(4, "tools/call", {"name": "list_conversations", "arguments": {}}),
            )
            repaired = await lines.answer(2)
            assert repaired["result"]["isError"] is False
            assert "billing\ufffd" in repaired["result"]["content"][0]["text"]
            assert (await lines.answer(3))["error"]["code"] == -32600
            assert world.group_key in (await lines.answer(4))["result"]["content"][0]["text"]
            lines.end()
            await asyncio.wait_for(serving, 20)
    finally:
        await store.close()


async def test_http_closes_connections_slow_to_send_headers_and_caps_each_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idle connections held every one of uvicorn's 256 places (it counts a connection
    from the moment it opens and waits for its headers for ever): every request was a 503
    while they stayed. Now one address holds at most its share, and a connection that
    sends no complete headers in time is closed."""
    import asyncio
    from types import SimpleNamespace

    import httpx2 as httpx
    from backchannel_mcp import http as mcp_http

    monkeypatch.setattr(mcp_http, "HEADER_TIMEOUT", 0.5)
    monkeypatch.setattr(mcp_http, "MAX_PER_ADDRESS", 4)

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/slow":  # a tool call slower than the header deadline
            await asyncio.sleep(1.5)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = SimpleNamespace(server=SimpleNamespace(streamable_http_app=lambda host: asgi))
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    serving = asyncio.create_task(
        mcp_http.serve_http(app, "127.0.0.1", 0, "tok", on_ready=ready.set_result, stop=stop)  # type: ignore[arg-type]
    )
    url = await asyncio.wait_for(ready, 30)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        idle = [
            await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.7", 0))
            for _ in range(6)
        ]
        # past its share, an address's connections are closed at once
        for reader, _writer in idle[4:]:
            assert await asyncio.wait_for(reader.read(), 30) == b""
        # another address is served meanwhile
        headers = {"Authorization": "Bearer tok"}
        async with httpx.AsyncClient() as http:
            assert (await http.get(url, headers=headers)).status_code == 200
        # a connection trickling its headers is closed once its time is up, and so is one
        # that never sent any
        idle[0][1].write(b"GET /mcp HTTP/1.1\r\n")
        await idle[0][1].drain()
        for reader, _writer in idle[:4]:
            assert await asyncio.wait_for(reader.read(), 30) == b""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
        assert answer.startswith(b"HTTP/1.1 200") and b"\r\nok\r\n" in answer
        # two requests in one write (pipelined), the second slower than the deadline: the
        # deadline counts for a connection gone quiet, not one whose request is being served
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = b"GET /%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n\r\n"
        writer.write(request % b"mcp" + request % b"slow")
        await writer.drain()
        answers = await asyncio.wait_for(reader.read(), 30)
        assert answers.count(b"HTTP/1.1 200") == 2 and answers.count(b"\r\nok\r\n") == 2
        for _reader, idle_writer in (*idle, (reader, writer)):
            idle_writer.close()
    finally:
        stop.set()
        await serving

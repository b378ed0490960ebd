"""Hostile and broken input from an MCP client: null, huge and broken arguments, bad stdio lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
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


INITIALIZE_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}


@contextlib.asynccontextmanager
async def stdio_serving(world: World) -> AsyncIterator[Lines]:
    """The app served over the SDK's stdio transport, its stdin and stdout in memory."""
    from mcp.server.stdio import stdio_server

    config = world.config()
    store = open_store(config)
    lines = Lines()
    try:
        async with stdio_server(stdin=lines, stdout=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            app = BackchannelMcp(ToolBox(config, store))
            serving = asyncio.create_task(app.serve_streams(read_stream, write_stream))
            try:
                yield lines
            finally:
                lines.end()  # end of input: the server stops
                await asyncio.wait_for(serving, 20)
    finally:
        await store.close()


async def test_stdio_lines_the_sdk_cannot_parse_are_answered_or_dropped_and_serving_goes_on(
    world: World,
) -> None:
    await world.seed()
    async with stdio_serving(world) as lines:
        lines.feed(request(1, "initialize", INITIALIZE_PARAMS))
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


async def test_stdio_every_line_with_an_id_gets_one_answer_and_one_without_is_counted(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Lines with an id that pydantic refuses as JSON-RPC (params not an object, jsonrpc
    1.0, no method, a batch) were dropped and the client waited for ever; valid JSON
    Python's json cannot read (a 5,000-digit number, 3,000-deep nesting) was dropped as
    'not JSON'."""
    caplog.set_level(logging.DEBUG, logger="backchannel.mcp")
    deep = "[" * 3000 + "]" * 3000
    with_id = {
        201: ('{"jsonrpc":"2.0","id":201,"method":"tools/call","params":"x"}', -32600),
        202: ('{"jsonrpc":"1.0","id":202,"method":"tools/list"}', -32600),
        203: ('{"jsonrpc":"2.0","id":203}', -32600),
        204: (
            '{"jsonrpc":"2.0","id":204,"method":"tools/call","params":{"name":'
            '"list_conversations","arguments":{"limit":' + "9" * 5000 + "}}}",
            -32700,
        ),
        205: (
            '{"jsonrpc":"2.0","method":"tools/call","params":{"name":"list_conversations",'
            '"arguments":{"query":' + deep + '}},"id":205}',
            -32700,
        ),
        206: ('[{"jsonrpc":"2.0","id":206,"method":"tools/list"},{"id":207}]', -32600),
        208: ('{"jsonrpc":"2.0","id":208,"method":"tools/li', -32700),
        "s1": ('{"jsonrpc":"2.0","id":"s1","method":"tools/list","params":[1]}', -32600),
    }
    without_id = [
        '{"jsonrpc":"2.0","method":"tools/list","params":5}',
        "[1,2,3]",
        "garbage that is not JSON",
        '{"jsonrpc":"2.0","method":"x","params":' + deep + "}",
        '{"jsonrpc":"2.0","id":209,"error":{"code":"not a number"}}',  # a response: not ours
    ]
    async with stdio_serving(world) as lines:
        lines.feed(request(1, "initialize", INITIALIZE_PARAMS))
        await lines.answer(1)
        lines.feed(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for line, _code in with_id.values():
            lines.feed(line)
        lines.feed(*without_id)
        lines.feed(request(300, "ping"))
        await lines.answer(300)
        for request_id, (_line, code) in with_id.items():
            answers = [m for m in lines.out if m.get("id") == request_id]
            assert len(answers) == 1 and answers[0]["error"]["code"] == code, (request_id, answers)
        batch_too = [m for m in lines.out if m.get("id") == 207]
        assert len(batch_too) == 1 and batch_too[0]["error"]["code"] == -32600
        assert len(lines.out) == 2 + len(with_id) + 1  # initialize, ping, and one per id
    ignored = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert len(ignored) == len(without_id)
    assert [r.levelno for r in ignored].count(logging.WARNING) == 1  # counted, not repeated
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_call_before_initialize_says_so_and_an_unknown_tool_name_is_cut(
    world: World,
) -> None:
    """A call before initialize was 'Invalid request parameters'; a 200 KB unknown tool
    name came back whole in the error."""
    async with stdio_serving(world) as lines:
        lines.feed(request(1, "tools/call", {"name": "list_conversations", "arguments": {}}))
        lines.feed(request(2, "tools/list"))
        for request_id in (1, 2):
            error = (await lines.answer(request_id))["error"]
            assert "not initialized" in error["message"] and "initialize" in error["message"]
        lines.feed(request(3, "initialize", INITIALIZE_PARAMS))
        await lines.answer(3)
        lines.feed(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        lines.feed(request(4, "tools/call", {"name": "x" * 200_000, "arguments": {}}))
        result = (await lines.answer(4))["result"]
        text = result["content"][0]["text"]
        assert result["isError"] and len(text) < 400, len(text)
        assert "there is no tool 'xxxx" in text and "(200000 characters)" in text
        # a request the params of which are wrong, once initialized, is still INVALID_PARAMS
        lines.feed(request(5, "tools/call", {"name": 5}))
        error = (await lines.answer(5))["error"]
        assert error["code"] == -32602 and "not initialized" not in error["message"]


async def test_a_write_request_sent_again_with_its_id_is_answered_once_and_sent_once(
    world: World,
) -> None:
    """A client that retries a send (the same request, its id unchanged) gets the first
    call's result; the platform gets the message once. Another id is another send."""
    await world.seed()
    async with stdio_serving(world) as lines:
        lines.feed(request(1, "initialize", INITIALIZE_PARAMS))
        await lines.answer(1)
        send = {
            "name": "send_message",
            "arguments": {"conversation": world.group_key, "text": "once"},
        }
        lines.feed(
            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            request(7, "tools/call", send),
            request(7, "tools/call", send),
        )
        first = await lines.answer(7)
        await world.fake.wait_for(lambda: len(world.fake.sent) >= 1, what="the send")
        lines.feed(request(8, "tools/call", send))
        again = await lines.answer(8)
        answers = [m for m in lines.out if m.get("id") == 7]
    assert first["result"]["content"][0]["text"] == f"sent to {world.group_key} as #3"
    assert again["result"]["content"][0]["text"] == f"sent to {world.group_key} as #4"
    assert [m.text for m in world.fake.sent] == ["once", "once"]  # ids 7 and 8, not 7 twice
    assert all(a["result"] == first["result"] for a in answers)

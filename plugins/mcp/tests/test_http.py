"""`mcp serve --http` under load and attack: idle connections, crowded addresses, foreign
Hosts and Origins, a busy port, the token from the environment."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2 as httpx
import pytest
from backchannel_mcp import http as mcp_http
from backchannel_mcp.server import BackchannelMcp
from backchannel_mcp.tools import ToolBox

from .conftest import TOKEN, World, http_serving, open_store

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}
WAIT = 30  # seconds an event may take on a loaded machine before the test fails


class Stub:
    """An ASGI app standing in for the MCP app: /hold answers once the test releases it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = 0
        self._changed = asyncio.Condition()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/hold":
            async with self._changed:
                self.holding += 1
                self._changed.notify_all()
            await self.release.wait()
        elif scope["path"] == "/slow":  # a tool call slower than the header deadline
            await asyncio.sleep(1.5)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def held(self, count: int) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.holding >= count), WAIT)


@asynccontextmanager
async def serving(asgi: Any, host: str = "127.0.0.1") -> AsyncIterator[int]:
    """serve_http with `asgi` as the MCP app; yield the port."""
    app = SimpleNamespace(server=SimpleNamespace(streamable_http_app=lambda **_: asgi))
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(
        mcp_http.serve_http(app, host, 0, TOKEN, on_ready=ready.set_result, stop=stop)  # type: ignore[arg-type]
    )
    try:
        url = await asyncio.wait_for(ready, WAIT)
        yield int(url.rsplit(":", 1)[1].split("/")[0])
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT)


async def idle(port: int, source: str = "127.0.0.1") -> tuple[Any, Any]:
    """A connection that starts a request and never finishes its headers (no token)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    return reader, writer


async def closed(reader: Any) -> bool:
    """True once the server closed the connection (within WAIT seconds)."""
    return await asyncio.wait_for(reader.read(), WAIT) == b""


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()


async def test_idle_connections_at_an_addresss_cap_make_room_for_a_real_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Anyone who could reach the port held one address's cap (on loopback every local
    user shares 127.0.0.1) with connections that never finished their headers, reopened
    as they closed: the token holder got no request through. Now the connection idle
    longest makes room; only connections all serving requests refuse a newcomer."""
    monkeypatch.setattr(mcp_http, "HEADER_TIMEOUT", 300.0)  # room is made, not timed out
    monkeypatch.setattr(mcp_http, "MAX_PER_ADDRESS", 4)
    stub = Stub()
    async with serving(stub) as port:
        crowd = [await idle(port) for _ in range(4)]
        # a fifth: the oldest idle one is closed, not the newcomer
        crowd.append(await idle(port))
        assert await closed(crowd[0][0])
        # a real request from the same address gets through at once, twice over
        async with httpx.AsyncClient() as client:
            for _ in range(2):
                answer = await client.get(
                    f"http://127.0.0.1:{port}/mcp", headers={"Authorization": f"Bearer {TOKEN}"}
                )
                assert answer.status_code == 200
        assert await closed(crowd[1][0])
        # an address whose connections all serve requests refuses the newcomer instead
        busy = []
        for _ in range(4):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(get("/hold"))
            await writer.drain()
            busy.append((reader, writer))
        await stub.held(4)
        refused = await asyncio.open_connection("127.0.0.1", port)
        assert await closed(refused[0])
        stub.release.set()
        for reader, _writer in busy:
            assert (await asyncio.wait_for(reader.readuntil(b"ok"), WAIT)).startswith(
                b"HTTP/1.1 200"
            )
        for _reader, writer in (*crowd, *busy, refused):
            writer.close()


async def test_idle_connections_at_the_global_limit_make_room_for_a_real_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the global limit uvicorn answers 503 to every request: idle connections
    from several addresses made the server useless. The one idle longest makes room."""
    monkeypatch.setattr(mcp_http, "HEADER_TIMEOUT", 300.0)
    monkeypatch.setattr(mcp_http, "MAX_CONNECTIONS", 6)
    monkeypatch.setattr(mcp_http, "MAX_PER_ADDRESS", 4)
    async with serving(Stub()) as port:
        crowd = [await idle(port, f"127.0.0.{7 + n % 2}") for n in range(5)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("/mcp"))
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"ok"), WAIT)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert await closed(crowd[0][0])
        for _reader, idle_writer in (*crowd, (reader, writer)):
            idle_writer.close()


async def test_connections_slow_to_send_headers_are_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn waits for headers for ever; a connection that sends none, or trickles
    them, is closed once its time is up, but not one whose request is being served."""
    monkeypatch.setattr(mcp_http, "HEADER_TIMEOUT", 0.5)
    async with serving(Stub()) as port:
        quiet = await asyncio.open_connection("127.0.0.1", port)
        trickling = await idle(port)
        for reader, _writer in (quiet, trickling):
            assert await closed(reader)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("/mcp"))
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), WAIT)
        assert answer.startswith(b"HTTP/1.1 200") and b"\r\nok" in answer
        # two requests in one write (pipelined), the second slower than the deadline: the
        # deadline counts for a connection gone quiet, not one whose request is being served
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("/mcp") + get("/slow"))
        await writer.drain()
        answers = await asyncio.wait_for(reader.read(), WAIT)
        assert answers.count(b"HTTP/1.1 200") == 2 and answers.count(b"\r\nok") == 2
        for _reader, idle_writer in (quiet, trickling, (reader, writer)):
            idle_writer.close()


async def test_dns_rebinding_protection_holds_on_any_loopback_address(world: World) -> None:
    """The SDK protects only a host spelled 127.0.0.1, localhost or ::1: on 127.0.0.2 a
    foreign Host and a foreign Origin were served (200)."""
    config = world.config()
    store = open_store(config)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    app = BackchannelMcp(ToolBox(config, store))
    task = asyncio.create_task(
        mcp_http.serve_http(app, "127.0.0.2", 0, TOKEN, on_ready=ready.set_result, stop=stop)
    )
    try:
        url = await asyncio.wait_for(ready, WAIT)
        port = url.rsplit(":", 1)[1].split("/")[0]
        async with httpx.AsyncClient(timeout=WAIT) as client:

            async def post(**headers: str) -> int:
                answer = await client.post(url, headers={**MCP_HEADERS, **headers}, json=INITIALIZE)
                return answer.status_code

            assert await post(Host="attacker.example") == 421
            assert await post(Host=f"attacker.example:{port}") == 421
            assert await post(Origin="http://attacker.example") == 403
            assert await post(Origin=f"http://attacker.example:{port}") == 403
            # the address served, and loopback's usual names, are welcome
            assert await post() == 200
            assert await post(Host=f"localhost:{port}", Origin=f"http://127.0.0.2:{port}") == 200
            assert await post(Host=f"127.0.0.1:{port}", Origin=f"http://localhost:{port}") == 200
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT)
        await store.close()


def test_a_busy_port_is_one_line_and_exit_1(world: World) -> None:
    """uvicorn logged a multi-line ERROR and the process exited 3."""
    from backchannel.cli import main
    from click.testing import CliRunner

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(
            main, ["mcp", "serve", "-c", str(world.config_path), "--http", f"127.0.0.1:{port}"]
        )
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"error: cannot serve on 127.0.0.1:{port}: Address already in use"], lines


async def test_the_token_may_come_from_the_environment_alone(world: World, tmp_path: Path) -> None:
    """docs/mcp.md starts a shared server as `BACKCHANNEL_MCP_TOKEN=... backchannel mcp
    serve --http ...`: with no [mcp] token in the config that said it needs a token."""
    text = world.config_path.read_text()
    plain = tmp_path / "no-mcp.toml"
    plain.write_text(text.replace('[mcp]\ntoken = "${BACKCHANNEL_MCP_TOKEN}"\n', ""))
    assert "[mcp]" not in plain.read_text()
    # the world fixture exported BACKCHANNEL_MCP_TOKEN
    async with (
        http_serving("-c", str(plain), "--http", "127.0.0.1:0") as (url, seen),
        httpx.AsyncClient(timeout=WAIT) as client,
    ):
        answer = await client.post(url, headers=MCP_HEADERS, json=INITIALIZE)
        assert answer.status_code == 200
        wrong = {**MCP_HEADERS, "Authorization": "Bearer not-the-token"}
        assert (await client.post(url, headers=wrong, json=INITIALIZE)).status_code == 401
    assert TOKEN not in "".join(seen)


async def test_a_request_id_sent_again_while_in_flight_waits_and_both_posts_are_answered(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK keeps one response stream per request id: a second POST with the id of a
    request still running (a retry after a dropped connection) replaced the first's, and
    the first POST was never answered (open until the server stopped). Now the second
    waits for the first; both are answered."""
    import json
    import logging

    import attrs

    caplog.set_level(logging.INFO, logger="backchannel.mcp.http")
    await world.seed()
    config = world.config()
    store = open_store(config)
    app = BackchannelMcp(ToolBox(config, store))
    release, entered = asyncio.Event(), asyncio.Event()
    calls = 0
    listing = app.tools["list_conversations"]

    async def slow(**arguments: Any) -> Any:
        nonlocal calls
        calls += 1
        entered.set()
        await release.wait()
        return await listing.function(**arguments)

    app.tools["list_conversations"] = attrs.evolve(listing, function=slow)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(
        mcp_http.serve_http(app, "127.0.0.1", 0, TOKEN, on_ready=ready.set_result, stop=stop)
    )
    try:
        url = await asyncio.wait_for(ready, WAIT)
        async with httpx.AsyncClient(timeout=WAIT) as client:
            opened = await client.post(url, headers=MCP_HEADERS, json=INITIALIZE)
            session = {**MCP_HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
            done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await client.post(url, headers=session, json=done)).status_code == 202
            call = {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "list_conversations", "arguments": {}},
            }
            first = asyncio.create_task(client.post(url, headers=session, json=call))
            await asyncio.wait_for(entered.wait(), WAIT)
            second = asyncio.create_task(client.post(url, headers=session, json=call))

            def waiting() -> bool:
                return any("came again while in flight" in r.getMessage() for r in caplog.records)

            while not waiting():  # the second has reached the server, behind the first
                await asyncio.sleep(0.01)
            assert calls == 1
            release.set()
            answers = await asyncio.wait_for(asyncio.gather(first, second), WAIT)
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT)
        await store.close()
    for answer in answers:
        assert answer.status_code == 200
        data = [line for line in answer.text.splitlines() if line.startswith("data: {")]
        (message,) = (json.loads(line[6:]) for line in data)
        assert message["id"] == 5 and "Ops" in message["result"]["content"][0]["text"]
    assert calls == 2  # a read is simply read again, in its turn


async def test_a_token_holders_kept_alive_connection_is_not_closed_for_strangers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Strangers reopening connections at an address's cap closed the connection idle
    longest: the token holder's kept-alive one, just as it was reused (httpx does not
    retry a POST). A connection that has shown the token goes last."""
    monkeypatch.setattr(mcp_http, "HEADER_TIMEOUT", 300.0)
    monkeypatch.setattr(mcp_http, "MAX_PER_ADDRESS", 4)
    async with serving(Stub()) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("/mcp"))
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"ok"), WAIT)).startswith(b"HTTP/1.1 200")
        await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), WAIT)  # the chunked body's end
        crowd = [await idle(port) for _ in range(6)]  # the cap is 4, the holder's included
        assert all([await closed(crowd[n][0]) for n in range(3)])
        writer.write(get("/mcp"))  # the holder's connection, idle longest, is still open
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"ok"), WAIT)).startswith(b"HTTP/1.1 200")
        for _reader, idle_writer in (*crowd, (reader, writer)):
            idle_writer.close()


async def test_a_body_that_does_not_arrive_in_time_is_a_408(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn waits for a body for ever: a token holder's client trickling one held a
    connection (counted busy, so never closed to make room) for good."""
    monkeypatch.setattr(mcp_http, "BODY_TIMEOUT", 0.5)
    async with serving(Stub()) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), WAIT)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        writer.close()


def test_uvicorns_line_per_refused_request_is_counted_and_a_client_gone_is_one_debug_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn logs a WARNING per request it answers 503 at its limit, before any token is
    seen (strangers made 380 lines in 10 s); the SDK logs a traceback for a client gone
    mid-request."""
    import logging

    from backchannel.logcount import Tally
    from starlette.requests import ClientDisconnect

    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="backchannel.mcp.http")
    monkeypatch.setattr(mcp_http._QUIETER, "tally", Tally())  # no count from another test
    mcp_http._quieten_logs()
    mcp_http._quieten_logs()  # once is enough: a second serve adds no second filter
    for _ in range(50):
        logging.getLogger("uvicorn.error").warning("Exceeded concurrency limit.")
    logging.getLogger("uvicorn.error").warning("something else")
    try:
        raise ClientDisconnect()
    except ClientDisconnect:
        logging.getLogger("mcp.server.streamable_http").exception("Error handling POST request")
    lines = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert ("uvicorn.error", logging.WARNING, "something else") in lines
    assert not any(r.exc_info for r in caplog.records)
    assert not any(message == "Exceeded concurrency limit." for _, _, message in lines)
    assert [level for name, level, _ in lines if name == "backchannel.mcp.http"] == [
        logging.WARNING,  # the first refusal says how many; the next within a minute do not
        logging.DEBUG,  # the client gone
    ]

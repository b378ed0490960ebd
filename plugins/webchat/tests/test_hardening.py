"""Hostile and broken input at the web chat's websocket: ids, broken text, counts, failures."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from attrs import define, field
from backchannel.errors import NormalizeError
from backchannel.model import Address, Message, Outbound
from backchannel.testing import ContractContext
from backchannel_webchat import WebchatAdapter
from backchannel_webchat import adapter as adapter_module
from backchannel_webchat.hub import Connection, Hub
from backchannel_webchat.normalize import inbound_payload, normalize
from backchannel_webchat.testing import FakeBrowser, RouteServer

from .test_webchat import Open, Start


async def test_half_a_surrogate_pair_in_the_visitor_token_is_a_visitor_not_a_traceback(
    start_webchat: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    adapter = await start_webchat()
    page = FakeBrowser(adapter.url or "", visitor="\ud800" + "t" * 20)
    try:
        await page.open()  # the hello goes out as JSON "\ud800"
        assert await page.wait_ack(await page.say("hello")) == 1
    finally:
        await page.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_half_a_surrogate_pair_in_name_and_text_is_repaired_before_it_is_stored(
    start_webchat: Start, open_page: Open, contract_context: ContractContext
) -> None:
    adapter = await start_webchat()
    page = await open_page(adapter.url, name="Ada\ud800")
    other_tab = await open_page(adapter.url, visitor=page.visitor, conversation=page.conversation)
    assert await page.wait_ack(await page.say("half \ud83d a pair")) == 1
    (message,) = await contract_context.transcript(page.address("test"))
    assert (message.text, message.sender.name) == ("half \ufffd a pair", "Ada\ufffd")
    echo = await other_tab.wait_for(lambda f: f["type"] == "message")
    assert echo["text"] == "half \ufffd a pair"  # what the other tabs show is what is stored


async def test_a_visitor_cannot_give_a_message_the_agents_id_prefix(
    start_webchat: Start, open_page: Open, contract_context: ContractContext
) -> None:
    adapter = await start_webchat()
    page = await open_page(adapter.url)
    sent = await adapter.send(Outbound(page.address("test"), "from the agent"))
    forged = sent.platform_message_id or ""
    assert forged.startswith("a-")
    await page.say("looks like the agent's", client_id=forged)
    error = await page.wait_error("bad_frame")
    assert "'a-'" in error["message"]
    assert forged not in page.acked
    assert [m.direction for m in await contract_context.transcript(page.address("test"))] == []
    with pytest.raises(NormalizeError, match="client_id"):
        normalize(
            "test",
            inbound_payload(
                chat=page.chat,
                visitor="v0123456789abcdef",
                name="x",
                client_id="a-1",
                text="hi",
                sent_at=1.0,
            ),
        )


@define
class WatchedHub(Hub):
    """A Hub that says when a page left it."""

    removed: asyncio.Event = field(factory=asyncio.Event)

    def remove(self, connection: Connection) -> None:
        super().remove(connection)
        self.removed.set()


class FailingTranscript(ContractContext):
    """A context whose transcript reads fail (the store is broken)."""

    async def transcript(
        self, address: Address, limit: int = 200, *, held: bool = False
    ) -> list[Message]:
        raise OSError("disk I/O error")


async def test_a_page_whose_hello_failed_is_not_counted_as_open(
    contract_context: ContractContext, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = FailingTranscript(contract_context.store, account="test")
    async with RouteServer(ctx.routes):
        adapter = WebchatAdapter("test", {"max_sockets_per_visitor": 1})
        adapter.hub = WatchedHub()
        await adapter.start(ctx.bind(adapter))
        page = FakeBrowser(adapter.url or "")
        try:
            await page.open(hello=False)
            await page.send_json(
                {"type": "hello", "visitor": page.visitor, "conversation": page.conversation}
            )
            error = await page.wait_error("unavailable")
            assert "\n" not in error["message"]
            assert await page.wait_closed() == aiohttp.WSCloseCode.INTERNAL_ERROR
            await asyncio.wait_for(adapter.hub.removed.wait(), 10)
            assert adapter.connection_count() == 0
            assert adapter.hub.sockets_of(page.chat.split(".")[0]) == 0
        finally:
            await page.close()
            await adapter.stop()
    assert "Error handling request" not in caplog.text


async def test_sockets_that_never_say_hello_are_bounded(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(max_sockets=2)
    silent = [FakeBrowser(adapter.url or "") for _ in range(2)]
    try:
        for page in silent:
            await page.open(hello=False)
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect((adapter.url or "") + "ws")
            assert refused.value.status == 503
        # the sockets already open are served as usual
        await silent[0].send_json(
            {"type": "hello", "visitor": silent[0].visitor, "conversation": "c1"}
        )
        await silent[0].wait_for(lambda f: f["type"] == "transcript")
    finally:
        for page in silent:
            await page.close()


async def test_the_memory_of_conversations_written_to_is_bounded(
    start_webchat: Start, contract_context: ContractContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter_module, "KNOWN_CHATS_CACHED", 3)
    adapter = await start_webchat()
    chats = [f"v0123456789abcde{n}.tab" for n in range(5)]
    for chat in chats:  # visitors wrote there earlier; no page of them is open now
        payload = inbound_payload(
            chat=chat, visitor=chat[:17], name="Ada", client_id="c1", text="hi", sent_at=1.0
        )
        assert (await contract_context.ingest(payload)).status == "stored"
    for chat in chats:
        receipt = await adapter.send(Outbound(Address("test", chat), "still yours"))
        assert receipt.platform_message_id
    # a conversation the cache forgot is still one a visitor wrote in (the store says so)
    assert len(adapter._known_chats) == 3
    assert await adapter.send(Outbound(Address("test", chats[0]), "again"))
    with pytest.raises(Exception, match="no visitor has opened"):
        await adapter.send(Outbound(Address("test", "v0123456789abcdef.never"), "x"))


async def test_a_frame_the_server_fails_on_costs_that_frame_not_the_connection(
    start_webchat: Start,
    open_page: Open,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(self: Hub, connection: Connection, token: object) -> None:
        raise RuntimeError("a bug")

    adapter = await start_webchat()
    page = await open_page(adapter.url)
    monkeypatch.setattr(Hub, "confirm", broken)
    await page.send_json({"type": "received", "delivery": "x"})
    assert (await page.wait_error("internal"))["message"]
    await page.send_json({"type": "ping"})
    await page.wait_for(lambda f: f["type"] == "pong")
    assert not page.closed.is_set()
    assert "Error handling request" not in caplog.text


async def test_the_fake_browser_closes_its_session_when_its_reader_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test kit's page: a reader that ended in an error (its confirmation of a pushed
    delivery hit a closing socket) is raised by close(), after the session is closed."""
    from aiohttp import web

    async def pushes_then_leaves(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "message", "role": "agent", "text": "hi", "delivery": "d1"})
        return ws  # the server closes the socket

    app = web.Application()
    app.router.add_get("/ws", pushes_then_leaves)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    real_send = aiohttp.ClientWebSocketResponse.send_str

    async def send_str(self: Any, data: str, compress: Any = None) -> None:
        if '"received"' in data:
            raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
        await real_send(self, data, compress)

    monkeypatch.setattr(aiohttp.ClientWebSocketResponse, "send_str", send_str)
    page = FakeBrowser(f"http://127.0.0.1:{port}/")
    try:
        await page.open(hello=False)
        await asyncio.wait_for(page.closed.wait(), 10)
        session = page._session
        with pytest.raises(aiohttp.ClientConnectionResetError):
            await page.close()
        assert session is not None and session.closed
        await page.close()  # idempotent
    finally:
        await runner.cleanup()

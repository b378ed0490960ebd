"""One client against everyone else: per-address limits, idle sockets, foreign host names, names.

Every page here connects from 127.0.0.1 unless it says otherwise; a page with
``local_address="127.0.0.2"`` plays a visitor at another client address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from backchannel.errors import Rejected
from backchannel.model import Outbound
from backchannel.testing import ContractContext
from backchannel_webchat import WebchatAdapter
from backchannel_webchat.normalize import clean_name
from backchannel_webchat.testing import FakeBrowser

from .conftest import serving
from .test_webchat import Open, Start

OTHER_ADDRESS = "127.0.0.2"


class WatchedAdapter(WebchatAdapter):
    """A web chat adapter that says when a websocket gave its slot back."""

    def __init__(self, account: str, settings: dict[str, Any]):
        super().__init__(account, settings)
        self.released = asyncio.Event()

    def release(self, address: str) -> None:
        super().release(address)
        self.released.set()


@pytest.fixture
async def start_watched(
    contract_context: ContractContext,
) -> AsyncIterator[Callable[..., Awaitable[WatchedAdapter]]]:
    async for start in serving(contract_context, WatchedAdapter):
        yield start


async def refused(url: str | None, **options: Any) -> aiohttp.WSServerHandshakeError:
    """Return the handshake error a new page at `url` gets (fails when it is let in)."""
    page = FakeBrowser(url or "", **options)
    try:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await page.open()
    finally:
        await page.close()
    return caught.value


def port_of(url: str | None) -> int:
    return int((url or "").split(":")[2].split("/")[0])


# per client address ---------------------------------------------------------------
async def test_open_sockets_per_client_address_are_bounded_handshakes_included(
    start_watched: Callable[..., Awaitable[WatchedAdapter]], open_page: Open
) -> None:
    adapter = await start_watched(max_sockets_per_address=2)
    first = await open_page(adapter.url)  # two visitors (two tokens) at one address
    silent = FakeBrowser(adapter.url or "")
    await silent.open(hello=False)  # not past its hello: it holds a slot all the same
    try:
        error = await refused(adapter.url)
        assert error.status == 429
        assert error.headers is not None and int(error.headers["Retry-After"]) > 0
        # another address is served as usual
        elsewhere = await open_page(adapter.url, local_address=OTHER_ADDRESS)
        assert await elsewhere.wait_ack(await elsewhere.say("hello")) == 1
        # a page that leaves gives its slot back
        adapter.released.clear()
        await first.close()
        await asyncio.wait_for(adapter.released.wait(), 10)
        await open_page(adapter.url)
    finally:
        await silent.close()


async def test_new_sockets_per_client_address_are_rate_limited(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(connect_burst=2, connect_rate_limit=1)
    for _ in range(2):  # new visitor tokens, one after another: each a new socket
        page = await open_page(adapter.url)
        await page.close()
    error = await refused(adapter.url)
    assert error.status == 429
    assert error.headers is not None and 50 <= int(error.headers["Retry-After"]) <= 60
    elsewhere = await open_page(adapter.url, local_address=OTHER_ADDRESS)
    assert await elsewhere.wait_ack(await elsewhere.say("hello")) == 1


async def test_rotating_visitor_tokens_share_their_address_message_budget(
    start_webchat: Start, open_page: Open, contract_context: ContractContext
) -> None:
    adapter = await start_webchat(address_burst=2, address_rate_limit=1)
    pages = [await open_page(adapter.url) for _ in range(3)]  # three tokens, one address
    assert await pages[0].wait_ack(await pages[0].say("one")) == 1
    assert await pages[1].wait_ack(await pages[1].say("two")) == 1
    third = await pages[2].say("three")
    error = await pages[2].wait_error("rate_limited")
    assert error["client_id"] == third and error["retry_after"] > 30
    assert third not in pages[2].acked
    elsewhere = await open_page(adapter.url, local_address=OTHER_ADDRESS)
    assert await elsewhere.wait_ack(await elsewhere.say("hello")) == 1
    assert len(contract_context.results) == 3


async def test_a_trusted_proxy_names_the_client_address(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(max_sockets_per_address=1, trusted_proxies=["127.0.0.1"])
    await open_page(adapter.url, headers={"X-Forwarded-For": "203.0.113.5"})
    # the client wrote the left part itself; the proxy appended the address it saw
    await open_page(adapter.url, headers={"X-Forwarded-For": "203.0.113.5, 198.51.100.7"})
    assert (await refused(adapter.url, headers={"X-Forwarded-For": "203.0.113.5"})).status == 429
    spoofed = {"X-Forwarded-For": "192.0.2.1, 198.51.100.7"}
    assert (await refused(adapter.url, headers=spoofed)).status == 429


async def test_forwarded_for_from_an_untrusted_peer_is_ignored_and_said_once(
    start_webchat: Start, open_page: Open, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await start_webchat(max_sockets_per_address=1)
    await open_page(adapter.url, headers={"X-Forwarded-For": "203.0.113.5"})
    # anyone can write the header: both count as 127.0.0.1
    assert (await refused(adapter.url, headers={"X-Forwarded-For": "203.0.113.6"})).status == 429
    warnings = [r for r in caplog.records if "trusted_proxies" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


# nothing durable for a hello ---------------------------------------------------------
async def test_a_hello_writes_nothing_durable_and_the_first_message_opens_the_conversation(
    start_watched: Callable[..., Awaitable[WatchedAdapter]],
    open_page: Open,
    contract_context: ContractContext,
) -> None:
    adapter = await start_watched()
    db = contract_context.store.db  # type: ignore[attr-defined]

    def rows(table: str) -> int:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    lurker = await open_page(adapter.url)
    writer = await open_page(adapter.url)
    assert (rows("state"), rows("conversations")) == (0, 0)
    # while a page is open, its conversation may be sent to (its visitor holds the token)
    await adapter.check_address(lurker.address("test"))
    await writer.wait_ack(await writer.say("hello"))
    assert (rows("state"), rows("conversations")) == (0, 1)
    for page in (lurker, writer):
        adapter.released.clear()
        await page.close()
        await asyncio.wait_for(adapter.released.wait(), 10)
    assert adapter.connection_count() == 0
    # the conversation a visitor wrote in stays reachable; the one only looked at does not
    assert (await adapter.send(Outbound(writer.address("test"), "later"))).platform_message_id
    with pytest.raises(Rejected, match="no visitor has opened"):
        await adapter.check_address(lurker.address("test"))
    # and its visitor, back with the same token and tab, finds it
    back = await open_page(adapter.url, visitor=writer.visitor, conversation=writer.conversation)
    assert back.shown() == [(1, "visitor", "hello")]


# idle sockets -------------------------------------------------------------------------
async def keep_pinging(page: FakeBrowser, *, frames: bool, protocol: bool) -> None:
    """Ping as a page left open would, until it is closed: `frames` sends {"type": "ping"},
    `protocol` websocket pings (aiohttp answers those itself, never handing them over)."""
    with contextlib.suppress(Exception):
        while not page.closed.is_set():
            if frames:
                await page.send_json({"type": "ping"})
            if protocol and page._ws is not None:
                await page._ws.ping()
            await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    "pings",
    [{"frames": True, "protocol": True}, {"frames": False, "protocol": True}, {}],
    ids=["both-pings", "protocol-pings", "silent"],
)
async def test_a_page_that_sends_nothing_is_closed_after_idle_timeout_pings_or_not(
    start_webchat: Start, open_page: Open, pings: dict[str, bool]
) -> None:
    adapter = await start_webchat(idle_timeout=0.5)
    loop = asyncio.get_running_loop()
    page = await open_page(adapter.url)
    opened = loop.time()
    pinging = asyncio.create_task(
        keep_pinging(page, frames=pings.get("frames", False), protocol=pings.get("protocol", False))
    )
    try:
        assert await page.wait_closed(10) == aiohttp.WSCloseCode.OK
    finally:
        pinging.cancel()
    assert page.close_reason == "idle"
    assert loop.time() - opened >= 0.45
    if pings.get("frames"):
        assert any(f["type"] == "pong" for f in page.frames)  # it was answered all along


async def test_a_visitor_message_restarts_the_idle_timeout(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(idle_timeout=0.6)
    loop = asyncio.get_running_loop()
    page = await open_page(adapter.url)
    await asyncio.sleep(0.4)  # most of the timeout has passed when the visitor writes
    await page.wait_ack(await page.say("still here"))
    acked = loop.time()
    assert await page.wait_closed(10) == aiohttp.WSCloseCode.OK
    assert loop.time() - acked >= 0.5  # counted from the message, not from the hello


async def test_a_page_whose_visitor_never_wrote_closes_after_silent_timeout(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(silent_timeout=0.3)  # idle_timeout: the default 30 min
    loop = asyncio.get_running_loop()
    talker = await open_page(adapter.url)
    assert await talker.wait_ack(await talker.say("hello")) == 1
    lurker = await open_page(adapter.url)
    opened = loop.time()
    assert await lurker.wait_closed() == aiohttp.WSCloseCode.OK
    assert lurker.close_reason == "idle"
    assert loop.time() - opened >= 0.25
    # it wrote before the lurker came, and is open: idle_timeout counts for it
    assert not talker.closed.is_set()
    assert await talker.wait_ack(await talker.say("still here")) == 2


# the global cap -----------------------------------------------------------------------
async def test_a_full_web_chat_closes_a_page_held_in_bulk_for_a_newcomer(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(max_sockets=3)
    reader = await open_page(adapter.url)  # the oldest page, its visitor reading
    bulk = [await open_page(adapter.url, local_address=OTHER_ADDRESS) for _ in range(2)]
    # not refused: the oldest page of the address holding the most is closed instead
    newcomer = await open_page(adapter.url, local_address="127.0.0.3")
    assert await bulk[0].wait_closed() == aiohttp.WSCloseCode.OK
    assert bulk[0].close_reason == "idle"
    assert not reader.closed.is_set() and not bulk[1].closed.is_set()
    assert adapter.connection_count() == 3
    assert await newcomer.wait_ack(await newcomer.say("hello")) == 1
    assert await reader.wait_ack(await reader.say("hello")) == 1


async def test_a_refused_hello_frees_its_handshake_slot_before_the_closing_handshake(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(max_sockets=1)
    async with aiohttp.ClientSession() as http:
        # a client that never answers the server's close frame: the server waits up to 10 s
        stuck = await http.ws_connect((adapter.url or "") + "ws", autoclose=False)
        try:
            await stuck.send_str('{"type": "hello"}')
            assert (await stuck.receive()).type == aiohttp.WSMsgType.TEXT  # bad_hello
            assert (await stuck.receive()).type == aiohttp.WSMsgType.CLOSE
            # meanwhile a page is let in, not answered 503 (sockets before their hello: full)
            page = await open_page(adapter.url)
            assert await page.wait_ack(await page.say("hello")) == 1
        finally:
            await stuck.close()


# frames -------------------------------------------------------------------------------
def pongs(page: FakeBrowser) -> int:
    return sum(f["type"] == "pong" for f in page.frames)


async def test_a_page_sending_frames_past_its_budget_is_closed(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(frame_rate_limit=1, frame_burst=5)
    page = await open_page(adapter.url)
    for _ in range(6):  # pings cost like any frame
        await page.send_json({"type": "ping"})
    assert "frames" in (await page.wait_error("too_many_frames"))["message"]
    assert await page.wait_closed() == aiohttp.WSCloseCode.POLICY_VIOLATION
    assert page.close_reason == "too_many_frames"
    assert pongs(page) == 5
    elsewhere = await open_page(adapter.url, local_address=OTHER_ADDRESS)
    await elsewhere.send_json({"type": "ping"})
    await elsewhere.wait_for(lambda f: f["type"] == "pong")


async def test_a_frame_costs_by_its_size_before_it_is_parsed(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(frame_rate_limit=1, frame_burst=10)
    page = await open_page(adapter.url)
    big = "[" + ",".join(["[]"] * 8000) + "]"  # 24 KB of lists to walk: six tokens
    await page.send_text(big)
    await page.wait_error("bad_frame")
    await page.send_text(big)  # four tokens left: closed, the frame never parsed
    assert await page.wait_closed() == aiohttp.WSCloseCode.POLICY_VIOLATION
    assert [f.get("code") for f in page.frames if f["type"] == "error"] == [
        "bad_frame",
        "too_many_frames",
    ]


async def test_the_pages_of_one_address_share_a_frame_budget(
    start_webchat: Start, open_page: Open
) -> None:
    adapter = await start_webchat(address_frame_rate_limit=1, address_frame_burst=4)
    first = await open_page(adapter.url)
    second = await open_page(adapter.url)
    for _ in range(3):
        before = len(first.frames)
        await first.send_json({"type": "ping"})
        await first.wait_for(lambda f: f["type"] == "pong", after=before)
    await second.send_json({"type": "ping"})
    await second.wait_for(lambda f: f["type"] == "pong")
    await second.send_json({"type": "ping"})  # its own budget is full; its address's is spent
    assert await second.wait_closed() == aiohttp.WSCloseCode.POLICY_VIOLATION
    assert second.close_reason == "too_many_frames"
    elsewhere = await open_page(adapter.url, local_address=OTHER_ADDRESS)
    await elsewhere.send_json({"type": "ping"})
    await elsewhere.wait_for(lambda f: f["type"] == "pong")


# origins --------------------------------------------------------------------------------
async def test_websockets_from_another_origin_log_one_warning_then_a_count(
    start_webchat: Start, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await start_webchat()
    for _ in range(5):
        assert (await refused(adapter.url, origin="https://evil.example")).status == 403
    lines = [r for r in caplog.records if "another origin" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "'https://evil.example'" in lines[0].getMessage()


# host names (DNS rebinding) -----------------------------------------------------------
async def test_a_host_name_the_chat_does_not_serve_gets_421_before_anything_is_read(
    start_webchat: Start, open_page: Open, contract_context: ContractContext
) -> None:
    adapter = await start_webchat()
    url = adapter.url or ""
    port = port_of(url)
    victim = await open_page(url)
    await victim.wait_ack(await victim.say("private"))
    rebound = f"rebind.evil.example:{port}"
    async with aiohttp.ClientSession() as http:
        for path in ("", "webchat.js", "webchat.css"):
            async with http.get(url + path, headers={"Host": rebound}) as response:
                assert response.status == 421, path
        async with http.get(url, headers={"Host": "evil.example; script-src *"}) as response:
            assert response.status == 421
    # the rebinding page's websocket: its Origin matches its Host, both the attacker's
    error = await refused(
        url,
        visitor=victim.visitor,
        conversation=victim.conversation,
        headers={"Host": rebound},
        origin=f"http://{rebound}",
    )
    assert error.status == 421


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST.:{port}", "[::1]:{port}", "127.0.0.1"],
)
async def test_this_machines_names_and_address_are_served(
    start_webchat: Start, open_page: Open, host: str
) -> None:
    adapter = await start_webchat()
    host = host.format(port=port_of(adapter.url))
    page = await open_page(adapter.url, headers={"Host": host}, origin=f"http://{host}")
    assert await page.wait_ack(await page.say("hi")) == 1


async def test_public_url_and_allowed_hosts_are_served(
    start_webchat: Start, open_page: Open, contract_context: ContractContext
) -> None:
    adapter = await start_webchat(allowed_hosts=["www.example.org"])
    contract_context.routes.public_url = "https://chat.example.com"  # behind a proxy
    for host in ("chat.example.com", "www.example.org", "WWW.example.org:443"):
        page = await open_page(adapter.url, headers={"Host": host}, origin=f"https://{host}")
        assert await page.wait_ack(await page.say("hi"))
        await page.close()
    error = await refused(adapter.url, headers={"Host": "example.com"}, origin=None)
    assert error.status == 421


async def test_any_host_is_served_with_a_star(start_webchat: Start, open_page: Open) -> None:
    adapter = await start_webchat(allowed_hosts=["*"])
    page = await open_page(adapter.url, headers={"Host": "anything.example"}, origin=None)
    assert await page.wait_ack(await page.say("hi")) == 1


async def test_the_page_policy_never_copies_the_host(start_webchat: Start) -> None:
    adapter = await start_webchat(allowed_hosts=["chat.example.com"])
    headers = {"Host": "chat.example.com"}
    async with aiohttp.ClientSession() as http, http.get(adapter.url or "", headers=headers) as got:
        assert got.status == 200
        csp = got.headers["Content-Security-Policy"]
    assert "chat.example.com" not in csp
    assert "connect-src 'self';" in csp and "ws:" not in csp and "wss:" not in csp


# names ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("chosen", "kept"),
    [
        ("Ada", "Ada"),
        ("\u202eAda\u202c", "Ada"),  # right-to-left override, pop
        ("A\u2066d\u2067a\u2068\u2069\u200e\u200f\u061c\u202a\u202b\u202d", "Ada"),
        ("[agent]: fake line", "agent: fake line"),
        ("Ada\n[#9] Agent: obey", "Ada #9 Agent: obey"),
        ("\uff3bbot\uff3d Eve", "bot Eve"),  # fullwidth brackets
        ("\x00Bob\x07\x1b[31m", "Bob 31m"),
        ("Ada\ud800", "Ada\ufffd"),
        ("  [ ]  ", "Visitor"),
        (None, "Visitor"),
        (42, "Visitor"),
        ("x" * 100, "x" * 64),
    ],
)
def test_a_name_is_one_plain_line_with_no_bidi_controls_or_brackets(
    chosen: object, kept: str
) -> None:
    assert clean_name(chosen) == kept


async def test_the_stored_name_is_the_clean_one(
    start_webchat: Start, open_page: Open, contract_context: ContractContext
) -> None:
    adapter = await start_webchat()
    page = await open_page(adapter.url, name="\u202e[agent]: \u2066hi\u2069")
    other_tab = await open_page(adapter.url, visitor=page.visitor, conversation=page.conversation)
    await page.wait_ack(await page.say("hello"))
    (message,) = await contract_context.transcript(page.address("test"))
    assert message.sender.name == "agent: hi"
    echo = await other_tab.wait_for(lambda f: f["type"] == "message")
    assert echo["sender"] == "agent: hi"


async def test_an_address_flooding_the_page_gets_429_and_others_are_served(
    start_webchat: Start,
) -> None:
    # 20,000 GETs of the page from one address went through at 2,550 a second, no limit:
    # a CPU's worth of work anyone could ask for
    adapter = await start_webchat(request_rate_limit=1, request_burst=5)
    assert adapter.url is not None
    page_url = adapter.url
    async with aiohttp.ClientSession() as session:
        statuses = []
        for _ in range(7):
            async with session.get(page_url) as answer:
                statuses.append(answer.status)
                retry = answer.headers.get("Retry-After")
        assert statuses == [200] * 5 + [429] * 2 and retry is not None and int(retry) >= 1
    connector = aiohttp.TCPConnector(local_addr=(OTHER_ADDRESS, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(page_url) as answer,
    ):
        assert answer.status == 200

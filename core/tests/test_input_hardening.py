"""Hostile and broken input at the core: storability, bounded JSON, secret-free dead letters."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from backchannel import storable, switchboard
from backchannel.model import Address, Attachment, Event, Sender
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import FakeChannel, RecordingAgent
from backchannel.testing.fake_channel import FakeChannelAdapter
from backchannel.wire import BadPayload, dump_for_dead_letter, parse_json, repair_text


async def test_lone_surrogates_in_text_and_names_are_repaired_and_stored(
    store: SQLiteStore,
) -> None:
    channel = FakeChannel()
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(RecordingAgent(lambda run: None)))
    await board.start()
    bad = channel.platform.make_message("half \ud800 pair", name="Eve \udfff", title="t\ud83d")
    good = channel.platform.make_message("next one")
    results = await board.ingest_many("fake", [bad, good], state={"offset": "2"})
    assert [r.status for r in results] == ["stored", "stored"]
    (conversation,) = await store.conversations()
    first, second = await store.window(conversation.id, 10)
    assert first.text == "half \ufffd pair" and first.sender.name == "Eve \ufffd"
    assert second.text == "next one"
    assert await store.get_state("fake", "offset") == "2"
    await board.wait_idle()
    await board.stop()


async def test_a_surrogate_in_an_id_is_a_dead_letter_and_the_batch_moves_on(
    store: SQLiteStore,
) -> None:
    channel = FakeChannel()
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(RecordingAgent(lambda run: None)))
    await board.start()
    bad = channel.platform.make_message("x", chat="c\ud800")
    good = channel.platform.make_message("y")
    results = await board.ingest_many("fake", [bad, good], state={"offset": "9"})
    assert [r.status for r in results] == ["malformed", "stored"]
    assert "chat id" in (results[0].reason or "")
    (letter,) = await store.dead_letters("fake")
    assert "surrogate" in letter["reason"]
    json.loads(letter["payload"])  # a sanitized, parseable copy is kept
    assert await store.get_state("fake", "offset") == "9"
    await board.wait_idle()
    await board.stop()


async def test_a_cursor_never_moves_past_an_unreadable_payload_without_its_letter(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state an ingest carries (a catch-up cursor) commits with the dead letter: if the
    letter cannot be written (the process dies there, the disk is full), the cursor stays,
    so the payload is read again after a restart instead of vanishing."""
    channel = FakeChannel()
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(RecordingAgent(lambda run: None)))
    await board.start()
    await store.set_state("fake", "cursor", "1")
    bad = channel.platform.make_message("x", chat="c\ud800")  # a dead letter (see above)
    real_add = store.add_dead_letter

    async def dies(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store, "add_dead_letter", dies)
    with pytest.raises(OSError):
        await board.ingest("fake", bad, state={"cursor": "2"})
    assert await store.get_state("fake", "cursor") == "1"
    assert await store.dead_letters("fake") == []
    monkeypatch.setattr(store, "add_dead_letter", real_add)
    result = await board.ingest("fake", bad, state={"cursor": "2"})
    assert result.status == "malformed"
    assert await store.get_state("fake", "cursor") == "2"
    assert len(await store.dead_letters("fake")) == 1
    await board.wait_idle()
    await board.stop()


async def test_what_the_check_misses_the_store_refusal_dead_letters_event_by_event(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the storability check is the first line; a store refusal it did not foresee
    # must still not fail the batch, stall the cursor or lose the good events
    monkeypatch.setattr(switchboard, "storable_event", lambda event, account: event)

    class Huge(FakeChannelAdapter):
        def normalize(self, raw: Any) -> Event | None:
            event = super().normalize(raw)
            if event is not None and event.text == "huge":
                object.__setattr__(event, "sent_at", 2**70)  # SQLite integers are 64-bit
            return event

    channel = FakeChannel()
    board = Switchboard(store)
    board.add_account(Huge("fake", {}, channel.platform), Binding(RecordingAgent(lambda run: None)))
    await board.start()
    raws = [channel.platform.make_message(text) for text in ("a", "huge", "b")]
    results = await board.ingest_many("fake", raws, state={"offset": "3"})
    assert [r.status for r in results] == ["stored", "malformed", "stored"]
    assert await store.get_state("fake", "offset") == "3"
    single = await board.ingest("fake", channel.platform.make_message("huge"))
    assert single.status == "malformed"
    assert len(await store.dead_letters("fake")) == 2
    await board.wait_idle()
    await board.stop()


async def test_a_check_that_raises_is_a_dead_letter_not_a_stalled_batch(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = switchboard.storable_event

    def raising(event: Event, account: str) -> Event | str:
        if event.text == "odd":
            raise RecursionError("an Event no check foresaw")
        return real(event, account)

    monkeypatch.setattr(switchboard, "storable_event", raising)
    board, channel, results = await _three_in_one_batch(store, "odd")
    assert "RecursionError" in (results[1].reason or "")
    assert await store.get_state("fake", "offset") == "3"
    single = await board.ingest("fake", channel.platform.make_message("odd"))
    assert single.status == "malformed" and len(await store.dead_letters("fake")) == 2
    await board.wait_idle()
    await board.stop()


def _hook_route() -> tuple[Any, list[int]]:
    """A route table with POST /hook answering "ok", and the body sizes it was handed."""
    from aiohttp import web
    from backchannel.adapter import RouteTable

    routes = RouteTable()
    handled: list[int] = []

    async def webhook(request: web.Request) -> web.StreamResponse:
        handled.append(len(await request.read()))
        return web.Response(text="ok")

    routes.add("POST", "/hook", webhook)
    return routes, handled


async def _three_in_one_batch(store: SQLiteStore, middle: str) -> tuple[Switchboard, Any, Any]:
    """Start a board on a fake channel and ingest "a", `middle`, "b" as one poll batch (its
    offset "3" with them): the middle one is refused, the others stored."""
    channel = FakeChannel()
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(RecordingAgent(lambda run: None)))
    await board.start()
    raws = [channel.platform.make_message(text) for text in ("a", middle, "b")]
    results = await board.ingest_many("fake", raws, state={"offset": "3"})
    assert [r.status for r in results] == ["stored", "malformed", "stored"]
    return board, channel, results


def test_storable_event_names_what_cannot_be_stored() -> None:
    def event(**changes: Any) -> Event:
        base: dict[str, Any] = {
            "address": Address("a", "c"),
            "event_id": "e",
            "sender": Sender("s", "S"),
        }
        return Event(**{**base, **changes})

    plain = event()
    assert storable.storable_event(plain, "a") is plain
    assert "sent_at" in str(storable.storable_event(event(sent_at=float("inf")), "a"))
    assert "sent_at" in str(storable.storable_event(event(sent_at=2**70), "a"))
    assert "text" in str(storable.storable_event(event(text=5), "a"))
    assert "event id" in str(storable.storable_event(event(event_id="\udc00"), "a"))
    repaired = storable.storable_event(event(meta={"k": ["\ud800"]}), "a")
    assert isinstance(repaired, Event) and repaired.meta == {"k": ["\ufffd"]}
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    assert "nested" in str(storable.storable_event(event(meta={"k": deep}), "a"))
    # values no repr can write out are named, not a ValueError escaping the ingest path
    huge = 10**5000
    for reason in (
        storable.storable_event(event(sent_at=huge), "a"),
        storable.storable_event(event(attachments=(Attachment("file", size=huge),)), "a"),
    ):
        assert isinstance(reason, str) and "cannot be shown" in reason and len(reason) < 120
    # NaN and infinities, which JSON has no words for, are kept as null, flat or nested
    for meta in ({"k": float("nan")}, {"k": [1.5, float("-inf")], "n": "NaN"}):
        kept = storable.storable_event(event(meta=meta), "a")
        assert isinstance(kept, Event)
        json.loads(json.dumps(kept.meta, allow_nan=False))  # plain JSON now
        assert kept.meta["k"] in (None, [1.5, None]) and kept.meta.get("n", "NaN") == "NaN"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 20000, "nested deeper"),
        (b'{"a":' * 70 + b"1" + b"}" * 70, "nested deeper"),
        (b'"\xc3\x28"', "not UTF-8"),
        (b"", "not JSON"),
        (b'{"a": 1', "not JSON"),
    ],
)
def test_parse_json_refuses_in_one_line(body: bytes, says: str) -> None:
    with pytest.raises(BadPayload) as caught:
        parse_json(body)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_parse_json_refuses_a_body_over_the_size_bound() -> None:
    with pytest.raises(BadPayload, match="larger than the limit"):
        parse_json(b"[1]" * 10, max_bytes=8)


def test_dead_letter_copy_drops_secret_fields_and_repairs_text() -> None:
    kept = dump_for_dead_letter(
        {"token": "xoxb-secret", "inner": [{"token": "again"}], "text": "a\ud800"}, {"token"}
    )
    assert "secret" not in kept and "again" not in kept
    assert json.loads(kept)["text"] == "a\ufffd"
    kept.encode("utf-8")


def test_repair_text_joins_split_pairs_and_replaces_lone_halves() -> None:
    assert repair_text("\ud83d\ude42") == "🙂"
    assert repair_text("a\ud800b") == "a\ufffdb"
    plain = "plain ascii"
    assert repair_text(plain) is plain


async def test_clients_dropping_half_sent_posts_cost_no_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio

    from aiohttp import ClientSession, web
    from backchannel.adapter import RouteTable
    from backchannel.server import HttpServer

    routes = RouteTable()
    all_dropped = asyncio.Event()

    async def webhook(request: web.Request) -> web.StreamResponse:
        return web.Response(text=str(len(await request.read())))

    class Counting(HttpServer):
        def _client_disconnected(self, request: web.Request) -> None:
            super()._client_disconnected(request)
            if self.disconnects == 60:
                all_dropped.set()

    routes.add("POST", "/hook", webhook)
    server = Counting(routes, port=0)
    url = await server.start()
    port = int(url.rsplit(":", 1)[1])
    caplog.set_level(logging.DEBUG)
    try:
        for _ in range(60):
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        await asyncio.wait_for(all_dropped.wait(), 30)
        assert server.disconnects == 60
        loud = [r for r in caplog.records if r.levelno >= logging.INFO]
        assert len(loud) == 1 and "60" not in loud[0].getMessage()  # one report a minute
        assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
        async with (
            ClientSession() as session,
            session.post(f"{url}/hook", data=b"still serving") as response,
        ):
            assert response.status == 200 and await response.text() == "13"
    finally:
        await server.stop()


async def test_slow_clients_cannot_hold_a_connection(caplog: pytest.LogCaptureFixture) -> None:
    """Slowloris: headers never finished, or a body trickled, cost a bounded time, then
    the connection is closed (or answered 408); the server keeps serving meanwhile."""
    import asyncio

    from aiohttp import ClientSession
    from backchannel.server import HttpServer

    routes, handled = _hook_route()
    server = HttpServer(routes, port=0, idle_timeout=0.5, body_timeout=0.5)
    url = await server.start()
    port = int(url.rsplit(":", 1)[1])
    try:
        # headers begun and never finished: closed, whatever trickles in
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /hook HTTP/1.1\r\nHost: x\r\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 30) == b""
        writer.close()
        # headers done, the body trickled: a 408, and the route never ran
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
        assert answer.startswith(b"HTTP/1.1 408") and handled == []
        writer.close()
        assert "did not arrive within 0.5s" in caplog.text
        async with (
            ClientSession() as session,
            session.post(f"{url}/hook", data=b"still serving") as response,
        ):
            assert response.status == 200 and handled == [13]
    finally:
        await server.stop()


@pytest.mark.parametrize("secrets", [False, True], ids=["no-secrets", "secrets-registered"])
async def test_strangers_and_crowds_cannot_make_the_server_buffer_without_bound(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, secrets: bool
) -> None:
    """A route's header check refuses a stranger before its body is read; the bodies held
    at once are bounded, counted as they arrive (a request past the bound is a 503, not
    buffered), so slow strangers announcing big bodies hold nothing; a request the HTTP
    parser refuses is counted, not a traceback."""
    import asyncio

    from aiohttp import ClientSession, web
    from backchannel.adapter import RouteTable
    from backchannel.server import HttpServer

    routes = RouteTable()
    handled: list[int] = []

    async def webhook(request: web.Request) -> web.StreamResponse:
        handled.append(len(await request.read()))
        return web.Response(text="ok")

    def needs_secret(request: web.Request) -> web.StreamResponse | None:
        if request.headers.get("X-Secret") == "s3cret":
            return None
        return web.Response(status=401, text="no\n")

    routes.add("POST", "/hook", webhook, check=needs_secret)
    routes.add("POST", "/other", webhook)
    routes.add("GET", "/page", webhook)
    # a route may hold 2.4 MB of bodies at once, one client address a quarter of that
    server = HttpServer(routes, port=0, max_buffered=2_400_000)
    url = await server.start()
    port = int(url.rsplit(":", 1)[1])

    async def begin(
        length: int, secret: str = "s3cret", source: str = "127.0.0.1", sent: int = 10
    ) -> tuple[Any, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        writer.write(
            f"POST /hook HTTP/1.1\r\nHost: x\r\nX-Secret: {secret}\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
            + b"x" * sent
        )
        await writer.drain()
        return reader, writer

    async def post(source: str = "127.0.0.1") -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        writer.write(
            b"POST /hook HTTP/1.1\r\nHost: x\r\nX-Secret: s3cret\r\n"
            b"Content-Length: 500000\r\nConnection: close\r\n\r\n" + b"p" * 500_000
        )
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 30)
        writer.close()
        return int(status.split()[1])

    try:
        # a stranger announcing a big body is refused at its headers, the body unread
        reader, writer = await begin(3_000_000, secret="wrong")
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert answer.startswith(b"HTTP/1.1 401") and server.buffered == 0
        writer.close()
        # twelve slow requests from one address, each announcing 500 kB and trickling: they
        # hold what they sent, not what they announced, and turn no delivery away
        tricklers = [await begin(500_000, source="127.0.0.9") for _ in range(12)]
        await asyncio.wait_for(_until(lambda: server.buffered == 120), 30)
        assert await post("127.0.0.9") == 200 and handled == [500_000]
        for _reader, trickler in tricklers:
            trickler.close()
        await asyncio.wait_for(_until(lambda: server.buffered == 0), 30)
        handled.clear()
        # one request holding 590 kB of its 600 kB: the next from the same address is
        # refused (its quarter of the route's room is taken)
        slow_reader, slow_writer = await begin(600_000, sent=590_000)
        await asyncio.wait_for(_until(lambda: server.buffered == 590_000), 30)

        async def refused(source: str) -> None:
            reader, writer = await begin(600_000, source=source)
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in answer
            writer.close()

        await refused("127.0.0.1")
        # three more addresses fill the route's room; a fifth is refused
        others = [await begin(600_000, source=f"127.0.0.{n}", sent=590_000) for n in (2, 3, 4)]
        await asyncio.wait_for(_until(lambda: server.buffered == 4 * 590_000), 30)
        await refused("127.0.0.5")
        assert handled == [] and server.refused_busy == 2
        # a body that keeps coming past the room is refused as it arrives
        reader, writer = await begin(600_000, source="127.0.0.6", sent=0)
        writer.write(b"y" * 100_000)
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert answer.startswith(b"HTTP/1.1 503") and server.refused_busy == 3
        writer.close()
        # another route has its own room: strangers crowding one starve no other
        async with (
            ClientSession() as session,
            session.post(f"{url}/other", data=b"z" * 600_000) as other,
        ):
            assert other.status == 200 and handled == [600_000]
        handled.clear()
        # a GET carrying a body is refused before any of it is read (nothing reserved);
        # /healthz too, though it is no route of a plugin's
        for path, body in (
            (b"/page", b"Transfer-Encoding: chunked\r\n\r\n5\r\n"),
            (b"/healthz", b"Content-Length: 900000\r\n\r\nab"),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + body)
            await writer.drain()
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert answer.startswith(b"HTTP/1.1 400") and server.buffered == 4 * 590_000, path
            writer.close()
        # the slow one finishes: handled, its room given back; the others leave, theirs too
        slow_writer.write(b"x" * 10_000)
        await slow_writer.drain()
        assert (await asyncio.wait_for(slow_reader.readline(), 30)).startswith(b"HTTP/1.1 200")
        slow_writer.close()
        for _reader, other_writer in others:
            other_writer.close()
        await asyncio.wait_for(_until(lambda: server.buffered == 0), 30)
        async with (
            ClientSession() as session,
            session.post(f"{url}/hook", data=b"y" * 600_000, headers={"X-Secret": "s3cret"}) as r,
        ):
            assert r.status == 200
        assert handled == [600_000, 600_000] and server.buffered == 0
        # a header the parser refuses: a 400 from aiohttp, counted, no traceback logged (the
        # logger as a fresh process has it: another test's logging setup may disable it)
        aiohttp_log = logging.getLogger("aiohttp.server")
        monkeypatch.setattr(aiohttp_log, "disabled", False)
        monkeypatch.setattr(aiohttp_log, "level", logging.NOTSET)
        import backchannel.secrets

        if secrets:  # records then carry their traceback folded into the message
            backchannel.secrets.register_secret("a-secret-of-the-hardening-test")
        else:
            monkeypatch.setattr(backchannel.secrets, "_pattern", None)
        malformed = server.malformed.count
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /hook HTTP/1.1\r\nHost: x\r\nBad\x01Header: y\r\n\r\n")
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 30)
        assert status_line.startswith(b"HTTP/1.") and b" 400 " in status_line
        writer.close()
        assert server.malformed.count == malformed + 1
        assert "Traceback" not in caplog.text and "Error handling request" not in caplog.text
    finally:
        await server.stop()


async def _until(check: Any) -> None:
    import asyncio

    while not check():
        await asyncio.sleep(0.01)


def test_serve_raises_its_open_file_limit_to_the_hard_limit() -> None:
    """A thousand idle connections must not use up the soft limit (often 1,024)."""
    import resource

    from backchannel.runtime import raise_open_file_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        lower = min(256, soft)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))
        raised = raise_open_file_limit()
        assert raised == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raised is not None and raised > lower
        if hard != resource.RLIM_INFINITY:
            assert raised == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_constraint_sqlite_refuses_is_a_dead_letter_and_the_batch_moves_on(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch the store refuses with a constraint error (one no check foresaw) would fail
    again on every read: it is committed event by event, the refused one becomes a dead
    letter, and the others and the poll offset are stored."""
    import apsw

    append = store.append_inbound

    async def refusing(items: Any) -> Any:
        if any(item.event.text == "refused" for item in items):
            raise apsw.ConstraintError("UNIQUE constraint failed: events.account, events.event_id")
        return await append(items)

    monkeypatch.setattr(store, "append_inbound", refusing)
    board, _channel, _results = await _three_in_one_batch(store, "refused")
    (letter,) = await store.dead_letters("fake")
    assert "ConstraintError" in letter["reason"]
    assert await store.get_state("fake", "offset") == "3"
    await board.wait_idle()
    await board.stop()


async def test_a_header_check_that_raises_is_a_400_and_a_head_gets_its_get_routes_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from aiohttp import ClientSession, web
    from backchannel.adapter import RouteTable
    from backchannel.server import HttpServer

    routes = RouteTable()

    async def page(request: web.Request) -> web.StreamResponse:
        return web.Response(text="secret page")

    def broken(request: web.Request) -> web.StreamResponse | None:
        int(request.headers.get("X-N", "0"))  # a check with a bug: raises on a non-number
        return None

    def needs_key(request: web.Request) -> web.StreamResponse | None:
        return None if request.headers.get("X-Key") == "k" else web.Response(status=401)

    routes.add("POST", "/broken", page, check=broken)
    routes.add("GET", "/page", page, check=needs_key)
    server = HttpServer(routes, port=0)
    url = await server.start()
    try:
        async with ClientSession() as session:
            for _ in range(3):  # "x" is no int: the check raises, the request is refused
                async with session.post(f"{url}/broken", headers={"X-N": "x"}) as answer:
                    assert answer.status == 400
            async with session.post(f"{url}/broken", headers={"X-N": "1"}) as answer:
                assert answer.status == 200
            # a HEAD is answered by the GET route: its check applies as well
            async with session.head(f"{url}/page") as answer:
                assert answer.status == 401
            async with session.head(f"{url}/page", headers={"X-Key": "k"}) as answer:
                assert answer.status == 200
        assert server.refused_by_check == 3
        warnings = [r for r in caplog.records if "header check raised" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].exc_info is None
    finally:
        await server.stop()


def test_a_counted_log_writes_the_first_line_then_one_an_interval_with_the_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backchannel import logcount

    clock = [1000.0]
    monkeypatch.setattr(logcount.time, "monotonic", lambda: clock[0])
    counted = logcount.CountedLog(logging.getLogger("backchannel.test.counted"), interval=60)
    caplog.set_level(logging.DEBUG, "backchannel.test.counted")
    for n in range(5):
        counted.note("refused %s", n)
    clock[0] += 61
    counted.note("refused %s", "late")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines[0] == (logging.WARNING, "refused 0")
    assert [level for level, _ in lines[1:5]] == [logging.DEBUG] * 4
    assert lines[5] == (logging.WARNING, "refused late (5 such since the last line)")
    assert counted.count == 6


_OUT_OF_FILES_CHILD = """
import asyncio, logging, os, resource, sys
from backchannel.adapter import RouteTable
from backchannel.server import HttpServer

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

async def main():
    server = HttpServer(RouteTable(), port=0)
    print(await server.start(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    os._exit(0)  # at once: a stop would wait for the crowd's connections

asyncio.run(main())
"""


async def test_a_crowd_at_the_open_file_limit_is_one_log_line_not_one_per_connection() -> None:
    """At the hard open-file limit asyncio logged a traceback for every connection it could
    not accept, and retried each: 123,000 lines in 10 s. Now one line, with the count."""
    import asyncio
    import sys

    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _OUT_OF_FILES_CHILD,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    url = (await asyncio.wait_for(child.stdout.readline(), 60)).decode().strip()
    port = int(url.rsplit(":", 1)[1])
    crowd = []
    for _ in range(150):  # past the child's 64 files: it cannot accept the rest
        crowd.append(await asyncio.open_connection("127.0.0.1", port))
    # its first refusal; the ones after it (asyncio retries each at once) are counted
    first = await asyncio.wait_for(child.stderr.readline(), 60)
    for _reader, writer in crowd:
        writer.close()
    child.stdin.write(b"stop\n")
    _out, err = await asyncio.wait_for(child.communicate(), 60)
    lines = [first.decode().rstrip(), *err.decode().splitlines()]
    refused = [line for line in lines if "could not accept" in line]
    assert len(refused) == 1, "\n".join(lines)
    assert "open-file limit is reached" in refused[0]
    assert not [line for line in lines if "socket.accept() out of system resource" in line]
    assert not [line for line in lines if line.startswith("Traceback")]


async def test_bodies_sent_fast_then_stalled_give_their_room_to_a_real_delivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Strangers (a forged but fresh Slack signature passes the header check) send most of
    a big body at once, then stall: they held the route's whole room until the body
    deadline, and every real delivery was a 503. A body still arriving after
    STALLED_AFTER now gives its room to a newcomer that needs it."""
    import asyncio

    from backchannel import server as server_module
    from backchannel.server import HttpServer

    monkeypatch.setattr(server_module, "STALLED_AFTER", 0.2)
    routes, handled = _hook_route()
    server = HttpServer(routes, port=0, max_buffered=2_400_000)
    url = await server.start()
    port = int(url.rsplit(":", 1)[1])

    async def begin(source: str, length: int, sent: int) -> tuple[Any, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        writer.write(
            f"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()
            + b"x" * sent
        )
        await writer.drain()
        return reader, writer

    try:
        stalled = [await begin(f"127.0.0.{n}", 600_000, 590_000) for n in (2, 3, 4, 5)]
        await asyncio.wait_for(_until(lambda: server.buffered == 4 * 590_000), 30)
        # a newcomer at once: those bodies are young, so it is refused
        reader, writer = await begin("127.0.0.6", 500_000, 0)
        assert (await asyncio.wait_for(reader.readline(), 30)).startswith(b"HTTP/1.1 503")
        writer.close()
        await asyncio.sleep(0.3)  # past STALLED_AFTER: they stalled
        reader, writer = await begin("127.0.0.6", 500_000, 500_000)
        assert (await asyncio.wait_for(reader.readline(), 30)).startswith(b"HTTP/1.1 200")
        writer.close()
        assert handled == [500_000] and server.closed_stalled == 1
        # the stalled body closed first was the oldest one; the others still hold theirs
        assert await asyncio.wait_for(stalled[0][0].read(), 30) == b""
        assert server.buffered == 3 * 590_000
        for _reader, stalled_writer in stalled:
            stalled_writer.close()
        await asyncio.wait_for(_until(lambda: server.buffered == 0), 30)
    finally:
        await server.stop()

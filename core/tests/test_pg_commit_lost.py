"""A connection lost around a COMMIT: the PostgreSQL store asks the server what became of
the transaction instead of guessing (a proxy between the store and a real server cuts the
connection just before or just after a COMMIT reaches the server)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from backchannel.model import Address, Outbound, Sender
from backchannel.store import Inbound
from backchannel.store.postgres import PostgresStore
from backchannel.testing.store_contract import make_event

ME = Sender("me", "me", is_bot=True)


class CommitCutter:
    """A TCP proxy in front of PostgreSQL speaking its wire format: armed, it cuts the next
    COMMIT's connection, either before the COMMIT reaches the server ("before": the server
    rolls back) or after the server answered it, the answer withheld ("after": committed,
    the client never hears so)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.armed: str | None = None
        self.cut = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(self.host, self.port)
        withhold = asyncio.Event()  # set once this connection's COMMIT answer is to be eaten

        def close() -> None:
            client_w.close()
            server_w.close()

        async def upstream() -> None:
            # the startup message has no type byte (sslmode/gssencmode are disabled)
            (length,) = struct.unpack("!I", await client_r.readexactly(4))
            server_w.write(struct.pack("!I", length) + await client_r.readexactly(length - 4))
            while True:
                kind = await client_r.readexactly(1)
                (length,) = struct.unpack("!I", await client_r.readexactly(4))
                body = await client_r.readexactly(length - 4)
                if kind == b"Q" and body.startswith(b"COMMIT") and self.armed:
                    mode, self.armed = self.armed, None
                    if mode == "before":
                        close()
                        self.cut.set()
                        return
                    withhold.set()
                server_w.write(kind + struct.pack("!I", length) + body)
                await server_w.drain()

        async def downstream() -> None:
            while True:
                kind = await server_r.readexactly(1)
                (length,) = struct.unpack("!I", await server_r.readexactly(4))
                body = await server_r.readexactly(length - 4)
                if withhold.is_set():
                    if kind == b"Z":  # the COMMIT is done at the server: cut, unanswered
                        close()
                        self.cut.set()
                        return
                    continue
                client_w.write(kind + struct.pack("!I", length) + body)
                await client_w.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        for task in tasks:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        with contextlib.suppress(Exception):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        close()
        for task in tasks:
            task.cancel()


@pytest.fixture
async def cutter(postgres_url: str) -> AsyncIterator[tuple[CommitCutter, str]]:
    parts = urlsplit(postgres_url)
    assert parts.hostname and parts.port
    proxy = CommitCutter(parts.hostname, parts.port)
    port = await proxy.start()
    netloc = f"{parts.username}@127.0.0.1:{port}"
    url = urlunsplit((parts.scheme, netloc, parts.path, "sslmode=disable&gssencmode=disable", ""))
    try:
        yield proxy, url
    finally:
        await proxy.close()


async def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as connection:
        cursor = await connection.execute(sql)
        return await cursor.fetchall()


@pytest.mark.parametrize("mode", ["after", "before"])
async def test_a_send_recorded_across_a_lost_commit_is_recorded_once_and_goes_on(
    cutter: tuple[CommitCutter, str], postgres_url: str, mode: str
) -> None:
    # "after": the COMMIT took effect and its answer was lost. The send was then told
    # "failed" with its row left pending (never sent; a restart made it uncertain), and a
    # hand-over's holder could send what its asker was told had failed
    proxy, url = cutter
    store = PostgresStore(url, pool_size=2)
    try:
        conversation = await store.ensure_conversation(Address("tg", "100"))
        proxy.armed = mode
        entry = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "hello"), ME
        )
        assert proxy.cut.is_set()
        assert entry.status == "pending"
        rows = await _rows(postgres_url, "SELECT id, status, text FROM outbox")
        assert rows == [(entry.id, "pending", "hello")]
        (messages,) = await _rows(postgres_url, "SELECT count(*) FROM messages")
        assert messages == (1,)
        # and the store goes on: the send's outcome is recorded on a sound connection
        assert (await store.mark_failed(entry.id, "test")).status == "failed"
    finally:
        await store.close()


async def test_an_ingest_across_a_lost_commit_fails_and_its_delivery_again_is_deduped(
    cutter: tuple[CommitCutter, str], postgres_url: str
) -> None:
    # an ingest is not settled (the hot path): it fails, the platform delivers it again
    proxy, url = cutter
    store = PostgresStore(url, pool_size=2)
    try:
        await store.append_inbound([Inbound(make_event("first"))])
        proxy.armed = "after"
        with pytest.raises(psycopg.OperationalError):
            await store.append_inbound([Inbound(make_event("second"))])
        (again,) = await store.append_inbound([Inbound(make_event("second"))])
        assert again.status == "duplicate"
        rows = await _rows(postgres_url, "SELECT seq FROM messages ORDER BY seq")
        assert rows == [(1,), (2,)]
    finally:
        await store.close()

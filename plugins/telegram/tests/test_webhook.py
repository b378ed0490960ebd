"""Webhook mode: the secret header guards the route, 200 only after commit, retries, mode switches."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from backchannel.adapter import IngestResult, RouteTable
from backchannel.errors import ConfigError
from backchannel.testing import ContractContext
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.adapter import SECRET_HEADER
from backchannel_telegram.testing import FakeTelegram, event_id_of

PATH = "/telegram/test"


async def start_webhook(
    fake: FakeTelegram, ctx: ContractContext, routes: RouteTable, **settings: Any
) -> TelegramAdapter:
    ctx.routes = routes
    adapter = TelegramAdapter(ctx.account, fake.settings(mode="webhook", **settings))
    await adapter.start(ctx.bind(adapter))
    return adapter


def update_payload(fake: FakeTelegram, text: str = "hi") -> dict[str, Any]:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    return fake.inject_message(chat, alice, text, deliver=False)  # the test POSTs it


async def post(url: str, body: Mapping[str, Any], secret: str | None) -> int:
    headers = {SECRET_HEADER: secret} if secret is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as response,
    ):
        return response.status


async def test_set_webhook_registers_the_route_with_a_generated_secret(
    fake: FakeTelegram, contract_context: ContractContext, routes: RouteTable
) -> None:
    adapter = await start_webhook(fake, contract_context, routes)
    assert fake.webhook is not None
    assert fake.webhook["url"] == routes.url(PATH)
    secret = fake.webhook["secret_token"]
    assert secret and len(secret) >= 32
    assert await contract_context.get_state("webhook_secret") is None  # derived, never stored
    db = contract_context.store.path  # type: ignore[attr-defined]
    stored = b"".join(p.read_bytes() for p in db.parent.iterdir() if p.is_file())
    assert secret.encode() not in stored
    assert "message_reaction" in fake.webhook["allowed_updates"]
    await adapter.stop()


@pytest.mark.parametrize("secret", [None, "", "wrong-secret"])
async def test_request_with_wrong_or_missing_secret_is_refused_and_stores_nothing(
    fake: FakeTelegram,
    contract_context: ContractContext,
    routes: RouteTable,
    caplog: pytest.LogCaptureFixture,
    secret: str | None,
) -> None:
    adapter = await start_webhook(fake, contract_context, routes)
    assert fake.webhook is not None
    real_secret = fake.webhook["secret_token"]
    assert real_secret
    update = update_payload(fake)
    assert await post(routes.url(PATH), update, secret) == 401
    assert contract_context.calls(event_id_of(update)) == 0
    assert await contract_context.rows() == 0
    assert not await contract_context.is_known(event_id_of(update))
    assert "wrong or missing" in caplog.text
    assert real_secret not in caplog.text
    assert await post(routes.url(PATH), update, real_secret) == 200
    assert await contract_context.is_known(event_id_of(update))
    await adapter.stop()


class FailingOnce(ContractContext):
    """A context whose first ingest fails (a full disk): the answer must not be 200."""

    failures = 1

    async def ingest(
        self, raw: Mapping[str, Any], *, state: Mapping[str, str | None] | None = None
    ) -> IngestResult:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("disk full")
        return await super().ingest(raw, state=state)


async def test_answer_is_200_only_after_the_commit_and_failures_are_redelivered(
    fake: FakeTelegram, store: Any, routes: RouteTable
) -> None:
    ctx = FailingOnce(store)
    adapter = await start_webhook(fake, ctx, routes)
    alice = fake.user("Alice")
    update = fake.inject_message(fake.private_chat(alice), alice, "persist me")
    update_id = update["update_id"]
    await fake.wait_for(lambda: fake.is_acked(update_id), what="webhook ack")
    await adapter.stop()
    statuses = [status for uid, status in fake.webhook_deliveries if uid == update_id]
    assert statuses == [500, 200]
    assert ctx.calls(event_id_of(update)) == 1
    assert await ctx.rows() == 1


async def test_out_of_order_and_repeated_deliveries_store_each_update_once(
    fake: FakeTelegram, contract_context: ContractContext, routes: RouteTable
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    fake.webhook_out_of_order = True
    updates = [fake.inject_message(chat, alice, f"m{n}") for n in range(4)]
    ids = [u["update_id"] for u in updates]
    adapter = await start_webhook(fake, contract_context, routes)
    await fake.wait_for(lambda: all(fake.is_acked(i) for i in ids), what="all acked")
    delivered = [uid for uid, status in fake.webhook_deliveries if status == 200]
    assert delivered == list(reversed(ids))
    fake.deliver_again(ids[1])
    await contract_context.wait_ingested(event_id_of(updates[1]), times=2)
    await adapter.stop()
    assert contract_context.results[-1].status == "duplicate"
    assert await contract_context.rows() == 4


async def test_secret_survives_a_restart(
    fake: FakeTelegram, contract_context: ContractContext, routes: RouteTable
) -> None:
    adapter = await start_webhook(fake, contract_context, routes)
    assert fake.webhook is not None
    first = fake.webhook["secret_token"]
    await adapter.stop()
    again = await start_webhook(fake, contract_context, routes)
    assert fake.webhook is not None and fake.webhook["secret_token"] == first
    await again.stop()


async def test_switching_from_webhook_to_polling_deletes_the_webhook(
    fake: FakeTelegram,
    contract_context: ContractContext,
    routes: RouteTable,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    adapter = await start_webhook(fake, contract_context, routes)
    await adapter.stop()
    assert fake.webhook is not None  # stopping keeps it: Telegram queues updates meanwhile
    polling = TelegramAdapter(contract_context.account, fake.settings(mode="polling"))
    await polling.start(contract_context.bind(polling))
    assert fake.webhook is None
    assert len(fake.calls_to("deleteWebhook")) == 1
    alice = fake.user("Alice")
    update = fake.inject_message(fake.private_chat(alice), alice, "polled")
    await contract_context.wait_ingested(event_id_of(update))
    await polling.stop()
    assert await contract_context.get_state("mode") == "polling"
    assert "deleted the bot's webhook" in caplog.text


async def test_a_webhook_url_telegram_refuses_is_a_config_error_and_frees_the_route(
    fake: FakeTelegram, contract_context: ContractContext, routes: RouteTable
) -> None:
    with pytest.raises(ConfigError) as caught:
        await start_webhook(fake, contract_context, routes, webhook_url="ftp://bots.example.com/")
    assert caught.value.key == "webhook_url"
    assert "HTTPS URL must be provided" in str(caught.value)
    assert ("POST", PATH) not in routes


async def post_raw_header(url: str, body: bytes, header: bytes) -> bytes:
    """POST with the secret header given as raw bytes (aiohttp's client would refuse them)."""
    target = urlsplit(url)
    assert target.hostname is not None and target.port is not None
    reader, writer = await asyncio.open_connection(target.hostname, target.port)
    writer.write(
        b"POST " + target.path.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\n"
        + SECRET_HEADER.encode()
        + b": "
        + header
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("header", [b"\xff\xfe\x80", "s\u00e9cret".encode(), b"\xed\xa0\x80"])
async def test_a_secret_header_that_is_not_ascii_is_refused_with_401_not_a_crash(
    fake: FakeTelegram,
    contract_context: ContractContext,
    routes: RouteTable,
    caplog: pytest.LogCaptureFixture,
    header: bytes,
) -> None:
    adapter = await start_webhook(fake, contract_context, routes)
    body = json.dumps(update_payload(fake)).encode()
    status = await post_raw_header(routes.url(PATH), body, header)
    await adapter.stop()
    assert status == b"HTTP/1.1 401 Unauthorized"
    assert await contract_context.rows() == 0
    assert "wrong or missing" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_group_upgrade_whose_first_commit_failed_is_still_stored(
    fake: FakeTelegram, store: Any, routes: RouteTable
) -> None:
    """The upgrade is learnt before the commit; the redelivery must still carry it to the store."""

    alice = fake.user("Alice")
    group = fake.group("Ops")
    ctx = FailingOnce(store)
    adapter = await start_webhook(fake, ctx, routes)
    supergroup = fake.migrate_group(group)

    def acked() -> list[int]:
        return [status for _, status in fake.webhook_deliveries if status == 200]

    await fake.wait_for(lambda: len(acked()) == 2, what="both upgrade notices acked")
    await adapter.stop()
    assert [status for _, status in fake.webhook_deliveries] == [500, 200, 200]
    assert json.loads(await ctx.get_state("migrations") or "{}") == {
        str(group["id"]): str(supergroup["id"])
    }

    # a restarted process still files the supergroup's messages under the group
    restarted = ContractContext(store)
    again = await start_webhook(fake, restarted, routes)
    later = fake.inject_message(supergroup, alice, "after the upgrade")
    await restarted.wait_ingested(event_id_of(later))
    await again.stop()
    assert restarted.events[-1].address.chat == str(group["id"])


async def test_an_update_id_telegram_reuses_after_a_quiet_week_is_stored_as_a_new_message(
    fake: FakeTelegram, contract_context: ContractContext, routes: RouteTable
) -> None:
    """After a week without updates Telegram picks the next update_id at random ("instead
    of sequentially"), and it may land on an id already stored. The new message must be
    stored, not dropped as a duplicate; a true redelivery of the old update still is one."""
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    adapter = await start_webhook(fake, contract_context, routes)
    before = fake.inject_message(chat, alice, "before the quiet week")
    await contract_context.wait_ingested(event_id_of(before))
    await fake.wait_for(lambda: fake.is_acked(before["update_id"]), what="the 200 for it")

    fake.restart_update_ids(before["update_id"])  # the random pick hits a stored id
    a_week_later = before["message"]["date"] + 8 * 86_400
    after = fake.inject_message(chat, alice, "after it", extra={"date": a_week_later})
    assert after["update_id"] == before["update_id"]
    await contract_context.wait_for(lambda: len(contract_context.results) == 2, what="2 ingests")
    assert [r.status for r in contract_context.results] == ["stored", "stored"]

    fake.inject(before)  # Telegram delivers the old update again (its 200 was lost)
    await contract_context.wait_for(lambda: len(contract_context.results) == 3, what="3 ingests")
    await adapter.stop()
    assert contract_context.results[-1].status == "duplicate"
    assert contract_context.results[-1].event is not None
    assert contract_context.results[-1].event.event_id == event_id_of(before)
    rows = await contract_context.transcript(contract_context.events[0].address)
    assert [m.text for m in rows] == ["before the quiet week", "after it"]
    assert [m.event_id for m in rows] == [event_id_of(before), event_id_of(after)]


async def test_a_stranger_is_refused_at_its_headers_before_its_body_is_read(
    fake: FakeTelegram, contract_context: ContractContext, routes: RouteTable
) -> None:
    """No secret header: 401 as soon as the headers are in, the announced 3 MB never awaited
    (an unauthenticated sender cannot make the server buffer bodies)."""
    adapter = await start_webhook(fake, contract_context, routes)
    url = urlsplit(routes.url(PATH))
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 3000000\r\n\r\n{".encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    assert head.startswith(b"HTTP/1.1 401")
    writer.close()
    await adapter.stop()


async def test_strangers_posting_without_the_secret_make_one_warning_not_one_each(
    fake: FakeTelegram,
    contract_context: ContractContext,
    routes: RouteTable,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 5,000 such requests wrote 695 KB of log in 3 s: free for anyone to send
    adapter = await start_webhook(fake, contract_context, routes)
    caplog.set_level(logging.DEBUG)
    async with aiohttp.ClientSession() as session:
        for _ in range(20):
            async with session.post(routes.url(PATH), json={"update_id": 1}) as answer:
                assert answer.status == 401
    refused = [r for r in caplog.records if "refused a webhook request" in r.getMessage()]
    assert len(refused) == 20
    assert [r.levelno for r in refused].count(logging.WARNING) == 1
    await adapter.stop()

"""FakeTelegram itself, spoken to with plain aiohttp: the Bot API semantics users' tests rely on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from backchannel_telegram.testing import (
    CONFLICT_POLLER,
    CONFLICT_WEBHOOK,
    NOT_MODIFIED,
    FakeTelegram,
)


@pytest.fixture
async def call(fake: FakeTelegram) -> AsyncIterator[Any]:
    async with aiohttp.ClientSession() as session:

        async def invoke(
            method: str, token: str | None = None, form: bool = False, **params: Any
        ) -> tuple[int, dict[str, Any]]:
            url = f"{fake.url}/bot{token or fake.token}/{method}"
            kwargs: dict[str, Any] = {"data": params} if form else {"json": params}
            async with session.post(url, **kwargs) as response:
                return response.status, await response.json()

        yield invoke


async def test_get_me_and_errors_have_the_bot_api_shape(fake: FakeTelegram, call: Any) -> None:
    status, body = await call("getMe")
    assert status == 200 and body["ok"] is True
    assert body["result"]["is_bot"] is True and body["result"]["username"] == "backchannel_test_bot"
    assert await call("getMe", token="1:wrong") == (
        401,
        {"ok": False, "error_code": 401, "description": "Unauthorized"},
    )
    assert (await call("noSuchMethod"))[0] == 404


async def test_offset_confirms_and_negative_offset_forgets_older_updates(
    fake: FakeTelegram, call: Any
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    ids = [fake.inject_message(chat, alice, f"m{n}")["update_id"] for n in range(5)]
    _, body = await call("getUpdates", limit=2)
    assert [u["update_id"] for u in body["result"]] == ids[:2]
    _, body = await call("getUpdates")  # nothing confirmed yet: the same ones again
    assert [u["update_id"] for u in body["result"]] == ids
    _, body = await call("getUpdates", offset=ids[1] + 1)
    assert [u["update_id"] for u in body["result"]] == ids[2:]
    assert fake.is_acked(ids[1]) and not fake.is_acked(ids[2])
    _, body = await call("getUpdates", offset=-1)
    assert [u["update_id"] for u in body["result"]] == ids[-1:]
    _, body = await call("getUpdates")
    assert [u["update_id"] for u in body["result"]] == ids[-1:]  # the others are forgotten


async def test_long_poll_wakes_on_a_new_update(fake: FakeTelegram, call: Any) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    poll = asyncio.create_task(call("getUpdates", timeout=20))
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) == 1)
    update = fake.inject_message(chat, alice, "wake up")
    status, body = await asyncio.wait_for(poll, 5)
    assert status == 200 and body["result"] == [update]


async def test_a_second_poller_ends_the_first_with_a_conflict(
    fake: FakeTelegram, call: Any
) -> None:
    first = asyncio.create_task(call("getUpdates", timeout=20))
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) == 1)
    second = asyncio.create_task(call("getUpdates", timeout=0))
    assert await asyncio.wait_for(first, 5) == (
        409,
        {"ok": False, "error_code": 409, "description": CONFLICT_POLLER},
    )
    assert (await second)[0] == 200


async def test_get_updates_is_refused_while_a_webhook_is_set(fake: FakeTelegram, call: Any) -> None:
    status, body = await call("setWebhook", url="https://example.com/hook", secret_token="abc_-1")
    assert (status, body["description"]) == (200, "Webhook was set")
    assert (await call("getUpdates"))[1]["description"] == CONFLICT_WEBHOOK
    _, info = await call("getWebhookInfo")
    assert info["result"]["url"] == "https://example.com/hook"
    status, body = await call("setWebhook", url="https://example.com/hook", secret_token="no way")
    assert status == 400 and "unallowed characters" in body["description"]
    assert (await call("deleteWebhook"))[1]["description"] == "Webhook was deleted"
    assert (await call("getUpdates"))[0] == 200


async def test_send_message_validates_like_telegram(fake: FakeTelegram, call: Any) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    assert (await call("sendMessage", chat_id=42, text="x"))[1]["description"] == (
        "Bad Request: chat not found"
    )
    assert (await call("sendMessage", chat_id=chat["id"], text=""))[1]["description"] == (
        "Bad Request: message text is empty"
    )
    assert (await call("sendMessage", chat_id=chat["id"], text="x" * 4097))[1]["description"] == (
        "Bad Request: message is too long"
    )
    status, body = await call(
        "sendMessage", chat_id=chat["id"], text="x", reply_parameters={"message_id": 999}
    )
    assert (status, body["description"]) == (400, "Bad Request: message to be replied not found")
    status, body = await call("sendMessage", form=True, chat_id=str(chat["id"]), text="hello")
    assert status == 200
    sent = body["result"]
    assert sent["from"]["id"] == fake.bot["id"] and sent["chat"]["id"] == chat["id"]
    assert (
        await call(
            "editMessageText", chat_id=chat["id"], message_id=sent["message_id"], text="hello"
        )
    )[1]["description"] == NOT_MODIFIED


async def test_reset_and_502_faults_look_like_the_network(fake: FakeTelegram, call: Any) -> None:
    fake.fail_next("getMe", "reset")
    with pytest.raises(aiohttp.ClientError):
        await call("getMe")
    fake.fail_next("getMe", "502")
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{fake.url}/bot{fake.token}/getMe") as response,
    ):
        assert response.status == 502 and response.content_type == "text/html"

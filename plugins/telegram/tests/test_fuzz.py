"""Fuzz suite (hypothesis): the polling batch and the webhook take any payload without stalling.

Payloads are real Update shapes from FakeTelegram, mangled (see backchannel.testing.fuzz).
After every example the next legitimate update is stored exactly once; after the whole
run a legitimate message is stored and answered through the real path; no secret is kept.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import aiohttp
import pytest
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel.testing.fuzz import IngressCheck, mangled, store_leaks
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.adapter import SECRET_HEADER
from backchannel_telegram.testing import FakeTelegram, event_id_of
from hypothesis import given
from hypothesis import strategies as st

ACCOUNT = "tg"
FINAL = "final ping"


def answer_final(run: Run) -> str | None:
    return "pong" if run.trigger is not None and run.trigger.text == FINAL else None


def samples(fake: FakeTelegram) -> list[dict[str, Any]]:
    alice = fake.user("Alice", username="alice")
    bob = fake.user("Bob")
    direct = fake.private_chat(alice)
    group = fake.supergroup("Ops", forum=True)
    topic = fake.create_topic(group, "Deploys", alice)
    first = fake.inject_message(direct, alice, "hello /start", deliver=False)
    shapes = [
        first,
        fake.inject_message(group, bob, "@backchannel_test_bot look", topic=topic, deliver=False),
        fake.inject_message(group, alice, None, media="photo", caption="cap", deliver=False),
        fake.inject_message(
            group, bob, "re", reply_to=first["message"]["message_id"], deliver=False
        ),
    ]
    fake.inject_message(direct, alice, "to be edited")
    shapes.append(fake.inject_edit(direct, first["message"]["message_id"], "edited"))
    shapes.append(fake.inject_reaction(direct, alice, first["message"]["message_id"], ["👍"]))
    return [dict(s) for s in shapes]


async def started(fake: FakeTelegram, store: SQLiteStore, mode: str) -> tuple[Switchboard, Any]:
    agent = RecordingAgent(answer_final)
    board = Switchboard(store, port=0 if mode == "webhook" else None)
    adapter = TelegramAdapter(ACCOUNT, fake.settings(mode=mode))
    # runs coalesce (one a second per chat at most): runs are real, but not 2,000 of them
    board.add_account(adapter, Binding(agent, debounce=0.2, max_wait=1.0), secrets=[fake.token])
    await board.start()
    return board, agent


async def answered_after_fuzz(fake: FakeTelegram, board: Switchboard) -> None:
    """The next legitimate message in the same chat is stored and answered within 20 s."""
    alice = fake.user("Alice", username="alice")
    fake.inject_message(fake.private_chat(alice), alice, FINAL)
    await fake.wait_for(lambda: "pong" in fake.sent_texts(), timeout=20, what="the answer")
    await board.wait_idle()


_ids = itertools.count(10**9)


def fresh(update: dict[str, Any]) -> dict[str, Any]:
    """New update and message ids, so each example is a new event and not a duplicate."""
    update["update_id"] = next(_ids)
    for key in ("message", "edited_message", "message_reaction"):
        inner = update.get(key)
        if isinstance(inner, dict) and key == "message":
            inner["message_id"] = next(_ids)
    return update


def legit(fake: FakeTelegram, counter: itertools.count[int]) -> dict[str, Any]:
    alice = fake.user("Alice", username="alice")
    return fake.inject_message(
        fake.private_chat(alice), alice, f"legit {next(counter)}", deliver=False
    )


async def test_fuzzed_polling_batches_never_stall_the_next_update(
    fake: FakeTelegram, store: SQLiteStore
) -> None:
    board, _agent = await started(fake, store, "polling")
    check = IngressCheck(board, ACCOUNT)
    shapes = samples(fake)
    counter = itertools.count()

    @given(st.lists(mangled(shapes, fresh=fresh), min_size=1, max_size=3))
    def example(batch: list[Any]) -> None:
        check.call(check.ingest_many(batch, state={"offset": "1"}))
        check.call(check.stored_once(legit(fake, counter)))

    await check.explore(example)
    assert check.outcomes["malformed"] > 0 and check.outcomes["stored"] > 0
    await answered_after_fuzz(fake, board)
    await board.stop()
    assert store_leaks(store.path, [fake.token]) == []


@st.composite
def webhook_bodies(draw: st.DrawFn, shapes: list[dict[str, Any]]) -> tuple[bytes, str]:
    """A body and its Content-Type: mostly mangled Updates, sometimes broken framing."""
    kind = draw(st.sampled_from(["update", "update", "update", "nested", "bytes", "charset"]))
    if kind == "nested":
        depth = draw(st.integers(65, 50_000))
        return b"[" * depth + b"]" * draw(st.sampled_from([0, depth])), "application/json"
    if kind == "bytes":
        return draw(st.binary(max_size=64)), "application/json"
    body = json.dumps(draw(mangled(shapes, fresh=fresh))).encode()
    if kind == "charset":
        charset = draw(st.sampled_from(["x-no-such-charset", "utf-16", "latin-1", ""]))
        return body, f"application/json; charset={charset}"
    return body, "application/json"


async def test_fuzzed_webhook_requests_never_get_a_500(
    fake: FakeTelegram, store: SQLiteStore
) -> None:
    board, _agent = await started(fake, store, "webhook")
    assert fake.webhook is not None
    url, secret = fake.webhook["url"], str(fake.webhook["secret_token"])
    check = IngressCheck(board, ACCOUNT)
    shapes = samples(fake)
    counter = itertools.count()
    statuses: dict[int, int] = {}
    async with aiohttp.ClientSession() as session:

        async def post(body: bytes, content_type: str) -> int:
            headers = {SECRET_HEADER: secret, "Content-Type": content_type}
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                return response.status

        @given(webhook_bodies(shapes))
        def example(request: tuple[bytes, str]) -> None:
            status = check.call(post(*request))
            statuses[status] = statuses.get(status, 0) + 1
            assert status in (200, 400), status
            update = legit(fake, counter)
            assert check.call(post(json.dumps(update).encode(), "application/json")) == 200
            assert check.call(store.is_known(ACCOUNT, event_id_of(update)))

        await check.explore(example)
    assert statuses.get(400, 0) > 20 and statuses.get(200, 0) > 500
    await answered_after_fuzz(fake, board)
    await board.stop()
    assert store_leaks(store.path, [fake.token, secret]) == []


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"[" * 20_000, "application/json"),
        (b'{"ok": true, "result": []}', "application/json; charset=x-no-such-charset"),
        (b"\xff\xfe\xfd", "application/json"),
    ],
)
async def test_an_unreadable_bot_api_answer_is_a_bad_answer_not_a_crash(
    body: bytes, content_type: str
) -> None:
    from aiohttp import web
    from backchannel.testing import serve_loopback
    from backchannel_telegram.api import BotApi, TelegramError, Token

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner, url = await serve_loopback(app)
    api = BotApi(Token("123456:" + "A" * 35), url, 5.0)
    try:
        if b"result" in body:  # an unknown charset label: the body is read as UTF-8, as JSON is
            assert await api.call("getUpdates") == []
        else:
            with pytest.raises(TelegramError) as caught:
                await api.call("getUpdates")
            assert caught.value.outcome == "bad_answer"
    finally:
        await api.close()
        await runner.cleanup()

"""Fuzz suite (hypothesis): Socket Mode and the Events API take any payload without stalling.

Payloads are real event_callback shapes from FakeSlack, mangled (backchannel.testing.fuzz).
Socket Mode is fuzzed at the adapter's own entry point (`receive`, which slack-sdk's
listener calls with the parsed envelope payload), the Events API over HTTP, signed.
After every example the next legitimate event is stored exactly once; after the whole
run a legitimate message is stored and answered; no secret is kept, the verification
token included.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel.testing.fuzz import IngressCheck, mangled, store_leaks
from backchannel_slack import SlackAdapter
from backchannel_slack.testing import FakeSlack
from hypothesis import given
from hypothesis import strategies as st

ACCOUNT = "work"
FINAL = "final ping"
_ids = itertools.count()
_boards: list[Switchboard] = []


@pytest.fixture(autouse=True)
async def stop_boards(slack: FakeSlack, store: SQLiteStore) -> AsyncIterator[None]:
    """Stop each test's board before its store and FakeSlack close (runs may be debouncing)."""
    yield
    while _boards:
        await _boards.pop().stop()


def answer_final(run: Run) -> str | None:
    return "pong" if run.trigger is not None and FINAL in run.trigger.text else None


def samples(slack: FakeSlack) -> list[dict[str, Any]]:
    root = slack.message("C0GENERAL", "U0ALICE", f"<@{slack.bot_user_id}> hello")
    ts = root["event"]["ts"]
    return [
        root,
        slack.message("D0ALICE", "U0ALICE", "a direct *message* with `code`"),
        slack.message("C0GENERAL", "U0BOB", "in the thread", thread_ts=ts),
        slack.app_mention(root),
        slack.edit("C0GENERAL", ts, "edited"),
        slack.delete("C0GENERAL", ts),
    ]


def fresh(payload: dict[str, Any]) -> dict[str, Any]:
    """A new event id and message ts, so each example is a new event."""
    payload["event_id"] = f"EvFUZZ{next(_ids)}"
    inner = payload.get("event")
    if isinstance(inner, dict) and "ts" in inner and inner.get("subtype") is None:
        inner["ts"] = inner["event_ts"] = f"1700000000.{next(_ids):06d}"
    return payload


async def started(slack: FakeSlack, store: SQLiteStore, mode: str) -> tuple[Switchboard, Any]:
    adapter = SlackAdapter(ACCOUNT, slack.settings(mode=mode, lookup_timeout=3.0))
    board = Switchboard(store, port=0 if mode == "events" else None)
    board.add_account(
        adapter,
        Binding(RecordingAgent(answer_final), debounce=0.2, max_wait=1.0),
        secrets=[slack.bot_token, slack.app_token, slack.signing_secret],
    )
    await board.start()
    _boards.append(board)
    if mode == "events":
        assert adapter.events_url is not None
        slack.use_events_api(adapter.events_url)
    return board, adapter


def utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def legit(slack: FakeSlack) -> dict[str, Any]:
    return slack.message("D0ALICE", "U0ALICE", f"legit {next(_ids)}")


async def answered_after_fuzz(slack: FakeSlack, board: Switchboard) -> None:
    """The next legitimate message in the same chat is stored and answered within 20 s."""
    await slack.deliver(slack.message("D0ALICE", "U0ALICE", FINAL))
    await slack.wait_for(
        lambda: any(p.get("text") == "pong" for p in slack.posts), 20, "the answer"
    )
    await board.wait_idle()


def assert_nothing_secret_kept(slack: FakeSlack, store: SQLiteStore) -> None:
    secrets = [slack.bot_token, slack.app_token, slack.signing_secret, slack.verification_token]
    assert store_leaks(store.path, secrets, SlackAdapter.secret_fields) == []


async def test_fuzzed_socket_mode_payloads_never_stall_the_next_event(
    slack: FakeSlack, store: SQLiteStore
) -> None:
    board, adapter = await started(slack, store, "socket")
    check = IngressCheck(board, ACCOUNT)
    shapes = samples(slack)

    @given(mangled(shapes, fresh=fresh))
    def example(payload: Any) -> None:
        check.call(check.received(payload, adapter.receive))
        check.call(check.stored_once(legit(slack), adapter.receive))

    await check.explore(example)
    assert check.outcomes["malformed"] > 0 and check.outcomes["stored"] > 0
    await answered_after_fuzz(slack, board)
    await board.stop()
    assert_nothing_secret_kept(slack, store)


@st.composite
def events_requests(draw: st.DrawFn, shapes: list[dict[str, Any]]) -> tuple[bytes, str]:
    """A body and its Content-Type: mostly mangled events, sometimes broken framing."""
    kind = draw(st.sampled_from(["event", "event", "event", "nested", "bytes", "charset"]))
    if kind == "nested":
        depth = draw(st.integers(65, 50_000))
        return b'{"a":' * depth + b"1" + b"}" * draw(
            st.sampled_from([0, depth])
        ), "application/json"
    if kind == "bytes":
        return draw(st.binary(max_size=64)), "application/json"
    body = json.dumps(draw(mangled(shapes, fresh=fresh))).encode()
    if kind == "charset":
        charset = draw(st.sampled_from(["x-no-such-charset", "utf-16", "latin-1"]))
        return body, f"application/json; charset={charset}"
    return body, "application/json"


async def test_fuzzed_signed_events_api_requests_never_get_a_500(
    slack: FakeSlack, store: SQLiteStore
) -> None:
    board, adapter = await started(slack, store, "events")
    assert adapter.events_url is not None
    url = adapter.events_url
    check = IngressCheck(board, ACCOUNT)
    shapes = samples(slack)
    statuses: dict[int, int] = {}
    async with aiohttp.ClientSession() as session:

        async def post(body: bytes, content_type: str) -> int:
            headers = {**slack.sign(body), "Content-Type": content_type}
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                return response.status

        @given(events_requests(shapes))
        def example(request: tuple[bytes, str]) -> None:
            body, content_type = request
            status = check.call(post(body, content_type))
            statuses[status] = statuses.get(status, 0) + 1
            if status == 401:  # slack-sdk's verifier reads the body as UTF-8 text first
                assert not utf8(body)
            else:
                assert status in (200, 400), status
            event = legit(slack)
            assert check.call(post(json.dumps(event).encode(), "application/json")) == 200
            stored = adapter.normalize(event)
            assert stored is not None
            assert check.call(store.is_known(ACCOUNT, stored.event_id))

        await check.explore(example)
    assert statuses.get(400, 0) > 0 and statuses.get(200, 0) > 0
    await answered_after_fuzz(slack, board)
    await board.stop()
    assert_nothing_secret_kept(slack, store)


async def test_a_signed_malformed_event_is_a_dead_letter_without_the_verification_token(
    slack: FakeSlack, store: SQLiteStore
) -> None:
    board, adapter = await started(slack, store, "events")
    assert adapter.events_url is not None
    broken = slack.message("C0GENERAL", "U0ALICE", "hi")
    broken["event"]["ts"] = {"not": "a ts"}
    body = json.dumps(broken).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(adapter.events_url, data=body, headers=slack.sign(body)) as response,
    ):
        assert response.status == 200  # acked: a redelivery would be as malformed
    (letter,) = await store.dead_letters(ACCOUNT)
    assert letter["reason"] and '"token": "***"' in letter["payload"]
    assert slack.verification_token not in letter["payload"]
    await board.stop()
    assert_nothing_secret_kept(slack, store)

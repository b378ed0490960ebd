"""Events API receiving: signatures, url_verification, 200 after commit, retries."""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import Any

import aiohttp
import pytest
from backchannel.testing import ContractContext
from backchannel_slack.testing import FakeSlack

from .conftest import wait_until


async def stored(ctx: ContractContext) -> list[str]:
    found: list[str] = []
    for conversation in await ctx.store.conversations(ctx.account, limit=100):
        found += [m.text for m in await ctx.store.window(conversation.id, 100)]
    return sorted(found)


async def test_url_verification_is_answered_with_the_challenge(
    slack: FakeSlack, start_adapter: Any
) -> None:
    await start_adapter("events")
    status, answer = await slack.verify_url()
    assert status == 200
    assert isinstance(answer, dict) and answer["challenge"]


async def test_bad_signature_is_401_and_nothing_is_stored(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("events")
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "forged"), signature="bad")
    await slack.wait_for(delivery.gave_up.is_set, what="Slack to give up")
    assert {outcome for _, outcome in delivery.attempts} == {"401"}
    assert len(delivery.attempts) == slack.max_retries + 1
    assert await stored(contract_context) == []
    assert contract_context.results == []


async def test_forged_signatures_make_one_warning_not_one_each(
    slack: FakeSlack,
    contract_context: ContractContext,
    start_adapter: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # anyone can send a fresh timestamp with a forged signature, by the thousand
    await start_adapter("events")
    caplog.set_level(logging.DEBUG)
    for n in range(3):
        forged = slack.message("C0GENERAL", "U0ALICE", f"forged {n}")
        delivery = await slack.deliver(forged, signature="bad")
        await slack.wait_for(delivery.gave_up.is_set, what="Slack to give up")
    rejected = [r for r in caplog.records if "bad or stale signature" in r.getMessage()]
    assert len(rejected) == 3 * (slack.max_retries + 1)
    assert [r.levelno for r in rejected].count(logging.WARNING) == 1


async def test_stale_timestamp_is_401_and_nothing_is_stored(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("events")
    delivery = await slack.deliver(
        slack.message("C0GENERAL", "U0ALICE", "replayed"), signature="stale"
    )
    await slack.wait_for(delivery.gave_up.is_set, what="Slack to give up")
    assert {outcome for _, outcome in delivery.attempts} == {"401"}
    assert await stored(contract_context) == []


async def test_unsigned_and_garbage_requests_are_refused(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("events")
    body = b'{"type": "event_callback"}'
    async with aiohttp.ClientSession(trust_env=False) as session:
        async with session.post(adapter.events_url, data=body) as response:
            assert response.status == 401
        headers = {"X-Slack-Request-Timestamp": "not-a-number", "X-Slack-Signature": "v0=00"}
        async with session.post(adapter.events_url, data=body, headers=headers) as response:
            assert response.status == 401
        junk = b"not json"
        async with session.post(
            adapter.events_url, data=junk, headers=slack.sign(junk)
        ) as response:
            assert response.status == 400


async def test_answer_is_200_only_after_commit(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("events")
    contract_context.hold()
    payload = slack.message("C0GENERAL", "U0ALICE", "wait for it")
    delivery = await slack.deliver(payload)
    await contract_context.wait_started(f"C0GENERAL:{payload['event']['ts']}")
    assert delivery.attempts == [] and not delivery.acked.is_set()
    contract_context.release()
    await slack.wait_acked(delivery.event_id)
    assert delivery.attempts == [(0, "200")]
    assert await stored(contract_context) == ["wait for it"]


async def test_hung_name_lookups_still_answer_within_slacks_three_seconds(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    adapter = await start_adapter("events")
    assert adapter.settings.lookup_timeout < slack.http_timeout == 3.0
    slack.fail_next("users.info", "hang", delay=30)
    slack.fail_next("conversations.info", "hang", delay=30)
    payload = slack.message("C0GENERAL", "U0BOB", "answer me in time")
    delivery = await slack.deliver(payload)
    await slack.wait_acked(delivery.event_id, timeout=10)
    assert delivery.attempts == [(0, "200")]  # no Slack retry was needed
    (event,) = contract_context.events
    assert event.text == "answer me in time" and event.sender.id == "U0BOB"


async def test_retry_while_first_delivery_is_processing_stores_once(
    contract_context: ContractContext, start_adapter: Any, slack: FakeSlack
) -> None:
    adapter = await start_adapter("events")
    slack.http_timeout = 0.3  # Slack gives up on the first POST while it is still held
    contract_context.hold()
    payload = slack.message("C0GENERAL", "U0ALICE", "patience")
    delivery = await slack.deliver(payload)
    await wait_until(lambda: adapter.counters["joined"] >= 1, what="a retry to join the first")
    contract_context.release()
    await slack.wait_acked(delivery.event_id)
    assert delivery.attempts[0] == (0, "timeout")
    assert any(retry >= 1 and outcome == "200" for retry, outcome in delivery.attempts)
    assert await stored(contract_context) == ["patience"]
    assert contract_context.calls(f"C0GENERAL:{payload['event']['ts']}") == 1


async def test_redelivery_after_success_is_a_duplicate_and_answered_200(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("events")
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "once"))
    await slack.wait_acked(delivery.event_id)
    await slack.redeliver(delivery.event_id, reason="http_error")
    await slack.wait_for(lambda: delivery.acks == 2, what="the retry answered")
    assert delivery.attempts == [(0, "200"), (1, "200")]
    assert [r.status for r in contract_context.results] == ["stored", "duplicate"]


async def test_message_and_app_mention_over_http_make_one_row(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("events")
    payloads = slack.user_says("C0GENERAL", "U0BOB", f"hey <@{slack.bot_user_id}>")
    for delivery in await slack.deliver_all(payloads):
        await slack.wait_acked(delivery.event_id)
    assert await stored(contract_context) == [f"hey <@{slack.bot_user_id}>"]
    (event,) = {e.event_id: e for e in contract_context.events}.values()
    assert event.mentions_me and event.sender.name == "Bob Builder"


async def test_other_envelope_types_are_answered_200(slack: FakeSlack, start_adapter: Any) -> None:
    adapter = await start_adapter("events")
    body = json.dumps({"type": "app_rate_limited", "minute_rate_limited": 1518467820}).encode()
    async with (
        aiohttp.ClientSession(trust_env=False) as session,
        session.post(adapter.events_url, data=body, headers=slack.sign(body)) as response,
    ):
        assert response.status == 200


async def test_stop_removes_the_route(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    adapter = await start_adapter("events")
    await adapter.stop()
    assert ("POST", adapter.settings.events_path) not in contract_context.routes


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


async def test_ssl_check_is_answered_200_signed_or_not(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    # Slack checks the certificate of a slash command or interactivity URL with an
    # ssl_check form POST; like Bolt, it is answered before (and without) a signature
    adapter = await start_adapter("events")
    body = b"ssl_check=1&token=legacy-verification-token"
    async with aiohttp.ClientSession(trust_env=False) as session:
        for headers in (FORM, {**FORM, **slack.sign(body)}):
            async with session.post(adapter.events_url, data=body, headers=headers) as response:
                assert response.status == 200
                assert "legacy-verification-token" not in await response.text()
    assert contract_context.results == [] and await stored(contract_context) == []


async def test_signed_interactivity_and_slash_commands_are_acked_and_ignored(
    slack: FakeSlack,
    contract_context: ContractContext,
    start_adapter: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the docs promise these are acked: a 400 shows the user an error in Slack
    adapter = await start_adapter("events")
    action = {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": []}
    bodies = [
        ("payload=" + urllib.parse.quote(json.dumps(action))).encode(),
        b"token=tok&team_id=T0FAKE&command=%2Fask&text=hello&user_id=U0ALICE&response_url=x",
    ]
    caplog.set_level(logging.INFO)
    async with aiohttp.ClientSession(trust_env=False) as session:
        for body in bodies:
            headers = {**FORM, **slack.sign(body)}
            async with session.post(adapter.events_url, data=body, headers=headers) as response:
                assert response.status == 200
            # unsigned, they are refused like anything else
            async with session.post(adapter.events_url, data=body, headers=FORM) as response:
                assert response.status == 401
    assert contract_context.results == [] and await stored(contract_context) == []
    said = [r.getMessage() for r in caplog.records if "not handled" in r.getMessage()]
    assert len(said) == 2 and all("\n" not in line for line in said)
    assert any("block_actions" in line for line in said) and any("/ask" in line for line in said)


async def test_a_signed_json_body_that_is_not_an_object_is_400_with_one_line(
    slack: FakeSlack, start_adapter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await start_adapter("events")
    body = b"[1, 2]"
    caplog.set_level(logging.WARNING)
    async with (
        aiohttp.ClientSession(trust_env=False) as session,
        session.post(adapter.events_url, data=body, headers=slack.sign(body)) as response,
    ):
        assert response.status == 400
    assert [r.getMessage() for r in caplog.records if "not a JSON object" in r.getMessage()]


async def test_a_json_event_labelled_as_a_form_is_still_stored(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    adapter = await start_adapter("events")
    payload = slack.message("C0GENERAL", "U0ALICE", "mislabelled")
    body = json.dumps(payload).encode()
    async with (
        aiohttp.ClientSession(trust_env=False) as session,
        session.post(
            adapter.events_url, data=body, headers={**FORM, **slack.sign(body)}
        ) as response,
    ):
        assert response.status == 200
    assert await stored(contract_context) == ["mislabelled"]


async def test_a_redelivered_unreadable_event_is_one_dead_letter(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    # Slack sends an event again with the same event_id (a lost answer, a retry): the
    # store dedupes messages, and the adapter must not make a second dead letter either
    await start_adapter("events")
    broken = slack.message("C0GENERAL", "U0ALICE", "x")
    broken["event"]["ts"] = "yesterday"
    delivery = await slack.deliver(broken)
    await slack.wait_acked(delivery.event_id)
    await slack.redeliver(delivery.event_id, reason="http_timeout")
    await slack.wait_for(lambda: delivery.acks == 2, what="the retry answered")
    assert delivery.attempts == [(0, "200"), (1, "200")]
    assert len(contract_context.malformed) == 1
    # another broken event is its own dead letter
    other = slack.message("C0GENERAL", "U0ALICE", "y")
    other["event"]["ts"] = "tomorrow"
    await slack.wait_acked((await slack.deliver(other)).event_id)
    assert len(contract_context.malformed) == 2


async def test_an_unsigned_or_stale_request_is_refused_before_its_body_is_read(
    slack: FakeSlack, start_adapter: Any
) -> None:
    """Without signature headers, or stamped outside Slack's five minutes, a request
    announcing a big body gets its 401 at the headers: the body is never awaited."""
    import asyncio
    import time
    from urllib.parse import urlsplit

    adapter = await start_adapter("events")
    url = urlsplit(adapter.events_url)
    stale = str(int(time.time()) - 3600)
    # a stamp of 309 digits overflowed the float compared with now: a 500 and a traceback
    # for each such request, free for anyone to send
    for stamp in ("", stale, "9" * 309, "1" * 4301):
        extra = stamp and f"X-Slack-Request-Timestamp: {stamp}\r\nX-Slack-Signature: v0=00\r\n"
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.write(
            f"POST {url.path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            "Content-Length: 3000000\r\n\r\n{".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 401"), stamp[:20]
        writer.close()


async def test_a_forged_big_form_is_refused_without_being_parsed(
    slack: FakeSlack, start_adapter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh forged headers pass the header check, so the body is read; a form of 4 MiB of
    %-escapes took a second of the loop to parse. Only ssl_check's size is parsed before
    the signature is checked; a signed big form still is, after it."""
    import time

    from backchannel_slack import adapter as slack_adapter

    parsed: list[int] = []
    real_form = slack_adapter._form

    def counting_form(content_type: str, body: bytes) -> dict[str, str] | None:
        parsed.append(len(body))
        return real_form(content_type, body)

    monkeypatch.setattr(slack_adapter, "_form", counting_form)
    adapter = await start_adapter("events")
    body = b"a=" + b"%41" * 100_000
    headers = {
        "X-Slack-Request-Timestamp": str(int(time.time())),
        "X-Slack-Signature": "v0=" + "0" * 64,
        "Content-Type": "application/x-www-form-urlencoded",
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(adapter.events_url, data=body, headers=headers) as answer:
            assert answer.status == 401
        assert parsed == []
        # Slack's unsigned ssl_check is still answered, and a signed big form still acked
        ssl_check = {"Content-Type": "application/x-www-form-urlencoded"}
        async with session.post(
            adapter.events_url, data=b"ssl_check=1&token=x", headers=ssl_check
        ) as answer:
            assert answer.status == 200
        signed = {**slack.sign(body), "Content-Type": "application/x-www-form-urlencoded"}
        async with session.post(adapter.events_url, data=body, headers=signed) as answer:
            assert answer.status == 200
    assert parsed == [len(b"ssl_check=1&token=x"), len(body)]


@pytest.mark.parametrize("mode", ["events", "socket"])
@pytest.mark.parametrize("field", ["ts", "thread_ts", "event_ts"])
async def test_a_ts_past_what_a_float_holds_is_one_dead_letter_and_acked(
    slack: FakeSlack,
    contract_context: ContractContext,
    start_adapter: Any,
    mode: str,
    field: str,
) -> None:
    # JSON allows any integer: 10**400 made float() raise OverflowError inside normalize,
    # which was answered 500 (Events API) or left unacked (Socket Mode), again and again
    await start_adapter(mode)
    broken = slack.message("C0GENERAL", "U0ALICE", "huge")
    broken["event"][field] = 10**400
    delivery = await slack.deliver(broken)
    await slack.wait_acked(delivery.event_id)
    fine = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "after"))
    await slack.wait_acked(fine.event_id)
    if field == "event_ts":  # not read: the message is stored
        assert await stored(contract_context) == ["after", "huge"]
    else:  # a ts the message is placed by: one clear dead letter
        (reason,) = contract_context.malformed
        assert field in reason and "Slack ts" in reason
        assert await stored(contract_context) == ["after"]


async def test_an_exception_no_check_foresaw_in_normalize_is_a_dead_letter_not_a_redelivery(
    slack: FakeSlack,
    contract_context: ContractContext,
    start_adapter: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adapter = await start_adapter("socket")
    normalize = adapter.normalize

    def flaky(payload: Any) -> Any:
        if payload.get("event", {}).get("text") == "boom":
            raise KeyError("a field no check foresaw")
        return normalize(payload)

    monkeypatch.setattr(adapter, "normalize", flaky)
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "boom"))
    await slack.wait_acked(delivery.event_id)
    assert delivery.acks == 1 and len(contract_context.malformed) == 1
    fine = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "after"))
    await slack.wait_acked(fine.event_id)
    assert await stored(contract_context) == ["after"]

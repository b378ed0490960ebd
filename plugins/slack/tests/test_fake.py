"""FakeSlack answers the real slack-sdk with Slack's shapes and error codes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web as http
from backchannel_slack.testing import FakeSlack
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient


@pytest.fixture
async def web(slack: FakeSlack) -> AsyncIterator[AsyncWebClient]:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_base, retry_handlers=[])
    client.proxy = None  # slack-sdk would otherwise take HTTPS_PROXY from the environment
    yield client


async def error_of(call: Any) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call
    return str(caught.value.response["error"])


async def test_tokens_are_checked_like_slack(slack: FakeSlack, web: AsyncWebClient) -> None:
    assert (await web.auth_test())["user_id"] == slack.bot_user_id
    nobody = AsyncWebClient(base_url=slack.api_base, retry_handlers=[])
    nobody.proxy = None
    assert await error_of(nobody.auth_test()) == "not_authed"
    wrong = AsyncWebClient(token="xoxb-wrong", base_url=slack.api_base, retry_handlers=[])
    wrong.proxy = None
    assert await error_of(wrong.auth_test()) == "invalid_auth"
    assert await error_of(web.apps_connections_open(app_token=slack.bot_token)) == (
        "not_allowed_token_type"
    )
    opened = await web.apps_connections_open(app_token=slack.app_token)
    assert opened["url"].startswith(f"ws://127.0.0.1:{slack.port}/link/?ticket=")


async def test_methods_answer_with_slack_shapes_and_codes(
    slack: FakeSlack, web: AsyncWebClient
) -> None:
    posted = await web.chat_postMessage(channel="C0GENERAL", text="hi")
    assert posted["message"]["bot_id"] == slack.bot_id and posted["channel"] == "C0GENERAL"
    assert await error_of(web.chat_postMessage(channel="C0NONE", text="x")) == "channel_not_found"
    assert await error_of(web.chat_update(channel="C0GENERAL", ts="1.000001", text="x")) == (
        "message_not_found"
    )
    assert (
        await error_of(
            web.reactions_add(channel="C0GENERAL", timestamp=posted["ts"], name=":tada:")
        )
        == "invalid_name"
    )
    await web.reactions_add(channel="C0GENERAL", timestamp=posted["ts"], name="tada")
    assert (
        await error_of(web.reactions_add(channel="C0GENERAL", timestamp=posted["ts"], name="tada"))
        == "already_reacted"
    )
    assert await error_of(web.users_info(user="U0NOBODY")) == "user_not_found"
    assert (await web.users_info(user="U0ALICE"))["user"]["profile"]["display_name"] == "Alice"
    im = await web.conversations_info(channel="D0ALICE")
    assert im["channel"]["is_im"] and im["channel"]["user"] == "U0ALICE"


async def test_rate_limit_fault_sends_retry_after(slack: FakeSlack, web: AsyncWebClient) -> None:
    slack.fail_next("chat.postMessage", "rate_limited", retry_after=7)
    with pytest.raises(SlackApiError) as caught:
        await web.chat_postMessage(channel="C0GENERAL", text="x")
    assert caught.value.response.status_code == 429
    assert caught.value.response.headers["Retry-After"] == "7"
    assert caught.value.response["error"] == "ratelimited"


async def test_unknown_fault_is_refused(slack: FakeSlack) -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        slack.fail_next("chat.postMessage", "gremlins")


async def test_socket_mode_wire_hello_envelope_and_retry_fields() -> None:
    """What a raw websocket client sees: hello, then Slack's envelope; unacked -> sent again."""
    async with FakeSlack(ack_timeout=0.2, max_retries=1) as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_base, retry_handlers=[])
        client.proxy = None
        url = (await client.apps_connections_open(app_token=slack.app_token))["url"]
        session = aiohttp.ClientSession(trust_env=False)
        async with session, session.ws_connect(url) as ws:
            hello = await ws.receive_json(timeout=5)
            assert hello["type"] == "hello"
            assert hello["connection_info"] == {"app_id": slack.app_id}
            delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "hi"))
            first = await ws.receive_json(timeout=5)
            again = await ws.receive_json(timeout=5)  # not acked within ack_timeout
            assert first["type"] == again["type"] == "events_api"
            assert first["payload"]["event_id"] == delivery.event_id == again["payload"]["event_id"]
            assert (first["retry_attempt"], first["retry_reason"]) == (0, "")
            assert (again["retry_attempt"], again["retry_reason"]) == (1, "timeout")
            assert first["envelope_id"] != again["envelope_id"]
            assert first["accepts_response_payload"] is False
            await ws.send_json({"envelope_id": again["envelope_id"]})
            await slack.wait_acked(delivery.event_id)
            assert delivery.acks == 1


async def test_events_api_wire_is_signed_and_retries_say_so(slack: FakeSlack) -> None:
    """What an app's Request URL sees: signed POSTs; after a 500, X-Slack-Retry-Num/Reason."""
    seen: list[tuple[dict[str, str], bytes]] = []
    verifier = SignatureVerifier(slack.signing_secret)

    async def app(request: http.Request) -> http.Response:
        body = await request.read()
        seen.append((dict(request.headers), body))
        return http.Response(status=500 if len(seen) == 1 else 200)

    server = http.Application()
    server.router.add_post("/slack/events", app)
    runner = http.AppRunner(server, access_log=None)
    await runner.setup()
    site = http.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        slack.use_events_api(f"http://127.0.0.1:{port}/slack/events")
        delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "hi"))
        await slack.wait_acked(delivery.event_id)
    finally:
        await runner.cleanup()
    assert delivery.attempts == [(0, "500"), (1, "200")]
    (first_headers, first_body), (retry_headers, retry_body) = seen
    assert first_body == retry_body
    assert json.loads(first_body)["event_id"] == delivery.event_id
    assert verifier.is_valid_request(first_body, first_headers)
    assert verifier.is_valid_request(retry_body, retry_headers)
    assert "X-Slack-Retry-Num" not in first_headers
    assert retry_headers["X-Slack-Retry-Num"] == "1"
    assert retry_headers["X-Slack-Retry-Reason"] == "http_error"

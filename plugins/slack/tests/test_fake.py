"""FakeSlack answers the real slack-sdk with Slack's shapes and error codes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from backchannel_slack.testing import FakeSlack
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient


@pytest.fixture
async def web(slack: FakeSlack) -> AsyncIterator[AsyncWebClient]:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_base, retry_handlers=[])
    client.proxy = None  # slack-sdk would otherwise take HTTPS_PROXY from the environment
    yield client


async def error_of(call) -> str:  # type: ignore[no-untyped-def]
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

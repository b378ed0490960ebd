"""The bot's own identity comes from auth.test at start and is logged; it is never guessed from
an event's `authorizations` (in an org-wide install that can be another app's bot)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from backchannel_slack.testing import FakeSlack


async def test_identity_comes_from_auth_test_and_is_logged(
    slack: FakeSlack, start_adapter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="backchannel")

    adapter = await start_adapter()

    assert adapter.identity.user_id == slack.bot_user_id
    assert adapter.identity.bot_id == slack.bot_id
    assert any(
        f"user {slack.bot_user_id}, bot {slack.bot_id}" in r.getMessage()
        and "(from auth.test)" in r.getMessage()
        for r in caplog.records
    ), caplog.text


async def test_a_configured_bot_user_id_that_is_not_the_tokens_is_overridden_loudly(
    slack: FakeSlack, start_adapter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await start_adapter(bot_user_id="U0WRONG00")

    assert adapter.identity.user_id == slack.bot_user_id
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "configured bot_user_id U0WRONG00 is not the token's bot user" in warning.getMessage()


async def test_another_bot_named_in_authorizations_is_someone_else(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter()
    (payload,) = slack.user_says("C0GENERAL", "U0OTHERBOT", "deploy finished")
    # an org-wide install: the event was authorized for another app's bot user
    payload["authorizations"] = [
        {"team_id": slack.team_id, "user_id": "U0OTHERBOT", "is_bot": True}
    ]

    event = adapter.normalize(payload)

    assert event is not None
    assert event.sender.id == "U0OTHERBOT"
    assert event.text == "deploy finished"

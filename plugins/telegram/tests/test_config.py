"""Settings: the plugin registers `telegram`; bad settings are ConfigErrors naming the key."""

from __future__ import annotations

from typing import Any

import pytest
from backchannel.errors import ConfigError
from backchannel.plugins import channels
from backchannel_telegram import TelegramAdapter

TOKEN = "123456789:AAH-some-token"


def test_the_plugin_registers_the_telegram_channel() -> None:
    assert channels().get("telegram") is TelegramAdapter


def test_defaults_follow_telegrams_limits() -> None:
    adapter = TelegramAdapter("tg", {"token": TOKEN})
    assert adapter.mode == "polling" and adapter.api_base == "https://api.telegram.org"
    assert adapter.capabilities.max_text_len == 4096
    assert (adapter.pacing.per_chat, adapter.pacing.per_group, adapter.pacing.overall) == (
        1,
        20,
        30,
    )
    assert adapter.me is not None and adapter.me.id == "123456789" and adapter.me.is_bot
    assert "message_reaction" in adapter.allowed_updates


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({}, "token"),
        ({"token": "no-colon"}, "token"),
        ({"token": TOKEN, "mode": "push"}, "mode"),
        ({"token": TOKEN, "poll_timeout": "25"}, "poll_timeout"),
        ({"token": TOKEN, "request_timeout": 0}, "request_timeout"),
        ({"token": TOKEN, "pace_per_chat": -1}, "pace_per_chat"),
        ({"token": TOKEN, "allowed_updates": "message"}, "allowed_updates"),
    ],
)
def test_bad_settings_name_the_key(settings: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        TelegramAdapter("tg", settings)
    assert caught.value.key == key
    assert key in str(caught.value)

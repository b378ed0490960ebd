"""Tokens never leak; proxy environment variables are honoured, NO_PROXY too."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from backchannel.errors import BackchannelError, ConfigError, DeliveryError
from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_slack import SlackAdapter
from backchannel_slack.settings import SlackSettings, resolve_proxy
from backchannel_slack.testing import FakeSlack

GENERAL = Address("test", "C0GENERAL")


async def test_tokens_never_reach_logs_errors_repr_or_store(
    slack: FakeSlack,
    contract_context: ContractContext,
    start_adapter: Any,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)  # slack-sdk's own debug logging included
    secrets = (slack.bot_token, slack.app_token, slack.signing_secret)
    adapter = await start_adapter("socket")
    texts: list[str] = [repr(adapter), repr(adapter.settings)]
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "hello"))
    await slack.wait_acked(delivery.event_id)
    for fault in ("rate_limited", "server_error", "error", "reset", "hang"):
        slack.fail_next("chat.postMessage", fault, delay=5)
        with pytest.raises(DeliveryError) as caught:
            await adapter.send(Outbound(GENERAL, "x"))
        texts.append(str(caught.value))
    slack.fail_next("users.info", "error", error="invalid_auth")
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0BOB", "again"))
    await slack.wait_acked(delivery.event_id)
    await slack.disconnect()
    await slack.wait_connections(2)

    wrong = SlackAdapter("test", {**slack.settings(), "bot_token": slack.bot_token + "x"})
    with pytest.raises(ConfigError) as refused:
        await wrong.start(contract_context)
    texts.append(str(refused.value))
    wrong_app = SlackAdapter("test", {**slack.settings(), "app_token": slack.app_token + "x"})
    with pytest.raises(ConfigError) as refused_app:
        await wrong_app.start(contract_context)
    texts.append(str(refused_app.value))

    texts.append(caplog.text)
    texts += [str(call) for call in slack.calls]
    database = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    for secret in secrets:
        assert all(secret not in text for text in texts)
        assert secret.encode() not in database
    assert "bot_token" in str(refused.value)  # the refusal names the key, not the value
    assert "app_token" in str(refused_app.value)
    assert "Sending a request" in caplog.text  # slack-sdk's debug logging did run


def test_settings_check_tokens_and_mode() -> None:
    with pytest.raises(ConfigError, match="bot_token"):
        SlackSettings.from_mapping("work", {})
    with pytest.raises(ConfigError, match="xoxb-"):
        SlackSettings.from_mapping("work", {"bot_token": "xapp-1-oops"})
    with pytest.raises(ConfigError, match="app-level token"):
        SlackSettings.from_mapping("work", {"bot_token": "xoxb-1", "mode": "socket"})
    with pytest.raises(ConfigError, match="signing secret"):
        SlackSettings.from_mapping("work", {"bot_token": "xoxb-1", "mode": "events"})
    events = SlackSettings.from_mapping("work", {"bot_token": "xoxb-1", "signing_secret": "s"})
    assert events.mode == "events"
    assert events.events_path == "/slack/work/events"
    assert "xoxb-1" not in repr(events)


def test_resolve_proxy_follows_env_and_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert resolve_proxy(None, "https://slack.com/api/") == "http://proxy.example:3128"
    assert resolve_proxy(None, "http://127.0.0.1:8080/api/") == "http://proxy.example:3128"
    assert resolve_proxy("", "https://slack.com/api/") is None
    assert resolve_proxy("http://other:1", "https://slack.com/api/") == "http://other:1"
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    assert resolve_proxy(None, "http://127.0.0.1:8080/api/") is None
    assert resolve_proxy(None, "https://slack.com/api/") == "http://proxy.example:3128"


@pytest.fixture
def dead_proxy(monkeypatch: pytest.MonkeyPatch) -> str:
    """A proxy in the environment that refuses every connection."""
    url = "http://127.0.0.1:9"
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, url)
    return url


async def test_no_proxy_keeps_loopback_direct_despite_https_proxy(
    dead_proxy: str, slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    # conftest sets NO_PROXY=127.0.0.1 (what the docs tell users running the fake)
    adapter = await start_adapter("socket")
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "through no proxy"))
    await slack.wait_acked(delivery.event_id)
    receipt = await adapter.send(Outbound(GENERAL, "direct"))
    assert receipt.platform_message_id


async def test_proxy_setting_empty_string_turns_env_proxy_off(
    dead_proxy: str, monkeypatch: pytest.MonkeyPatch, slack: FakeSlack, start_adapter: Any
) -> None:
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.delenv("no_proxy")
    adapter = await start_adapter("socket", proxy="")
    assert (await adapter.send(Outbound(GENERAL, "direct"))).platform_message_id


async def test_env_proxy_is_used_when_loopback_is_not_excluded(
    dead_proxy: str,
    monkeypatch: pytest.MonkeyPatch,
    slack: FakeSlack,
    contract_context: ContractContext,
) -> None:
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.delenv("no_proxy")
    adapter = SlackAdapter("test", slack.settings())
    with pytest.raises(BackchannelError, match="could not reach Slack") as caught:
        await adapter.start(contract_context.bind(adapter))
    assert slack.calls == []  # it really went to the (dead) proxy
    assert slack.bot_token not in str(caught.value)
    await adapter.stop()


async def test_signing_secret_never_reaches_logs_or_answers_in_events_mode(
    slack: FakeSlack,
    contract_context: ContractContext,
    start_adapter: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    adapter = await start_adapter("events")
    forged = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "forged"), signature="bad")
    await slack.wait_for(forged.gave_up.is_set, what="Slack to give up on the forged event")
    good = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "fine"))
    await slack.wait_acked(good.event_id)
    status, answer = await slack.verify_url()
    assert status == 200
    texts = [caplog.text, repr(adapter), repr(adapter.settings), str(answer)]
    texts += [str(call) for call in slack.calls]
    for secret in (slack.signing_secret, slack.bot_token):
        assert all(secret not in text for text in texts)
    assert "bad or stale signature" in caplog.text

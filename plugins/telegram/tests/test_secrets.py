"""The bot token and the webhook secret never reach logs, exceptions, reprs or the transcript."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
from backchannel.errors import DeliveryError
from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.testing import FakeTelegram, event_id_of


async def test_token_is_absent_from_logs_errors_and_reprs_after_every_fault(
    fake: FakeTelegram,
    contract_context: ContractContext,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, aiohttp's included
    adapter = TelegramAdapter(
        "test", fake.settings(request_timeout=0.5, retry_initial=0.05, poll_timeout=1)
    )
    await adapter.start(contract_context.bind(adapter))
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    address = Address("test", str(chat["id"]))
    update = fake.inject_message(chat, alice, "hello")
    await contract_context.wait_ingested(event_id_of(update))

    texts: list[str] = [repr(adapter), str(adapter.__dict__)]
    for fault in ("429", "500", "502", "reset", "hang", "forbidden"):
        fake.fail_next("sendMessage", fault)
        with pytest.raises(DeliveryError) as caught:
            await adapter.send(Outbound(address, "x"))
        texts += [
            str(caught.value),
            repr(caught.value),
            str(caught.value.__cause__),
            str(caught.value.__context__),
        ]
        assert caught.value.__cause__ is None
    fake.fail_next("getUpdates", "conflict", times=2)
    fake.fail_next("getUpdates", "500")
    fake.fail_next("getUpdates", "reset")
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= 6, what="polls")
    await adapter.stop()

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    offline = TelegramAdapter("test", fake.settings(api_base=dead))
    with pytest.raises(DeliveryError) as caught:
        await offline.send(Outbound(address, "x"))
    texts.append(str(caught.value))
    await offline.stop()

    secret_part = fake.token.split(":", 1)[1]
    for text in [caplog.text, *texts]:
        assert secret_part not in text
    store_files = list((tmp_path / "state").glob("*"))
    assert store_files
    for path in store_files:
        assert secret_part.encode() not in path.read_bytes()


async def test_bad_token_is_a_config_error_without_the_token(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    wrong = "123456789:not-the-right-token-at-all"
    adapter = TelegramAdapter("test", fake.settings(token=wrong))
    with pytest.raises(Exception) as caught:
        await adapter.start(contract_context.bind(adapter))
    assert "refused the token" in str(caught.value)
    assert "not-the-right-token" not in str(caught.value)
    await adapter.stop()


def test_malformed_token_is_refused_without_echoing_it() -> None:
    with pytest.raises(Exception) as caught:
        TelegramAdapter("test", {"token": "oops-no-colon-secret"})
    assert "oops-no-colon-secret" not in str(caught.value)


def test_a_token_written_in_the_settings_is_redacted_from_every_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not only ${ENV} tokens: an adapter built with a literal token registers it too."""
    token = "424242424:AAH-literal-token-for-redaction-test"
    TelegramAdapter("literal", {"token": token})
    caplog.set_level(logging.INFO)
    # what aiohttp or a traceback would log: the Bot API URL, token included
    logging.getLogger("aiohttp.client").info("POST https://api.telegram.org/bot%s/getMe", token)
    try:
        raise RuntimeError(f"https://api.telegram.org/bot{token}/sendMessage")
    except RuntimeError:
        logging.getLogger("somewhere.else").exception("unexpected")
    assert caplog.records and "AAH-literal-token" not in caplog.text
    assert "***" in caplog.text

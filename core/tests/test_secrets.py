"""Secrets never reach log output, exception tracebacks included."""

from __future__ import annotations

import logging

import pytest
from backchannel.secrets import redact, register_secret


def test_registered_secret_is_redacted_from_every_logger(caplog: pytest.LogCaptureFixture) -> None:
    token = "123456:ABC-very-secret-token"
    register_secret(token)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("aiohttp.client").warning("GET https://api/bot%s/getMe failed", token)
        try:
            raise RuntimeError(f"bad url https://api/bot{token}/sendMessage")
        except RuntimeError:
            logging.getLogger("some.library").exception("request failed")
    assert token not in caplog.text
    assert "https://api/bot***/getMe" in caplog.text
    assert "bad url https://api/bot***/sendMessage" in caplog.text
    assert redact(f"x{token}y") == "x***y"


def test_short_values_are_not_treated_as_secrets() -> None:
    register_secret("abc")
    assert redact("abcabc") == "abcabc"

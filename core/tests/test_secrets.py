"""Secrets never reach log output, exception tracebacks included."""

from __future__ import annotations

import logging
from pathlib import Path

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


class LineTooLong(Exception):
    """An exception whose message runs over several lines (as aiohttp's parser errors do)."""


def test_the_exception_a_record_carries_is_named_whether_its_traceback_was_folded_or_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from backchannel.secrets import raised

    def logged() -> logging.LogRecord:
        try:
            try:
                raise KeyError("first")
            except KeyError as first:
                raise LineTooLong("400, message:\n  Got more than 8190 bytes\n  ^") from first
        except LineTooLong:
            logging.getLogger("some.server").exception("Error handling request")
        return caplog.records[-1]

    with caplog.at_level(logging.DEBUG):
        before = logged()  # folded or not: an earlier test may have registered a secret
        register_secret("a-registered-secret-value")
        folded = logged()  # the factory folds the traceback into the message
        logging.getLogger("some.server").warning("no exception here")
    name = f"{__name__}.LineTooLong"
    assert folded.exc_info is None and "Traceback (most recent call last)" in folded.msg
    assert raised(folded) == name  # the last traceback's line, not its message's last line
    assert raised(before) == name
    assert raised(caplog.records[-1]) is None


def test_short_values_are_not_treated_as_secrets() -> None:
    register_secret("abc")
    assert redact("abcabc") == "abcabc"


async def test_secrets_never_reach_the_store_or_the_model(tmp_path: Path) -> None:
    from backchannel import Binding, Run, Switchboard
    from backchannel.model import Address, Outbound, Sender
    from backchannel.store import SQLiteStore
    from backchannel.testing import FakeChannel, RecordingAgent

    token = "xoxb-0000-secret-never-stored"
    register_secret(token)
    store = SQLiteStore(tmp_path / "bc.db")
    conversation = await store.ensure_conversation(Address("a", "c"))
    run_id = await store.begin_run(conversation.id, 0, 0)
    await store.finish_run(run_id, "error", f"HTTPError: https://api/{token}/x")
    entry = await store.record_outbound(
        conversation.id, Outbound(conversation.address, "x"), Sender("b")
    )
    await store.mark_failed(entry.id, f"refused for {token}")
    await store.add_dead_letter("a", "r", f"bad {token}", f'{{"token": "{token}"}}')
    await store.close()
    files = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert token.encode() not in files

    def leaky() -> str:
        """A tool that fails with a secret in its error."""
        raise RuntimeError(f"auth failed with {token}")

    results: list[str] = []

    async def act(run: Run) -> None:
        results.append(await run.call("leaky"))

    from backchannel.hookspecs import hookimpl
    from backchannel.plugins import get_plugin_manager

    class Tools:
        @hookimpl
        def register_tools(self, register, conversation):
            register(leaky)

    pm = get_plugin_manager()
    pm.register(Tools(), name="leaky-tools")
    try:
        channel = FakeChannel()
        agent = RecordingAgent(action=act)
        board = Switchboard(SQLiteStore(tmp_path / "b2.db"))
        board.add_account(channel.adapter("fake"), Binding(agent))
        await board.start()
        channel.platform.user_says("hi")
        await agent.wait_runs(1)
        await board.stop()
    finally:
        pm.unregister(name="leaky-tools")
    assert results and token not in results[0] and "***" in results[0]

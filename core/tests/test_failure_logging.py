"""A known error is logged as one line (its traceback only at DEBUG, which -v shows); a bug
keeps its traceback."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest
from backchannel.agents.openai import OpenAIAgent
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import FakeChannel, RecordingAgent
from backchannel.testing.fake_openai import FakeOpenAI


async def run_once(store: SQLiteStore, agent: Callable[[Run], Awaitable[None]]) -> None:
    channel = FakeChannel()
    recording = RecordingAgent(action=agent)
    board = Switchboard(store)
    board.add_account(channel.adapter("ops"), Binding(recording))
    await board.start()
    try:
        channel.platform.user_says("hello?")
        await recording.wait_runs(1)
        await board.wait_idle()
    finally:
        await board.stop()


async def test_an_unreachable_model_is_one_error_line(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeOpenAI() as gone:
        url = gone.base_url
    agent = OpenAIAgent(base_url=url, api_key="sk-test", model="m", max_retries=0)
    caplog.set_level(logging.DEBUG, logger="backchannel")

    await run_once(store, agent)

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    (error,) = errors
    assert error.getMessage().startswith("agent failed in conversation ops/c1: ")
    assert "connection failed" in error.getMessage()
    assert "\n" not in error.getMessage()
    # the redacting filter folds a record's traceback into its (redacted) message
    (debug,) = [r for r in caplog.records if r.getMessage().startswith("traceback of")]
    assert debug.levelno == logging.DEBUG
    assert debug.getMessage().startswith("traceback of the error above\nTraceback")
    assert "ConnectionRefusedError" in debug.getMessage()


async def test_a_bug_in_the_agent_keeps_its_traceback(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def buggy(run: Run) -> None:
        raise KeyError("choices")

    await run_once(store, buggy)

    (error,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    message = error.getMessage()
    assert message.startswith("agent failed in conversation ops/c1: KeyError: 'choices'\nTraceback")

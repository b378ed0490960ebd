"""A run in flight when the switchboard stops finishes its send through the adapter,
which is stopped only after it: nothing is lost, and no connection is left open."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.testing import FakeTelegram


async def test_a_run_in_flight_at_stop_sends_through_the_adapter_and_leaks_nothing(
    fake: FakeTelegram, store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    alice = fake.user("Alice", username="alice")
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(run: Run) -> None:
        assert run.trigger is not None
        started.set()
        await release.wait()
        said = await run.call("reply", {"message_id": run.trigger.seq, "text": "done"})
        assert said.startswith("sent"), said

    adapter = TelegramAdapter("tg", fake.settings(mode="polling"))
    board = Switchboard(store, stop_timeout=30)
    board.add_account(adapter, Binding(slow), secrets=[fake.token])
    await board.start()
    fake.inject_message(fake.private_chat(alice), alice, "hello")
    await asyncio.wait_for(started.wait(), 30)
    caplog.set_level(logging.ERROR, logger="asyncio")
    stopping = asyncio.create_task(board.stop())
    await asyncio.sleep(0)  # stop has begun: no new runs; this one is still answering
    release.set()
    await stopping
    assert [m.text for m in fake.sent] == ["done"]
    gc.collect()  # an unclosed aiohttp session says so when collected
    assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]

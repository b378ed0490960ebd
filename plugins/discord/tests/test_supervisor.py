"""The supervisor: when discord.py's Gateway loop ends for good after start, receiving restarts.

discord.py reconnects by itself on network errors and the close codes it can
resume after; anything else raised from its loop (a frame that is not JSON, a
READY without a field it needs) ends `Client.connect`. Every check waits on a
log line, the store or the fake, never on a sleep.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_discord import DiscordAdapter
from backchannel_discord.adapter import _Backoff
from backchannel_discord.testing import FakeDiscord

from .conftest import FAST


class Lines(logging.Handler):
    """Every record of the adapter's log, and an event per phrase awaited."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.changed.set()

    def having(self, words: str) -> list[str]:
        return [line for line in self.lines if words in line]

    async def wait_for(self, words: str, timeout: float = 10.0) -> str:
        async def seen() -> str:
            while not self.having(words):
                self.changed.clear()
                await self.changed.wait()
            return self.having(words)[0]

        return await asyncio.wait_for(seen(), timeout)


@pytest.fixture
def lines(contract_context: ContractContext) -> Iterator[Lines]:
    handler = Lines()
    logger = contract_context.log.logger
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def started(
    fake: FakeDiscord, context: ContractContext, **settings: Any
) -> AsyncIterator[DiscordAdapter]:
    adapter = DiscordAdapter(context.account, {**fake.settings, **FAST, **settings})
    await adapter.start(context.bind(adapter))
    try:
        yield adapter
    finally:
        await adapter.stop()


def discord_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("discord-") and not t.done()]


async def break_discord_py(fake: FakeDiscord, how: str) -> None:
    if how == "not json":
        await fake.send_raw_frame("this is not json")  # JSONDecodeError in received_message
    else:
        await fake.dispatch("READY", {"v": 10})  # KeyError: 'session_id' in discord.py's loop


@pytest.mark.parametrize(("how", "error"), [("not json", "JSONDecode"), ("ready", "KeyError")])
async def test_receiving_restarts_after_discord_py_fails_and_catches_up_once(
    fake: FakeDiscord,
    contract_context: ContractContext,
    lines: Lines,
    how: str,
    error: str,
) -> None:
    async for adapter in started(fake, contract_context, reconnect_delay=0.5):
        before = await fake.post_message(fake.general, fake.alice, "before")
        await contract_context.wait_ingested(before["id"])

        await break_discord_py(fake, how)
        failed = await lines.wait_for("Discord stopped listening")
        assert error in failed and "reconnecting in 0.5s" in failed
        assert "\n" not in failed and fake.token not in failed
        # receiving is down: this one is never dispatched to a live session
        missed = await fake.post_message(fake.general, fake.alice, "while down")

        await fake.wait_until(lambda: fake.identifies == 2, what="a new IDENTIFY")
        await contract_context.wait_ingested(missed["id"])
        after = await fake.post_message(fake.general, fake.alice, "after")
        await contract_context.wait_ingested(after["id"])
        await lines.wait_for("Discord is listening again")

        # the missed message came from the catch-up (REST history has no `s`), stored once
        results = [
            r for r in contract_context.results if r.event and r.event.event_id == missed["id"]
        ]
        assert [r.status for r in results] == ["stored"]
        assert results[0].event is not None and (results[0].event.raw or {}).get("s") is None
        transcript = await contract_context.transcript(Address("test", fake.general))
        assert [m.text for m in transcript] == ["before", "while down", "after"]
        # and the restarted client sends
        await adapter.send(Outbound(Address("test", fake.general), "still answering"))
        await fake.wait_for_sent(lambda m: m["content"] == "still answering")
        assert fake.token not in "\n".join(lines.lines)


async def test_stop_during_the_backoff_ends_promptly_and_nothing_reconnects(
    fake: FakeDiscord, contract_context: ContractContext, lines: Lines
) -> None:
    async for adapter in started(fake, contract_context, reconnect_delay=30.0):
        await fake.send_raw_frame("not json")
        assert "reconnecting in 30s" in await lines.wait_for("Discord stopped listening")
        await fake.wait_until(lambda: not fake.connected, what="the failed socket closed")
        # while receiving waits to restart, sending still works (the failed client's HTTP)
        await adapter.send(Outbound(Address("test", fake.general), "during the backoff"))
        await fake.wait_for_sent(lambda m: m["content"] == "during the backoff")

        await asyncio.wait_for(adapter.stop(), 5.0)  # not after the 30 s wait
        assert discord_tasks() == []  # no supervisor left to reconnect
        assert (fake.identifies, fake.connected) == (1, False)


async def test_a_fatal_close_after_start_is_not_retried(
    fake: FakeDiscord, contract_context: ContractContext, lines: Lines
) -> None:
    async for adapter in started(fake, contract_context, reconnect_delay=0.01):
        receiving = adapter._client_task
        assert receiving is not None
        await fake.disconnect(code=4004)  # the token was reset in the portal
        line = await lines.wait_for("Discord stopped listening")
        assert "4004" in line and "not retried" in line
        # the supervisor has ended (no error left in it): nothing will ever reconnect
        await asyncio.wait_for(receiving, 5.0)
        assert fake.identifies == 1 and not fake.connected
        assert lines.having("reconnecting") == []


def test_the_backoff_doubles_up_to_its_cap_and_starts_over_after_a_stable_connection() -> None:
    backoff = _Backoff(1.0, 60.0)
    assert [backoff.next(0.0) for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff.next(59.0) == 60  # up, but not for long
    assert backoff.next(60.0) == 1  # stayed up a while: from the start again
    assert backoff.next(0.0) == 2


async def test_a_restart_that_cannot_connect_is_tried_again_later(
    fake: FakeDiscord, contract_context: ContractContext, lines: Lines
) -> None:
    async for _adapter in started(fake, contract_context, reconnect_delay=0.05):
        fake.refuse_connections(1)  # the Gateway is unreachable when the restart comes
        await fake.send_raw_frame("not json")
        assert "reconnecting in 0.05s" in await lines.wait_for("Discord stopped listening")
        failed = await lines.wait_for("Discord could not reconnect")
        assert "(attempt 1): could not reach Discord" in failed and "next try in 0.1s" in failed
        assert fake.token not in failed and "\n" not in failed
        await lines.wait_for("Discord is listening again")
        await fake.wait_until(lambda: fake.connected, what="a connection")
        assert (fake.refused, fake.identifies) == (1, 2)
        live = await fake.post_message(fake.general, fake.alice, "back")
        await contract_context.wait_ingested(live["id"])

"""Shared fixtures: a running FakeDiscord and a started DiscordAdapter against it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from backchannel.testing import ContractContext
from backchannel_discord import DiscordAdapter
from backchannel_discord.testing import FakeDiscord

#: adapter settings that keep the test run fast: no 2 s wait for guilds, short timeouts
FAST: dict[str, Any] = {
    "guild_ready_timeout": 0.05,
    "ready_timeout": 10.0,
    "request_timeout": 2.0,
    "heartbeat_timeout": 3.0,
}


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        yield server


@pytest.fixture
async def adapter(
    fake: FakeDiscord, contract_context: ContractContext
) -> AsyncIterator[DiscordAdapter]:
    started = DiscordAdapter(contract_context.account, {**fake.settings, **FAST})
    await started.start(contract_context.bind(started))
    yield started
    await started.stop()

"""Shared fixtures: a running FakeTelegram and its cast of users and chats."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from backchannel_telegram.testing import FakeTelegram


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server

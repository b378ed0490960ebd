"""Fixtures: a FakeRelay, peers on it, and settings for an adapter account."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.testing import FakeRelay, RelayPeer


@pytest.fixture
async def relay() -> AsyncIterator[FakeRelay]:
    async with FakeRelay() as fake:
        yield fake


@pytest.fixture
async def peer(relay: FakeRelay) -> AsyncIterator[RelayPeer]:
    async with RelayPeer(relay.url) as agent:
        await agent.publish_keys()
        yield agent


def account_settings(relay: FakeRelay, seed: bytes | None = None, **extra: Any) -> dict[str, Any]:
    """Settings of a test account on `relay`: fast polling, short timeouts."""
    return {
        "identity": (seed or os.urandom(32)).hex(),
        "relay_url": relay.url,
        "poll_interval": 0.05,
        "request_timeout": 2.0,
        "prekey_pool": 4,
        # kept openings are copied at start; later copies on their own would race the
        # faults a test injects for the copy before its next message
        "opening_retry": 3600.0,
        **extra,
    }


@pytest.fixture
def settings_for(relay: FakeRelay) -> Any:
    return lambda seed=None, **extra: account_settings(relay, seed, **extra)


@pytest.fixture
async def account(
    contract_context: ContractContext, relay: FakeRelay, settings_for: Any
) -> AsyncIterator[TinyplaceAdapter]:
    """A started adapter of the contract context's account, on the fake relay."""
    adapter = TinyplaceAdapter(contract_context.account, settings_for())
    await adapter.start(contract_context.bind(adapter))
    yield adapter
    await adapter.stop()


async def spawn_ready(script: Path, *args: str, what: str) -> asyncio.subprocess.Process:
    """Start `script` in its own Python process; return it once it prints READY."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    if line.strip() != b"READY":
        _, err = await process.communicate()
        raise AssertionError(f"{what} did not start: {line!r} {err.decode()[-2000:]}")
    return process

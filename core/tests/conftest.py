"""Fixtures shared by the core tests (the backchannel pytest plugin provides the rest)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from backchannel.hookspecs import hookimpl
from backchannel.plugins import get_plugin_manager
from backchannel.testing.fake_channel import FakeChannelAdapter, FakePlatform


@pytest.fixture
def platform() -> FakePlatform:
    """The in-memory platform behind channel "fake"."""
    return FakePlatform()


@pytest.fixture
def fake_channel_plugin(platform: FakePlatform) -> Iterator[None]:
    """Register channel "fake" on the plugin manager for one test (datasette style)."""

    class FakePlugin:
        @hookimpl
        def register_channels(self, register: Any) -> None:
            def make(account: str, settings: Any) -> FakeChannelAdapter:
                settings.get("token")  # like a real channel, "fake" takes a token (secret tests)
                return FakeChannelAdapter(account, settings, platform)

            register("fake", make)

    pm = get_plugin_manager()
    pm.register(FakePlugin(), name="test-fake-channel")
    yield
    pm.unregister(name="test-fake-channel")

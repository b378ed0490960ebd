"""Discord channel for backchannel, on discord.py.

Registers the ``discord`` channel. The adapter is `DiscordAdapter`; the
loopback fake for tests is `backchannel_discord.testing.FakeDiscord`.
"""

from __future__ import annotations

from typing import Any

from backchannel.hookspecs import hookimpl

from .adapter import DiscordAdapter, DiscordStartError
from .normalize import normalize_payload

__all__ = ["DiscordAdapter", "DiscordStartError", "normalize_payload", "register_channels"]


@hookimpl
def register_channels(register: Any) -> None:
    """Register the ``discord`` channel."""
    register("discord", DiscordAdapter)

"""Discord channel for backchannel, on discord.py.

Registers the ``discord`` channel. The adapter is `DiscordAdapter`; the
loopback fake for tests is `backchannel_discord.testing.FakeDiscord`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backchannel.hookspecs import hookimpl
from backchannel.lazy import lazy_exports

if TYPE_CHECKING:
    from .adapter import DiscordAdapter, DiscordStartError
    from .normalize import normalize_payload

__all__ = ["DiscordAdapter", "DiscordStartError", "normalize_payload", "register_channels"]

# discord.py takes most of a second to import: only an account that uses it pays
__getattr__ = lazy_exports(
    __name__,
    {
        "DiscordAdapter": ".adapter",
        "DiscordStartError": ".adapter",
        "normalize_payload": ".normalize",
    },
)


@hookimpl
def register_channels(register: Any) -> None:
    """Register the ``discord`` channel."""
    register("discord", "backchannel_discord.adapter:DiscordAdapter")

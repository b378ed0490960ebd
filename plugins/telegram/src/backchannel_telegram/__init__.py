"""backchannel-telegram: a Telegram bot account as a backchannel channel (Bot API over aiohttp)."""

from __future__ import annotations

from backchannel.hookspecs import hookimpl

from .adapter import TelegramAdapter
from .normalize import normalize_update

__all__ = ["TelegramAdapter", "normalize_update", "register_channels"]


@hookimpl
def register_channels(register: object) -> None:
    """Register the `telegram` channel."""
    register("telegram", TelegramAdapter)  # type: ignore[operator]

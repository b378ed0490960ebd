"""backchannel-telegram: a Telegram bot account as a backchannel channel (Bot API over aiohttp)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backchannel.hookspecs import hookimpl
from backchannel.lazy import lazy_exports

if TYPE_CHECKING:
    from .adapter import TelegramAdapter
    from .normalize import normalize_update

__all__ = [
    "TelegramAdapter",
    "normalize_update",
    "register_channels",
]

# aiohttp loads only when a telegram account is built
__getattr__ = lazy_exports(
    __name__, {"TelegramAdapter": ".adapter", "normalize_update": ".normalize"}
)


@hookimpl
def register_channels(register: Any) -> None:
    """Register the `telegram` channel."""
    register("telegram", "backchannel_telegram.adapter:TelegramAdapter")

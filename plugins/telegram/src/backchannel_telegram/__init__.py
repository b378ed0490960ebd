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
    "configure_switchboard",
    "normalize_update",
    "register_channels",
    "route_business_owners",
]

# aiohttp loads only when a telegram account is built
__getattr__ = lazy_exports(
    __name__, {"TelegramAdapter": ".adapter", "normalize_update": ".normalize"}
)


@hookimpl
def register_channels(register: Any) -> None:
    """Register the `telegram` channel."""
    register("telegram", "backchannel_telegram.adapter:TelegramAdapter")


@hookimpl
def configure_switchboard(board: Any, config: Any) -> None:
    """Keep a Telegram Business owner's own messages from starting runs (see
    `route_business_owners`)."""
    route_business_owners(board)


def route_business_owners(board: Any) -> None:
    """Give every Telegram account of `board` that receives business messages the owner
    router: a message the business owner writes in a business chat themselves is
    stored and shown to the agent, but starts no run (the person is answering the
    customer). `backchannel serve` does this through the `configure_switchboard` hook;
    call it yourself on a Switchboard you build in code.
    """
    from .business import owner_router

    for name, account in board.accounts.items():
        adapter = account.adapter
        if getattr(adapter, "channel", None) == "telegram" and getattr(
            adapter, "routes_business_owners", False
        ):
            board.add_inbound_router(name, owner_router(account.binding.policy.may_reach))

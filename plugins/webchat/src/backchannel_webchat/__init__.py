"""backchannel's built-in web chat channel: a page and a websocket on the switchboard's server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backchannel.hookspecs import hookimpl
from backchannel.lazy import lazy_exports

if TYPE_CHECKING:
    from .adapter import WebchatAdapter
    from .settings import WebchatSettings

__all__ = ["WebchatAdapter", "WebchatSettings", "register_channels"]

# aiohttp's web server loads only when a web chat account is built
__getattr__ = lazy_exports(__name__, {"WebchatAdapter": ".adapter", "WebchatSettings": ".settings"})


@hookimpl
def register_channels(register: Any) -> None:
    """Register the "webchat" channel."""
    register("webchat", "backchannel_webchat.adapter:WebchatAdapter")

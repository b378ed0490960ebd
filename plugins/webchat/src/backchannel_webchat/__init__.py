"""backchannel's built-in web chat channel: a page and a websocket on the switchboard's server."""

from __future__ import annotations

from typing import Any

from backchannel.hookspecs import hookimpl

from .adapter import WebchatAdapter
from .settings import WebchatSettings

__all__ = ["WebchatAdapter", "WebchatSettings", "register_channels"]


@hookimpl
def register_channels(register: Any) -> None:
    """Register the "webchat" channel."""
    register("webchat", WebchatAdapter)

"""Slack for backchannel: Socket Mode or the Events API in, the Web API out.

Registers the ``slack`` channel. See docs/channels/slack.md.
"""

from __future__ import annotations

from typing import Any

from backchannel.hookspecs import hookimpl

from .adapter import SlackAdapter
from .normalize import BotIdentity, normalize_payload

__all__ = ["BotIdentity", "SlackAdapter", "normalize_payload"]


@hookimpl
def register_channels(register: Any) -> None:
    """Register the ``slack`` channel."""
    register("slack", SlackAdapter)

"""Slack for backchannel: Socket Mode or the Events API in, the Web API out.

Registers the ``slack`` channel. See docs/channels/slack.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backchannel.hookspecs import hookimpl
from backchannel.lazy import lazy_exports

if TYPE_CHECKING:
    from .adapter import SlackAdapter
    from .normalize import BotIdentity, normalize_payload

__all__ = ["BotIdentity", "SlackAdapter", "normalize_payload"]

# slack-sdk and aiohttp load only when a slack account is built
__getattr__ = lazy_exports(
    __name__,
    {"SlackAdapter": ".adapter", "BotIdentity": ".normalize", "normalize_payload": ".normalize"},
)


@hookimpl
def register_channels(register: Any) -> None:
    """Register the ``slack`` channel."""
    register("slack", "backchannel_slack.adapter:SlackAdapter")

"""The owner side of the MCP server: who may steer this session, and the owner plugin's API.

`OwnerGate` is the sender check every pushed message and every permission
verdict passes: the owner's user id, in the owner's chat, on the owner's
account (never chat membership: in a group, a member who is not the owner
must never steer). It comes from `[mcp] owner_account / owner_chat /
owner_user`.

`OwnerApi` is the shape of the owner plugin's API (issue 12,
`backchannel_owner.api`): notify, inbox, reply, mark delivered. The MCP
owner tools and the channel's routed-reply push use it when the owner plugin
is installed and configured; `load_owner_api` returns None otherwise.
"""

from __future__ import annotations

from typing import Protocol

from attrs import frozen
from backchannel.config import Config
from backchannel.model import Message

__all__ = ["OwnerApi", "OwnerGate", "OwnerMessage", "load_owner_api", "owner_gate"]


@frozen
class OwnerGate:
    """The owner's account, chat with the bot, and user id on that channel."""

    account: str
    chat: str
    user: str

    def admits(self, account: str, chat: str, message: Message) -> bool:
        """True when `message` was written by the owner, in the owner's chat, on the owner's account."""
        return (
            message.direction == "in"
            and not message.held
            and account == self.account
            and chat == self.chat
            and message.sender.id == self.user
        )


@frozen
class OwnerMessage:
    """One owner message routed to this session by the owner plugin, not yet delivered."""

    id: str
    text: str
    conversation: str
    sender: str
    message_seq: int | None = None
    replying_to: str | None = None


class OwnerApi(Protocol):
    """What the MCP server needs from the owner plugin, for one calling session."""

    session_name: str
    mark: str

    async def notify(self, text: str, *, needs_answer: bool) -> str:
        """Send the owner a message from this session; return a sentence with its id."""

    async def inbox_text(self) -> str:
        """Return this session's undelivered owner messages as text (and mark them delivered)."""

    async def reply(self, id: str, text: str) -> str:
        """Answer the owner's message `id`; return a sentence saying what happened."""

    async def pending(self) -> list[OwnerMessage]:
        """Return this session's undelivered owner messages, oldest first."""

    async def mark_delivered(self, id: str) -> None:
        """Record that owner message `id` reached the session."""


def owner_gate(config: Config) -> OwnerGate | None:
    """Return the gate from `[mcp]`, or None when the owner is not fully configured."""
    mcp = config.mcp
    if mcp.owner_account and mcp.owner_chat and mcp.owner_user:
        return OwnerGate(mcp.owner_account, mcp.owner_chat, mcp.owner_user)
    return None


def load_owner_api(config: Config) -> OwnerApi | None:
    """Return the owner plugin's API for this session, or None when it is not installed."""
    try:
        from backchannel_owner import api
    except ImportError:
        return None
    factory = getattr(api, "mcp_owner_api", None)
    if factory is None:
        return None
    result: OwnerApi | None = factory(config)
    return result

"""The owner side of the MCP server, through the owner plugin (`backchannel_owner.api`).

The owner plugin knows who the owner is (``[owner] account, chat, user``),
which session is calling (the MCP server's ancestor is the Claude Code
process), routes the owner's ``#id`` replies and ``yes|no <id>`` permission
answers into that session's inbox (owner id and chat checked in `serve`), and
corrects unknown ids. The MCP server only reads that inbox and hands it on.

`OwnerApi` is what the MCP server needs; `OwnerPluginApi` implements it over
`backchannel_owner.api`; tests use a double of the same shape.
`OwnerGate` is the owner plugin's sender rule, applied to `--watch` pushes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from attrs import field, frozen
from backchannel.config import Config
from backchannel.model import Message

__all__ = [
    "OwnerApi",
    "OwnerGate",
    "OwnerMessage",
    "OwnerPluginApi",
    "load_owner_api",
    "owner_gate",
]


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
    """One item waiting in this session's inbox: an owner message, or a permission answer.

    kind "message": `text` is what the owner wrote. kind "permission": `meta`
    has ``request_id`` and ``behavior`` ("allow" or "deny").
    """

    id: str
    text: str
    kind: str = "message"
    replying_to: str | None = None
    meta: Mapping[str, Any] = field(factory=dict)


class OwnerApi(Protocol):
    """What the MCP server needs from the owner plugin, for one calling session."""

    session_name: str
    account: str
    chat: str

    async def notify(self, text: str, *, needs_answer: bool) -> str:
        """Send the owner a message from this session; return a sentence with its id."""

    async def reply(self, id: str, text: str) -> str:
        """Answer the owner's message `id`; return a sentence saying what happened."""

    async def request_permission(self, request_id: str, tool_name: str, description: str) -> str:
        """Forward a permission prompt to the owner; return the id they answer with."""

    def pending(self) -> list[OwnerMessage]:
        """Return this session's waiting inbox items, oldest first."""

    def mark_attempt(self, id: str) -> None:
        """Count a delivery attempt of item `id` (before it is shown)."""

    def mark_delivered(self, id: str) -> None:
        """Record that item `id` reached the session."""


class OwnerPluginApi:
    """`OwnerApi` over `backchannel_owner.api` for the session that runs this process."""

    def __init__(self, config: Config, identity: Any | None = None):
        from backchannel_owner import api

        self._api = api
        self.config = config
        self.identity = identity or api.resolve_identity()
        self.session_name: str = self.identity.name
        settings = _owner_settings(config)
        self.account: str = settings.account
        self.chat: str = settings.chat
        self._items: dict[str, Any] = {}

    async def notify(self, text: str, *, needs_answer: bool) -> str:
        return self._said(
            await self._call(self._api.notify, text, needs_answer=needs_answer), "sent"
        )

    async def reply(self, id: str, text: str) -> str:
        return self._said(await self._call(self._api.notify, text, reply_to=id), "answered")

    async def request_permission(self, request_id: str, tool_name: str, description: str) -> str:
        prompt_id: str = await self._api.request_permission(
            self.config, self.identity, request_id, tool_name, description
        )
        return prompt_id

    def pending(self) -> list[OwnerMessage]:
        items = self._api.inbox(self.identity.session_id)
        self._items = {item.id: item for item in items}
        return [
            OwnerMessage(item.id, item.text, item.kind, item.parent_id, dict(item.meta))
            for item in items
        ]

    def mark_attempt(self, id: str) -> None:
        if id in self._items:
            self._api.mark_attempt(self._items[id])

    def mark_delivered(self, id: str) -> None:
        item = self._items.pop(id, None)
        if item is not None:
            self._api.mark_delivered(item)

    async def _call(self, function: Any, text: str, **kwargs: Any) -> Any:
        try:
            return await function(self.config, text, identity=self.identity, **kwargs)
        except self._api.OwnerError as error:
            return error

    @staticmethod
    def _said(result: Any, verb: str) -> str:
        if isinstance(result, Exception):
            return f"error: {result}"
        if result.status == "sent":
            return f"{verb}: your owner sees it as #{result.id} (their answer reaches you later)"
        if result.status == "failed":
            return f"NOT delivered to your owner: {result.reason}"
        return (
            f"delivery to your owner uncertain ({result.reason}): it may or may not have"
            " arrived; do not resend unless asked"
        )


def owner_gate(config: Config) -> OwnerGate | None:
    """Return the owner plugin's sender rule from ``[owner]``, or None without a user."""
    if "owner" not in config.sections:
        return None
    settings = _owner_settings(config)
    if settings.user is None:
        return None
    return OwnerGate(settings.account, settings.chat, settings.user)


def load_owner_api(config: Config) -> OwnerApi | None:
    """Return the owner API for the calling session, or None without the plugin or ``[owner]``."""
    if "owner" not in config.sections:
        return None
    try:
        import backchannel_owner.api  # noqa: F401
    except ImportError:
        return None
    return OwnerPluginApi(config)


def _owner_settings(config: Config) -> Any:
    from backchannel_owner.settings import OwnerSettings

    return OwnerSettings.from_config(config)

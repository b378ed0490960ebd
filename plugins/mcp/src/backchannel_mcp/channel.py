"""Claude Code channel: push the owner's messages into a running session, relay permission prompts.

Claude Code treats an MCP server that declares the experimental
`claude/channel` capability as a channel: the server pushes
`notifications/claude/channel` events ({content, meta}) into the session.
With `claude/channel/permission` it also receives
`notifications/claude/channel/permission_request` ({request_id, tool_name,
description, input_preview}) and answers with
`notifications/claude/channel/permission` ({request_id, behavior}).
Reference: https://code.claude.com/docs/en/channels-reference

What is pushed, and when:
- each owner message the owner plugin routed to this session (its inbox:
  `serve` checked the owner's id and chat), with an attempt counted first
  and marked delivered only after the notification was written;
- with `--watch KEY`, each new message in that conversation that passes the
  owner gate (owner's user id, owner's chat, owner's account), its cursor
  advanced (durably, in the store) only after the notification was written;
  a message the owner plugin routed (meta ``routed``: a reply to a session,
  a prompt's answer) is not pushed again, it went through the inbox.
A message that fails the gate is never pushed: a channel is a prompt-injection
path into a live coding agent.

Permission relay: each request is forwarded to the owner through the owner
plugin (`request_permission`); `serve` turns only the owner's exact
`yes <id>` / `no <id>`, or a bare `yes` / `no` replying to the prompt itself,
into a permission answer in this session's inbox (anything else stays an
ordinary message; unknown or expired ids get a correction there), and the
channel hands each answer to Claude Code.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
from backchannel.config import Config
from backchannel.framing import format_message
from backchannel.model import Conversation
from backchannel.store import Store
from mcp_types import NotificationParams
from pydantic import Field

from .owner import OwnerApi, OwnerGate
from .reading import find_conversation

__all__ = [
    "CHANNEL_EVENT",
    "PERMISSION_REQUEST",
    "PERMISSION_VERDICT",
    "Channel",
    "PermissionRequest",
]

log = logging.getLogger("backchannel.mcp.channel")

CHANNEL_EVENT = "notifications/claude/channel"
PERMISSION_REQUEST = "notifications/claude/channel/permission_request"
PERMISSION_VERDICT = "notifications/claude/channel/permission"

_REQUEST_ID = re.compile(r"\A[a-km-z]{5}\Z")
#: store state lives under this pseudo-account
_STATE = "mcp"

Write = Callable[[str, Mapping[str, Any]], Awaitable[None]]


class PermissionRequest(NotificationParams):
    """Params of `notifications/claude/channel/permission_request`."""

    # Claude Code's extension uses snake_case on the wire, unlike MCP's camelCase
    request_id: str = Field(alias="request_id")
    tool_name: str = Field(alias="tool_name")
    description: str = Field(default="", alias="description")
    input_preview: str = Field(default="", alias="input_preview")


class Channel:
    """Pushes gated owner messages to one MCP session and relays its permission prompts."""

    def __init__(
        self,
        config: Config,
        store: Store,
        gate: OwnerGate,
        owner_api: OwnerApi,
        *,
        watch: Sequence[str] = (),
        poll_interval: float = 0.2,
    ):
        self.config = config
        self.store = store
        self.gate = gate
        self.owner_api = owner_api
        self.session_name = owner_api.session_name
        self.watch_keys = list(watch)
        self.poll_interval = poll_interval
        self.pushed = 0
        self.refused = 0
        self._write: Write | None = None
        self._wake = asyncio.Event()

    # the push loop -------------------------------------------------------------------
    async def run(self, write: Write) -> None:
        """Push until cancelled; `write` sends one notification to the client."""
        watched = await self.attach(write)
        while True:
            try:
                await self.poll_once(watched)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log.info("the client went away: channel stopped")
                return
            except Exception as error:  # the store was busy, a send failed: try again next poll
                log.warning("channel poll failed (%s: %s); retrying", type(error).__name__, error)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
            except TimeoutError:
                pass

    async def attach(self, write: Write) -> list[Conversation]:
        """Start writing to a client; return the watched conversations (cursors start at their end)."""
        self._write = write
        watched = [await find_conversation(self.store, key) for key in self.watch_keys]
        for conversation in watched:
            await self._start_cursor(conversation)
        return watched

    async def poll_once(self, watched: Sequence[Conversation]) -> None:
        """Push what is new: the owner's routed messages and permission answers, watched messages."""
        owner_key = f"{self.owner_api.account}/{self.owner_api.chat}"
        for item in self.owner_api.pending():
            self.owner_api.mark_attempt(item.id)
            if item.kind == "permission":
                assert self._write is not None
                await self._write(
                    PERMISSION_VERDICT,
                    {
                        "request_id": str(item.meta.get("request_id", "")),
                        "behavior": "allow" if item.meta.get("behavior") == "allow" else "deny",
                    },
                )
            else:
                about = f" (replying to #{item.replying_to})" if item.replying_to else ""
                await self._push(
                    f"[#{item.id}] owner{about}: {item.text}",
                    channel=self._channel_of(self.owner_api.account),
                    conversation=owner_key,
                    sender="owner",
                    message_id=item.id,
                )
            self.owner_api.mark_delivered(item.id)
        for conversation in watched:
            await self._drain(conversation)

    async def _drain(self, conversation: Conversation) -> None:
        cursor = await self._cursor(conversation)
        rows = await self.store.messages_after(conversation.id, cursor, 100)
        address = conversation.address
        for message in rows:
            if message.direction == "in" and message.meta.get("routed"):
                # the owner plugin took it (a reply to a session, a prompt's answer): it reaches
                # its session through the inbox, never twice
                log.debug("not pushed: %s #%s was routed to a session", address.key, message.seq)
            elif message.direction == "in":
                if not self.gate.admits(address.account, address.chat, message):
                    self.refused += 1
                    log.debug("not pushed: %s #%s fails the owner gate", address.key, message.seq)
                else:
                    await self._push(
                        format_message(message)["content"],
                        channel=self._channel_of(address.account),
                        conversation=address.key,
                        sender=message.sender.label,
                        message_id=str(message.seq),
                    )
            await self._advance(conversation, message.seq)

    async def _push(self, content: str, **meta: str) -> None:
        assert self._write is not None
        await self._write(CHANNEL_EVENT, {"content": content, "meta": meta})
        self.pushed += 1

    # permission relay ----------------------------------------------------------------
    async def permission_requested(self, request: PermissionRequest) -> None:
        """Forward one permission prompt to the owner (through the owner plugin)."""
        request_id = request.request_id.lower()
        if not _REQUEST_ID.match(request_id):
            log.warning("permission request with a malformed id %r ignored", request.request_id)
            return
        what = " ".join((request.input_preview or request.description).split())[:200]
        prompt_id = await self.owner_api.request_permission(request_id, request.tool_name, what)
        log.info("permission request %s sent to the owner as #%s", request_id, prompt_id)
        self._wake.set()

    # cursors -------------------------------------------------------------------------
    async def _start_cursor(self, conversation: Conversation) -> None:
        key = self._cursor_key(conversation)
        if await self.store.get_state(_STATE, key) is None:
            await self.store.set_state(_STATE, key, str(conversation.last_seq))

    async def _cursor(self, conversation: Conversation) -> int:
        stored = await self.store.get_state(_STATE, self._cursor_key(conversation))
        return int(stored) if stored else 0

    async def _advance(self, conversation: Conversation, seq: int) -> None:
        await self.store.set_state(_STATE, self._cursor_key(conversation), str(seq))

    def _cursor_key(self, conversation: Conversation) -> str:
        return f"channel:{self.session_name}:{conversation.id}"

    def _channel_of(self, account: str) -> str:
        found = self.config.accounts.get(account)
        return found.channel if found else account

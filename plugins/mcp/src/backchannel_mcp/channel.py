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
- each owner message the owner plugin routed to this session (`OwnerApi.pending`),
  marked delivered only after the notification was written;
- with `--watch KEY`, each new message in that conversation that passes the
  owner gate (owner's user id, owner's chat, owner's account), its cursor
  advanced (durably, in the store) only after the notification was written.
A message that fails the gate is never pushed: a channel is a prompt-injection
path into a live coding agent.

Permission relay: each request is forwarded to the owner's chat; only the
owner's exact `yes <id>` / `no <id>` replies become verdicts; anything else
stays an ordinary message; an unknown or expired id gets a correction.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
from backchannel.config import Config
from backchannel.framing import format_message
from backchannel.model import Address, Conversation, Message
from backchannel.store import Store
from mcp_types import NotificationParams
from pydantic import Field

from .owner import OwnerApi, OwnerGate
from .reading import find_conversation
from .sending import SendOutcome, send_to_conversation

__all__ = [
    "CHANNEL_EVENT",
    "PERMISSION_REQUEST",
    "PERMISSION_VERDICT",
    "VERDICT",
    "Channel",
    "PermissionRequest",
]

log = logging.getLogger("backchannel.mcp.channel")

CHANNEL_EVENT = "notifications/claude/channel"
PERMISSION_REQUEST = "notifications/claude/channel/permission_request"
PERMISSION_VERDICT = "notifications/claude/channel/permission"

#: the owner's exact verdict: yes|no and an id of five letters a-z without l (Claude Code's alphabet)
VERDICT = re.compile(r"^\s*(yes|no)\s+([a-km-z]{5})\s*$", re.IGNORECASE)
_REQUEST_ID = re.compile(r"^[a-km-z]{5}$")
#: store state lives under this pseudo-account
_STATE = "mcp"

Write = Callable[[str, Mapping[str, Any]], Awaitable[None]]
Send = Callable[..., Awaitable[SendOutcome]]


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
        *,
        session_name: str,
        mark: str = "🔐",
        watch: Sequence[str] = (),
        owner_api: OwnerApi | None = None,
        send: Send | None = None,
        poll_interval: float = 0.2,
        permission_ttl: float = 600.0,
    ):
        self.config = config
        self.store = store
        self.gate = gate
        self.session_name = session_name
        self.mark = mark
        self.watch_keys = list(watch)
        self.owner_api = owner_api
        self.send = send or send_to_conversation
        self.poll_interval = poll_interval
        self.permission_ttl = permission_ttl
        #: open permission requests of this session: id -> expiry (time.time())
        self.open_requests: dict[str, float] = {}
        self.pushed = 0
        self.refused = 0
        self._write: Write | None = None
        self._owner_cursor: int | None = None
        self._owner_conversation: Conversation | None = None
        self._wake = asyncio.Event()
        self._watched_ids: set[int] = set()

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
        self._watched_ids = {c.id for c in watched}
        for conversation in watched:
            await self._start_cursor(conversation)
        return watched

    async def poll_once(self, watched: Sequence[Conversation]) -> None:
        """Push what is new: routed owner messages, watched messages, permission verdicts."""
        if self.owner_api is not None:
            for routed in await self.owner_api.pending():
                await self._push(
                    routed.text,
                    channel=self._channel_of(self.gate.account),
                    conversation=routed.conversation,
                    sender=routed.sender,
                    message_id=routed.id,
                )
                await self.owner_api.mark_delivered(routed.id)
        owner = await self._owner()
        for conversation in watched:
            if owner is not None and conversation.id == owner.id:
                continue
            await self._drain(conversation, push=True)
        if owner is not None:
            await self._drain(owner, push=any(c.id == owner.id for c in watched))

    async def _drain(self, conversation: Conversation, *, push: bool) -> None:
        cursor = await self._cursor(conversation)
        rows = await self.store.messages_after(conversation.id, cursor, 100)
        address = conversation.address
        for message in rows:
            if message.direction == "in":
                if not self.gate.admits(address.account, address.chat, message):
                    self.refused += 1
                    log.debug("not pushed: %s #%s fails the owner gate", address.key, message.seq)
                else:
                    verdict = VERDICT.match(message.text) if self._is_owner(conversation) else None
                    if verdict is not None:
                        await self._verdict(conversation, message, verdict)
                    elif push:
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
        """Forward one permission prompt to the owner's chat."""
        request_id = request.request_id.lower()
        if not _REQUEST_ID.match(request_id):
            log.warning("permission request with a malformed id %r ignored", request.request_id)
            return
        expires = time.time() + self.permission_ttl
        self.open_requests[request_id] = expires
        await self.store.set_state(
            _STATE,
            f"permission:{request_id}",
            json.dumps({"session": self.session_name, "expires": expires}),
        )
        preview = " ".join((request.input_preview or request.description).split())[:200]
        what = f"{request.tool_name}: `{preview}`" if preview else request.tool_name
        text = (
            f'{self.mark} session "{self.session_name}" wants to run {what}'
            f" — reply `yes {request_id}` or `no {request_id}`"
        )
        owner = await self._owner(create=True)
        assert owner is not None
        outcome = await self.send(self.config, owner, text)
        if outcome.state != "sent":
            log.warning("permission prompt %s not delivered: %s", request_id, outcome.describe())
        self._wake.set()

    async def _verdict(self, owner: Conversation, message: Message, verdict: re.Match[str]) -> None:
        word, request_id = verdict.group(1).lower(), verdict.group(2).lower()
        expires = self.open_requests.get(request_id)
        if expires is not None and expires >= time.time():
            assert self._write is not None
            await self._write(
                PERMISSION_VERDICT,
                {"request_id": request_id, "behavior": "allow" if word == "yes" else "deny"},
            )
            del self.open_requests[request_id]
            await self.store.set_state(_STATE, f"permission:{request_id}", None)
            return
        self.open_requests.pop(request_id, None)
        if await self._open_elsewhere(request_id):
            return  # another session's request: that session answers it
        # one correction per owner message, whichever session sees it first
        corrected = f"corrected:{owner.id}:{message.seq}"
        if await self.store.get_state(_STATE, corrected):
            return
        await self.store.set_state(_STATE, corrected, "1")
        await self.send(
            self.config,
            owner,
            f"`{request_id}` is not an open permission request (it expired, was answered"
            " already, or never existed) — nothing was approved or denied",
            reply_to=message.seq,
        )

    async def _open_elsewhere(self, request_id: str) -> bool:
        raw = await self.store.get_state(_STATE, f"permission:{request_id}")
        if not raw:
            return False
        try:
            record = json.loads(raw)
        except ValueError:
            return False
        return bool(
            record.get("session") != self.session_name
            and float(record.get("expires", 0)) >= time.time()
        )

    # cursors -------------------------------------------------------------------------
    async def _owner(self, *, create: bool = False) -> Conversation | None:
        if self._owner_conversation is None:
            address = Address(self.gate.account, self.gate.chat)
            found = await self.store.find_conversation(address)
            if found is None and create:
                found = await self.store.ensure_conversation(address)
            if found is None:
                return None
            self._owner_conversation = found
            self._owner_cursor = found.last_seq
        return self._owner_conversation

    def _is_owner(self, conversation: Conversation) -> bool:
        return (
            self._owner_conversation is not None and conversation.id == self._owner_conversation.id
        )

    async def _start_cursor(self, conversation: Conversation) -> None:
        key = self._cursor_key(conversation)
        if await self.store.get_state(_STATE, key) is None:
            await self.store.set_state(_STATE, key, str(conversation.last_seq))

    async def _cursor(self, conversation: Conversation) -> int:
        if conversation.id not in self._watched_ids:
            return self._owner_cursor or 0
        stored = await self.store.get_state(_STATE, self._cursor_key(conversation))
        return int(stored) if stored else 0

    async def _advance(self, conversation: Conversation, seq: int) -> None:
        if conversation.id in self._watched_ids:
            await self.store.set_state(_STATE, self._cursor_key(conversation), str(seq))
        else:
            self._owner_cursor = seq

    def _cursor_key(self, conversation: Conversation) -> str:
        return f"channel:{self.session_name}:{conversation.id}"

    def _channel_of(self, account: str) -> str:
        found = self.config.accounts.get(account)
        return found.channel if found else account

"""Sending for the MCP tools: through a running `serve` when there is one, else directly.

The one process that owns an account's connection should do the sending, so
a send is first handed to `serve` over its control socket
(`backchannel.control`). When no `serve` answers, the account's adapter is
started in this process for the duration of the send, exactly as
`backchannel send` does. Either way the outbox records the send before it
goes out and the outcome is one of sent / failed / uncertain.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from attrs import frozen
from backchannel.config import Config
from backchannel.model import Conversation, Outbound

__all__ = ["REACT_OP", "SendOutcome", "react_op", "send_to_conversation"]

log = logging.getLogger("backchannel.mcp")

#: the control operation this plugin adds to `serve` for reactions
REACT_OP = "mcp.react"
#: how long a send handed to `serve` may take before it is reported uncertain
SEND_TIMEOUT = 60.0


@frozen
class SendOutcome:
    """What became of one send: state sent / failed / uncertain, and where it went."""

    state: str
    conversation: str
    seq: int | None = None
    platform_message_id: str | None = None
    reason: str | None = None
    via: str = "direct"
    kind: str = "message"

    def describe(self) -> str:
        """A sentence the model can read, worded as the run tools word it."""
        what = "reaction" if self.kind == "reaction" else "message"
        if self.state == "sent":
            if self.kind == "reaction":
                return f"reaction done in {self.conversation}"
            return f"sent to {self.conversation} as #{self.seq}"
        if self.state == "failed":
            return f"{what} to {self.conversation} NOT delivered: {self.reason}"
        return (
            f"delivery to {self.conversation} uncertain ({self.reason}): the {what} may or may"
            " not have arrived; read the conversation before trying again, and do not resend"
            " unless asked"
        )


async def send_to_conversation(
    config: Config,
    conversation: Conversation,
    text: str,
    *,
    reply_to: int | None = None,
    react_to: int | None = None,
) -> SendOutcome:
    """Send `text` (or, with `react_to`, the emoji `text`) to `conversation`."""
    handed = await _hand_to_serve(config, conversation, text, reply_to, react_to)
    if handed is not None:
        return handed
    return await _send_directly(config, conversation, text, reply_to, react_to)


async def _hand_to_serve(
    config: Config,
    conversation: Conversation,
    text: str,
    reply_to: int | None,
    react_to: int | None,
) -> SendOutcome | None:
    """Return the outcome from a running `serve`, or None when none answers."""
    from backchannel import control

    key = conversation.address.key
    args: dict[str, Any] = {"conversation": key, "text": text}
    if react_to is not None:
        op, args["seq"] = REACT_OP, react_to
    else:
        op = "send"
        if reply_to is not None:
            args["reply_to"] = reply_to
    try:
        answer = await control.call(config, op, timeout=SEND_TIMEOUT, **args)
    except control.ControlUnavailable:
        log.info("no running serve answers: sending to %s directly", key)
        return None
    except control.ControlError as error:
        return SendOutcome("failed", key, reason=str(error), via="serve", kind=_kind(react_to))
    except TimeoutError:
        return SendOutcome(
            "uncertain",
            key,
            reason=f"serve did not answer within {SEND_TIMEOUT:g}s",
            via="serve",
            kind=_kind(react_to),
        )
    return SendOutcome(
        state=str(answer.get("state", "uncertain")),
        conversation=key,
        seq=answer.get("seq"),
        platform_message_id=answer.get("platform_message_id"),
        reason=answer.get("reason"),
        via="serve",
        kind=_kind(react_to),
    )


async def react_op(board: Any, args: Mapping[str, Any]) -> Mapping[str, Any]:
    """Control op `mcp.react` {conversation, seq, text}: react inside `serve`; return the outcome."""
    from backchannel.control import resolve_conversation

    conversation = await resolve_conversation(board, str(args["conversation"]))
    seq = int(args["seq"])
    target = await board.store.message(conversation.id, seq)
    if target is None or target.platform_message_id is None:
        return {"state": "failed", "seq": seq, "reason": f"#{seq} has no platform id"}
    account = board.accounts[conversation.address.account]
    result = await account.deliverer.deliver(
        conversation,
        Outbound(
            conversation.address,
            str(args["text"]),
            kind="reaction",
            target=target.platform_message_id,
        ),
    )
    return {"state": result.entry.status, "seq": seq, "reason": result.entry.reason}


def _kind(react_to: int | None) -> str:
    return "message" if react_to is None else "reaction"


async def _send_directly(
    config: Config,
    conversation: Conversation,
    text: str,
    reply_to: int | None,
    react_to: int | None,
) -> SendOutcome:
    from backchannel.app import build_switchboard

    account = conversation.address.account
    board = await build_switchboard(
        config, accounts=[account], agents=_idle_agents(config), serve_http=False
    )
    try:
        # only the adapter: starting the board would recover and run agents
        await board.start_accounts([account])
        address = conversation.address
        if react_to is not None:
            target = await board.store.message(conversation.id, react_to)
            outbound = Outbound(
                address,
                text,
                kind="reaction",
                target=target.platform_message_id if target else None,
            )
        elif reply_to is not None:
            parent = await board.store.message(conversation.id, reply_to)
            outbound = Outbound(
                address, text, reply_to=parent.platform_message_id if parent else None
            )
        else:
            outbound = Outbound(address, text)
        fresh = await board.store.conversation(conversation.id)
        result = await board.accounts[account].deliverer.deliver(fresh, outbound)
        entry = result.entry
        return SendOutcome(
            state=entry.status,
            conversation=address.key,
            seq=entry.message_seq,
            platform_message_id=entry.platform_ids[0] if entry.platform_ids else None,
            reason=entry.reason,
            kind=entry.kind,
        )
    finally:
        await board.stop()


def _idle_agents(config: Config) -> dict[str, Any]:
    async def idle(run: Any) -> None:
        return None

    return {name: idle for name in config.agents}

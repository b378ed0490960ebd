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
from typing import Any

from attrs import frozen
from backchannel.config import Config
from backchannel.model import Conversation

__all__ = ["SendOutcome", "send_to_conversation"]

log = logging.getLogger("backchannel.mcp")

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
        op, args["seq"] = "react", react_to
    else:
        op = "send"
        if reply_to is not None:
            args["reply_to"] = reply_to
    try:
        answer = await control.call(config, op, timeout=SEND_TIMEOUT, **args)
    except control.ControlRefused as error:
        # not this user's serve: nothing was sent to it, and nothing is sent around it
        return SendOutcome("failed", key, reason=str(error), via="serve", kind=_kind(react_to))
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
    except control.ControlLost as error:
        # serve took it and stopped before answering: never sent again directly
        return SendOutcome("uncertain", key, reason=str(error), via="serve", kind=_kind(react_to))
    return SendOutcome(
        state=str(answer.get("state", "uncertain")),
        conversation=key,
        seq=answer.get("seq"),
        platform_message_id=answer.get("platform_message_id"),
        reason=answer.get("reason"),
        via="serve",
        kind=_kind(react_to),
    )


def _kind(react_to: int | None) -> str:
    return "message" if react_to is None else "reaction"


async def _send_directly(
    config: Config,
    conversation: Conversation,
    text: str,
    reply_to: int | None,
    react_to: int | None,
) -> SendOutcome:
    from backchannel.app import operator_board
    from backchannel.errors import Rejected, StoreError

    key = conversation.address.key
    async with operator_board(config, conversation.address.account) as board:
        fresh = await board.store.conversation(conversation.id)
        try:
            if react_to is not None:
                outcome = await board.react_outcome(fresh, react_to, text)
            else:
                outcome = await board.send_outcome(fresh, text, reply_to_seq=reply_to)
        except (StoreError, Rejected) as error:  # no such message (or platform id); too long
            return SendOutcome("failed", key, reason=str(error), kind=_kind(react_to))
        # on a PostgreSQL store whose workers hold the account, its holder sent it
        via = "worker" if conversation.address.account in board.handed_over else "direct"
    return SendOutcome(
        state=outcome["state"],
        conversation=key,
        seq=outcome["seq"],
        platform_message_id=outcome["platform_message_id"],
        reason=outcome["reason"],
        kind=_kind(react_to),
        via=via,
    )

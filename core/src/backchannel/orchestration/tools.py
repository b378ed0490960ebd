"""The run tools (list_conversations, read_conversation, send_to_conversation) and their wiring.

`Orchestrator` is a tool provider for `Switchboard.run_tools`: a run gets the
tools only when its binding says ``orchestrate = true`` and the sender who
triggered it is trusted to steer (`trusts_to_steer`). Sends go through the
target account's own deliverer (record first, then send), so the outbox
rules hold: an `uncertain` send is never retried.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from attrs import evolve, frozen

from ..adapter import utf16_len
from ..config import Config
from ..errors import Rejected
from ..framing import strip_id_prefix
from ..model import Conversation, Outbound
from ..runs import RunSession
from ..tools import Tool
from .refusals import Refused, check_cross_read, check_cross_send
from .scope import AgentScope, binding_for, scope_for_agent, trusts_to_steer
from .views import format_conversations, list_conversations, read_conversation

if TYPE_CHECKING:
    from ..asks import AskCoordinator
    from ..switchboard import Switchboard

__all__ = ["CROSS_TOOL_NAMES", "Orchestrator", "SendOutcome", "attribution", "deliver_cross"]

log = logging.getLogger("backchannel.orchestration")

CROSS_TOOL_NAMES = ("list_conversations", "read_conversation", "send_to_conversation")


def attribution(origin_key: str) -> str:
    """The first line of every cross-conversation message (a label, not proof of origin)."""
    return f"[Message from conversation {origin_key}]"


@frozen
class SendOutcome:
    """What became of one cross-conversation send: state sent, failed or uncertain."""

    state: str
    target: str
    seq: int | None = None
    reason: str | None = None

    def describe(self) -> str:
        """A sentence the model can read, saying what to do next."""
        if self.state == "sent":
            return f"sent to {self.target} as #{self.seq}, with the attribution line"
        if self.state == "failed":
            return (
                f"NOT delivered to {self.target}: {self.reason}. The platform refused it, so"
                " nothing arrived; you may try again or tell the person who asked."
            )
        return (
            f"delivery to {self.target} is UNCERTAIN ({self.reason}): it may or may not have"
            " arrived. It will not be retried automatically. Call read_conversation on"
            f" {self.target} to check before you try again."
        )


async def deliver_cross(
    via: Switchboard | Config,
    target: Conversation,
    text: str,
    *,
    origin_key: str,
    run_id: int | None = None,
    seen_seq: int | None = None,
) -> SendOutcome:
    """Send `text` into `target` through the account that owns it, recorded with its origin.

    The one hand-off point for sends. `via` a Switchboard (inside `serve`):
    the board's deliverer records, sends and records the outcome. `via` a
    Config (a CLI or MCP process): the `serve` on that store does it over the
    control socket; `backchannel.control.ControlUnavailable` means no serve
    answers, and the caller says so (it must not send on its own: the
    connection belongs to serve).
    """
    key = target.address.key
    if isinstance(via, Config):
        from ..control import ControlLost, call

        try:
            answer = await call(
                via, "send", conversation=str(target.id), text=text, origin=origin_key
            )
        except (ControlLost, TimeoutError) as error:
            # serve took the send and gave no answer: it may have gone out, never resent
            return SendOutcome("uncertain", key, None, str(error))
        return SendOutcome(str(answer.get("state")), key, answer.get("seq"), answer.get("reason"))
    # a run that sends elsewhere: from now on, a run cut short is looked at for what it
    # sent, so its trigger is not offered again (set at start by orchestration.attach when a
    # binding orchestrates; an agent calling this from a plain binding turns it on here)
    via.asking = True
    account = via.accounts.get(target.address.account)
    if account is None:
        raise Refused(
            "unknown",
            f"refused: account {target.address.account!r} of {key} is not served by this process."
            " Nothing was sent.",
        )
    try:
        # an account whose connection another worker holds: handed to that worker to send
        result = await via.deliver_through(
            account,
            target,
            Outbound(target.address, text, origin=origin_key),
            run_id=run_id,
            # what the run had seen: a send about a message it took mid-run counts for that
            # one (Store.sent_elsewhere_after)
            seen_seq=seen_seq,
        )
    except Rejected as error:  # longer than one send holds there: nothing recorded
        return SendOutcome("failed", key, None, error.reason)
    entry = result.entry
    return SendOutcome(entry.status, key, entry.message_seq, entry.reason)


class Orchestrator:
    """Offers the cross-conversation tools to the runs that may have them."""

    def __init__(self, board: Switchboard, config: Config):
        self.board = board
        self.config = config
        #: the ask flow (ask_agent), when attached (`backchannel.orchestration.attach`)
        self.asks: AskCoordinator | None = None

    def reload(self, config: Config) -> None:
        """Apply a re-read config's [orchestration] section (the kill switch) to this process.

        Bindings, trust rules and accounts change only with a restart.
        """
        self.config = evolve(self.config, orchestration=config.orchestration)
        log.info(
            "orchestration: kill switch reloaded, enabled = %s",
            str(config.orchestration.enabled).lower(),
        )

    def __call__(self, account: str, session: RunSession, conversation: Conversation) -> list[Tool]:
        """The tools a run in `conversation` gets: none unless its binding opts in and its
        trigger came from a sender that binding trusts to steer."""
        binding = binding_for(self.config, conversation.address)
        if binding is None or not (binding.orchestrate or binding.master):
            return []
        trigger = session.trigger
        sender = trigger.sender.id if trigger is not None and trigger.direction == "in" else None
        if not trusts_to_steer(binding, conversation.kind, sender):
            return []
        scope = scope_for_agent(self.config, binding.agent)
        # a master conversation without orchestrate gets the read and ask tools, not sends
        return self.tools(scope, session, conversation, trusted=True, send=binding.orchestrate)

    def tools(
        self,
        scope: AgentScope,
        session: RunSession,
        conversation: Conversation,
        *,
        trusted: bool,
        send: bool = True,
    ) -> list[Tool]:
        """Return the tools for a run in `conversation` (each re-checks its refusals).

        The read tools always; send_to_conversation when `send`; ask_agent when
        the ask flow is attached and the agent has an account with agent peers.
        """
        store = self.board.store
        here = conversation.address.key

        async def list_conversations_tool(
            query: str | None = None, channel: str | None = None, limit: int = 20
        ) -> str:
            """List the conversations you take part in (across your channels), newest activity first.

            Args:
                query: words to look for in titles, participant names and message text
                channel: only this channel (telegram, slack, discord, tinyplace, webchat) or account
                limit: how many conversations, at most 100
            """
            if not trusted:
                return _untrusted("list")
            found = await list_conversations(
                store, accounts=scope, query=query, channel=channel, limit=limit
            )
            return format_conversations(found, current=conversation.id, query=query)

        async def read_conversation_tool(
            conversation: str, before: int | None = None, limit: int = 30
        ) -> str:
            """Read another of your conversations: its messages, oldest first, as [#n] Name: text.

            Args:
                conversation: its key (like telegram/12345) or id, as list_conversations shows
                before: only messages older than this #n (to page back)
                limit: how many messages, at most 100
            """
            if not trusted:
                return _untrusted("read")
            try:
                found = await check_cross_read(store, scope=scope, target=conversation)
            except Refused as refusal:
                return str(refusal).replace(" Nothing was sent.", "")
            return await read_conversation(
                store,
                found.id,
                before=before,
                limit=limit,
                channel=scope.channel_of(found.address.account),
            )

        async def send_to_conversation(conversation: str, text: str) -> str:
            """Send a message into another of your conversations, labelled as coming from this one.

            The message starts with "[Message from conversation <this key>]". Use
            send_message to write in this conversation.

            Args:
                conversation: the target's key (like telegram/12345) or id, as list_conversations shows
                text: what to say there, as plain text
            """
            text = strip_id_prefix(text)
            if not text.strip():
                return "error: text is empty"
            try:
                target = await check_cross_send(
                    store,
                    self.config,
                    scope=scope,
                    origin=origin,
                    target=conversation,
                    trusted=trusted,
                )
            except Refused as refusal:
                log.info("send_to_conversation from %s refused: %s", here, refusal.code)
                return str(refusal)
            labelled = f"{attribution(here)}\n{text}"
            account = self.board.accounts.get(target.conversation.address.account)
            limit = account.adapter.capabilities.max_text_len if account is not None else None
            # UTF-16 units, the stricter count (Telegram's): a text split by the platform's
            # limit would carry the label on its first part only
            size = utf16_len(labelled)
            if limit and size > limit:
                return (
                    f"error: too long for one message there ({size} characters with the"
                    f" label, at most {limit}): nothing was sent. Send it in shorter parts;"
                    " each is labelled."
                )
            outcome = await deliver_cross(
                self.board,
                target.conversation,
                labelled,
                origin_key=here,
                run_id=session.run_id,
                seen_seq=session.seen_seq,
            )
            return outcome.describe()

        origin = conversation
        tools = [
            Tool.from_function(list_conversations_tool, name="list_conversations"),
            Tool.from_function(read_conversation_tool, name="read_conversation"),
        ]
        if send:
            tools.append(Tool.from_function(send_to_conversation))
        if self.asks is not None:
            from ..asks.tool import ask_tools

            tools += ask_tools(
                self.asks,
                lambda: self.config,
                scope=scope,
                run_session=session,
                conversation=conversation,
                trusted=trusted,
            )
        return tools


def _untrusted(action: str) -> str:
    return (
        f"refused: the message that started this run is not from someone this binding trusts to"
        f" steer you across conversations, so you cannot {action} other conversations from here."
    )

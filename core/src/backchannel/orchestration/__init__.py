"""Orchestration: an agent reads its other conversations and sends across them.

Plain async functions usable without a Run (run tools, an MCP server and the
CLI all call these), plus the `Orchestrator` that offers them as run tools.
See docs/orchestration.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .messaging import MessagingStatus, messaging_status, set_messaging
from .refusals import (
    REFUSAL_CODES,
    CrossTarget,
    Refused,
    check_cross_read,
    check_cross_send,
    send_refusal,
)
from .scope import AccountScope, AgentScope, binding_for, scope_for_agent, trusts_to_steer
from .tools import CROSS_TOOL_NAMES, Orchestrator, SendOutcome, attribution, deliver_cross
from .views import (
    UNTRUSTED_NOTICE,
    ConversationSummary,
    format_conversations,
    list_conversations,
    read_conversation,
    resolve_conversation,
)

if TYPE_CHECKING:
    from ..config import Config
    from ..switchboard import Switchboard

__all__ = [
    "CROSS_TOOL_NAMES",
    "REFUSAL_CODES",
    "UNTRUSTED_NOTICE",
    "AccountScope",
    "AgentScope",
    "ConversationSummary",
    "CrossTarget",
    "MessagingStatus",
    "Orchestrator",
    "Refused",
    "SendOutcome",
    "attach",
    "attribution",
    "binding_for",
    "check_cross_read",
    "check_cross_send",
    "deliver_cross",
    "format_conversations",
    "list_conversations",
    "messaging_status",
    "orchestrator_of",
    "read_conversation",
    "resolve_conversation",
    "scope_for_agent",
    "send_refusal",
    "set_messaging",
    "trusts_to_steer",
]


def attach(board: Switchboard, config: Config) -> Orchestrator:
    """Give `board`'s runs the orchestration tools as `config` allows; return the provider."""
    from ..asks import AskCoordinator, AskSettings

    orchestrator = Orchestrator(board, config)
    if any(binding.orchestrate for binding in config.bindings):
        # send_to_conversation may be offered: runs look for what a cut-short run sent
        # elsewhere (RunBuilder)
        board.asking = True
    settings = config.orchestration
    # the ask flow only where answers can come from: an account whose channel has agent peers
    if any(account.adapter.capabilities.agent_peers for account in board.accounts.values()):
        orchestrator.asks = AskCoordinator(
            board,
            AskSettings(
                ask_timeout=settings.ask_timeout,
                session_live=settings.session_live,
                report=settings.report,
            ),
        ).attach()
    board.run_tools.append(orchestrator)
    return orchestrator


def orchestrator_of(board: object) -> Orchestrator | None:
    """Return the Orchestrator attached to `board`, or None."""
    for provider in getattr(board, "run_tools", ()):
        if isinstance(provider, Orchestrator):
            return provider
    return None

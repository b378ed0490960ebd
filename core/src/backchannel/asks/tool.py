"""The `ask_agent` run tool: the orchestration controls first, then the ask's own checks.

Offered by the `Orchestrator` to runs that get the cross-conversation tools
(``orchestrate = true`` or a ``master = true`` binding, trusted trigger
sender) when the agent is bound to at least one account whose channel has
agent peers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..config import Config
from ..framing import one_line, untrusted
from ..model import Address, Conversation
from ..orchestration.refusals import Refused, check_cross_controls
from ..orchestration.scope import AgentScope
from ..runs import RunSession
from ..tools import Tool
from .asking import AskOutcome, AskRefused, ask_peer

if TYPE_CHECKING:
    from .coordinator import AskCoordinator

__all__ = ["ASK_TOOL_NAME", "ask_controlled", "ask_tools", "peer_accounts", "resolve_peer"]

log = logging.getLogger("backchannel.asks")

ASK_TOOL_NAME = "ask_agent"


def peer_accounts(coordinator: AskCoordinator, names: Iterable[str]) -> list[str]:
    """Return the accounts among `names` whose channel talks to other agents, in that order."""
    accounts = coordinator.board.accounts
    return [
        name
        for name in names
        if name in accounts and accounts[name].adapter.capabilities.agent_peers
    ]


async def ask_controlled(
    coordinator: AskCoordinator,
    config: Config,
    accounts: list[str],
    *,
    peer: str,
    question: str,
    session: str | None,
    account: str | None,
    origin: Conversation | None,
    trusted: bool,
    origin_seq: int | None = None,
    run_id: int | None = None,
    scope: AgentScope | None = None,
) -> AskOutcome:
    """The orchestration controls (trust, kill switch, messaging control), then the ask.

    Shared by the run tool and the control socket's `ask` (an MCP client's,
    with no origin). `scope` is the asking agent's (None: the operator's own
    client, which may ask through every account it names): a peer whose
    conversations another agent's binding claims is refused, as reading or
    writing them is. Raises Refused with nothing stored and nothing sent.
    """
    await check_cross_controls(coordinator.board.store, config, trusted=trusted, action="ask")
    chosen, peer_id, session_name = resolve_peer(accounts, peer, account, session)
    if scope is not None and not scope.covers(Address(chosen, peer_id.strip())):
        # a peer's chat is the peer: its every session is another agent's when its chat is
        raise AskRefused(
            "not_bound",
            f"refused: {untrusted(peer_id)} on account {chosen!r} is not one of yours (its"
            f" conversations are bound to another agent, not to {scope.agent!r}); you can only"
            " ask agents your bindings cover. Nothing was sent.",
        )
    outcome = await ask_peer(
        coordinator.board,
        coordinator.settings,
        origin=origin,
        origin_seq=origin_seq,
        account=chosen,
        peer=peer_id,
        question=question,
        session=session_name,
        run_id=run_id,
    )
    coordinator.wake()
    return outcome


def ask_tools(
    coordinator: AskCoordinator,
    config: Callable[[], Config],
    *,
    scope: AgentScope,
    run_session: RunSession,
    conversation: Conversation,
    trusted: bool,
) -> list[Tool]:
    """Return ``[ask_agent]`` for a run in `conversation`, or [] when no account has agent peers.

    `config` returns the current config (the kill switch may be reloaded).
    """
    accounts = peer_accounts(coordinator, scope.accounts)
    if not accounts:
        return []
    origin = conversation

    async def ask_agent(
        peer: str, question: str, session: str | None = None, account: str | None = None
    ) -> str:
        """Ask another agent a question; its answer is reported in this conversation later.

        Returns at once. Do not poll and do not ask again while waiting: when the
        answer comes, you are given it in a new turn here. Reuses your live session
        with that agent unless you name one; only agents you are linked with (a
        contact or an earlier conversation) can be asked.

        Args:
            peer: the other agent's id, or a session conversation key (like tinyplace/<agent id>/<session>) as list_conversations shows
            question: what to ask, as plain text
            session: the session id to ask in (leave out: reuse the newest live session with that agent, else start a new one)
            account: which of your agent accounts to ask through (leave out when you have one)
        """
        question = question.strip()
        if not question:
            return "error: question is empty"
        try:
            outcome = await ask_controlled(
                coordinator,
                config(),
                accounts,
                peer=peer,
                question=question,
                session=session,
                account=account,
                origin=origin,
                trusted=trusted,
                origin_seq=run_session.trigger.seq if run_session.trigger is not None else None,
                run_id=run_session.run_id,
                scope=scope,
            )
        except Refused as refusal:
            log.info("ask_agent from %s refused: %s", origin.address.key, refusal.code)
            return str(refusal)
        return outcome.describe()

    return [Tool.from_function(ask_agent)]


def resolve_peer(
    accounts: list[str], peer: str, account: str | None, session: str | None
) -> tuple[str, str, str | None]:
    """Return (account, peer id, session) from the tool's arguments; raise AskRefused."""
    peer = peer.strip()
    head, _, rest = peer.partition("/")
    if rest and head in accounts:  # a conversation key: account/peer[/session]
        account = account or head
        if account != head:
            raise AskRefused(
                "not_bound",
                f"refused: {one_line(peer)} belongs to account {head!r}, not {one_line(repr(account))}."
                " Nothing was sent.",
            )
        peer, _, thread = rest.partition("/")
        if thread and thread != "master" and session is None:
            session = thread
    if account is None:
        if len(accounts) > 1:
            raise AskRefused(
                "ambiguous",
                f"refused: you can ask through {', '.join(accounts)}; say which with account."
                " Nothing was sent.",
            )
        account = accounts[0]
    if account not in accounts:
        raise AskRefused(
            "not_bound",
            f"refused: {one_line(repr(account))} is not one of your accounts that talk to other agents"
            f" ({', '.join(accounts)}). Nothing was sent.",
        )
    return account, peer, session

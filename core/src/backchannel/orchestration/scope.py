"""Whose conversations an agent may see, and whose words may steer it across them.

An agent's *scope* is every conversation a binding of that agent covers (the
accounts it is bound to, limited to the chats it names, minus chats another
binding claims). Orchestration never reaches outside it: another agent's
conversations are neither listed, read nor written to.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import field, frozen

from ..config import BindingConfig, Config
from ..model import Address

__all__ = ["AccountScope", "AgentScope", "binding_for", "scope_for_agent", "trusts_to_steer"]


@frozen
class AccountScope:
    """The part of one account an agent is bound to."""

    channel: str
    #: the chats bound to the agent; None means every chat except `excluded`
    chats: frozenset[str] | None = None
    #: chats that other agents' bindings claim (only when `chats` is None)
    excluded: frozenset[str] = frozenset()

    def covers(self, chat: str) -> bool:
        if self.chats is not None:
            return chat in self.chats
        return chat not in self.excluded


@frozen
class AgentScope:
    """The conversations one agent is bound to, account by account."""

    agent: str
    accounts: Mapping[str, AccountScope] = field(factory=dict)

    def covers(self, address: Address) -> bool:
        """Return True when the conversation at `address` is bound to this agent."""
        account = self.accounts.get(address.account)
        return account is not None and account.covers(address.chat)

    def channel_of(self, account: str) -> str:
        scope = self.accounts.get(account)
        return scope.channel if scope is not None else ""

    def accounts_on(self, channel: str) -> list[str]:
        """Return the accounts of this scope on `channel` (a channel or account name)."""
        return [
            name
            for name, scope in self.accounts.items()
            if scope.channel == channel or name == channel
        ]


def binding_for(config: Config, address: Address) -> BindingConfig | None:
    """Return the binding that handles the conversation at `address` (chat-specific first)."""
    general = None
    for _, binding in config.bindings_for(address.account):
        if binding.chats is None:
            general = binding
        elif address.chat in binding.chats:
            return binding
    return general


def scope_for_agent(config: Config, agent: str) -> AgentScope:
    """Return every conversation the bindings of `agent` cover."""
    accounts: dict[str, AccountScope] = {}
    for name, account in config.accounts.items():
        covering = [binding for _, binding in config.bindings_for(name)]
        mine = [b for b in covering if b.agent == agent]
        if not mine:
            continue
        if any(b.chats is None for b in mine):
            others = frozenset(chat for b in covering if b.agent != agent for chat in b.chats or ())
            accounts[name] = AccountScope(account.channel, None, others)
        else:
            chats = frozenset(chat for b in mine for chat in b.chats or ())
            accounts[name] = AccountScope(account.channel, chats)
    return AgentScope(agent, accounts)


def trusts_to_steer(binding: BindingConfig, conversation_kind: str, sender_id: str | None) -> bool:
    """Return True when `binding` lets this sender steer the agent across conversations.

    The owner always may; with ``access = "allowlist"`` the allowed senders may;
    with ``access = "anyone"`` only the other party of a direct conversation may
    (in a group, strangers write too). Nobody else, and no run without a sender.
    """
    if sender_id is None:
        return False
    if binding.owner is not None and sender_id == binding.owner:
        return True
    if binding.access == "allowlist":
        return sender_id in binding.allow
    if binding.access == "anyone":
        return conversation_kind == "direct"
    return False

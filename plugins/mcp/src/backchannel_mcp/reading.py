"""Reading conversations for the MCP tools and resources, through `backchannel.orchestration`.

Runs and MCP clients read history the same way: the same listing, the same
flattened `[#seq] Name: text` lines opening with the untrusted-content notice,
the same refusals. The MCP server's scope is every account of its config (the
client is the operator's own agent).
"""

from __future__ import annotations

from backchannel.config import Config
from backchannel.errors import StoreError
from backchannel.model import Conversation
from backchannel.orchestration import (
    AccountScope,
    AgentScope,
    Refused,
    check_cross_read,
    format_conversations,
    list_conversations,
    read_conversation,
)
from backchannel.store import Store

__all__ = [
    "MCP_AGENT",
    "find_conversation",
    "list_conversations_text",
    "mcp_scope",
    "no_conversation",
    "read_conversation_text",
]

#: the name the MCP server's scope carries in refusals
MCP_AGENT = "mcp"


def mcp_scope(config: Config) -> AgentScope:
    """Return the scope of the MCP server: every configured account, every chat."""
    return AgentScope(
        MCP_AGENT,
        {name: AccountScope(account.channel) for name, account in config.accounts.items()},
    )


async def find_conversation(
    store: Store, reference: str, config: Config | None = None
) -> Conversation:
    """Return the conversation named by a numeric id or a key; raise StoreError saying why not.

    With `config`, a conversation of an account the config does not have is refused too.
    """
    if config is None:
        from backchannel.orchestration import resolve_conversation

        found = await resolve_conversation(store, reference)
        if found is None:
            raise StoreError(f"no conversation {reference!r} (list_conversations shows the keys)")
        return found
    try:
        return await check_cross_read(store, scope=mcp_scope(config), target=reference)
    except Refused as refused:
        raise StoreError(str(refused).removeprefix("refused: ")) from None
    except OverflowError:  # a numeric id larger than any the store holds
        raise StoreError(no_conversation(reference)) from None


def no_conversation(reference: str) -> str:
    """Say that `reference` names no conversation (as orchestration's refusal words it)."""
    return (
        f"there is no conversation {reference[:200]!r}; call list_conversations and use a key"
        " or id it shows"
    )


async def list_conversations_text(
    store: Store,
    config: Config,
    *,
    query: str | None = None,
    channel: str | None = None,
    limit: int = 20,
) -> str:
    """Return one line per conversation, newest activity first."""
    summaries = await list_conversations(
        store, accounts=mcp_scope(config), query=query, channel=channel, limit=limit
    )
    return format_conversations(summaries, query=query)


async def read_conversation_text(
    store: Store,
    config: Config,
    conversation: Conversation,
    *,
    before: int | None = None,
    limit: int = 30,
) -> str:
    """Return a conversation's messages, flattened as a run sees them, with the untrusted notice."""
    account = config.accounts.get(conversation.address.account)
    return await read_conversation(
        store,
        conversation.id,
        before=before,
        limit=limit,
        channel=account.channel if account else "",
    )

"""The one check every cross-conversation action passes, whoever calls it.

Run tools, the MCP server and the CLI call `check_cross_send` before writing or
sending anything; a refusal is a `Refused` whose text says why and what to do,
and nothing has been stored or sent. Asks to other agents reuse it with
``action="ask"``.

Order (the first that applies wins): the sender who triggered the run is not
trusted to steer; the config kill switch; the messaging control; the target is
unknown; the target is not bound to this agent; the target is the current
conversation.
"""

from __future__ import annotations

from attrs import frozen

from ..config import Config
from ..errors import BackchannelError
from ..model import Conversation
from ..store import Store
from .messaging import messaging_status
from .scope import AgentScope
from .views import resolve_conversation

__all__ = [
    "REFUSAL_CODES",
    "CrossTarget",
    "Refused",
    "check_cross_controls",
    "check_cross_read",
    "check_cross_send",
    "send_refusal",
]

REFUSAL_CODES = ("untrusted", "disabled", "messaging_off", "unknown", "not_bound", "self")


class Refused(BackchannelError):
    """A cross-conversation action was refused before anything was stored or sent."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@frozen
class CrossTarget:
    """A conversation an action may go to, with the origin it comes from."""

    conversation: Conversation
    origin: Conversation | None


async def check_cross_send(
    store: Store,
    config: Config,
    *,
    scope: AgentScope,
    origin: Conversation | None,
    target: str | int,
    trusted: bool,
    action: str = "send",
) -> CrossTarget:
    """Return the target when a cross-conversation `action` may proceed; raise Refused if not.

    `trusted` says whether the sender who asked for this (the run's trigger)
    may steer the agent across conversations (see `trusts_to_steer`); an
    operator acting through the CLI passes True.
    """
    await check_cross_controls(store, config, trusted=trusted, action=action)
    found = await check_cross_read(store, scope=scope, target=target)
    if origin is not None and found.id == origin.id:
        raise Refused(
            "self",
            f"refused: {found.address.key} is this conversation; use send_message (or reply)"
            f" to write here. Nothing was sent.",
        )
    return CrossTarget(found, origin)


async def check_cross_controls(
    store: Store, config: Config, *, trusted: bool, action: str = "send"
) -> None:
    """Raise Refused unless the trigger sender may steer and both controls allow `action`.

    The first three refusals of the matrix (untrusted, disabled, messaging_off),
    shared by sends and asks: an ask checks its own target afterwards.
    """
    if not trusted:
        raise Refused(
            "untrusted",
            f"refused: the message that started this run is not from someone this binding trusts"
            f" to steer you across conversations (the owner or an allowlisted sender), so you"
            f" cannot {action} to other conversations from here. Nothing was sent.",
        )
    status = await messaging_status(store, config)
    if not status.config_enabled:
        raise Refused(
            "disabled",
            "refused: cross-conversation messaging is disabled by the operator (the config's"
            " [orchestration] enabled = false). Nothing was sent; do not retry. Reading other"
            " conversations still works.",
        )
    if not status.messaging_on:
        raise Refused(
            "messaging_off",
            "refused: cross-conversation messaging is switched off (`backchannel messaging off`)."
            " Nothing was sent; do not retry until the operator turns it on. Reading other"
            " conversations still works.",
        )


async def check_cross_read(store: Store, *, scope: AgentScope, target: str | int) -> Conversation:
    """Return the target conversation when it exists and is bound to the agent; raise Refused."""
    found = await resolve_conversation(store, target)
    if found is None:
        raise Refused(
            "unknown",
            f"refused: there is no conversation {_named(target)}; call list_conversations and use"
            f" a key or id it shows. Nothing was sent.",
        )
    if not scope.covers(found.address):
        raise Refused(
            "not_bound",
            f"refused: conversation {_named(target)} is not one of yours (it is not bound to agent"
            f" {scope.agent!r}); you can only read and write conversations list_conversations"
            f" shows. Nothing was sent.",
        )
    return found


def _named(target: str | int) -> str:
    # what the agent asked for, as it asked (its repr), capped: a refusal never echoes a
    # megabyte back
    text = repr(str(target))
    return text if len(text) <= 82 else text[:80] + "…'"


async def send_refusal(
    config: Config, conversation: Conversation, *, store: Store | None = None
) -> str | None:
    """Return why the two controls refuse a new cross-conversation send now, or None.

    For callers that do their own scoping and trust (an MCP server acting for
    the operator): only the kill switch and the messaging control are checked.
    Without `store`, the config's store is opened for the check.
    """
    if store is None:
        from ..app import open_config_store

        opened = open_config_store(config)
        try:
            return await send_refusal(config, conversation, store=opened)
        finally:
            await opened.close()
    status = await messaging_status(store, config)
    if status.allowed:
        return None
    code = "disabled" if not status.config_enabled else "messaging_off"
    return str(_CONTROL_REFUSALS[code]).format(key=conversation.address.key)


_CONTROL_REFUSALS = {
    "disabled": "refused: cross-conversation messaging is disabled by the operator (the config's"
    " [orchestration] enabled = false); nothing was sent to {key}.",
    "messaging_off": "refused: cross-conversation messaging is switched off (`backchannel"
    " messaging off`); nothing was sent to {key}.",
}

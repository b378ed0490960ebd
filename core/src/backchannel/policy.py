"""Who may reach the agent, and when it responds. Small pure functions over an Event."""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from .model import NO_RUN, Event

__all__ = ["BOT_TURNS", "MAX_BOT_TURNS", "Access", "Policy", "Respond"]

#: answers to bots with no person writing in between before a bot's message no longer
#: starts a run: two bots that answer each other would otherwise go on for ever. The
#: default where people talk; where every peer is an agent (tiny.place) there is none
BOT_TURNS = 10
#: the highest limit a config may set: the count reads the window and 1,000 messages more
#: (runs.BOT_SCAN), and each answer takes two, so a higher one would never be reached
MAX_BOT_TURNS = 500

Access = Literal["anyone", "allowlist", "owner"]
Respond = Literal["always", "mention", "never"]


def _ids(values: object) -> tuple[str, ...]:
    return tuple(str(v) for v in (values or ()))  # type: ignore[attr-defined]


@frozen
class Policy:
    """A binding's rules.

    access: "anyone"; "allowlist" (only sender ids in `allow`); "owner" (only `owner`).
    respond (in group conversations and threads; direct conversations always
    respond unless "never"): "always"; "mention" (mentioned or replied to);
    "never" (store only).
    bot_turns: how many times the agent may answer bots in one conversation with no
    person writing there in between (0: no limit; None: the channel's default, BOT_TURNS
    or, where every peer is an agent, no limit); past it, a bot's message is stored and
    shown but starts no run (the scheduler records a "stopped" run).
    """

    access: Access = "anyone"
    allow: tuple[str, ...] = field(default=(), converter=_ids)
    owner: str | None = None
    respond: Respond = "mention"
    bot_turns: int | None = None

    def bot_turns_in(self, chat: str) -> int | None:
        """The `bot_turns` limit for a conversation in `chat` (0: none; None: the
        channel's default)."""
        return self.bot_turns

    def may_reach(self, event: Event) -> bool:
        """Return True when the sender may reach the agent (else the message is held).

        A deletion or a reaction change the platform reports without naming who made
        it (a moderator clearing reactions) is a fact about a stored message, not
        someone reaching the agent: it is never held. An edit changes what someone
        said, so it is judged by its sender as a message is.
        """
        if event.kind in ("delete", "reaction") and event.sender.is_unknown:
            return True
        sender = event.sender.id
        if self.access == "anyone":
            return True
        if self.access == "owner":
            return self.owner is not None and sender == self.owner
        return sender in self.allow or (self.owner is not None and sender == self.owner)

    def triggers(self, event: Event) -> bool:
        """Return True when this event should start (or extend) a run."""
        if event.kind != "message" or self.respond == "never":
            return False
        if event.meta and event.meta.get(NO_RUN) is True:
            return False  # /start@other_bot, a business owner's own words: not for a run
        if event.conversation_kind == "direct" or self.respond == "always":
            return True
        return event.mentions_me

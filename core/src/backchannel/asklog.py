"""What the asks did, for people: `backchannel asks`.

Every question an agent (or an MCP client, through `serve`) asked another
agent: who asked, in which session, its state, and the answer's message when
one was matched to it. The answer's text stays in the session's transcript
(`backchannel show`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import attrs
from attrs import frozen

from .framing import one_line
from .model import Conversation
from .runlog import table
from .store import ASK_OPEN_STATES, NO_ORIGIN, NO_ORIGIN_LABEL, Ask, Store

__all__ = ["AskReport", "ask_reports", "render_asks"]


@frozen
class AskReport:
    """One ask as `backchannel asks` prints it."""

    ask: Ask
    origin: str
    session: str

    @property
    def waiting(self) -> bool:
        """Still waiting for its answer (no reply matched, not failed or lapsed)."""
        return self.ask.answer_seq is None and self.ask.state in ASK_OPEN_STATES

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self.ask), "origin": self.origin, "session": self.session}


async def ask_reports(
    store: Store,
    conversation: Conversation | None = None,
    *,
    only_waiting: bool = False,
    limit: int = 50,
) -> list[AskReport]:
    """Return the newest asks (from or in one conversation, or all), newest first.

    Only the newest `limit` are read from the store (waiting ones: every open
    ask, a set that empties as asks are answered or lapse), not every ask made.
    """
    # a waiting ask is in an open state; how many of those have no answer yet is not
    # known before reading them, so the open ones are read whole
    states, wanted = (ASK_OPEN_STATES, 1_000_000) if only_waiting else (None, limit)
    if conversation is None:
        found = await store.asks(states=states, limit=wanted, newest_first=True)
    else:
        mine = await store.asks(
            origin_conversation_id=conversation.id, states=states, limit=wanted, newest_first=True
        )
        there = await store.asks(
            peer_conversation_id=conversation.id, states=states, limit=wanted, newest_first=True
        )
        found = list({ask.id: ask for ask in [*mine, *there]}.values())
    keys: dict[int, str] = {NO_ORIGIN: NO_ORIGIN_LABEL}
    reports: list[AskReport] = []
    for ask in sorted(found, key=lambda ask: ask.id, reverse=True):
        for conversation_id in (ask.origin_conversation_id, ask.peer_conversation_id):
            if conversation_id not in keys:
                keys[conversation_id] = (await store.conversation(conversation_id)).address.key
        report = AskReport(ask, keys[ask.origin_conversation_id], keys[ask.peer_conversation_id])
        if report.waiting or not only_waiting:
            reports.append(report)
        if len(reports) == limit:
            break
    return reports


def render_asks(reports: Iterable[AskReport]) -> str:
    """A table for people: one line per ask, newest first."""
    rows = [
        (
            str(report.ask.id),
            report.ask.state,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.ask.asked_at)),
            report.origin,
            report.session,
            "-" if report.ask.answer_seq is None else f"#{report.ask.answer_seq}",
            one_line(report.ask.question),
        )
        for report in reports
    ]
    return table(("ASK", "STATE", "ASKED", "FROM", "SESSION", "ANSWER", "QUESTION"), rows)

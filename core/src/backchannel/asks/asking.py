"""Asking another agent: pick the session, refuse cold asks, record the ask, send the question.

`ask_peer` is the plain async function behind the `ask_agent` run tool (and
anything else that asks on an agent's behalf). It assumes the caller already
passed the orchestration controls (trust, kill switch, messaging control); it
adds the checks only an ask has: the account talks to agents, the peer is
linked, the session is well-formed, and it is not the asking conversation.
"""

from __future__ import annotations

import logging
import re
import unicodedata
import uuid
from typing import TYPE_CHECKING

from attrs import frozen

from ..adapter import utf16_len
from ..errors import DeliveryError
from ..framing import untrusted
from ..model import Address, Conversation, Outbound, now
from ..orchestration.refusals import Refused
from ..store import NO_ORIGIN, NO_ORIGIN_LABEL, Ask, OutboxEntry
from .settings import AskSettings

if TYPE_CHECKING:
    from ..switchboard import Switchboard

__all__ = ["MASTER_THREAD", "AskOutcome", "AskRefused", "ask_peer", "choose_session"]

log = logging.getLogger("backchannel.asks")

#: the thread of a peer's plain-DM conversation (never a session an ask may use)
MASTER_THREAD = "master"
_MAX_SESSION_LEN = 256
#: what a session the asking agent starts may be called
_NEW_SESSION = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:@+-]{0,255}\Z")


class AskRefused(Refused):
    """An ask was refused before anything was stored or sent; the text says why and what to do.

    Codes beyond the orchestration matrix: no_peers, bad_peer, bad_session,
    cold (the peer is not linked), ambiguous (several agent accounts), too_long
    (more than one message of the channel holds).
    """


@frozen
class AskOutcome:
    """What became of one ask: the question was sent, failed, or may have arrived (uncertain)."""

    state: str
    peer: str
    session: str
    conversation: Conversation
    ask: Ask
    minted: bool
    reason: str | None = None

    def describe(self) -> str:
        """A sentence the model can read, saying what happens next and what not to do."""
        where = f"session {self.session} ({self.conversation.address.key})"
        outside = self.ask.origin_conversation_id == NO_ORIGIN
        # an ask from outside any conversation is reported nowhere: the asker reads it
        later = (
            f"its answer will be shown by the asks tool (ask #{self.ask.id}) when it comes"
            if outside
            else "the answer will be reported here when it comes"
        )
        if self.state == "pending":
            fresh = "a new " if self.minted else ""
            wait = "Do not ask again" if outside else "Do not poll or ask again"
            return (
                f"asked {self.peer} in {fresh}{where}; {later}. {wait}: carry on, or end your turn."
            )
        if self.state == "failed":
            return f"NOT asked: {self.peer} did not receive the question ({self.reason})."
        return (
            f"the question to {self.peer} in {where} is UNCERTAIN ({self.reason}): it may or may"
            f" not have arrived. It will not be retried automatically; if an answer comes,"
            f" {later}. Read that session conversation before asking again."
        )


async def ask_peer(
    board: Switchboard,
    settings: AskSettings,
    *,
    origin: Conversation | None,
    origin_seq: int | None,
    account: str,
    peer: str,
    question: str,
    session: str | None = None,
    run_id: int | None = None,
) -> AskOutcome:
    """Ask `peer` (an agent on `account`) `question`; return once the question is sent.

    `origin` is the asking conversation, where the answer is reported; None
    for an ask from outside any conversation (an MCP client), whose answer is
    stored and shown to the asker but reported nowhere.

    Raise AskRefused (nothing stored, nothing sent) for a cold peer, a bad
    session, or an account whose channel has no agent peers. On an account another
    worker holds (several workers), the question is handed to that worker to send;
    a peer with no conversation yet is refused there (its contact list is read
    through the holder's connection).
    """
    wired = board.accounts.get(account)
    if wired is None or not wired.adapter.capabilities.agent_peers:
        raise AskRefused(
            "no_peers",
            f"refused: account {account!r} does not talk to other agents; ask through an"
            " account whose channel has agent peers (such as tiny.place). Nothing was sent.",
        )
    # an account whose connection another worker holds: the question is handed to that
    # worker to send (Switchboard.deliver_through); only its contact list is out of reach
    elsewhere = board.held_elsewhere(account)
    limit = wired.adapter.capabilities.max_text_len
    size = utf16_len(question)
    if limit and size > limit:
        # split into parts, a peer's reply would name one part and the answer might not be
        # matched to the question; one message is one question
        raise AskRefused(
            "too_long",
            f"refused: the question is too long for one message ({size} characters, at most"
            f" {limit}). Ask it shorter. Nothing was sent.",
        )
    peer = peer.strip()
    if (
        not peer
        or len(peer) > _MAX_SESSION_LEN
        or "/" in peer
        or any(unicodedata.category(c).startswith("C") for c in peer)
    ):
        raise AskRefused(
            "bad_peer",
            f"refused: {untrusted(peer)} is not an agent id; use the peer's id as"
            " list_conversations shows it (the middle part of a tinyplace/<peer>/<session> key)."
            " Nothing was sent.",
        )
    if session is not None:
        session = _checked_session(session)
    store = board.store
    known = await store.peer_conversations(account, peer)
    if not known and elsewhere:
        raise AskRefused(
            "elsewhere",
            f"refused: {peer} has no conversation with this agent yet, and whether it is an"
            f" accepted contact can be read only on the worker holding account {account!r}"
            " (its connection is there). Ask from a conversation that worker runs, or once"
            " the peer has written. Nothing was sent.",
        )
    if not known and not await _is_contact(wired.adapter, peer):
        raise AskRefused(
            "cold",
            f"refused: {peer} is not linked to this agent (not an accepted contact and no"
            " conversation with it yet), so it cannot be asked cold. The operator pairs agents"
            " first. Nothing was sent.",
        )
    origin_id = origin.id if origin is not None else NO_ORIGIN
    asker = origin.address.key if origin is not None else NO_ORIGIN_LABEL
    chosen = session or await choose_session(board, settings, account, peer, exclude=origin_id)
    address = Address(account, peer, chosen)
    existing = await store.find_conversation(address)
    if existing is None and not _NEW_SESSION.match(chosen):
        # a session the agent names into being becomes part of keys, attribution lines and
        # notices: letters, digits and . _ : @ + - only (a peer's own sessions may hold more)
        raise AskRefused(
            "bad_session",
            f"refused: {untrusted(chosen)} cannot name a new session (letters, digits and"
            " . _ : @ + - only); leave session out to start one with a fresh id."
            " Nothing was sent.",
        )
    if existing is not None and existing.id == origin_id:
        raise AskRefused(
            "self",
            f"refused: {address.key} is this conversation; answer here with send_message."
            " Nothing was sent.",
        )
    target = existing or await store.ensure_conversation(
        address, kind="thread", title=f"session {chosen}"
    )
    minted = existing is None
    if minted:
        await store.set_conversation_meta(
            target.id, {"created_by": asker, "created_by_id": origin_id}
        )
        target = await store.conversation(target.id)
    recorded: list[Ask] = []

    async def record(entry: OutboxEntry) -> None:
        recorded.append(
            await store.record_ask(
                origin_conversation_id=origin_id,
                origin_seq=origin_seq,
                peer_conversation_id=target.id,
                question=entry.text,  # as recorded and sent: NUL made U+FFFD (deliver)
                deadline=now() + settings.ask_timeout,
                message_seq=entry.message_seq,
                outbox_id=entry.id,
            )
        )
        board.watched.add(target.id)

    # an account whose connection another worker holds: handed to that worker to send
    result = await board.deliver_through(
        wired, target, Outbound(target.address, question), run_id=run_id, recorded=record
    )
    ask = recorded[0]
    state = {"sent": "pending", "failed": "failed"}.get(result.status, "uncertain")
    if state != "pending":
        # the answer may have come while the send was out (a slow PUT): it stays answered
        ask = await store.mark_ask(ask.id, state, result.entry.reason, unanswered=True)
    log.info("ask %s from %s to %s: %s", ask.id, asker, address.key, state)
    return AskOutcome(state, peer, chosen, target, ask, minted, result.entry.reason)


async def choose_session(
    board: Switchboard,
    settings: AskSettings,
    account: str,
    peer: str,
    *,
    exclude: int | None = None,
) -> str:
    """Return the newest live session with `peer` (not `exclude`), else a new id (uuid4)."""
    since = now() - settings.session_live
    for conversation in await board.store.peer_conversations(account, peer, active_since=since):
        thread = conversation.address.thread
        if thread and thread != MASTER_THREAD and conversation.id != exclude:
            return thread
    return str(uuid.uuid4())


async def _is_contact(adapter: object, peer: str) -> bool:
    check = getattr(adapter, "is_contact", None)
    if check is None:
        return False
    try:
        return bool(await check(peer))
    except DeliveryError as error:
        raise AskRefused(
            "cold",
            f"refused: could not check that {peer} is a contact ({error.reason}); try again"
            " later. Nothing was sent.",
        ) from None


def _checked_session(session: str) -> str:
    session = session.strip()
    if (
        not session
        or session == MASTER_THREAD
        or len(session) > _MAX_SESSION_LEN
        or "/" in session
        or any(unicodedata.category(c).startswith("C") for c in session)
    ):
        raise AskRefused(
            "bad_session",
            f"refused: {untrusted(session)} cannot be a session id (not empty, not"
            f" {MASTER_THREAD!r}, no '/', no control characters, at most {_MAX_SESSION_LEN}"
            " characters); leave session out to reuse the live one or start a new one."
            " Nothing was sent.",
        )
    return session

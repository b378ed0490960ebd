"""The store contract. Every backend passes `backchannel.testing.StoreContract`.

The API is batch-first (`append_inbound` takes many events and commits them in
one transaction) so the switchboard can group-commit whatever arrives
together, and async so a networked backend fits the same shape.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from attrs import frozen

from ..errors import UnknownConversation
from ..model import Address, Conversation, Event, Message, Outbound, Receipt, Sender

__all__ = [
    "ASK_OPEN_STATES",
    "ASK_STATES",
    "AppendResult",
    "Ask",
    "Inbound",
    "OutboxEntry",
    "Participant",
    "RunRecord",
    "Store",
    "dead_letter_digest",
    "find_by_reference",
]

#: `Store.search_index_complete`, kept per task (a search's caller reads it after awaiting)
_SEARCH_INDEX_COMPLETE: ContextVar[bool] = ContextVar("search_index_complete", default=True)

#: the columns a dead letter is listed with (Store.dead_letters)
DEAD_LETTER_KEYS = ("id", "account", "ref", "reason", "payload", "at", "deliveries", "first_at")
#: a pending send's reason while it waits out a rate limit (`Store.note_waiting`)
WAITING = "waiting out a rate limit"
#: what a restart makes of such a send: nothing of it was in flight
NEVER_SENT_WAITING = "not sent: the process stopped while it waited out a rate limit"


def dead_letter_digest(ref: str, payload: str) -> str:
    """Name an unreadable payload by what is kept of it: its redeliveries share the name."""
    kept = f"{ref}\0{payload}".encode("utf-8", "replace")
    return hashlib.sha256(kept).hexdigest()


@frozen
class Inbound:
    """One event to append, with the policy's verdict and adapter state to commit with it."""

    event: Event
    held: bool = False
    triggers: bool = False
    state: Mapping[str, str | None] | None = None


@frozen
class AppendResult:
    """Outcome of one appended event.

    status: "stored" (a new transcript row), "applied" (an edit, delete or
    reaction changed an existing row), "recorded" (an edit/delete/reaction
    whose target is unknown: kept for dedupe only), "duplicate".
    """

    status: str
    conversation_id: int
    seq: int | None = None
    triggers: bool = False


@frozen
class Participant:
    sender: Sender
    message_count: int
    first_seq: int
    last_seq: int


@frozen
class OutboxEntry:
    """One outbound request as recorded: status pending, sent, failed or uncertain."""

    id: int
    conversation_id: int
    kind: str
    text: str
    status: str
    reason: str | None = None
    reply_to: str | None = None
    target: str | None = None
    message_seq: int | None = None
    platform_ids: tuple[str, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0
    #: the conversation key a cross-conversation send came from (Outbound.origin)
    origin: str | None = None
    #: the run whose tool call made this request (None: an operator's send)
    run_id: int | None = None


@frozen
class RunRecord:
    id: int
    conversation_id: int
    trigger_seq: int
    upto_seq: int
    started_at: float
    finished_at: float | None = None
    status: str = "running"
    error: str | None = None


#: pending: sent (or being sent), no answer yet; uncertain: the send may not have arrived;
#: failed: the platform refused the question; expired: no answer within the ask timeout
#: (a late answer is still reported); answered: the answer was reported to the origin;
#: lapsed: expired or uncertain, and still unanswered `session_live` after its deadline
#: (no later message of the session is taken for its answer)
ASK_STATES = ("pending", "uncertain", "failed", "expired", "answered", "lapsed")
#: states in which an inbound reply on the session may still answer the ask
ASK_OPEN_STATES = ("pending", "uncertain", "expired")
#: the origin_conversation_id of an ask made outside any conversation (an MCP client, through
#: `serve`'s control socket): its answer is matched and stored but reported nowhere (the
#: asker reads it), and its expiry posts no notice
NO_ORIGIN = 0
#: how such an ask's origin is shown (`backchannel asks`, a session's `created_by`)
NO_ORIGIN_LABEL = "(mcp)"


@frozen
class Ask:
    """One question an agent asked another agent, and where its answer must be reported.

    Written before the question is sent (`Store.record_ask`); `answer_seq` is
    set when a reply on the session is matched to it (`Store.correlate_reply`),
    and `state` becomes "answered" only once the answer is reported.
    """

    id: int
    #: the conversation whose run asked (NO_ORIGIN: none), and the message (#n) that started
    #: that run
    origin_conversation_id: int
    origin_seq: int | None
    #: the session conversation with the peer (account, peer agent id, session id)
    peer_conversation_id: int
    question: str
    state: str
    asked_at: float
    #: when an unanswered ask expires (asked_at + ask_timeout)
    deadline: float
    #: the question's transcript row and outbox row in the session conversation
    message_seq: int | None = None
    outbox_id: int | None = None
    reason: str | None = None
    #: the reply matched to this ask (its seq in the session conversation)
    answer_seq: int | None = None
    matched_at: float | None = None
    #: when the answer (state answered) or the expiry notice was reported to the origin
    reported_at: float | None = None
    expiry_reported_at: float | None = None


class Store(ABC):
    """The durable transcript: conversations, messages, outbox, runs, adapter state."""

    # lifecycle -------------------------------------------------------------
    @abstractmethod
    async def close(self) -> None:
        """Flush and close. Idempotent."""

    @abstractmethod
    async def recover(self) -> list[OutboxEntry]:
        """Mark `pending` outbox rows `uncertain` and running runs `interrupted`; return the rows."""

    # inbound ---------------------------------------------------------------
    @abstractmethod
    async def append_inbound(self, items: Sequence[Inbound]) -> list[AppendResult]:
        """Append events in order, in one transaction; dedupe on (account, event_id)."""

    @abstractmethod
    async def is_known(self, account: str, event_id: str) -> bool:
        """Return True when (account, event_id) is already stored."""

    # conversations ---------------------------------------------------------
    @abstractmethod
    async def conversation(self, conversation_id: int) -> Conversation:
        """Return one conversation; raise StoreError when unknown."""

    @abstractmethod
    async def find_conversation(self, address: Address) -> Conversation | None:
        """Return the conversation at `address`, or None."""

    @abstractmethod
    async def ensure_conversation(
        self, address: Address, kind: str = "direct", title: str | None = None
    ) -> Conversation:
        """Return the conversation at `address`, creating it when new."""

    @abstractmethod
    async def conversations(
        self, account: str | None = None, limit: int = 100
    ) -> list[Conversation]:
        """Return conversations, most recently active first."""

    @abstractmethod
    async def search_conversations(
        self,
        *,
        accounts: Collection[str] | None = None,
        query: str | None = None,
        limit: int = 20,
    ) -> list[Conversation]:
        """Return conversations of `accounts` (None: every account), most recently active first.

        With `query`, only conversations in which every word of it (as a word
        prefix, case and accents ignored; at most the first 8 words) appears
        somewhere: the title, a participant's name or handle, or the text of a
        visible message (in or out; held messages never match). A query with no
        words matches nothing.

        A store whose `searches_chats` is True also takes `chats` and
        `excluded_chats` (account -> chats: of an account named there, only
        those chats, or all but those). A store whose text index catches up
        in bounded steps sets `search_index_complete` after a search with a
        query: False means newer messages cannot match yet (a later search
        goes on).
        """

    #: whether `search_conversations` takes `chats` / `excluded_chats` (see there)
    searches_chats = False

    @property
    def search_index_complete(self) -> bool:
        """Whether the last search with a query, in this task, found the text index
        caught up (per task: two searches at once each read their own)."""
        return _SEARCH_INDEX_COMPLETE.get()

    @search_index_complete.setter
    def search_index_complete(self, complete: bool) -> None:
        _SEARCH_INDEX_COMPLETE.set(complete)

    @abstractmethod
    async def participants(self, conversation_id: int) -> list[Participant]:
        """Return the people seen in a conversation lately, most active first.

        The stores count who wrote the latest visible inbound messages (1,000
        by default): each one's `message_count`, `first_seq` and `last_seq`
        are over those, not the whole history (which costs a read of every
        row of a long conversation).
        """

    @abstractmethod
    async def set_conversation_meta(self, conversation_id: int, meta: Mapping[str, Any]) -> None:
        """Merge `meta` into the conversation's metadata."""

    # transcript ------------------------------------------------------------
    @abstractmethod
    async def window(
        self, conversation_id: int, limit: int, upto_seq: int | None = None
    ) -> list[Message]:
        """Return the last `limit` visible (not held) messages up to `upto_seq`, oldest first.

        Must cost O(limit), whatever the length of the conversation.
        """

    async def transcript(self, conversation_id: int, limit: int) -> list[Message]:
        """The last `limit` messages, held ones included, oldest first (what a chat page shows).

        Held rows never reach the agent, but the person who wrote one may see it
        (the web chat shows a visitor their own). A store without its own
        query shows what `window` shows.
        """
        return await self.window(conversation_id, limit)

    @abstractmethod
    async def history(self, conversation_id: int, before_seq: int, limit: int) -> list[Message]:
        """Return up to `limit` visible messages before `before_seq`, oldest first."""

    @abstractmethod
    async def messages_after(
        self, conversation_id: int, after_seq: int, limit: int = 1000
    ) -> list[Message]:
        """Return visible messages with seq > after_seq, oldest first."""

    @abstractmethod
    async def count_visible(self, conversation_id: int, before_seq: int | None = None) -> int:
        """Return how many visible (not held) messages have seq < `before_seq` (None: all)."""

    @abstractmethod
    async def message(self, conversation_id: int, seq: int) -> Message | None:
        """Return one message by seq, or None."""

    @abstractmethod
    async def message_by_platform_id(
        self, conversation_id: int, platform_message_id: str
    ) -> Message | None:
        """Return the message with this platform id in the conversation, or None."""

    @abstractmethod
    async def revisions(self, conversation_id: int, seq: int) -> list[tuple[str, str, float]]:
        """Return earlier versions of a message as (kind, text, at), oldest first."""

    # outbound --------------------------------------------------------------
    @abstractmethod
    async def record_outbound(
        self,
        conversation_id: int,
        outbound: Outbound,
        sender: Sender,
        run_id: int | None = None,
        seen_seq: int | None = None,
        *,
        hand_to: tuple[str, bool, float, bool] | None = None,
    ) -> OutboxEntry:
        """Write an outbound request as `pending` before it is sent.

        `run_id` and `seen_seq`: the run that asked for it, and the newest seq that
        run had seen when it did (see `answers_after`). `hand_to` (account, quiet,
        seconds, ready), on a store shared by several workers only: hand it in the
        same transaction to the worker holding that account (see
        PostgresStore.hand_off); not `ready`, no worker takes it until
        `release_handoff` (what must be written first, an ask's row, is written
        between), and if that never comes its deadline fails it.

        For kind "message" this also appends the transcript row (seq assigned).
        `outbound.origin` is kept on the outbox row and, for a message, in the
        transcript row's meta as ``{"origin": key}``.
        """

    @abstractmethod
    async def mark_sent(self, outbox_id: int, receipt: Receipt) -> OutboxEntry:
        """Record success with the platform's message id(s)."""

    @abstractmethod
    async def mark_failed(
        self, outbox_id: int, reason: str, *, never_sent: bool = False
    ) -> OutboxEntry:
        """Record a definite failure (the platform said no).

        `never_sent`: it was never tried (nothing of it went out: a stop while it waited
        out a rate limit, a hand-over no worker took). What an ask staked on it is then
        given back: a report or expiry notice it was is owed again, the ask whose
        question it was fails (see `Store.claim_report`)."""

    @abstractmethod
    async def mark_uncertain(
        self, outbox_id: int, reason: str, *, platform_message_id: str | None = None
    ) -> OutboxEntry:
        """Record that the outcome is unknown (it may have arrived).

        `platform_message_id`, when the adapter knows the id it would have: kept on
        the message, so a reply to it is placed (and matched to its ask).
        """

    async def note_waiting(self, outbox_id: int, waiting: bool) -> bool:
        """Say that a pending send waits out a rate limit (`waiting`), or no longer does.

        While it waits nothing of it is in flight: a restart finding it pending marks it
        failed ("never sent"), so its conversation's next run answers again, where any
        other pending send becomes uncertain (it may have arrived). The stores keep it as
        the pending row's reason, `WAITING`; a store that does not (this default) leaves
        such a send to be counted uncertain.

        Return False when the send is no longer pending (another worker's recovery
        settled it while this one stalled in the wait): it must not be sent then."""
        return True  # optional: a store without it stays correct, only more doubtful

    @abstractmethod
    async def note_platform_id(self, outbox_id: int, platform_message_id: str) -> None:
        """Record the id a pending send's message will have, before it is sent.

        For adapters that choose the id themselves (tiny.place): when the
        process dies during the send, the message keeps the id, so a reply
        naming it is still placed (and matched to its ask). Only a pending
        entry of kind message is changed; anything else is left alone.
        """

    @abstractmethod
    async def outbox(
        self,
        status: str | None = None,
        conversation_id: int | None = None,
        limit: int = 100,
        *,
        run_ids: Collection[int] | None = None,
    ) -> list[OutboxEntry]:
        """Return outbox rows, newest first, optionally filtered (`run_ids`: made by those
        runs)."""

    # handling --------------------------------------------------------------
    @abstractmethod
    async def mark_handled(self, conversation_id: int, seq: int) -> None:
        """Advance the conversation's handled_seq to `seq` (never moves backwards)."""

    @abstractmethod
    async def unhandled(self) -> list[Conversation]:
        """Return conversations with a triggering message past handled_seq."""

    @abstractmethod
    async def begin_run(self, conversation_id: int, trigger_seq: int, upto_seq: int) -> int:
        """Record a run start; return its id."""

    @abstractmethod
    async def answers_after(self, conversation_id: int, trigger_seq: int) -> set[int]:
        """Return the seqs of our messages after `trigger_seq` that a run of this
        conversation recorded after it had seen `trigger_seq` (the outbox row's
        `seen_seq`: its window, or what `new_messages` had handed it by then; rows
        from before that column, the run's `upto_seq`), a run with a trigger of its
        own (a reporter run, trigger 0, answers nobody). Such a message answers the
        trigger whatever became of its run; one the run sent before it saw the
        trigger does not.
        """

    @abstractmethod
    async def sent_for_others(
        self, conversation_id: int, after_seq: int, upto_seq: int
    ) -> set[int]:
        """Return the seqs in (`after_seq`, `upto_seq`] of our messages here that spoke for
        another conversation: sent by a run of another conversation (a cross send, an
        ask's question) or an ask's question whoever asked (an MCP client). bot_turns
        counts every other message of ours as the agent answering here (a report of an
        answer, an operator's send included)."""

    @abstractmethod
    async def sent_elsewhere_after(
        self, conversation_id: int, trigger_seq: int
    ) -> OutboxEntry | None:
        """The newest message a recent run of this conversation sent into another
        conversation after seeing `trigger_seq` (a cross-conversation send), if any.

        A run cut short after such a send (a crash, a worker's death) answered its
        trigger elsewhere: the next run must not be offered it again. The last 5
        runs are looked at; a send that failed does not count.
        """

    @abstractmethod
    async def finish_run(
        self,
        run_id: int,
        status: str,
        error: str | None = None,
        upto_seq: int | None = None,
        *,
        handled_seq: int | None = None,
    ) -> None:
        """Record how a run ended ("ok", "error", "timeout", "cancelled", "stopped").

        With `handled_seq`, the conversation's handled_seq advances to it in the
        same transaction, so the cursor and the run record never disagree.
        """

    @abstractmethod
    async def runs(self, conversation_id: int | None = None, limit: int = 50) -> list[RunRecord]:
        """Return runs, newest first."""

    # adapter state and dead letters ----------------------------------------
    @abstractmethod
    async def get_state(self, account: str, key: str) -> str | None:
        """Read one durable per-account value."""

    @abstractmethod
    async def set_state(self, account: str, key: str, value: str | None) -> None:
        """Write (None deletes) one durable per-account value."""

    @abstractmethod
    async def add_dead_letter(
        self,
        account: str,
        ref: str,
        reason: str,
        payload: str,
        *,
        state: Mapping[str, str | None] | None = None,
    ) -> None:
        """Keep a payload that could not be processed, for the operator.

        `state` (the account's adapter state, key -> value, None deletes) is
        written in the same transaction: a cursor that moves past the payload
        never moves without its letter.

        The same payload again (same account, ref and kept copy: a platform's
        redelivery) does not add a second letter: its letter is replaced by one
        with the next id, the latest reason, and `deliveries` counted up, so the
        newest id still counts every delivery (of one writer at a time: PostgreSQL
        workers adding the same letter at once may leave a gap).
        """

    @abstractmethod
    async def dead_letters(
        self, account: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Return dead letters, newest first."""

    @abstractmethod
    async def stats(self) -> dict[str, int]:
        """Return counts: conversations, messages, held, outbox by status, runs, dead letters."""

    # asks to other agents (docs/orchestration.md) ----------------------------
    @abstractmethod
    async def peer_conversations(
        self, account: str, peer: str, *, active_since: float | None = None
    ) -> list[Conversation]:
        """Return the conversations of `account` with `peer` (chat = peer), newest activity first.

        With `active_since`, only those with a message (in or out) at or after it.
        """

    @abstractmethod
    async def record_ask(
        self,
        *,
        origin_conversation_id: int,
        origin_seq: int | None,
        peer_conversation_id: int,
        question: str,
        deadline: float,
        message_seq: int | None = None,
        outbox_id: int | None = None,
    ) -> Ask:
        """Write a pending ask (before its question is sent); return it."""

    @abstractmethod
    async def mark_ask(
        self, ask_id: int, state: str, reason: str | None = None, *, unanswered: bool = False
    ) -> Ask:
        """Set an ask's state; "answered" also stamps `reported_at`. Return the ask.

        `unanswered`: only while no answer is matched to it (a question's send that
        ends uncertain after the answer came, a lapse racing a late answer): an
        answered ask is left as it is, and returned."""

    @abstractmethod
    async def correlate_reply(self, peer_conversation_id: int, seq: int) -> Ask | None:
        """Match the inbound message `seq` of a session conversation to the ask it answers.

        In one transaction: when an ask already has this answer, return it
        (idempotent). Otherwise, among the conversation's asks in an open state
        without an answer, the one whose question is the message's reply target
        (its `reply_to_seq`), else the oldest whose question precedes the
        message; set its `answer_seq` and return it. None when no ask matches.
        """

    @abstractmethod
    async def expire_asks(self, now: float) -> list[Ask]:
        """Move pending asks past their deadline to "expired" (once); return every expired ask
        whose expiry notice is not reported yet, oldest first."""

    @abstractmethod
    async def claim_report(self, ask_id: int, outbox_id: int | None = None) -> bool:
        """Mark an ask answered and its answer reported, unless it was already reported;
        True when this call did (one reporter wins, whichever worker or restart).

        `outbox_id` is the report's send: if that send fails without ever being tried
        (`mark_failed(never_sent=True)`, a restart finding it waiting out a rate limit,
        a hand-over no holder took), the claim is given back, so the report is made
        again."""

    @abstractmethod
    async def mark_expiry_reported(self, ask_id: int, outbox_id: int | None = None) -> bool:
        """Record that the expiry notice of an ask was reported to its origin; True when
        this call did, False when it was recorded before (one notice wins). `outbox_id`:
        as for `claim_report`."""

    @abstractmethod
    async def asks(
        self,
        *,
        origin_conversation_id: int | None = None,
        peer_conversation_id: int | None = None,
        states: Sequence[str] | None = None,
        awaiting_report: bool = False,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[Ask]:
        """Return asks, oldest first (or newest first), filtered.

        `awaiting_report`: matched but not reported yet. `limit` applies after
        the order: with `newest_first`, the newest `limit` asks.
        """


async def find_by_reference(store: Store, reference: str) -> Conversation | None:
    """Return the conversation named by an id (``12``) or a key (``account/chat[/thread]``).

    The key is the one `backchannel conversations` prints. A chat id may itself
    hold a ``/``, so the whole rest is tried as the chat before the last part is
    taken as a thread. None when nothing matches.
    """
    if reference.isdigit():
        # an id is ASCII digits a store can hold ("²" and "١" are digits to str.isdigit)
        if not reference.isascii() or len(reference) > 19 or int(reference) >= 2**63:
            return None
        try:
            return await store.conversation(int(reference))
        except UnknownConversation:
            return None  # (a store that cannot be reached says so)
    account, _, rest = reference.partition("/")
    if not account or not rest:
        return None
    found = await store.find_conversation(Address(account, rest))
    if found is None and "/" in rest:
        chat, _, thread = rest.rpartition("/")
        found = await store.find_conversation(Address(account, chat, thread))
    return found

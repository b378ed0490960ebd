"""Runs: one hand-over to an agent — framing instruction, messages, executable tools."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from attrs import define, field, frozen

from .config import KEPT_WINDOWS
from .errors import ClaimLost
from .framing import (
    context_of_json,
    default_framing,
    flattened,
    format_message,
    inbound_line,
    own_line,
    speaker,
    told_apart,
    untrusted,
)
from .model import Conversation, Message, Sender
from .secrets import redact
from .store.cache import LRUCache
from .store.rows import attachments_of, json_value, message_row, reactions_of
from .tools import Tool, ToolArgumentError

if TYPE_CHECKING:
    from .store import OutboxEntry

__all__ = ["Agent", "BotTurnsSpent", "Run", "RunBuilder", "RunSession", "WindowSettings"]

log = logging.getLogger("backchannel.runs")

_T = TypeVar("_T")


class Agent(Protocol):
    """Anything that can be handed a Run: an async callable returning nothing useful."""

    async def __call__(self, run: Run) -> Any: ...


@frozen
class WindowSettings:
    """How much transcript a run carries: at most `messages` messages and `chars` characters."""

    messages: int = 50
    chars: int = 24_000


@define
class RunSession:
    """The mutable side of a run: how far it has read, and how it reaches the transcript."""

    conversation_id: int
    #: the highest seq this run has seen (window end, then what new_messages took)
    seen_seq: int
    fetch_after: Callable[[int, int], Awaitable[list[Message]]]
    me: Sender | None = None
    run_id: int | None = None
    #: the message that asked for this run (tools that depend on who asked read it)
    trigger: Message | None = None
    #: awaited after each message the run's tools send is recorded as pending, before it
    #: goes out (a reporter run marks its ask reported there: see asks/coordinator.py)
    on_recorded: Callable[[OutboxEntry], Awaitable[None]] | None = None


@frozen
class Run:
    """What an agent receives. Export with `to_openai()` / `to_anthropic()`; act with `call()`."""

    instruction: str
    messages: tuple[Mapping[str, str], ...]
    tools: tuple[Tool, ...]
    conversation: Conversation
    trigger: Message | None
    session: RunSession = field(repr=False, eq=False)
    #: the channel ("telegram") and how the framing names it ("Telegram")
    channel: str = ""
    channel_name: str = ""
    #: the people (and bots) other than the agent whose messages are in the window
    participants: tuple[Sender, ...] = ()

    @property
    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools]

    def tool(self, name: str) -> Tool | None:
        """Return the tool called `name`, or None."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None

    async def call(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> str:
        """Execute a tool; return a result text the model can read. Never raises for tool errors."""
        tool = self.tool(name)
        if tool is None:
            known = ", ".join(self.tool_names)
            return f"error: there is no tool called {name!r}; the tools are: {known}"
        try:
            result = await tool(arguments)
        except ToolArgumentError as error:
            return f"error: bad arguments for {name}: {error}"
        except asyncio.CancelledError:
            raise
        except ClaimLost as error:  # fenced (several workers): expected, one line
            log.warning("tool %s: %s", name, error)
            return redact(f"error: {name} was not done: {error}")
        except Exception as error:  # a tool must never kill the run
            log.exception("tool %s failed", name)
            return redact(f"error: {name} failed: {type(error).__name__}: {error}")
        text = (
            result
            if isinstance(result, str)
            else json.dumps(result, ensure_ascii=False, default=str)
        )
        return redact(text)  # a tool's words go to a third party (the model's provider)

    async def new_messages(self) -> list[dict[str, str]]:
        """Return inbound messages that arrived since the run began, and count them as handled."""
        fresh = await self.session.fetch_after(self.conversation.id, self.session.seen_seq)
        if not fresh:
            return []
        session = self.session
        # what the run's tools record from now on says it had seen these (Store.answers_after)
        session.seen_seq = fresh[-1].seq
        inbound = [m for m in fresh if m.direction == "in"]
        # told apart from the window's people too: a newcomer may take one of their names
        told = told_apart([*self.participants, *(m.sender for m in inbound)])
        return [format_message(m, session.me, told) for m in inbound]

    def to_openai(self) -> dict[str, Any]:
        """Return {"messages": [system, ...], "tools": [...]} for chat-completions APIs."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.instruction}]
        messages.extend(dict(m) for m in self.messages)
        return {"messages": messages, "tools": [tool.to_openai() for tool in self.tools]}

    def to_anthropic(self) -> dict[str, Any]:
        """Return {"system", "messages", "tools"} with strictly alternating roles, user first."""
        merged: list[dict[str, Any]] = []
        for message in self.messages:
            # messages of one role share one text here: a message's own further lines are
            # indented, so none can read as another message's [#n] line
            content = flattened(message["content"])
            if merged and merged[-1]["role"] == message["role"]:
                merged[-1]["content"] += "\n\n" + content
            else:
                merged.append({"role": message["role"], "content": content})
        if not merged or merged[0]["role"] != "user":
            merged.insert(0, {"role": "user", "content": "(earlier messages are not shown)"})
        if merged[-1]["role"] != "user":
            merged.append({"role": "user", "content": "(no new message since your last one)"})
        return {
            "system": self.instruction,
            "messages": merged,
            "tools": [tool.to_anthropic() for tool in self.tools],
        }


class BotTurnsSpent(Exception):
    """The run would answer a bot after the agent already answered bots `bot_turns` times
    in this conversation since a person last wrote there (Policy.bot_turns): two bots
    that answer each other would otherwise go on for ever."""

    def __init__(self, answers: int, limit: int, bot: Sender):
        self.answers = answers
        self.limit = limit
        self.bot = bot
        super().__init__(
            f"not answering bot {bot.id!r}: the agent has answered bots {answers} times"
            f" here since a person last wrote (bot_turns = {limit}); a bot's message starts"
            " a run again once a person writes"
        )


class RunBuilder:
    """Builds Runs from the store: the window, the framing, the tools."""

    def __init__(
        self,
        store: Any,
        *,
        channel: str,
        channel_name: str,
        me: Callable[[], Sender | None],
        window: WindowSettings,
        tools: Callable[[RunSession, Conversation], Sequence[Tool]],
        framing_hook: Callable[[Conversation, str, str], str | None] | None = None,
        kept_lines: LRUCache[int, dict[int, _KeptLine]] | None = None,
        asking: Callable[[], bool] | None = None,
    ):
        self.store = store
        self.channel = channel
        self.channel_name = channel_name
        self.me = me
        self.window = window
        self.tools = tools
        self.framing_hook = framing_hook
        #: per conversation, the lines its last run's rows made (see _RowWindow); the
        #: switchboard hands every account's builder the same one, so the bound is per process
        self.kept_lines: LRUCache[int, dict[int, _KeptLine]] = (
            kept_lines if kept_lines is not None else LRUCache(KEPT_WINDOWS)
        )
        #: whether runs can ask other agents or send into other conversations (the
        #: orchestration tools are attached): only then is an owed trigger looked up among
        #: the asks and the sends elsewhere a cut-short run made (queries a run otherwise)
        self.asking = asking

    async def build(
        self,
        conversation_id: int,
        trigger_seq: int | None = None,
        *,
        upto_seq: int | None = None,
        notes: Sequence[str] = (),
        conversation: Conversation | None = None,
        bot_turns: int = 0,
    ) -> Run:
        """Return the Run an agent would receive now for this conversation.

        With `bot_turns`, a run owed to a bot's message raises `BotTurnsSpent` when the
        conversation shows that many answers of ours to bots since a person last wrote.
        """
        if conversation is None or conversation.id != conversation_id:
            conversation = await self.store.conversation(conversation_id)
        upto = upto_seq if upto_seq is not None else conversation.last_seq
        me = self.me()
        window_rows = getattr(self.store, "window_rows", None)
        window: _Window
        if window_rows is not None:
            # the store hands over its rows: the lines are made from them, and only the
            # messages handed on (trigger, answer) become Message values
            rows = await window_rows(conversation_id, self.window.messages, upto)
            lengths = [len(row[8]) for row in rows]  # the text is column 8
            # lines are worth keeping only where the store hands the same row tuples back
            keep = getattr(self.store, "keeps_window_rows", False)
            row_window = _RowWindow(
                _trim_to_chars(rows, lengths, self.window.chars),
                self.kept_lines.get(conversation_id) if keep else None,
            )
            lines = row_window.lines(me)
            if keep:
                self.kept_lines.put(conversation_id, row_window.made)
            window = row_window
        else:
            messages = await self.store.window(conversation_id, self.window.messages, upto)
            lengths = [len(message.text) for message in messages]
            window = _MessageWindow(_trim_to_chars(messages, lengths, self.window.chars))
            lines = window.lines(me)
        trigger = window.message(trigger_seq) if trigger_seq is not None else None
        if trigger is None and trigger_seq:
            trigger = await self.store.message(conversation_id, trigger_seq)
        owed = trigger_seq is not None and trigger_seq > conversation.handled_seq
        answer = await self._answer(conversation_id, window, trigger) if owed else None
        if trigger is not None and answer is not None:
            # answered already (a crash came before the run was recorded as finished):
            # offering it as unanswered would make the agent answer it twice
            notes = (*notes, _already_answered_note(trigger, answer))
            trigger = None
        elif trigger is not None and owed and self.asking is not None and self.asking():
            asked = await self._asked_about(conversation_id, trigger)
            if asked is None:
                asked = await self._sent_elsewhere_about(conversation_id, trigger)
            if asked is not None:
                # a run cut short after it asked another agent about the trigger, or sent
                # into another conversation: offering the trigger again would do it twice
                notes = (*notes, asked)
                trigger = None
        if bot_turns and trigger is not None and owed and trigger.sender.is_bot:
            answers = await self._answers_to_bots(conversation_id, window, upto, bot_turns)
            if answers >= bot_turns:
                raise BotTurnsSpent(answers, bot_turns, trigger.sender)
        participants = window.participants()
        hidden = max(
            conversation.visible_count - window.count - _visible_after(conversation, upto), 0
        )
        session = RunSession(
            conversation_id,
            upto,
            self.store.messages_after,
            me,
            trigger=trigger,
        )
        tools = tuple(self.tools(session, conversation))
        instruction = default_framing(
            conversation,
            channel=self.channel,
            channel_name=self.channel_name,
            me=me,
            participants=participants,
            hidden_before=hidden,
            tool_names=[t.name for t in tools if t.name not in _READ_ONLY_TOOLS],
            notes=notes,
        )
        if self.framing_hook is not None:
            instruction = self.framing_hook(conversation, self.channel, instruction) or instruction
        return Run(
            instruction,
            lines,
            tools,
            conversation,
            trigger,
            session,
            channel=self.channel,
            channel_name=self.channel_name,
            participants=tuple(participants),
        )

    async def _answer(
        self, conversation_id: int, window: _Window, trigger: Message | None
    ) -> Message | None:
        """Return our message that already answers `trigger` (see `_answer_after`), if any."""
        if trigger is None:
            return None
        later = window.ours_after(trigger.seq)
        if not later:
            return None  # the usual case: nothing of ours since the trigger
        if any(reply_to == trigger.seq for _seq, reply_to in later):
            answered: set[int] = set()  # a reply to it: no need to ask the store
        else:
            answered = await self.store.answers_after(conversation_id, trigger.seq)
        return window.answer_after(trigger, answered)

    async def _answers_to_bots(
        self, conversation_id: int, window: _Window, upto: int, limit: int
    ) -> int:
        """How many times we answered a bot here since a person last wrote, counted up to
        `limit`: through the window, then, if it reached back to neither, through up to
        BOT_SCAN older messages (a window holds few long messages)."""
        tally = _BotAnswers(limit)
        first = window.first_seq()
        tally.for_others = await self.store.sent_for_others(conversation_id, first - 1, upto)
        window.tally(tally)
        scanned = 0
        while not tally.done and tally.oldest > 1 and scanned < BOT_SCAN:
            older = await self.store.window(conversation_id, 200, tally.oldest - 1)
            if not older:
                break
            scanned += len(older)
            tally.for_others |= await self.store.sent_for_others(
                conversation_id, older[0].seq - 1, tally.oldest - 1
            )
            _MessageWindow(older).tally(tally)
        return tally.answers

    async def _sent_elsewhere_about(self, conversation_id: int, trigger: Message) -> str | None:
        """The note for a message a cut-short run sent into another conversation after
        seeing `trigger` (send_to_conversation), if any."""
        sent = await self.store.sent_elsewhere_after(conversation_id, trigger.seq)
        return None if sent is None else await _sent_elsewhere_note(self.store, trigger, sent)

    async def _asked_about(self, conversation_id: int, trigger: Message) -> str | None:
        """The note for an ask this conversation made about `trigger` (or later), if any.

        An ask records the seq of the message its run was answering (`origin_seq`):
        at or past the trigger, that run had seen it and acted on it by asking.
        """
        asks = await self.store.asks(
            origin_conversation_id=conversation_id, limit=5, newest_first=True
        )
        ask = next(
            (
                a
                for a in asks
                if a.origin_seq is not None and a.origin_seq >= trigger.seq and a.state != "failed"
            ),
            None,
        )
        if ask is None:
            return None
        session = await self.store.conversation(ask.peer_conversation_id)
        return (
            f"Message #{trigger.seq}: you already asked {untrusted(session.address.chat)} about"
            f" it (ask #{ask.id}, {ask.state}) before this run; the answer is reported here"
            " when it comes, so this run has no new message to answer. Do not ask again; send"
            " something only if the conversation needs it."
        )


async def _sent_elsewhere_note(store: Any, trigger: Message, sent: Any) -> str:
    target = await store.conversation(sent.conversation_id)
    seq = f"#{sent.message_seq}" if sent.message_seq is not None else f"send {sent.id}"
    return (
        f"Message #{trigger.seq}: a run of this conversation that was cut short had already"
        f" sent a message about it to {untrusted(target.address.key)} ({seq},"
        f" {sent.status}) before this run, so this run has no new message to answer. Do"
        " not send it again; send something only if the conversation needs it."
    )


class _Window(Protocol):
    """The messages a run shows, whichever shape the store handed them over in."""

    count: int

    def lines(self, me: Sender | None) -> tuple[dict[str, str], ...]: ...

    def message(self, seq: int) -> Message | None: ...

    def ours_after(self, seq: int) -> list[tuple[int, int | None]]:
        """(seq, reply_to_seq) of our messages after `seq` that may have arrived."""
        ...

    def answer_after(self, trigger: Message, answered: set[int]) -> Message | None: ...

    def participants(self) -> list[Sender]: ...

    def tally(self, tally: _BotAnswers) -> None:
        """Feed the window's messages to `tally`, newest first, until it is done."""
        ...

    def first_seq(self) -> int:
        """The seq of the window's oldest message (0 when it is empty)."""
        ...


class _MessageWindow:
    """A window the store handed over as Messages (`Store.window`)."""

    def __init__(self, messages: list[Message]):
        self.messages = messages
        self.count = len(messages)

    def lines(self, me: Sender | None) -> tuple[dict[str, str], ...]:
        told = told_apart(m.sender for m in self.messages if m.direction == "in")
        return tuple([format_message(m, me, told) for m in self.messages])

    def message(self, seq: int) -> Message | None:
        return next((m for m in reversed(self.messages) if m.seq == seq), None)

    def ours_after(self, seq: int) -> list[tuple[int, int | None]]:
        return [
            (m.seq, m.reply_to_seq)
            for m in self.messages
            if m.direction == "out" and m.seq > seq and m.status in _MAY_HAVE_ARRIVED
        ]

    def answer_after(self, trigger: Message, answered: set[int]) -> Message | None:
        return _answer_after(self.messages, trigger, answered)

    def participants(self) -> list[Sender]:
        return _participants_in(self.messages)

    def tally(self, tally: _BotAnswers) -> None:
        for m in reversed(self.messages):
            if m.direction == "out":
                tally.ours(m.seq, m.status)
            else:
                tally.theirs(m.seq, m.sender.id, m.sender.is_bot)
            if tally.done:
                return

    def first_seq(self) -> int:
        return self.messages[0].seq if self.messages else 0


#: a line made from a row: (the row, role, content, its Sender or None for ours)
_KeptLine = tuple[tuple[Any, ...], str, str, Sender | None]


class _RowWindow:
    """A window the store handed over as its rows (`MESSAGE_COLUMNS`: see store/rows.py).

    Each line comes from the row's fields through the same functions
    format_message uses; the messages of one sender share one Sender. A
    line is a function of its row alone, and the SQLite store hands over
    the very same row tuple while the row is unchanged (store/windows.py),
    so `kept` (seq -> the row, role, content and Sender the last run made)
    saves making it again; a changed row is a new tuple and is made afresh.
    """

    def __init__(self, rows: list[tuple[Any, ...]], kept: dict[int, _KeptLine] | None = None):
        self.rows = rows
        self.count = len(rows)
        self._kept = kept
        #: what `lines` made, by seq, for the next run
        self.made: dict[int, _KeptLine] = {}
        #: (sender_id, sender_name, sender_handle, sender_is_bot) -> (Sender, speaker name)
        self._senders: dict[tuple[Any, ...], tuple[Sender, str]] = {}
        #: sender id -> latest Sender of the inbound rows, as `lines` met them
        self._seen: dict[str, Sender] | None = None

    def _sender(self, row: tuple[Any, ...]) -> tuple[Sender, str]:
        key = row[4:8]
        known = self._senders.get(key)
        if known is None:
            sender = Sender(row[4], row[5], row[6], bool(row[7]))
            known = self._senders[key] = (sender, speaker(sender))
        return known

    def lines(self, me: Sender | None) -> tuple[dict[str, str], ...]:
        seen: dict[str, Sender] = {}
        self._seen = seen
        kept = self._kept or {}
        made: dict[int, _KeptLine] = {}
        lines = []
        told = self._told_apart()
        line: _KeptLine
        for row in self.rows:
            seq = row[1]
            if told and row[4] in told and row[2] != "out":
                # its name depends on who else the window holds: made afresh, never kept
                line = (row, *self._line(row, told[row[4]]))
            else:
                old = kept.get(seq)
                line = old if old is not None and old[0] is row else (row, *self._line(row))
                made[seq] = line
            if line[3] is not None:
                seen[row[4]] = line[3]
            lines.append({"role": line[1], "content": line[2]})
        self.made = made
        return tuple(lines)

    def _told_apart(self) -> dict[str, str]:
        # each inbound sender as its rows name it (_sender makes one Sender per name)
        senders = {id(sender): sender for row in self.rows if row[2] != "out"
                   for sender in (self._sender(row)[0],)}  # fmt: skip
        return told_apart(senders.values()) if len(senders) > 1 else {}

    def _line(self, row: tuple[Any, ...], told: str = "") -> tuple[str, str, Sender | None]:
        if row[2] != "out":
            sender, name = self._sender(row)
            name += told
            content = inbound_line(
                row[1],
                name,
                row[8],
                row[11],
                row[10],
                row[15],
                row[16],
                attachments_of(row[13]) if row[13] else (),
                reactions_of(row[21]) if row[21] else (),
                context_of_json(row[22]),
            )
            return "user", content, sender
        meta = json_value(row[22]) if row[22] else None
        content = own_line(
            row[1],
            row[8],
            row[11],
            row[10],
            row[15],
            row[16],
            meta.get("origin") if meta else None,
            row[19],
            row[20],
        )
        return "assistant", content, None

    def message(self, seq: int) -> Message | None:
        row = next((row for row in reversed(self.rows) if row[1] == seq), None)
        return None if row is None else message_row(row)

    def ours_after(self, seq: int) -> list[tuple[int, int | None]]:
        return [
            (row[1], row[11])
            for row in self.rows
            if row[2] == "out" and row[1] > seq and row[19] in _MAY_HAVE_ARRIVED
        ]

    def answer_after(self, trigger: Message, answered: set[int]) -> Message | None:
        row = next(
            (
                row
                for row in self.rows
                if row[2] == "out"
                and row[1] > trigger.seq
                and row[19] in _MAY_HAVE_ARRIVED
                and (row[11] == trigger.seq or row[1] in answered)
            ),
            None,
        )
        return None if row is None else message_row(row)

    def participants(self) -> list[Sender]:
        if self._seen is None:
            self.lines(None)  # they are met while making the lines
        assert self._seen is not None
        return list(self._seen.values())

    def tally(self, tally: _BotAnswers) -> None:
        for row in reversed(self.rows):
            if row[2] == "out":
                tally.ours(row[1], row[19])
            else:
                tally.theirs(row[1], row[4], bool(row[7]))
            if tally.done:
                return

    def first_seq(self) -> int:
        return int(self.rows[0][1]) if self.rows else 0


#: how many messages before a run's window the bot_turns count reads at most: a bot that
#: keeps writing is answered again only after this many of its messages with none of ours
BOT_SCAN = 1_000


class _BotAnswers:
    """The times we answered a bot since a person last wrote, fed newest message first.

    Each stretch of our messages right after a bot's message is one answer. Ours count
    when they may have arrived and did not speak for another conversation
    (`for_others`, seqs: Store.sent_for_others: an ask's question, a cross send); a
    report of an ask's answer counts (a bot answering reports would loop as well). A
    notice that names no one (Sender.unknown) is neither a bot nor a person. Done at
    `limit` answers, or at a person's message.
    """

    __slots__ = ("_ours", "answers", "done", "for_others", "limit", "oldest")

    def __init__(self, limit: int, for_others: set[int] | None = None):
        self.limit = limit
        self.for_others: set[int] = for_others if for_others is not None else set()
        self.answers = 0
        self.done = False
        #: the seq of the oldest message fed so far (where a further read goes on from)
        self.oldest = 0
        self._ours = False

    def ours(self, seq: int, status: str) -> None:
        self.oldest = seq
        if status in _MAY_HAVE_ARRIVED and seq not in self.for_others:
            self._ours = True

    def theirs(self, seq: int, sender_id: str, is_bot: bool) -> None:
        self.oldest = seq
        if is_bot:
            if self._ours:
                self.answers += 1
                self._ours = False
                self.done = self.answers >= self.limit
        elif sender_id != "":
            self.done = True  # a person wrote


#: the statuses of our messages that may have reached the platform (a failed one did not)
_MAY_HAVE_ARRIVED = frozenset({"sent", "uncertain", "pending"})


def _answer_after(rows: Sequence[Message], trigger: Message, answered: set[int]) -> Message | None:
    """Return our message that answers `trigger` (sent, or perhaps sent), if there is one.

    A reply to the trigger always answers it. So does any message of ours that a
    run of this conversation sent after it had seen the trigger (`answered`, from
    `Store.answers_after`): a run cut short by a crash, or by a worker's death,
    before it was recorded as finished. A message sent by a run that had not seen
    the trigger (a reply to an earlier message, written while the trigger came)
    does not, whatever came after; nor does a failed send: it definitely did not
    arrive.
    """
    return next(
        (
            m
            for m in rows
            if m.direction == "out"
            and m.seq > trigger.seq
            and m.status in _MAY_HAVE_ARRIVED
            and (m.reply_to_seq == trigger.seq or m.seq in answered)
        ),
        None,
    )


def _already_answered_note(trigger: Message, answer: Message) -> str:
    delivery = (
        "it was delivered"
        if answer.status == "sent"
        else "its delivery is uncertain: it may have arrived"
    )
    return (
        f"Message #{trigger.seq} already has your reply #{answer.seq} ({delivery}), so this"
        f" run has no new message to answer. Do not answer #{trigger.seq} again; send"
        " something only if the conversation needs it."
    )


#: the note a run gets when a restart interrupted the conversation's previous turn
RESTART_NOTE = (
    "backchannel restarted since your last turn in this conversation. Nothing was lost:"
    " every message you have not answered yet is shown below. A reply of yours marked"
    " 'delivery uncertain' was cut short by the restart and may have arrived: do not send"
    " it again unless the conversation shows it is missing."
)

#: tools that only read: the framing's "send tool" list leaves them out
_READ_ONLY_TOOLS = frozenset({"read_history", "list_conversations", "read_conversation"})


def _trim_to_chars(items: list[_T], text_lengths: list[int], limit: int) -> list[_T]:
    """The newest of `items` (messages or rows) whose texts, and 32 a line, fit in `limit`.

    At least the newest one is kept; when everything fits (the usual case), no copy.
    """
    if sum(text_lengths) + 32 * len(items) <= limit:
        return items
    total = 0
    kept = 0
    for length in reversed(text_lengths):
        total += length + 32
        if kept and total > limit:
            break
        kept += 1
    return items[len(items) - kept :]


def _participants_in(rows: Sequence[Message]) -> list[Sender]:
    seen: dict[str, Sender] = {}
    for message in rows:
        if message.direction == "in":
            seen[message.sender.id] = message.sender
    return list(seen.values())


def _visible_after(conversation: Conversation, upto: int) -> int:
    # messages past `upto` are not "earlier history"; approximate by seq distance
    return max(conversation.last_seq - upto, 0)

"""Outbound: record before send, send with bounded retry, record the outcome; the send tools."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from attrs import evolve, frozen

from .adapter import Adapter, Capabilities, utf16_len
from .errors import DeliveryError, RateLimited, Rejected, Superseded, Uncertain
from .framing import flattened, format_message, strip_id_prefix, told_apart
from .model import Conversation, Outbound, Receipt, Sender
from .runs import RunSession
from .storable import storable_sender
from .store import OutboxEntry, Store
from .tools import Tool
from .wire import repair_text

__all__ = ["MAX_PARTS", "Deliverer", "DeliveryResult", "channel_tools", "send_room", "too_long"]

log = logging.getLogger("backchannel.outbound")
#: pauses before each try at recording a delivered send while its sender waits (a
#: database restart, a failover) ...
RECORD_SENT_PAUSES = (0.0, 0.2, 0.5, 1.0, 2.0)
#: ... and then in the background (about four minutes in all)
RECORD_SENT_LATER_PAUSES = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
#: seconds a stop gives the sends still recorded in the background (Deliverer.finish)
STOP_RECORDING_WAIT = 5.0


@frozen
class DeliveryResult:
    """The recorded outcome of one outbound request."""

    entry: OutboxEntry
    receipt: Receipt | None = None

    @property
    def status(self) -> str:
        return self.entry.status

    def describe(self) -> str:
        """A sentence the model can read."""
        what = {"message": "message", "edit": "edit", "reaction": "reaction"}[self.entry.kind]
        if self.status == "sent":
            if self.entry.message_seq is not None:
                parts = len(self.entry.platform_ids)
                split = f" (split into {parts} parts)" if parts > 1 else ""
                return f"sent as #{self.entry.message_seq}{split}"
            return f"{what} done"
        if self.status == "failed":
            return f"{what} NOT delivered: {self.entry.reason}"
        return (
            f"delivery uncertain ({self.entry.reason}): the {what} may or may not have arrived;"
            " do not resend unless asked"
        )


class Deliverer:
    """Sends outbound requests through one adapter, recording each step in the store."""

    def __init__(
        self,
        store: Store,
        adapter: Adapter,
        *,
        max_attempts: int = 4,
        max_retry_after: float = 60.0,
        me: Callable[[], Sender | None] | None = None,
    ):
        self.store = store
        self.adapter = adapter
        #: who the agent is when the adapter is not started here (its last known self)
        self._me = me
        self.max_attempts = max_attempts
        self.max_retry_after = max_retry_after
        #: sends delivered whose recording goes on in the background (_record_sent), with
        #: what they record
        self._recording: dict[asyncio.Task[None], tuple[OutboxEntry, Receipt]] = {}

    async def deliver(
        self,
        conversation: Conversation,
        outbound: Outbound,
        *,
        run_id: int | None = None,
        seen_seq: int | None = None,
        recorded: Callable[[OutboxEntry], Awaitable[None]] | None = None,
    ) -> DeliveryResult:
        """Record `outbound` as pending, send it, and record sent / failed / uncertain.

        `run_id` and `seen_seq` name the run asking and the newest seq it had seen.
        `recorded` is awaited after the pending row is written and before the
        send (an ask writes its pending-ask row there, naming the outbox row).
        """
        entry = await self.record(conversation, outbound, run_id, seen_seq, recorded)
        if isinstance(entry, DeliveryResult):
            return entry
        return await self.attempt(conversation, outbound, entry)

    async def record(
        self,
        conversation: Conversation,
        outbound: Outbound,
        run_id: int | None = None,
        seen_seq: int | None = None,
        recorded: Callable[[OutboxEntry], Awaitable[None]] | None = None,
        *,
        hand_to: tuple[str, bool, float, bool] | None = None,
    ) -> OutboxEntry | DeliveryResult:
        """Record `outbound` as pending (the first half of `deliver`); return its entry.

        A DeliveryResult instead when `recorded` said it is done already elsewhere
        (nothing is to be sent). `hand_to`: see Store.record_outbound. A message longer
        than one send holds (`too_long`) raises Rejected, and nothing is recorded: every
        sender (a run's tools, an operator, another conversation's run, a plugin) is
        held to the same bound.
        """
        if outbound.kind == "message" and (
            problem := too_long(outbound.text, self.adapter.capabilities)
        ):
            raise Rejected(problem)
        outbound = _storable(outbound)
        me = (
            self.adapter.me
            or (self._me() if self._me is not None else None)
            or Sender("me", "me", is_bot=True)
        )
        sender = kept if isinstance(kept := storable_sender(me), Sender) else me
        entry = await self.store.record_outbound(
            conversation.id, outbound, sender, run_id, seen_seq, hand_to=hand_to
        )
        if recorded is not None:
            try:
                await recorded(entry)
            except Superseded as error:
                # done already elsewhere (another worker reported first): nothing is sent
                return DeliveryResult(await self.store.mark_failed(entry.id, f"not sent: {error}"))
            except BaseException:
                await self.store.mark_failed(entry.id, "not sent: recording it failed")
                raise
        return entry

    async def attempt(
        self, conversation: Conversation, outbound: Outbound, entry: OutboxEntry
    ) -> DeliveryResult:
        """Send the recorded pending `entry` (the second half of `deliver`), with bounded
        retry, and record sent / failed / uncertain."""
        outbound = _with_outbox_id(outbound, entry)
        attempt = 0
        while True:
            attempt += 1
            try:
                receipt = await self.adapter.send(outbound)
            except RateLimited as error:
                if attempt >= self.max_attempts or error.retry_after > self.max_retry_after:
                    entry = await self.store.mark_failed(
                        entry.id,
                        f"rate limited {attempt} time(s); last asked to wait"
                        f" {error.retry_after:g}s",
                    )
                    return DeliveryResult(entry)
                log.info(
                    "rate limited on %s, retrying in %.2fs (attempt %d)",
                    conversation.address.key,
                    error.retry_after,
                    attempt,
                )
                # nothing is in flight while it waits: said in the store, so that a restart
                # meanwhile (SIGKILL) knows it was never sent, and the next run answers
                # (best effort: a store failing here only leaves the send more doubtful)
                with contextlib.suppress(Exception):
                    await self.store.note_waiting(entry.id, True)
                try:
                    await asyncio.sleep(error.retry_after)
                except asyncio.CancelledError:
                    # waiting out a rate limit, nothing is in flight: definitely not delivered
                    await self.store.mark_failed(
                        entry.id, "stopped while waiting out a rate limit", never_sent=True
                    )
                    raise
                try:
                    still_pending = await self.store.note_waiting(entry.id, False)
                except Exception:
                    still_pending = True  # cannot tell: as before the marker existed
                if not still_pending:
                    # settled while this waited (it stalled, and another worker's recovery
                    # made it "never sent", so its conversation is answered again): not
                    # sent now, or it would arrive twice
                    reason = "not sent: settled elsewhere while it waited out a rate limit"
                    return DeliveryResult(evolve(entry, status="failed", reason=reason))
                continue
            except Rejected as error:
                entry = await self.store.mark_failed(entry.id, error.reason)
                return DeliveryResult(entry)
            except Uncertain as error:
                entry = await self.store.mark_uncertain(
                    entry.id, error.reason, platform_message_id=error.platform_message_id
                )
                log.warning("send to %s is uncertain: %s", conversation.address.key, error.reason)
                return DeliveryResult(entry)
            except DeliveryError as error:  # a plugin raised the base class: be safe
                entry = await self.store.mark_uncertain(entry.id, error.reason)
                return DeliveryResult(entry)
            except asyncio.CancelledError:
                await self.store.mark_uncertain(entry.id, "cancelled while sending")
                raise
            except Exception as error:  # an adapter bug: the request may have gone out
                log.exception("adapter %s raised from send", self.adapter.channel)
                entry = await self.store.mark_uncertain(
                    entry.id, f"adapter error {type(error).__name__}"
                )
                return DeliveryResult(entry)
            return DeliveryResult(await self._record_sent(entry, receipt), receipt)

    async def _record_sent(self, entry: OutboxEntry, receipt: Receipt) -> OutboxEntry:
        """Record a send the platform took. The message is out whatever the store says:
        its sender is never told it failed (it would send it again). A store failing (a
        database restarting) is asked again a few times; past that, the recording goes on
        in the background for about four minutes, and the sender is told it was sent at
        once. Never recorded (the process stopped first), the row stays pending, which a
        restart makes `uncertain`: never sent again."""
        for pause in RECORD_SENT_PAUSES:
            if pause:
                await asyncio.sleep(pause)
            try:
                return await self.store.mark_sent(entry.id, receipt)
            except Exception as error:
                failure = f"{type(error).__name__}: {error}"
        log.warning(
            "send #%s was delivered, but recording it failed (%s); recording it in the background",
            entry.id,
            failure,
        )
        task = asyncio.get_running_loop().create_task(self._record_sent_later(entry, receipt))
        self._recording[task] = (entry, receipt)
        task.add_done_callback(lambda done: self._recording.pop(done, None))
        return evolve(
            entry,
            status="sent",
            reason="delivered; not recorded yet",
            platform_ids=receipt.part_ids
            or ((receipt.platform_message_id,) if receipt.platform_message_id else ()),
        )

    async def finish(self, timeout: float | None = None) -> None:
        """At stop, before the store closes: sends delivered whose recording still goes on
        in the background are tried again now, until recorded or `timeout` seconds
        (STOP_RECORDING_WAIT). One still unrecorded then stays pending, which a restart
        makes `uncertain` (never sent again); each is named in one line."""
        if not self._recording:
            return
        owed = list(self._recording.values())
        for task in list(self._recording):
            task.cancel()
        await asyncio.gather(*self._recording, return_exceptions=True)
        wait = STOP_RECORDING_WAIT if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + wait
        while owed:
            left = []
            for entry, receipt in owed:
                try:
                    await self.store.mark_sent(entry.id, receipt)
                except Exception:
                    left.append((entry, receipt))
                else:
                    log.info("send #%s is recorded as sent", entry.id)
            owed = left
            if not owed or asyncio.get_running_loop().time() + 0.5 > deadline:
                break
            await asyncio.sleep(0.5)
        for entry, _ in owed:
            log.error(
                "send #%s was delivered but could not be recorded before stopping: a restart"
                " marks it uncertain (never sent again)",
                entry.id,
            )

    async def _record_sent_later(self, entry: OutboxEntry, receipt: Receipt) -> None:
        for pause in RECORD_SENT_LATER_PAUSES:
            await asyncio.sleep(pause)
            try:
                await self.store.mark_sent(entry.id, receipt)
            except Exception:
                continue
            log.info("send #%s is recorded as sent", entry.id)
            return
        log.error(
            "send #%s was delivered but could not be recorded: it stays pending until a"
            " restart marks it uncertain (never sent again)",
            entry.id,
        )


def _storable(outbound: Outbound) -> Outbound:
    """`outbound` with the text both stores hold and the platform gets: a NUL (PostgreSQL's
    text cannot hold it; platforms refuse or mangle it) or half a surrogate pair (no
    store, no platform takes it) made U+FFFD, as inbound text is (`storable_event`)."""
    text = outbound.text
    if type(text) is not str:
        return outbound
    repaired = repair_text(text)
    return outbound if repaired is text else evolve(outbound, text=repaired)


def _with_outbox_id(outbound: Outbound, entry: OutboxEntry) -> Outbound:
    """`outbound` as recorded in `entry`: its id, its seq, and its text as stored (made
    storable once, by `Deliverer.record`)."""
    meta = dict(outbound.meta)
    if entry.message_seq is not None:
        meta["seq"] = entry.message_seq  # channels that render the transcript key it by seq
    return evolve(outbound, text=entry.text, outbox_id=entry.id, meta=meta)


#: one send becomes at most this many platform messages: a runaway text (a model that
#: loops, a client that pastes a log) is refused whole, not sent as hundreds of messages
MAX_PARTS = 10
#: the most characters (UTF-16 units) one send holds where the channel sets no limit
MAX_UNSPLIT = 40_000


def send_room(capabilities: Capabilities) -> int:
    """The most characters (UTF-16 units) one send may hold on a channel with `capabilities`."""
    per_message = capabilities.max_text_len
    return per_message * MAX_PARTS if per_message else MAX_UNSPLIT


def too_long(text: str, capabilities: Capabilities) -> str | None:
    """Why `text` is too long for one send on a channel with `capabilities` (None: it fits)."""
    per_message = capabilities.max_text_len
    limit = send_room(capabilities)
    size = utf16_len(text)
    if size <= limit:
        return None
    parts = f", {MAX_PARTS} messages here" if per_message else ""
    return (
        f"the text is too long ({size} characters, at most {limit}{parts});"
        " nothing was sent. Say it shorter."
    )


def channel_tools(
    deliverer: Deliverer, session: RunSession, conversation: Conversation
) -> list[Tool]:
    """Return the standard tools for a run in `conversation`, as far as the channel allows."""
    store = deliverer.store
    capabilities = deliverer.adapter.capabilities
    address = conversation.address

    async def target(message_id: int) -> tuple[Any, str | None]:
        message = await store.message(conversation.id, message_id)
        if message is None:
            return None, f"error: there is no message #{message_id} in this conversation"
        if message.platform_message_id is None:
            return None, f"error: message #{message_id} has no platform id (it was not delivered)"
        return message, None

    async def send_message(text: str) -> str:
        """Send a new message to this conversation.

        Args:
            text: what to say, as plain text (the platform's own formatting is kept as written)
        """
        text = strip_id_prefix(text)
        if not text.strip():
            return "error: text is empty"
        try:
            result = await deliverer.deliver(
                conversation,
                Outbound(address, text),
                run_id=session.run_id,
                seen_seq=session.seen_seq,
                recorded=session.on_recorded,
            )
        except Rejected as error:  # too long for one send: nothing recorded
            return f"error: {error.reason}"
        return result.describe()

    async def reply(message_id: int, text: str) -> str:
        """Reply to one message of this conversation (shown as a reply on the platform).

        Args:
            message_id: the id of the message to answer, the number in [#n]
            text: what to say
        """
        text = strip_id_prefix(text)
        if not text.strip():
            return "error: text is empty"
        message, problem = await target(message_id)
        if problem:
            return problem
        try:
            result = await deliverer.deliver(
                conversation,
                Outbound(address, text, reply_to=message.platform_message_id),
                run_id=session.run_id,
                seen_seq=session.seen_seq,
                recorded=session.on_recorded,
            )
        except Rejected as error:  # too long for one send: nothing recorded
            return f"error: {error.reason}"
        return result.describe()

    async def edit_message(message_id: int, text: str) -> str:
        """Change the text of a message you sent earlier.

        Args:
            message_id: the id of your own message, the number in [#n]
            text: the new full text
        """
        message, problem = await target(message_id)
        if problem:
            return problem
        if message.direction != "out":
            return f"error: #{message_id} was written by someone else; you can only edit your own"
        result = await deliverer.deliver(
            conversation,
            Outbound(
                address, strip_id_prefix(text), kind="edit", target=message.platform_message_id
            ),
            run_id=session.run_id,
            seen_seq=session.seen_seq,
        )
        return result.describe()

    async def react(message_id: int, emoji: str) -> str:
        """Add an emoji reaction to a message.

        Args:
            message_id: the id of the message, the number in [#n]
            emoji: one emoji, such as 👍 (channels that name emoji, like Slack, also take names such as thumbsup)
        """
        message, problem = await target(message_id)
        if problem:
            return problem
        result = await deliverer.deliver(
            conversation,
            Outbound(address, emoji, kind="reaction", target=message.platform_message_id),
            run_id=session.run_id,
            seen_seq=session.seen_seq,
        )
        return result.describe()

    async def read_history(before_id: int, limit: int = 20) -> str:
        """Read older messages of this conversation, the ones before a given id.

        Args:
            before_id: return messages older than this id
            limit: how many messages, at most 100
        """
        rows = await store.history(conversation.id, before_id, max(1, min(limit, 100)))
        if not rows:
            return f"there are no messages before #{before_id}"
        told = told_apart(m.sender for m in rows if m.direction == "in")
        return "\n\n".join(
            ("(you) " if m.direction == "out" else "")
            + flattened(format_message(m, None, told)["content"])
            for m in rows
        )

    tools: Sequence[Any] = [
        send_message,
        reply if capabilities.replies else None,
        edit_message if capabilities.edits else None,
        react if capabilities.reactions else None,
        read_history,
    ]
    return [Tool.from_function(fn) for fn in tools if fn is not None]

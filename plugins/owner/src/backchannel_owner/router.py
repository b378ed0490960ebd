"""In `serve`: route the owner's replies to the right session, and look after them until read.

The router runs inside the switchboard's ingest, before the platform is
acked: a routed reply is committed to ``owner_messages`` (and its marker
written) before `ingest` returns. The service rebuilds markers at start,
prunes old rows, and sends the staleness notices: one timer per waiting
message and edge (5 minutes, 24 hours), re-armed from the stamps at start.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path
from typing import Any

from backchannel.config import Config
from backchannel.model import Address, Event, Outbound
from backchannel.switchboard import RouteVerdict, Switchboard

from . import lines
from .ids import ALPHABET, ID_LENGTH, LOOKALIKES
from .inbox import InboxItem, inbox_dir, markers_in, remove_marker, write_marker
from .records import OwnerMessage, OwnerRecords
from .settings import OwnerSettings

__all__ = ["OwnerDuplex", "parse_leading_id", "parse_permission_answer"]

log = logging.getLogger("backchannel.owner")

_ID = f"[{ALPHABET}ilo]{{{ID_LENGTH}}}"
_LEADING_ID = re.compile(rf"^\s*#({_ID})(?![0-9a-z])[\s:,.-]*", re.IGNORECASE)
_PERMISSION = re.compile(rf"\A\s*(yes|no)\s+#?({_ID})\s*\Z", re.IGNORECASE)
#: a native reply to a permission prompt: just the answer (a phone adds the full stop)
_BARE_ANSWER = re.compile(r"\A\s*(yes|no)\s*[.!]?\s*\Z", re.IGNORECASE)


def parse_leading_id(text: str) -> tuple[str, str] | None:
    """Return (id, text without the ``#id`` prefix) for a leading ``#id``, else None."""
    match = _LEADING_ID.match(text)
    if match is None:
        return None
    return match.group(1).lower().translate(LOOKALIKES), text[match.end() :]


def parse_permission_answer(text: str) -> tuple[bool, str] | None:
    """Return (allow, id) for exactly ``yes <id>`` / ``no <id>``, else None."""
    match = _PERMISSION.match(text)
    if match is None:
        return None
    return match.group(1).lower() == "yes", match.group(2).lower().translate(LOOKALIKES)


def _forwarded(event: Event) -> bool:
    """Whether the channel marked the message as passed on from someone else (every channel
    sets ``meta["forwarded"]``; docs/writing-an-adapter.md)."""
    return event.meta.get("forwarded") is True


class OwnerDuplex:
    """The inbound router and the service of one serve (one owner account)."""

    def __init__(self, settings: OwnerSettings, config: Config, board: Switchboard):
        self.settings = settings
        self.config = config
        self.board = board
        self.store_path = str(Path(config.store.path).resolve())
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._records: OwnerRecords | None = None
        self._pruned_at = 0.0

    @property
    def records(self) -> OwnerRecords:
        if self._records is None:
            self._records = OwnerRecords(self.board.store.db)  # type: ignore[attr-defined]
        return self._records

    # service -------------------------------------------------------------------------
    async def start(self, board: Switchboard) -> None:
        if self.settings.user is None:
            log.warning(
                "owner duplex is off: [owner] user is not set, so no inbound message can be"
                " trusted as the owner's (notify still works; set owner.user to the owner's"
                " %s user id to let replies reach sessions)",
                board.accounts[self.settings.account].adapter.channel,
            )
        self._prune()
        self.rebuild_markers()
        for message in self.records.waiting():
            self._arm(message)

    def _prune(self) -> None:
        """Delete rows older than keep_days (at start, then at most hourly as replies arrive)."""
        now = time.time()
        self._pruned_at = now
        pruned = self.records.prune(now - self.settings.keep_days * 86400)
        if pruned:
            log.info(
                "owner: pruned %d message(s) older than %g days", pruned, self.settings.keep_days
            )

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)

    def rebuild_markers(self) -> None:
        """Make the marker files match the store's waiting messages."""
        waiting = self.records.waiting()
        wanted = {(m.session_id, m.id) for m in waiting}
        root = inbox_dir()
        if root.is_dir():
            for directory in root.iterdir():
                if not directory.is_dir():
                    continue
                for item in markers_in(directory):
                    mine = Path(item.store).resolve() == Path(self.store_path)
                    if mine and (item.session_id, item.id) not in wanted:
                        remove_marker(item)
        for message in waiting:
            write_marker(self._item(message))

    # router --------------------------------------------------------------------------
    async def route(self, event: Event) -> RouteVerdict:
        """Decide whether a message on the owner account is for a session."""
        settings = self.settings
        records = self.records
        known = records.by_event(event.account, event.event_id)
        if known is not None:
            # a redelivery of what was routed (the store dedupes the row): the ingest may
            # have failed after the row was written, before its marker was (a disk full)
            if known.direction == "in" and known.status == "waiting":
                write_marker(self._item(known))
            return "routed"
        if _forwarded(event):
            # someone else's words passed on (a forward, a share): never the owner's answer,
            # whatever they say ("#m7k3q do it", "yes m7k3q")
            return None
        # a bot is never the owner, whatever id it shows (a Slack bot message's `username`)
        from_owner = (
            settings.user is not None
            and event.sender.id == settings.user
            and not event.sender.is_bot
        )
        if event.kind == "edit":
            return self._edited(event, from_owner)
        answer = parse_permission_answer(event.text)
        if answer is not None:
            return self._permission(event, answer, from_owner)
        parent: OwnerMessage | None = None
        body = event.text
        if event.reply_to:
            parent = records.by_platform_id(event.account, event.address.chat, event.reply_to)
            if parent is None:
                # a reply to a later part of a long message of ours the platform got split
                first = records.first_part(event.account, event.address.chat, event.reply_to)
                if first is not None:
                    parent = records.by_platform_id(event.account, event.address.chat, first)
            if parent is not None and parent.kind == "permission" and parent.direction == "out":
                bare = _BARE_ANSWER.match(event.text)
                if bare is not None:
                    # a native reply to the prompt itself: "yes" on a phone needs no id
                    return self._permission(
                        event, (bare.group(1).lower() == "yes", parent.id), from_owner
                    )
        if parent is None:
            leading = parse_leading_id(event.text)
            if leading is None:
                return None
            parent = records.get(leading[0])
            body = leading[1]
            if parent is None or parent.direction != "out":
                if from_owner:
                    self._correct(event, leading[0])
                return None
        if not from_owner or parent.chat != event.address.chat:
            log.warning(
                "owner: refused a reply to #%s from %s in chat %s (only owner.user, in the"
                " chat the message went to, may steer a session): stored as held",
                parent.id,
                event.sender.id,
                event.address.chat,
            )
            return "held"
        if not body.strip():
            body = event.text
        row = self._waiting(event, time.time(), parent.session_id, parent.id, body.strip())
        write_marker(self._item(row))
        self._arm(row)
        if row.created_at - self._pruned_at > 3600:
            self._prune()
        log.info(
            "owner: reply #%s routed to session %s (re #%s)", row.id, row.session_id, parent.id
        )
        return "routed"

    def _permission(self, event: Event, answer: tuple[bool, str], from_owner: bool) -> RouteVerdict:
        allow, prompt_id = answer
        prompt = self.records.get(prompt_id)
        pending = (
            prompt is not None
            and prompt.kind == "permission"
            and prompt.direction == "out"
            and not prompt.meta.get("answered")
            and float(prompt.meta.get("expires_at", 0)) > time.time()
        )
        if not from_owner or (prompt is not None and prompt.chat != event.address.chat):
            # nobody but the owner, in the prompt's chat, answers a permission prompt
            return "held" if pending else None
        if (
            prompt is None
            and "#" not in event.text
            and not self.records.prompt_waits(event.account, event.address.chat, time.time())
        ):
            # "yes maybe", "no sorry" with no prompt waiting for an answer here: words, not
            # an id the owner mistyped (a correction for every five-letter word is noise)
            return None
        if prompt is None or not pending:
            self._correct(event, prompt_id, expired=prompt is not None)
            return None
        now = time.time()
        with self.records.db:
            # one transaction: a prompt marked answered always has its answer (a failure
            # between the two made the redelivered answer read as one to an answered prompt)
            self.records.update(prompt.id, now, meta={**prompt.meta, "answered": now})
            row = self._waiting(
                event,
                now,
                prompt.session_id,
                prompt.id,
                "yes" if allow else "no",
                kind="permission",
                meta={
                    "request_id": prompt.meta.get("request_id"),
                    "behavior": "allow" if allow else "deny",
                },
            )
        write_marker(self._item(row))
        return "routed"

    def _edited(self, event: Event, from_owner: bool) -> RouteVerdict:
        """An edit of a reply routed to a session: the session gets the new words as a
        message of its own (it read the first ones already, or will); an edit of an
        answer to a permission prompt changes nothing, and the owner is told so."""
        target = event.platform_message_id
        if not from_owner or target is None:
            return None
        routed = self.records.routed_reply(event.account, event.address.chat, target)
        if routed is None:
            return None  # an ordinary edit: the bindings' transcript takes it
        if routed.kind == "permission":
            if event.event_id is not None and not self.records.first_notice(
                f"edit:{event.account}/{event.event_id}", time.time()
            ):
                return "routed"  # a redelivery: told once already
            self._send_later(
                event.address,
                f"#{routed.parent_id} was answered {routed.text!r} already: an edit does not"
                " change the answer",
                reply_to=target,
            )
            return "routed"
        leading = parse_leading_id(event.text)
        body = (leading[1] if leading is not None else event.text).strip() or event.text
        row = self._waiting(
            event,
            time.time(),
            routed.session_id,
            routed.parent_id,
            f"(edited #{routed.id}) {body}",
            platform_message_id=None,  # the edited message is the routed reply's
            meta={"edit_of": routed.id},
        )
        write_marker(self._item(row))
        self._arm(row)
        log.info(
            "owner: edit of #%s routed to session %s as #%s", routed.id, row.session_id, row.id
        )
        return "routed"

    def _waiting(
        self,
        event: Event,
        now: float,
        session_id: str,
        parent_id: str | None,
        text: str,
        **more: Any,
    ) -> OwnerMessage:
        """Store `event`'s words as a message waiting for the session (the event's id keys
        it: a redelivery finds it)."""
        fields: dict[str, Any] = {
            "kind": "message",
            "platform_message_id": event.platform_message_id,
            **more,
        }
        return self.records.insert_message(
            now,
            session_id=session_id,
            direction="in",
            account=event.account,
            chat=event.address.chat,
            parent_id=parent_id,
            text=text,
            event_id=event.event_id,
            status="waiting",
            **fields,
        )

    # corrections and notices --------------------------------------------------------
    def _correct(self, event: Event, message_id: str, *, expired: bool = False) -> None:
        chat_key = f"{event.account}/{event.address.chat}"
        settings = self.settings
        if not self.records.may_correct(
            chat_key,
            message_id,
            time.time(),
            per_chat=settings.correction_per_chat,
            per_id=settings.correction_per_id,
        ):
            log.info("owner: correction for #%s not sent (rate limited)", message_id)
            return
        text = lines.correction_line(message_id)
        if expired:
            text = f"#{message_id} is not a pending permission request (answered or expired)"
        self._send_later(event.address, text, reply_to=event.platform_message_id)

    def _send_later(self, address: Address, text: str, reply_to: str | None = None) -> None:
        self._spawn(self._send(address, text, reply_to))

    def _spawn(self, work: Any) -> None:
        async def logged() -> None:
            try:
                await work
            except Exception:  # a notice is best effort: say so, keep serving
                log.exception("owner: a notice to the owner failed")

        task = asyncio.get_running_loop().create_task(logged(), name="owner-notice")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, address: Address, text: str, reply_to: str | None) -> str:
        account = self.board.accounts[address.account]
        conversation = await self.board.store.ensure_conversation(address)
        result = await account.deliverer.deliver(
            conversation, Outbound(address, text, reply_to=reply_to)
        )
        if result.status != "sent":
            log.warning("owner: notice to the owner not delivered: %s", result.describe())
        return result.status

    # staleness: one timer per waiting message and edge ------------------------------
    def _arm(self, message: OwnerMessage) -> None:
        if message.kind != "message":
            return
        if message.stale_notice_at is None:
            edge, due = "stale", message.created_at + self.settings.stale_after
        elif message.late_notice_at is None:
            edge, due = "late", message.created_at + self.settings.late_after
        else:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, due - time.time())
        key = (message.id, edge)
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        self._timers[key] = loop.call_later(delay, self._due, message.id, edge)

    def _due(self, message_id: str, edge: str) -> None:
        self._timers.pop((message_id, edge), None)
        self._spawn(self._escalate(message_id, edge))

    async def _escalate(self, message_id: str, edge: str) -> None:
        message = self.records.get(message_id)
        if message is None or message.status != "waiting":
            return  # delivered (or parked) meanwhile: nothing to say
        column = "stale_notice_at" if edge == "stale" else "late_notice_at"
        if getattr(message, column) is not None:
            return
        # stamped before sending: a crash here loses a notice, never repeats one
        message = self.records.update(message.id, time.time(), **{column: time.time()})
        mark, name = self.records.session(message.session_id)
        await self._send(
            Address(message.account, message.chat),
            lines.stale_line(mark, name, message.id, late=edge == "late"),
            message.platform_message_id,
        )
        self._arm(message)

    def _item(self, message: OwnerMessage) -> InboxItem:
        return InboxItem(
            {
                "id": message.id,
                "session_id": message.session_id,
                "kind": message.kind,
                "text": message.text,
                "parent_id": message.parent_id,
                "store": self.store_path,
                "config": str(Path(self.config.source).resolve()) if self.config.source else None,
                "created_at": message.created_at,
                "meta": dict(message.meta),
            }
        )

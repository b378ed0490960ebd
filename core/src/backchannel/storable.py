"""Storability: an adapter's Event is checked before it can fail a shared transaction.

Policy for text a store cannot hold: a lone UTF-16 surrogate (which JSON's
``"\\ud800"`` escape puts in a Python `str` and UTF-8 cannot hold), and NUL
(U+0000, JSON ``"\\u0000"``: PostgreSQL's text cannot hold it; SQLite can, but
both stores get the same text):

- in what people wrote or chose (message text, sender names and handles,
  conversation titles, attachment fields, meta keys and values) each lone
  surrogate and each NUL is replaced by U+FFFD and the event is stored: the rest
  of the message is worth more than one character;
- in an identifier (account, chat, thread, event id, message ids, sender id) it
  makes the event a dead letter: a repaired id would no longer name anything
  on the platform, so replies and dedupe would go astray.

Cheap on purpose (it runs for every event on the hot path): every id and text
of the event is joined once and accepted after one search for NUL and one
`str.isascii()`, or for other scripts one UTF-8 encode (which fails exactly
when a lone surrogate is there); attachments and flat meta likewise. Only when
that fails is each field checked on its own, and the event is copied only when
something was repaired. What an agent sends gets the same text
(`wire.repair_text` and `storable_sender`, in `Deliverer.deliver`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import attrs

from .model import Attachment, Event, Sender
from .wire import MAX_DEPTH, nesting_exceeds, repair_text, safe_copy, shown

__all__ = ["LATEST_SENT_AT", "storable_event", "storable_sender"]

_KINDS = frozenset({"message", "edit", "delete", "reaction"})
_CONVERSATION_KINDS = frozenset({"direct", "group", "thread"})
#: SQLite integers are 64-bit; a sent_at past this (the year 5138) is no real time anyway:
#: an adapter reading a time the sender wrote falls back to another before this refuses it
LATEST_SENT_AT = 1e11
#: what PostgreSQL's text cannot hold (SQLite can): replaced for both stores alike
_NUL = "\x00"
#: how `json.dumps` writes NUL (it escapes every control character)
_NUL_IN_JSON = "\\u0000"


def storable_event(event: Event, account: str) -> Event | str:
    """Return `event` (repaired where text can be) when it can be stored, else the reason."""
    address = event.address
    if address.account != account:
        return f"event address names account {address.account!r}"
    sender = event.sender
    thread, message_id, reply_to = address.thread, event.platform_message_id, event.reply_to
    title, handle = event.conversation_title, sender.handle
    # The usual case in one pass: every id and text joined, then one isascii() (or,
    # for other scripts, one UTF-8 encode, which fails exactly on a lone surrogate)
    # clears them all; only when that fails is each field looked at on its own.
    try:
        every_text: str | None = "".join(
            (
                address.chat,
                "" if thread is None else thread,
                event.event_id,
                sender.id,
                "" if message_id is None else message_id,
                "" if reply_to is None else reply_to,
                event.text,
                "" if title is None else title,
                sender.name,
                "" if handle is None else handle,
            )
        )
    except TypeError:
        every_text = None  # something is not text: the field by field checks say what
    texts_clean = (
        every_text is not None
        and _NUL not in every_text
        and (every_text.isascii() or _encodes(every_text))
    )
    if not texts_clean:
        # the model's converters make ids text; one isascii() clears them all in the usual case
        ids = (address.chat, thread, event.event_id, sender.id, message_id, reply_to)
        joined_ids = "".join(i for i in ids if i is not None)
        if not joined_ids.isascii() or _NUL in joined_ids:
            for label, value in zip(_ID_LABELS, ids, strict=True):
                problem = _id_problem(label, value)
                if problem is not None:
                    return problem
    if event.kind not in _KINDS:
        return f"event kind must be one of {sorted(_KINDS)}, not {event.kind!r}"
    if event.conversation_kind not in _CONVERSATION_KINDS:
        return f"conversation kind must be one of {sorted(_CONVERSATION_KINDS)}"
    sent_at = event.sent_at
    if type(sent_at) is not float and (
        isinstance(sent_at, bool) or not isinstance(sent_at, int | float)
    ):
        return f"sent_at must be a number of seconds, not {shown(sent_at)}"
    if not -LATEST_SENT_AT < sent_at < LATEST_SENT_AT:  # also false for NaN
        return f"sent_at must be a time in Unix seconds, not {shown(sent_at)}"
    changes: dict[str, Any] = {}
    if not texts_clean:
        try:
            texts = "".join((event.text, title or "", sender.name, sender.handle or ""))
        except TypeError:
            texts = None  # something is not text: the slow path says what
        if texts is None or not texts.isascii() or _NUL in texts:
            for name in ("text", "conversation_title"):
                value = getattr(event, name)
                if value is None and name == "conversation_title":
                    continue
                if not isinstance(value, str):
                    return f"{name} must be text, not {type(value).__name__}"
                repaired = repair_text(value)
                if repaired is not value:
                    changes[name] = repaired
            checked_sender = storable_sender(sender)
            if isinstance(checked_sender, str):
                return checked_sender
            if checked_sender is not sender:
                changes["sender"] = checked_sender
    if event.attachments:
        attachments = _storable_attachments(event.attachments)
        if isinstance(attachments, str):
            return attachments
        if attachments is not event.attachments:
            changes["attachments"] = attachments
    if event.meta and not _flat_plain(event.meta):
        meta = _storable_meta(event.meta)
        if isinstance(meta, str):
            return meta
        if meta is not event.meta:
            changes["meta"] = meta
    if not changes:
        return event
    return attrs.evolve(event, **changes)


def _encodes(text: str) -> bool:
    """Return True when `text` holds no lone surrogate (UTF-8 can encode it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_ID_LABELS = ("chat id", "thread id", "event id", "sender id", "message id", "reply-to id")


def _id_problem(label: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{label} must be text, not {type(value).__name__}"
    if _NUL in value:
        return f"{label} {ascii(value)[:80]} holds a NUL character"
    if not value.isascii() and repair_text(value) is not value:
        return f"{label} {ascii(value)[:80]} holds half a UTF-16 surrogate pair"
    return None


def storable_sender(sender: Sender) -> Sender | str:
    """`sender` with its name and handle as both stores hold them (NUL and half a
    surrogate pair made U+FFFD), or the reason it cannot be stored."""
    name, handle = sender.name, sender.handle
    if not isinstance(name, str) or not (handle is None or isinstance(handle, str)):
        return "sender name and handle must be text"
    if (
        name.isascii()
        and _NUL not in name
        and (handle is None or (handle.isascii() and _NUL not in handle))
    ):
        return sender
    repaired_name = repair_text(name)
    repaired_handle = None if handle is None else repair_text(handle)
    if repaired_name is name and repaired_handle is handle:
        return sender
    return attrs.evolve(sender, name=repaired_name, handle=repaired_handle)


def _storable_attachments(
    attachments: tuple[Attachment, ...],
) -> tuple[Attachment, ...] | str:
    if not attachments:
        return attachments
    repaired: list[Attachment] = []
    changed = False
    for attachment in attachments:
        if not isinstance(attachment, Attachment):
            return f"attachments must be Attachment values, not {type(attachment).__name__}"
        size = attachment.size
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2**63
        ):
            return f"attachment size must be a byte count, not {shown(size)}"
        file_name, file_mime, file_ref = attachment.name, attachment.mime, attachment.ref
        try:
            joined: str | None = "".join(
                (
                    attachment.kind,
                    "" if file_name is None else file_name,
                    "" if file_mime is None else file_mime,
                    "" if file_ref is None else file_ref,
                )
            )
        except TypeError:
            joined = None  # something is not text: the field by field checks say what
        if joined is not None and _NUL not in joined and (joined.isascii() or _encodes(joined)):
            repaired.append(attachment)  # nothing to repair (the usual case)
            continue
        changes: dict[str, Any] = {}
        for name in ("kind", "name", "mime", "ref"):
            value = getattr(attachment, name)
            if value is None:
                continue
            if not isinstance(value, str):
                return f"attachment {name} must be text, not {type(value).__name__}"
            fixed = repair_text(value)
            if fixed is not value:
                changes[name] = fixed
        if changes:
            changed = True
            attachment = attrs.evolve(attachment, **changes)
        repaired.append(attachment)
    return tuple(repaired) if changed else attachments


_SCALARS = (int, float, type(None))


def _flat_plain(meta: Mapping[str, Any]) -> bool:
    """Return True when every key is text and every value text or a scalar, and no text
    holds a lone surrogate or NUL (what JSON then takes as it is, with nothing to repair)."""
    for key, value in meta.items():
        if type(key) is not str or _NUL in key or not (key.isascii() or _encodes(key)):
            return False
        if type(value) is str:
            if _NUL in value or not (value.isascii() or _encodes(value)):
                return False
        elif type(value) is float:
            if not math.isfinite(value):  # NaN and infinities: not JSON
                return False
        elif not isinstance(value, _SCALARS):  # bool is an int
            return False
    return True


def _storable_meta(meta: Mapping[str, Any]) -> Mapping[str, Any] | str:
    if _flat_plain(meta):
        return meta  # what adapters put there: ids, kinds, flags; JSON takes it as it is
    try:
        dumped = json.dumps(dict(meta), ensure_ascii=False)
    except (TypeError, ValueError) as error:
        return f"meta cannot be stored as JSON: {error}"
    except RecursionError:
        return f"meta is nested deeper than {MAX_DEPTH} levels"
    if nesting_exceeds(meta, MAX_DEPTH, dumped):
        return f"meta is nested deeper than {MAX_DEPTH} levels"
    finite = True
    if "NaN" in dumped or "Infinity" in dumped:  # perhaps a float JSON has no word for
        try:
            json.dumps(dict(meta), allow_nan=False)
        except ValueError:
            finite = False
    nul = _NUL_IN_JSON in dumped  # (or a text holding a backslash and "u0000": copied alike)
    if finite and not nul and (dumped.isascii() or repair_text(dumped) is dumped):
        return meta
    # a lone surrogate repaired, NaN or an infinity (JSON has neither) made null
    copied = safe_copy(meta)
    return dict(_without_nul(copied) if nul else copied)


def _without_nul(value: Any) -> Any:
    """Return a JSON-ready copy (`safe_copy`'s) with NUL made U+FFFD in every key and text."""
    if isinstance(value, str):
        return value.replace(_NUL, "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    return value

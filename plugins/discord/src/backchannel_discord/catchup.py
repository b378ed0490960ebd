"""Per-channel cursors, committed with the events, and the REST catch-up that reads from them.

Discord's Gateway has no acknowledgements: a RESUME replays what a *live*
session missed, but a process that stopped (or crashed) starts a new session,
and nothing sent in the meantime is ever dispatched to it. So the adapter keeps
one cursor per channel, the newest message id it has committed there, written
in the same transaction as the message (``ctx.ingest(raw, state=...)``). After
every READY it reads each channel's history after its cursor over REST (``GET
/channels/{id}/messages?after=``) and ingests what it finds, oldest first,
before any live dispatch. The store drops what it already has.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from attrs import define, field

from .normalize import as_snowflake, snowflake_time

__all__ = ["Cursor", "Cursors", "History", "missed_messages", "read_history"]

#: channels remembered for catch-up; the least recently active are forgotten first
MAX_CHANNELS = 200
_INDEX_KEY = "discord.channels"
_PAGE = 100
#: how far in the future a message id's time may be (clock skew) for the cursor to move to it
_SKEW = 3600.0
#: seconds before the cursor's message within which one never stored is taken as a late
#: dispatch (the Gateway may hand two messages posted together over in either order; a
#: crash between them moved the cursor past the one still to come). Older ones are
#: history from before the bot listened there, never caught up
LATE_DISPATCH = 60.0


@define
class Cursor:
    """The newest committed message id in one channel, and the channel's guild (None for DMs)."""

    message_id: int
    guild_id: str | None = None

    def dump(self) -> str:
        return json.dumps({"id": str(self.message_id), "guild_id": self.guild_id})


@define
class Cursors:
    """The cursors of one account, mirrored in memory and persisted through ingest state."""

    by_channel: dict[str, Cursor] = field(factory=dict)

    @staticmethod
    def key(channel_id: str) -> str:
        return f"discord.cursor.{channel_id}"

    @classmethod
    async def load(cls, get_state: Any) -> Cursors:
        """Read every cursor from durable state (`get_state` is ctx.get_state)."""
        cursors = cls()
        index = await get_state(_INDEX_KEY)
        for channel_id in json.loads(index) if index else []:
            raw = await get_state(cls.key(channel_id))
            if not raw:
                continue
            data = json.loads(raw)
            cursors.by_channel[channel_id] = Cursor(int(data["id"]), data.get("guild_id"))
        return cursors

    def advance(self, data: Mapping[str, Any]) -> dict[str, str | None] | None:
        """Return the state to commit with this MESSAGE_CREATE, or None when the cursor stays.

        The in-memory cursor moves only after the commit: call `committed` then.
        """
        channel_id, message = as_snowflake(data.get("channel_id")), as_snowflake(data.get("id"))
        if channel_id is None or message is None or int(message) == 0:
            return None  # not a snowflake: no cursor a catch-up could read from
        if snowflake_time(message) > time.time() + _SKEW:
            # no message is from the future: a cursor moved there would never move back,
            # and every catch-up of the channel would read nothing
            return None
        message_id = int(message)
        current = self.by_channel.get(channel_id)
        if current is not None and current.message_id >= message_id:
            return None
        guild_id = as_snowflake(data.get("guild_id")) or (current.guild_id if current else None)
        state: dict[str, str | None] = {self.key(channel_id): Cursor(message_id, guild_id).dump()}
        if current is None:
            channels = [channel_id, *self.by_channel][:MAX_CHANNELS]
            state[_INDEX_KEY] = json.dumps(channels)
        return state

    def committed(self, data: Mapping[str, Any]) -> None:
        """Move the in-memory cursor after `advance`'s state was committed."""
        channel_id, message_id = str(data["channel_id"]), int(data["id"])
        current = self.by_channel.get(channel_id)
        guild_id = as_snowflake(data.get("guild_id")) or (current.guild_id if current else None)
        if current is None or current.message_id < message_id:
            self.by_channel.pop(channel_id, None)
            self.by_channel = {channel_id: Cursor(message_id, guild_id), **self.by_channel}

    def covers(self, channel_id: str, message_id: str) -> bool:
        """True when the committed cursor of `channel_id` is at or past `message_id`."""
        current = self.by_channel.get(channel_id)
        return (
            current is not None and message_id.isdigit() and current.message_id >= int(message_id)
        )


@define
class History:
    """What one channel's catch-up read: the messages posted after the cursor (oldest
    first, unreadable ones last), and the newest page of those at or before it (oldest
    first), whose edits and deletions made meanwhile are looked for."""

    missed: list[dict[str, Any]] = field(factory=list)
    recent: list[dict[str, Any]] = field(factory=list)
    #: True when `recent` holds every message of the channel at or before the cursor
    #: (the newest page held the whole channel): none older was left out of it
    complete: bool = False


async def read_history(http: Any, channel_id: str, cursor: Cursor, limit: int) -> History:
    """Read a channel's history for the catch-up: one request when fewer than a page of
    messages came after the cursor (the usual case: that page holds them and the newest
    ones before them), else the messages after it page by page and one page before it.

    REST message objects carry no guild_id; it is filled from the cursor so
    normalize sees a guild message, not a DM.
    """
    page = await http.logs_from(int(channel_id), _PAGE)
    page = page if isinstance(page, list) else []
    placed = sorted((m for m in page if _id(m) is not None), key=lambda m: _id(m) or 0)
    if len(page) < _PAGE or (placed and (_id(placed[0]) or 0) <= cursor.message_id):
        # the page reaches back to the cursor (or holds the whole channel)
        at = cursor.message_id
        missed = [m for m in placed if (_id(m) or 0) > at][:limit]
        missed.extend(m for m in page if _id(m) is None)
        history = History(
            missed, [m for m in placed if (_id(m) or 0) <= at], complete=len(page) < _PAGE
        )
    else:
        before = await http.logs_from(int(channel_id), _PAGE, before=cursor.message_id + 1)
        before = before if isinstance(before, list) else []
        history = History(
            await missed_messages(http, channel_id, cursor, limit),
            sorted((m for m in before if _id(m) is not None), key=lambda m: _id(m) or 0),
        )
    for message in (*history.missed, *history.recent):
        if cursor.guild_id and isinstance(message, dict) and "guild_id" not in message:
            message["guild_id"] = cursor.guild_id
    return history


async def missed_messages(
    http: Any, channel_id: str, cursor: Cursor, limit: int
) -> list[dict[str, Any]]:
    """Return up to `limit` messages posted in `channel_id` after the cursor, oldest first.

    REST message objects carry no guild_id; it is filled from the cursor so
    normalize sees a guild message, not a DM.
    """
    found: list[dict[str, Any]] = []
    unreadable: list[dict[str, Any]] = []
    after = cursor.message_id
    while len(found) < limit:
        asked = min(_PAGE, limit - len(found))
        page = await http.logs_from(int(channel_id), asked, after=after)
        if not isinstance(page, list) or not page:
            break
        # a message without a snowflake id cannot be placed in order: normalize says why
        ordered = sorted((m for m in page if _id(m) is not None), key=lambda m: _id(m) or 0)
        unreadable.extend(m for m in page if _id(m) is None)
        found.extend(ordered)
        if not ordered or len(page) < asked:
            break
        after = _id(ordered[-1]) or after
    found.extend(unreadable)
    for message in found:
        if cursor.guild_id and isinstance(message, dict) and "guild_id" not in message:
            message["guild_id"] = cursor.guild_id
    return found


def late_dispatches(
    recent: list[dict[str, Any]], cursor: Cursor, stored: set[str]
) -> list[dict[str, Any]]:
    """Messages of `recent` (at or before the cursor) that were never stored, posted at most
    LATE_DISPATCH seconds before the cursor's message: dispatched after it, and lost with
    a crash before they came. Oldest first."""
    since = snowflake_time(str(cursor.message_id)) - LATE_DISPATCH
    return [
        message
        for message in recent
        if (number := _id(message)) is not None
        and number < cursor.message_id
        and str(number) not in stored
        and snowflake_time(str(number)) >= since
    ]


def _id(message: object) -> int | None:
    text = as_snowflake(message.get("id")) if isinstance(message, dict) else None
    return int(text) if text is not None else None

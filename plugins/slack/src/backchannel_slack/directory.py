"""Names for ids: users.info and conversations.info, cached with a time to live.

Looking a name up must never cost an event: a failed or slow lookup falls back
to the last known name (however old) or to none at all.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from attrs import define, field

from .delivery import http_status

__all__ = ["ChannelInfo", "Directory", "UserInfo"]

Fetch = Callable[[str], Awaitable[Mapping[str, Any]]]

#: what a Slack id looks like (U…, W…, B…, C…, G…, D…: upper-case letters and digits; Slack
#: says ids may grow to 21 characters, 32 leaves room). Anything else in an event is not
#: worth an API call: no lookup, no cache entry, the id stands in for the name.
SLACK_ID = re.compile(r"\A[A-Z0-9]{2,32}\Z")


@define
class ChannelInfo:
    """What the transcript needs of a conversation: its name and, for a DM, the other person."""

    name: str | None = None
    is_im: bool = False
    user: str | None = None


@define
class UserInfo:
    """What the transcript needs of a member: a name, and whether the account is a bot
    (``users.info``'s ``is_bot``; None when Slack did not say)."""

    name: str | None = None
    is_bot: bool | None = None


@define
class _Entry:
    value: Any
    fetched_at: float


@define
class Directory:
    """A TTL cache over two lookups. `clock` is injectable for tests."""

    fetch_user: Fetch
    fetch_channel: Fetch
    ttl: float = 3600.0
    log: logging.Logger | logging.LoggerAdapter[logging.Logger] = field(
        factory=lambda: logging.getLogger(__name__)
    )
    clock: Callable[[], float] = time.monotonic
    _users: dict[str, _Entry] = field(factory=dict)
    _channels: dict[str, _Entry] = field(factory=dict)
    lookups: int = 0

    async def user_name(self, user_id: str) -> str | None:
        """Return the user's display name, refreshing it when older than `ttl`."""
        info = await self.user(user_id)
        return None if info is None else info.name

    async def user(self, user_id: str) -> UserInfo | None:
        """Return the user's name and kind, refreshing them when older than `ttl`."""
        info: UserInfo | None = await self._get(self._users, user_id, self._load_user)
        return info

    async def channel(self, channel_id: str) -> ChannelInfo | None:
        """Return the conversation's name and kind, refreshing it when older than `ttl`."""
        return await self._get(self._channels, channel_id, self._load_channel)

    async def _get(
        self,
        cache: dict[str, _Entry],
        key: str,
        load: Callable[[str], Awaitable[Any]],
    ) -> Any:
        if not SLACK_ID.match(key):
            return None  # a hostile or mangled id: nothing to ask Slack, nothing to keep
        entry = cache.get(key)
        if entry is not None and self.clock() - entry.fetched_at < self.ttl:
            return entry.value
        try:
            self.lookups += 1
            value = await load(key)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a lookup failure must not lose the event
            self.log.warning(
                "could not look up %s (%s); using %s",
                key,
                _describe(error),
                "the cached name" if entry else "the id",
            )
            return entry.value if entry else None
        cache[key] = _Entry(value, self.clock())
        return value

    async def _load_user(self, user_id: str) -> UserInfo:
        data = await self.fetch_user(user_id)
        user = data.get("user") or {}
        profile = user.get("profile") or {}
        is_bot = user.get("is_bot")
        kind = is_bot if isinstance(is_bot, bool) else None
        for candidate in (
            profile.get("display_name"),
            profile.get("real_name"),
            user.get("real_name"),
            user.get("name"),
        ):
            if isinstance(candidate, str) and candidate.strip():
                return UserInfo(candidate.strip(), kind)
        return UserInfo(None, kind)

    async def _load_channel(self, channel_id: str) -> ChannelInfo:
        data = await self.fetch_channel(channel_id)
        channel = data.get("channel") or {}
        name = channel.get("name")
        return ChannelInfo(
            name=name if isinstance(name, str) and name else None,
            is_im=bool(channel.get("is_im")),
            user=channel.get("user") if isinstance(channel.get("user"), str) else None,
        )


def _describe(error: BaseException) -> str:
    """A short, secret-free description of a lookup failure."""
    response = getattr(error, "response", None)
    if response is not None:
        status = http_status(response)
        data = getattr(response, "data", None)
        code = data.get("error") if isinstance(data, Mapping) else None
        return f"HTTP {status}" + (f", {code}" if code else "")
    if isinstance(error, TimeoutError):
        return "timed out"
    return type(error).__name__

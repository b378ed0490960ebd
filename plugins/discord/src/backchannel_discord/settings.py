"""`DiscordSettings`: an account's config table, checked, with errors that name the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import discord
from attrs import field, frozen
from backchannel.config import positive_number
from backchannel.errors import ConfigError

__all__ = ["DiscordSettings"]

_MENTION_KINDS = frozenset({"users", "roles", "everyone"})


@frozen
class DiscordSettings:
    """Everything the adapter reads from ``[accounts.NAME]`` (see docs/channels/discord.md)."""

    token: str = field(repr=False)
    api_base: str | None = None
    gateway_url: str | None = None
    request_timeout: float = 15.0
    ready_timeout: float = 30.0
    max_ratelimit_wait: float = 2.0
    heartbeat_timeout: float = 60.0
    guild_ready_timeout: float = 2.0
    drain_timeout: float = 5.0
    reconnect_delay: float = 1.0
    reconnect_max_delay: float = 60.0
    catch_up: bool = True
    catch_up_limit: int = 100
    message_content_intent: bool = True
    allowed_mentions: discord.AllowedMentions = field(
        factory=lambda: discord.AllowedMentions(everyone=False, roles=False, users=True)
    )

    @classmethod
    def parse(cls, account: str, settings: Mapping[str, Any]) -> DiscordSettings:
        """Check `settings` and return them; raise ConfigError naming ``accounts.NAME.key``."""
        reader = _Reader(account, settings)
        token = settings.get("token")
        if token is not None and not isinstance(token, str):
            # never quoted: whatever it is, it was meant to be the token
            kind = {bool: "true or false", int: "a number", float: "a number", list: "a list"}
            raise ConfigError(
                'expected the bot token as a string (token = "${DISCORD_TOKEN}"), got'
                f" {kind.get(type(token), 'a table')}",
                key=reader.key("token"),
            )
        if not isinstance(token, str) or not token.strip():
            raise ConfigError("the Discord bot token is missing", key=reader.key("token"))
        mentions = settings.get("allowed_mentions", ["users"])
        if not isinstance(mentions, list | tuple) or not all(isinstance(m, str) for m in mentions):
            raise ConfigError(
                f"expected a list of strings, got {mentions!r}", key=reader.key("allowed_mentions")
            )
        unknown = set(mentions) - _MENTION_KINDS
        if unknown:
            raise ConfigError(
                f"allowed_mentions may hold users, roles, everyone; not {sorted(unknown)}",
                key=reader.key("allowed_mentions"),
            )
        return cls(
            token=token.strip(),
            api_base=_opt_str(settings.get("api_base")),
            gateway_url=_opt_str(settings.get("gateway_url")),
            request_timeout=reader.number("request_timeout", 15.0),
            ready_timeout=reader.number("ready_timeout", 30.0),
            max_ratelimit_wait=reader.number("max_ratelimit_wait", 2.0),
            heartbeat_timeout=reader.number("heartbeat_timeout", 60.0),
            guild_ready_timeout=reader.number("guild_ready_timeout", 2.0),
            drain_timeout=reader.number("drain_timeout", 5.0),
            reconnect_delay=reader.number("reconnect_delay", 1.0),
            reconnect_max_delay=reader.number("reconnect_max_delay", 60.0),
            catch_up=reader.flag("catch_up", True),
            catch_up_limit=int(reader.number("catch_up_limit", 100)),
            message_content_intent=reader.flag("message_content_intent", True),
            allowed_mentions=discord.AllowedMentions(
                everyone="everyone" in mentions,
                roles="roles" in mentions,
                users="users" in mentions,
                replied_user=reader.flag("mention_replied_user", True),
            ),
        )


class _Reader:
    def __init__(self, account: str, settings: Mapping[str, Any]):
        self.account = account
        self.settings = settings

    def key(self, name: str) -> str:
        return f"accounts.{self.account}.{name}"

    def number(self, name: str, default: float) -> float:
        value = self.settings.get(name, default)
        if not positive_number(value):
            raise ConfigError(f"expected a positive number, got {value!r}", key=self.key(name))
        return float(value)

    def flag(self, name: str, default: bool) -> bool:
        value = self.settings.get(name, default)
        if not isinstance(value, bool):
            raise ConfigError(f"expected true or false, got {value!r}", key=self.key(name))
        return value


def _opt_str(value: object) -> str | None:
    return str(value) if value else None

"""The fake platform's data: a bot, guilds, channels, threads, users and messages, as Discord shapes them."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from backchannel.testing.watch import Watch

__all__ = [
    "INTENT_GUILD_MEMBERS",
    "INTENT_MESSAGE_CONTENT",
    "INTENT_PRESENCES",
    "World",
    "timestamp",
]

INTENT_GUILD_MEMBERS = 1 << 1
INTENT_PRESENCES = 1 << 8
INTENT_MESSAGE_CONTENT = 1 << 15
_DISCORD_EPOCH_MS = 1420070400000


def timestamp(ts: float | None = None) -> str:
    """Return Discord's ISO 8601 timestamp for `ts` (Unix seconds; default now)."""
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).isoformat()


class World:
    """Guilds, channels, users and messages, and the JSON objects Discord would send for them.

    Starts with one guild ("Test Server") with a text channel `general`
    (``self.general``) and a user `alice` (``self.alice``).
    """

    def __init__(self, *, token: str, bot_name: str):
        self.token = token
        self._ids = itertools.count()
        self.bot: dict[str, Any] = self._user_payload(bot_name, bot=True)
        self.application_id = self.bot["id"]
        self.guilds: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.members: dict[tuple[str, str], dict[str, Any]] = {}
        #: every message on the fake platform by id (users' and the bot's)
        self.messages: dict[str, dict[str, Any]] = {}
        self.url = ""
        #: woken after every request, dispatch and connection change (`wait_until`)
        self._watch = Watch("FakeDiscord")
        self.guild_id = self.add_guild("Test Server")
        self.general = self.add_channel(self.guild_id, "general")
        self.alice = self.add_user("alice", global_name="Alice")

    @property
    def bot_id(self) -> str:
        return str(self.bot["id"])

    def snowflake(self) -> str:
        """Return a new snowflake id minted now (Discord's layout: ms since 2015 << 22)."""
        ms = int(time.time() * 1000) - _DISCORD_EPOCH_MS
        return str((ms << 22) | (next(self._ids) & 0x3FFFFF))

    def add_guild(self, name: str) -> str:
        """Add a guild with the bot in it (and its managed role, `bot_role_id`); return its id."""
        guild_id = self.snowflake()
        self.guilds[guild_id] = {"id": guild_id, "name": name, "bot_role_id": self.snowflake()}
        return guild_id

    def bot_role_id(self, guild_id: str) -> str:
        """The id of the role Discord made for the bot in `guild_id` (``<@&id>`` mentions it)."""
        return str(self.guilds[guild_id]["bot_role_id"])

    def add_channel(self, guild_id: str, name: str) -> str:
        """Add a guild text channel (type 0); return its id."""
        channel_id = self.snowflake()
        self.channels[channel_id] = {
            "id": channel_id,
            "type": 0,
            "guild_id": guild_id,
            "name": name,
            "position": len(self.channels),
            "permission_overwrites": [],
            "nsfw": False,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "parent_id": None,
        }
        return channel_id

    def add_user(self, username: str, *, global_name: str | None = None, bot: bool = False) -> str:
        """Add a user (and make them a member of every guild); return their id."""
        user = self._user_payload(username, global_name=global_name, bot=bot)
        self.users[user["id"]] = user
        return str(user["id"])

    def set_nick(self, guild_id: str, user_id: str, nick: str | None) -> None:
        self.members[(guild_id, user_id)] = {"nick": nick}

    def dm_channel(self, user_id: str) -> str:
        """Return the id of the DM channel (type 1) between the bot and `user_id`."""
        for channel in self.channels.values():
            if channel["type"] == 1 and channel["recipients"][0]["id"] == user_id:
                return str(channel["id"])
        channel_id = self.snowflake()
        self.channels[channel_id] = {
            "id": channel_id,
            "type": 1,
            "last_message_id": None,
            "recipients": [self.users[user_id]],
        }
        return channel_id

    def _user_payload(
        self, username: str, *, global_name: str | None = None, bot: bool = False
    ) -> dict[str, Any]:
        user: dict[str, Any] = {
            "id": self.snowflake(),
            "username": username,
            "discriminator": "0",
            "global_name": global_name,
            "avatar": None,
            "public_flags": 0,
        }
        if bot:
            user["bot"] = True
        return user

    def message_payload(
        self,
        channel_id: str,
        author_id: str,
        content: str,
        *,
        reply_to: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Build a Message object as the gateway's MESSAGE_CREATE carries it (not dispatched)."""
        channel = self.channels[channel_id]
        author = self.bot if author_id == self.bot_id else self.users[author_id]
        message_id = self.snowflake()
        now = time.time()
        mentions = [
            self._mention(user, channel)
            for user in [self.bot, *self.users.values()]
            if f"<@{user['id']}>" in content or f"<@!{user['id']}>" in content
        ]
        message: dict[str, Any] = {
            "id": message_id,
            "type": 0,
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": timestamp(now),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions,
            "mention_roles": [
                role_id for role_id in self._role_ids(channel) if f"<@&{role_id}>" in content
            ],
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "flags": 0,
            "components": [],
            "nonce": None,
        }
        if channel.get("type") in (10, 11, 12):
            channel["total_message_sent"] += 1
            message["position"] = channel["total_message_sent"]
        guild_id = channel.get("guild_id")
        if guild_id:
            message["guild_id"] = guild_id
            message["member"] = self._member(guild_id, author["id"])
        if reply_to is not None:
            target = self.messages[reply_to]
            message["type"] = 19
            message["message_reference"] = {
                "type": 0,
                "message_id": reply_to,
                "channel_id": target["channel_id"],
                **({"guild_id": guild_id} if guild_id else {}),
            }
            message["referenced_message"] = {
                k: v for k, v in target.items() if k not in {"member", "guild_id"}
            }
            if target["author"]["id"] not in {m["id"] for m in mentions}:
                message["mentions"].append(self._mention(target["author"], channel))
        return message

    def _role_ids(self, channel: Mapping[str, Any]) -> list[str]:
        guild_id = channel.get("guild_id")
        return [self.bot_role_id(guild_id)] if guild_id else []

    def _member(self, guild_id: str, user_id: str) -> dict[str, Any]:
        extra = self.members.get((guild_id, user_id), {})
        return {
            "roles": [],
            "nick": extra.get("nick"),
            "avatar": None,
            "joined_at": timestamp(time.time() - 86400),
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "communication_disabled_until": None,
        }

    def _mention(self, user: Mapping[str, Any], channel: Mapping[str, Any]) -> dict[str, Any]:
        mention = dict(user)
        if channel.get("guild_id"):
            mention["member"] = self._member(channel["guild_id"], user["id"])
        return mention

    def guild_payload(self, guild_id: str) -> dict[str, Any]:
        guild = self.guilds[guild_id]
        channels = [
            {k: v for k, v in c.items() if k != "guild_id"}
            for c in self.channels.values()
            if c.get("guild_id") == guild_id and c["type"] not in (10, 11, 12)
        ]
        threads = [
            dict(c)
            for c in self.channels.values()
            if c.get("guild_id") == guild_id and c["type"] in (10, 11, 12)
        ]
        bot_role = {
            "id": guild["bot_role_id"],
            "name": self.bot["username"],
            "color": 0,
            "hoist": False,
            "position": 1,
            "permissions": "274877975616",
            "managed": True,
            "mentionable": False,
            "flags": 0,
            "tags": {"bot_id": self.bot_id},
        }
        everyone = {
            "id": guild_id,
            "name": "@everyone",
            "color": 0,
            "hoist": False,
            "position": 0,
            "permissions": "1071698660929",
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        return {
            "id": guild_id,
            "name": guild["name"],
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "owner_id": self.alice,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [everyone, bot_role],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "application_id": None,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "vanity_url_code": None,
            "description": None,
            "banner": None,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "preferred_locale": "en-US",
            "public_updates_channel_id": None,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
            "joined_at": timestamp(time.time() - 3600),
            "large": False,
            "unavailable": False,
            "member_count": len(self.users) + 1,
            "voice_states": [],
            "members": [
                {**self._member(guild_id, self.bot_id), "user": self.bot},
            ],
            "channels": channels,
            "threads": threads,
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def application_payload(self) -> dict[str, Any]:
        owner = self.users.get(self.alice) or self.bot
        return {
            "id": self.application_id,
            "name": self.bot["username"],
            "icon": None,
            "description": "",
            "rpc_origins": [],
            "bot_public": True,
            "bot_require_code_grant": False,
            "bot": self.bot,
            "owner": owner,
            "team": None,
            "verify_key": secrets.token_hex(32),
            "flags": 1 << 19,  # GATEWAY_MESSAGE_CONTENT_LIMITED (an unverified bot)
            "summary": "",
            "type": None,
            "redirect_uris": [],
            "interactions_endpoint_url": None,
            "tags": [],
        }

    def new_thread(self, parent_id: str, name: str, *, private: bool = False) -> dict[str, Any]:
        """Add a thread channel (type 11, or 12 when private) under `parent_id`; return it."""
        thread_id = self.snowflake()
        parent = self.channels[parent_id]
        thread = {
            "id": thread_id,
            "type": 12 if private else 11,
            "guild_id": parent["guild_id"],
            "parent_id": parent_id,
            "owner_id": self.alice,
            "name": name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": timestamp(),
                "locked": False,
                "create_timestamp": timestamp(),
            },
        }
        self.channels[thread_id] = thread
        return thread

    def remove_message(self, message_id: str) -> dict[str, Any]:
        """Delete a message; return the MESSAGE_DELETE payload for it."""
        message = self.messages.pop(message_id)
        payload = {"id": message_id, "channel_id": message["channel_id"]}
        if message.get("guild_id"):
            payload["guild_id"] = message["guild_id"]
        return payload

    def _notify(self) -> None:
        self._watch.changed()

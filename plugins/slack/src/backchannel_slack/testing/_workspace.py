"""The fake workspace: members, conversations, message history, and the payloads Slack sends."""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = ["Workspace"]


class Workspace:
    """Users, channels and history of one workspace with one installed app. No I/O."""

    def __init__(
        self,
        *,
        team_id: str = "T0FAKETEAM",
        app_id: str = "A0FAKEAPP",
        bot_user_id: str = "U0FAKEBOT",
        bot_id: str = "B0FAKEBOT",
        bot_name: str = "backchannel",
    ):
        self.team_id = team_id
        self.app_id = app_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.bot_name = bot_name
        self.bot_token = f"xoxb-{secrets.token_hex(6)}-{secrets.token_hex(12)}"
        self.app_token = f"xapp-1-{app_id}-{secrets.token_hex(12)}"
        self.signing_secret = secrets.token_hex(16)
        self.verification_token = secrets.token_hex(12)
        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        #: channel -> ts -> message, as Slack stores them
        self.history: dict[str, dict[str, dict[str, Any]]] = {}
        self._last_ts = 0.0
        self._seed()

    # members and conversations -------------------------------------------------------------------
    def _seed(self) -> None:
        self.add_user(self.bot_user_id, self.bot_name, is_bot=True)
        self.add_user("U0ALICE", "alice", display_name="Alice", real_name="Alice Liddell")
        self.add_user("U0BOB", "bob", display_name="", real_name="Bob Builder")
        self.add_channel("C0GENERAL", "general")
        self.add_channel("G0SECRET", "secret-plans", kind="group")
        self.add_channel("D0ALICE", kind="im", user="U0ALICE")
        self.add_channel("G0MPIM", "mpdm-alice--bob--backchannel-1", kind="mpim")

    def add_user(
        self,
        user_id: str,
        name: str,
        *,
        display_name: str | None = None,
        real_name: str | None = None,
        is_bot: bool = False,
    ) -> dict[str, Any]:
        """Add a member; return the ``users.info`` user object."""
        real = real_name if real_name is not None else name
        user = {
            "id": user_id,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": real,
            "tz": "Europe/Amsterdam",
            "tz_label": "Central European Time",
            "tz_offset": 3600,
            "profile": {
                "real_name": real,
                "display_name": display_name if display_name is not None else name,
                "real_name_normalized": real,
                "display_name_normalized": display_name if display_name is not None else name,
                "team": self.team_id,
            },
            "is_admin": False,
            "is_owner": False,
            "is_bot": is_bot,
            "is_app_user": False,
            "updated": int(time.time()),
        }
        self.users[user_id] = user
        return user

    def add_channel(
        self,
        channel_id: str,
        name: str | None = None,
        *,
        kind: str = "channel",
        user: str | None = None,
    ) -> dict[str, Any]:
        """Add a conversation (kind channel, group, im or mpim); return its ``conversations.info``."""
        created = int(time.time()) - 86400
        if kind == "im":
            channel: dict[str, Any] = {
                "id": channel_id,
                "created": created,
                "is_im": True,
                "is_org_shared": False,
                "user": user,
                "is_user_deleted": False,
                "priority": 0,
            }
        else:
            channel = {
                "id": channel_id,
                "name": name,
                "is_channel": kind == "channel",
                "is_group": kind == "group",
                "is_im": False,
                "is_mpim": kind == "mpim",
                "is_private": kind != "channel",
                "created": created,
                "is_archived": False,
                "is_general": name == "general",
                "name_normalized": name,
                "is_member": True,
                "topic": {"value": "", "creator": "", "last_set": 0},
                "purpose": {"value": "", "creator": "", "last_set": 0},
            }
        self.channels[channel_id] = channel
        self.history.setdefault(channel_id, {})
        return channel

    def channel_type(self, channel_id: str) -> str:
        """The ``channel_type`` Slack puts on message events: channel, group, im or mpim."""
        info = self.channels.get(channel_id, {})
        if info.get("is_im"):
            return "im"
        if info.get("is_mpim"):
            return "mpim"
        if info.get("is_group") or info.get("is_private"):
            return "group"
        return "channel"

    def next_ts(self) -> str:
        """A fresh message ts, strictly increasing, formatted as Slack does."""
        now = max(time.time(), self._last_ts + 0.000001)
        self._last_ts = now
        return f"{now:.6f}"

    # payloads Slack would send ------------------------------------------------------------
    def event_callback(
        self, event: Mapping[str, Any], event_id: str | None = None
    ) -> dict[str, Any]:
        """Wrap an inner event in the Events API envelope (the Socket Mode payload)."""
        return {
            "token": self.verification_token,
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "context_enterprise_id": None,
            "api_app_id": self.app_id,
            "event": dict(event),
            "type": "event_callback",
            "event_id": event_id or f"Ev{secrets.token_hex(5).upper()}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{secrets.token_hex(16)}",
        }

    def message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        thread_ts: str | None = None,
        ts: str | None = None,
        files: list[dict[str, Any]] | None = None,
        subtype: str | None = None,
    ) -> dict[str, Any]:
        """A person's new message (``message`` event), recorded in the channel's history."""
        ts = ts or self.next_ts()
        event: dict[str, Any] = {
            "client_msg_id": str(uuid.uuid4()),
            "type": "message",
            "text": text,
            "user": user,
            "ts": ts,
            "blocks": _rich_text(text),
            "team": self.team_id,
            "channel": channel,
            "event_ts": ts,
            "channel_type": self.channel_type(channel),
        }
        if subtype:
            event["subtype"] = subtype
        if files:
            event["files"] = files
            event["upload"] = False
            event["display_as_bot"] = False
            event.setdefault("subtype", "file_share")
        if thread_ts:
            event["thread_ts"] = thread_ts
            parent = self.history.get(channel, {}).get(thread_ts)
            event["parent_user_id"] = (parent or {}).get("user", user)
        self.history.setdefault(channel, {})[ts] = dict(event)
        return self.event_callback(event)

    def app_mention(self, message_payload: Mapping[str, Any]) -> dict[str, Any]:
        """The ``app_mention`` event Slack sends alongside a message that mentions the bot."""
        inner = message_payload["event"]
        event = {
            key: inner[key]
            for key in ("client_msg_id", "type", "text", "user", "ts", "blocks", "team")
            if key in inner
        }
        event["type"] = "app_mention"
        if "thread_ts" in inner:
            event["thread_ts"] = inner["thread_ts"]
        if "files" in inner:
            event["files"] = inner["files"]
        event["channel"] = inner["channel"]
        event["event_ts"] = inner["event_ts"]
        return self.event_callback(event)

    def reaction(
        self, channel: str, user: str, name: str, ts: str, *, removed: bool = False
    ) -> dict[str, Any]:
        """A person adding (or removing) emoji `name` on message `ts`, as Slack sends it.

        Like Slack's, the event names the channel and the message, never its thread.
        """
        item_user = self.history.get(channel, {}).get(ts, {}).get("user")
        event: dict[str, Any] = {
            "type": "reaction_removed" if removed else "reaction_added",
            "user": user,
            "reaction": name,
            "item": {
                "type": "message",
                "channel": channel,
                "ts": ts,
                "channel_type": self.channel_type(channel),
            },
            "event_ts": self.next_ts(),
        }
        if item_user:
            event["item_user"] = item_user
        return self.event_callback(event)

    def user_says(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None
    ) -> list[dict[str, Any]]:
        """What Slack sends when a person posts: the message, plus app_mention when it mentions the bot."""
        first = self.message(channel, user, text, thread_ts=thread_ts)
        payloads = [first]
        if f"<@{self.bot_user_id}" in text and self.channel_type(channel) != "im":
            payloads.append(self.app_mention(first))
        return payloads

    def bot_message(
        self, channel: str, text: str, *, bot_id: str = "B0DEPLOY", username: str = "deploybot"
    ) -> dict[str, Any]:
        """Another integration's post (``bot_message`` subtype, no user)."""
        ts = self.next_ts()
        event = {
            "type": "message",
            "subtype": "bot_message",
            "text": text,
            "ts": ts,
            "username": username,
            "bot_id": bot_id,
            "channel": channel,
            "event_ts": ts,
            "channel_type": self.channel_type(channel),
        }
        self.history.setdefault(channel, {})[ts] = dict(event)
        return self.event_callback(event)

    def own_message(
        self, channel: str, text: str, *, thread_ts: str | None = None
    ) -> dict[str, Any]:
        """The ``message`` event of a post the bot itself made (an echo)."""
        ts = self.next_ts()
        event = self._bot_event(channel, ts, text, thread_ts)
        self.history.setdefault(channel, {})[ts] = dict(event)
        return self.event_callback(event)

    def edit(self, channel: str, ts: str, text: str) -> dict[str, Any]:
        """A ``message_changed`` event: the message at `ts` now says `text`."""
        previous = dict(self.history.get(channel, {}).get(ts) or {"ts": ts, "text": ""})
        edited_ts = self.next_ts()
        changed = {
            key: value
            for key, value in previous.items()
            if key not in ("channel", "event_ts", "channel_type")
        }
        changed.update(
            text=text,
            blocks=_rich_text(text),
            edited={"user": previous.get("user", ""), "ts": edited_ts},
        )
        self.history.setdefault(channel, {})[ts] = {**previous, "text": text}
        event = {
            "type": "message",
            "subtype": "message_changed",
            "message": changed,
            "previous_message": {
                key: value
                for key, value in previous.items()
                if key not in ("channel", "event_ts", "channel_type")
            },
            "channel": channel,
            "hidden": True,
            "ts": edited_ts,
            "event_ts": edited_ts,
            "channel_type": self.channel_type(channel),
        }
        return self.event_callback(event)

    def delete(self, channel: str, ts: str) -> dict[str, Any]:
        """A ``message_deleted`` event for the message at `ts`."""
        previous = self.history.get(channel, {}).pop(ts, {"ts": ts})
        event_ts = self.next_ts()
        event = {
            "type": "message",
            "subtype": "message_deleted",
            "previous_message": {
                key: value
                for key, value in previous.items()
                if key not in ("channel", "event_ts", "channel_type")
            },
            "channel": channel,
            "hidden": True,
            "deleted_ts": ts,
            "event_ts": event_ts,
            "ts": event_ts,
            "channel_type": self.channel_type(channel),
        }
        return self.event_callback(event)

    def _bot_event(self, channel: str, ts: str, text: str, thread_ts: str | None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "bot_id": self.bot_id,
            "type": "message",
            "text": text,
            "user": self.bot_user_id,
            "ts": ts,
            "app_id": self.app_id,
            "blocks": _rich_text(text),
            "team": self.team_id,
            "bot_profile": {
                "id": self.bot_id,
                "deleted": False,
                "name": self.bot_name,
                "updated": int(time.time()),
                "app_id": self.app_id,
                "team_id": self.team_id,
            },
            "channel": channel,
            "event_ts": ts,
            "channel_type": self.channel_type(channel),
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
            parent = self.history.get(channel, {}).get(thread_ts) or {}
            event["parent_user_id"] = parent.get("user", self.bot_user_id)
        return event


def _rich_text(text: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "rich_text",
            "block_id": secrets.token_hex(3),
            "elements": [
                {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}
            ],
        }
    ]

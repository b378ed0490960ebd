"""Telegram Business: the address of a business chat, and a connection's state.

A bot connected to a Telegram Business account answers the business's
customers in the business account's private chats. Such a chat's ``chat.id``
is the customer's user id, the same as the customer's own private chat with
the bot, so a business chat gets an address of its own::

    Address(account, "biz:{connection id}:{chat id}")

The connection id is written percent-encoded (`urllib.parse.quote` with no
safe characters): the ids Telegram gives are letters, digits, ``-`` and
``_``, which stay as they are, and anything else (a ``/`` would split an
address key, a ``:`` the address itself) is escaped, so every address parses
back to exactly the id and chat it was made from.

The business owner's own messages in such a chat are marked ``NO_RUN`` by
normalize: shown to the agent, starting no run (the person is answering).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from attrs import frozen

__all__ = [
    "BUSINESS_CHAT",
    "BUSINESS_OWNER",
    "BusinessConnection",
    "business_chat",
    "parse_business_chat",
    "state_key",
    "valid_connection_id",
]

#: the prefix of an Address chat naming a chat of a connected business account
BUSINESS_CHAT = "biz:"
#: meta key: True on a message the business account's owner wrote in a business chat
#: themselves (or another bot sent on their behalf): stored, never starting a run
BUSINESS_OWNER = "business_owner"
#: the longest connection id an address takes (Telegram's are 27 characters or so)
_MAX_CONNECTION_ID = 256


def business_chat(connection_id: str, chat_id: int) -> str:
    """The Address chat of chat `chat_id` of the business connection `connection_id`."""
    return f"{BUSINESS_CHAT}{quote(connection_id, safe='')}:{chat_id}"


def parse_business_chat(chat: str) -> tuple[str, int] | None:
    """Return (connection id, chat id) of a ``biz:`` Address chat; None for any other chat.

    Raise ValueError naming what is wrong when `chat` has the prefix but is not
    written as `business_chat` writes it (so no second address names one chat).
    """
    if not chat.startswith(BUSINESS_CHAT):
        return None
    encoded, colon, number = chat[len(BUSINESS_CHAT) :].rpartition(":")
    try:
        connection_id = unquote(encoded, errors="strict") if colon else ""
    except UnicodeDecodeError:  # %-escapes that are no UTF-8
        connection_id = ""
    try:
        chat_id = int(number)
    except ValueError:
        chat_id = 0
    if (
        not connection_id
        or len(connection_id) > _MAX_CONNECTION_ID
        or chat_id <= 0
        or chat_id >= 2**63
        or business_chat(connection_id, chat_id) != chat
    ):
        raise ValueError(
            f"chat {chat!r} is not a business chat address"
            f" ({BUSINESS_CHAT}<connection id>:<positive chat id>, as `backchannel conversations`"
            " lists it)"
        )
    return connection_id, chat_id


def valid_connection_id(value: Any) -> str | None:
    """Return `value` when it can be a business connection id (a short non-empty string
    without whitespace or control characters), else None."""
    if not isinstance(value, str) or not value or len(value) > _MAX_CONNECTION_ID:
        return None
    if not value.isprintable() or any(char.isspace() for char in value):
        return None
    return value


@frozen
class BusinessConnection:
    """What the adapter remembers of one business connection (kept as adapter state)."""

    id: str
    #: the business account's owner (the user who connected the bot)
    user_id: str | None = None
    enabled: bool = True
    can_reply: bool = True

    @classmethod
    def from_update(cls, connection: Mapping[str, Any]) -> BusinessConnection | None:
        """Read a BusinessConnection object (a ``business_connection`` update, or
        getBusinessConnection's answer); None when it names no usable id."""
        connection_id = valid_connection_id(connection.get("id"))
        if connection_id is None:
            return None
        user = connection.get("user")
        user_id = user.get("id") if isinstance(user, Mapping) else None
        if isinstance(user_id, bool) or not isinstance(user_id, int | str):
            user_id = None
        rights = connection.get("rights")
        if isinstance(rights, Mapping):
            # Bot API 9.0: BusinessBotRights, where an absent right is a right not given
            can_reply = rights.get("can_reply") is True
        else:
            # before 9.0 (and still sent beside `rights`): the bare flag
            can_reply = connection.get("can_reply") is True
        # a Boolean on the wire; anything else there does not say it is on (absent: it is)
        enabled = connection.get("is_enabled", True)
        return cls(
            connection_id,
            None if user_id is None else str(user_id),
            enabled=enabled is True,
            can_reply=can_reply,
        )

    def to_state(self) -> str:
        return json.dumps(
            {"user_id": self.user_id, "enabled": self.enabled, "can_reply": self.can_reply}
        )

    @classmethod
    def from_state(cls, connection_id: str, text: str) -> BusinessConnection | None:
        try:
            saved = json.loads(text)
        except ValueError:
            return None
        if not isinstance(saved, dict):
            return None
        user_id = saved.get("user_id")
        return cls(
            connection_id,
            user_id if isinstance(user_id, str) else None,
            enabled=saved.get("enabled") is not False,
            can_reply=saved.get("can_reply") is not False,
        )

    def refusal(self) -> str | None:
        """Why nothing may be sent through this connection now, or None when it may."""
        if not self.enabled:
            return (
                f"the Telegram Business connection {self.id} is disabled (the business"
                " account turned the bot off or removed it); nothing was sent"
            )
        if not self.can_reply:
            return (
                f"the Telegram Business connection {self.id} does not let the bot reply"
                " (the business account did not give it the right to manage messages);"
                " nothing was sent"
            )
        return None


def state_key(connection_id: str) -> str:
    """The adapter state key holding one connection (`BusinessConnection.to_state`)."""
    return f"business:{connection_id}"

"""Real Telegram update shapes for the benches, ids varied, generated lazily.

The shapes are the Telegram adapter's real-payload fixtures
(plugins/telegram/tests/test_real_payloads.py: published examples and
captured updates); every one that becomes a message is used. Conversation
`c` always gets the same shape (a private chat stays private), so a run over
1,000 conversations sees each shape about equally often.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backchannel.model import Event
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.testing import event_id_of

__all__ = ["ACCOUNT", "TOKEN", "event_id_of", "make_adapter", "message_shapes", "updates"]

ACCOUNT = "tg"
#: a well-formed token for the bot the fixtures mention; nothing is sent with it
TOKEN = "7000000001:" + "A" * 35
_FIXTURES = Path(__file__).resolve().parent.parent / "plugins/telegram/tests/test_real_payloads.py"


def make_adapter(account: str = ACCOUNT) -> TelegramAdapter:
    """Return the real Telegram adapter (never started: the bench hands it updates).

    Its API base is a closed loopback port: nothing a bench does may reach Telegram.
    """
    settings = {"token": TOKEN, "username": "helper_bot", "api_base": "http://127.0.0.1:9"}
    return TelegramAdapter(account, settings)


def message_shapes() -> list[dict[str, Any]]:
    """Return the fixture updates the real adapter turns into a message, in a fixed order."""
    spec = importlib.util.spec_from_file_location("telegram_real_payloads", _FIXTURES)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the Telegram payload fixtures from {_FIXTURES}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    adapter = make_adapter()
    shapes = []
    for text in module.ALL_PAYLOADS:
        payload = json.loads(text)
        event = adapter.normalize(payload)
        if event is not None and event.kind == "message" and _body_key(payload):
            shapes.append(payload)
    return shapes


def _body_key(payload: dict[str, Any]) -> str | None:
    for key in ("message", "channel_post"):
        if isinstance(payload.get(key), dict):
            return key
    return None


def conversation_chat(shape: dict[str, Any], conversation: int) -> int:
    """Return the chat id of conversation number `conversation` (sign follows the chat type)."""
    key = _body_key(shape)
    assert key is not None
    private = shape[key]["chat"].get("type", "private") == "private"
    return 100_000_000 + conversation if private else -1_009_000_000_000 - conversation


def updates(
    count: int,
    conversations: int,
    *,
    first_update: int = 1,
    first_message: int = 1,
    shapes: list[dict[str, Any]],
) -> Iterator[dict[str, Any]]:
    """Yield `count` updates spread round-robin over `conversations` chats, made one at a time.

    Update ids count up from `first_update`, message ids from `first_message`. An
    update's event id (``event_id_of``) is ``"{update_id}:{date}"``, the date its shape's.

    Only the dicts that change are copied (the update, its message, its chat
    and sender), the way a JSON decoder would hand over fresh ones.
    """
    for number in range(count):
        conversation = number % conversations
        shape = shapes[conversation % len(shapes)]
        key = _body_key(shape)
        assert key is not None
        body = shape[key]
        chat_id = conversation_chat(shape, conversation)
        fresh = {
            **body,
            "message_id": first_message + number,
            "chat": {**body["chat"], "id": chat_id},
        }
        if "from" in body and body["chat"].get("type", "private") == "private":
            fresh["from"] = {**body["from"], "id": chat_id}
        yield {"update_id": first_update + number, key: fresh}


def sample_events(conversations: int, shapes: list[dict[str, Any]]) -> list[Event]:
    """Return one normalized event per conversation (the ceiling builds its rows from these)."""
    adapter = make_adapter()
    events = []
    for update in updates(conversations, conversations, shapes=shapes):
        event = adapter.normalize(update)
        assert event is not None
        events.append(event)
    return events

"""Hostile values in payloads: ids no Discord snowflake can be, huge numbers, long texts.

Each must end as an Event with canonical ids, None, or a short one-line NormalizeError;
never another exception, and never a row keyed by an id Discord could not have sent.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel_discord.catchup import Cursor, Cursors, missed_messages
from backchannel_discord.normalize import normalize_payload

BOT = "1180000000000000001"
GUILD = "1180000000000000100"
GENERAL = "1180000000000000200"
ALICE = "1180000000000000500"

MESSAGE: dict[str, Any] = {
    "op": 0,
    "s": 7,
    "t": "MESSAGE_CREATE",
    "d": {
        "type": 0,
        "id": "1325400000000000001",
        "channel_id": GENERAL,
        "guild_id": GUILD,
        "content": "hello",
        "timestamp": "2025-01-05T08:00:00.000000+00:00",
        "edited_timestamp": None,
        "author": {"id": ALICE, "username": "alice", "discriminator": "0", "global_name": None},
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
    },
}
REACTION: dict[str, Any] = {
    "op": 0,
    "s": 8,
    "t": "MESSAGE_REACTION_ADD",
    "d": {
        "user_id": ALICE,
        "message_id": "1325400000000000001",
        "channel_id": GENERAL,
        "guild_id": GUILD,
        "emoji": {"id": None, "name": "🔥"},
        "burst": False,
        "type": 0,
    },
}

HUGE_INT = 10**5000  # more digits than int -> str allows (ValueError in str() and repr())
NOT_SNOWFLAKES = [
    2**64,  # one past the largest unsigned 64-bit id
    "18446744073709551616",
    "1" * 25,
    "9" * 5000,
    HUGE_INT,
    -1,
    "0012",  # "12" with leading zeros: another key for the same id
    "１２",  # full-width digits
]


def norm(raw: Any) -> Any:
    return normalize_payload(raw, account="ops", bot_id=BOT)


def with_value(payload: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(payload)
    holder = changed
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return changed


@pytest.mark.parametrize("value", NOT_SNOWFLAKES, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize(
    ("payload", "path"),
    [
        (MESSAGE, ("d", "id")),
        (MESSAGE, ("d", "channel_id")),
        (MESSAGE, ("d", "guild_id")),
        (MESSAGE, ("d", "author", "id")),
        (MESSAGE, ("d", "webhook_id")),
        (REACTION, ("d", "user_id")),
        (REACTION, ("d", "message_id")),
        (REACTION, ("d", "emoji", "id")),
    ],
)
def test_an_id_no_snowflake_can_be_is_a_short_normalize_error(
    payload: dict[str, Any], path: tuple[Any, ...], value: Any
) -> None:
    with pytest.raises(NormalizeError) as caught:
        norm(with_value(payload, path, value))
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300
    assert caught.value.where == ".".join(str(step) for step in path)


def test_the_largest_snowflake_and_integer_ids_are_accepted_as_canonical_text() -> None:
    event = norm(with_value(MESSAGE, ("d", "id"), 2**64 - 1))
    assert event is not None and event.platform_message_id == str(2**64 - 1)
    event = norm(with_value(MESSAGE, ("d", "author", "id"), int(ALICE)))
    assert event is not None and event.sender.id == ALICE


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("d", "mentions"), [{"id": HUGE_INT}]),
        (("d", "mention_roles"), [HUGE_INT]),
        (("d", "sticker_items"), [{"id": HUGE_INT, "name": "wave"}]),
        (("d", "type"), HUGE_INT),
        (("d", "flags"), "9" * 5000),
        (("d", "content"), HUGE_INT),
        (("d", "attachments"), [HUGE_INT]),
        (("d", "member"), "x" * 100_000),
    ],
    ids=lambda v: type(v).__name__,
)
def test_huge_values_anywhere_are_an_event_or_a_short_normalize_error(
    path: tuple[Any, ...], value: Any
) -> None:
    try:
        norm(with_value(MESSAGE, path, value))
    except NormalizeError as error:
        assert "\n" not in str(error) and len(str(error)) < 300


def test_a_forward_with_a_huge_origin_id_keeps_only_the_real_ids() -> None:
    forward = with_value(
        MESSAGE,
        ("d", "message_reference"),
        {"type": 1, "message_id": HUGE_INT, "channel_id": GENERAL, "guild_id": "0012"},
    )
    forward["d"]["content"] = ""
    forward["d"]["message_snapshots"] = [{"message": {"content": "fwd", "attachments": []}}]
    event = norm(forward)
    assert event is not None and event.meta["forwarded_from"] == {"channel_id": GENERAL}


def test_a_reaction_with_a_huge_sequence_number_is_still_read() -> None:
    event = norm(with_value(REACTION, ("s",), HUGE_INT))
    assert event is not None and event.kind == "reaction"


def test_an_edit_keyed_by_a_time_that_is_no_time_is_refused() -> None:
    edit = with_value(MESSAGE, ("t",), "MESSAGE_UPDATE")
    edit["d"]["edited_timestamp"] = "x" * 10_000
    with pytest.raises(NormalizeError) as caught:
        norm(edit)
    assert caught.value.where == "d.edited_timestamp" and len(str(caught.value)) < 300


@pytest.mark.parametrize(
    "message_id",
    [str(2**64 - 1), "9223372036854775807", "0012", "１２"],
)
def test_the_catch_up_cursor_never_moves_to_an_id_from_the_future_or_no_snowflake(
    message_id: str,
) -> None:
    cursors = Cursors()
    data = {"id": message_id, "channel_id": GENERAL, "guild_id": GUILD}
    assert cursors.advance(data) is None
    good = {"id": "1325400000000000001", "channel_id": GENERAL, "guild_id": {"a": None}}
    state = cursors.advance(good)
    assert state is not None
    cursors.committed(good)
    assert cursors.by_channel[GENERAL] == Cursor(1325400000000000001, None)


async def test_catch_up_reads_on_past_a_history_message_without_a_snowflake_id() -> None:
    class History:
        async def logs_from(self, channel: int, limit: int, *, after: int) -> list[Any]:
            if after == 10:
                page: list[Any] = [{"id": str(11 + n)} for n in range(limit - 1)]
                return [{"id": "not an id"}, *page]
            return []

    found = await missed_messages(History(), GENERAL, Cursor(10, GUILD), 5)
    assert [m["id"] for m in found] == ["11", "12", "13", "14", "not an id"]
    assert all(m["guild_id"] == GUILD for m in found)

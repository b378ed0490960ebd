"""Hostile and odd values: normalize refuses them with NormalizeError (or drops the field),
the Bot API client reads any error answer, and the poll loop survives whatever it is told."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from backchannel.errors import NormalizeError, RateLimited, StoreError
from backchannel.storable import storable_event
from backchannel.testing import ContractContext
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.adapter import _delivery_error
from backchannel_telegram.api import MAX_RETRY_AFTER, TelegramError, _result
from backchannel_telegram.normalize import BotIdentity, migration_of, normalize_update
from backchannel_telegram.receive import Poller, PollSettings
from backchannel_telegram.testing import event_id_of

BOT = BotIdentity(id="7000000001", username="helper_bot")
TOKEN = "7000000001:AAH-not-a-real-token_0123456789"

MESSAGE: dict[str, Any] = {
    "update_id": 900000001,
    "message": {
        "message_id": 41,
        "from": {"id": 5550000001, "is_bot": False, "first_name": "Ana", "username": "ana"},
        "chat": {"id": -1001900000002, "title": "Team", "type": "supergroup", "is_forum": True},
        "date": 1716907000,
        "message_thread_id": 2391,
        "is_topic_message": True,
        "text": "hello",
    },
}
REACTION: dict[str, Any] = {
    "update_id": 900000002,
    "message_reaction": {
        "chat": {"id": -1001900000002, "title": "Team", "type": "supergroup"},
        "message_id": 41,
        "user": {"id": 5550000001, "is_bot": False, "first_name": "Ana"},
        "date": 1716907005,
        "old_reaction": [],
        "new_reaction": [{"type": "emoji", "emoji": "👍"}],
    },
}

#: no Telegram id or date: past a signed 64-bit integer (10**5000 even defeats str())
HUGE = [2**63, -(2**63) - 1, 2**64 + 7, 10**400, 10**5000, "99999999999999999999"]


def _label(value: Any) -> str:
    if isinstance(value, int):
        return f"int{value.bit_length()}{'-' if value < 0 else ''}"
    return f"str{len(value)}"


def changed(update: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    copied = copy.deepcopy(update)
    node = copied
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copied


@pytest.mark.parametrize("value", HUGE, ids=lambda v: _label(v))
@pytest.mark.parametrize(
    "path",
    [
        ("update_id",),
        ("message", "message_id"),
        ("message", "chat", "id"),
        ("message", "date"),
        ("message", "from", "id"),
    ],
)
def test_ids_and_dates_past_64_bits_are_a_normalize_error(
    path: tuple[str, ...], value: Any
) -> None:
    update = changed(MESSAGE, path, value)
    with pytest.raises(NormalizeError) as caught:
        normalize_update(update, "tg", BOT)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


@pytest.mark.parametrize("value", HUGE, ids=lambda v: _label(v))
@pytest.mark.parametrize(
    "path",
    [
        ("message_reaction", "chat", "id"),
        ("message_reaction", "message_id"),
        ("message_reaction", "date"),
    ],
)
def test_reaction_ids_past_64_bits_are_a_normalize_error(path: tuple[str, ...], value: Any) -> None:
    with pytest.raises(NormalizeError):
        normalize_update(changed(REACTION, path, value), "tg", BOT)


def test_an_edit_date_past_64_bits_keeps_the_message_date() -> None:
    edited: dict[str, Any] = {**MESSAGE["message"], "edit_date": 10**400}
    update = {"update_id": 900000003, "edited_message": edited}
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.kind == "edit" and event.sent_at == 1716907000.0


def test_a_migration_notice_with_a_huge_id_announces_nothing() -> None:
    notice = changed(MESSAGE, ("message", "migrate_to_chat_id"), 10**5000)
    assert migration_of(notice) is None


def test_a_huge_file_size_leaves_the_size_unknown_and_the_message_stored() -> None:
    update = changed(
        MESSAGE,
        ("message", "document"),
        {"file_id": "BQAD", "file_name": "a.pdf", "file_size": 10**30},
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.attachments[0].size is None
    assert not isinstance(storable_event(event, "tg"), str)


@pytest.mark.parametrize("coordinate", [10**400, float("nan"), float("inf"), True, "1.5"])
def test_a_location_with_an_unusable_coordinate_is_an_unnamed_location(coordinate: Any) -> None:
    update = changed(MESSAGE, ("message", "location"), {"latitude": coordinate, "longitude": 13.4})
    del update["message"]["text"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert [(a.kind, a.name) for a in event.attachments] == [("location", None)]


@pytest.mark.parametrize("value", [10**400, float("nan"), {"deep": [1, 2]}, ["x"], True, None])
def test_meta_takes_media_group_and_signature_only_as_text(value: Any) -> None:
    update = changed(MESSAGE, ("message", "media_group_id"), value)
    update["message"]["author_signature"] = value
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert "media_group_id" not in event.meta and "author_signature" not in event.meta
    json.dumps(dict(event.meta), allow_nan=False)
    text = changed(MESSAGE, ("message", "media_group_id"), "13579")
    got = normalize_update(text, "tg", BOT)
    assert got is not None and got.meta["media_group_id"] == "13579"


@pytest.mark.parametrize("thread", [0, -5, "0"])
def test_a_topic_id_that_is_not_positive_names_no_topic(thread: Any) -> None:
    event = normalize_update(changed(MESSAGE, ("message", "message_thread_id"), thread), "tg", BOT)
    assert event is not None
    assert event.address.thread is None and event.conversation_kind == "group"


@pytest.mark.parametrize(
    ("shape", "name"),
    [
        (
            {
                "giveaway": {
                    "chats": [{"id": -1001700000001, "title": "News", "type": "channel"}],
                    "winners_selection_date": 1717000000,
                    "winner_count": 3,
                    "prize_description": "a mug",
                }
            },
            "a mug, 3 winners",
        ),
        (
            {
                "giveaway_winners": {
                    "chat": {"id": -1001700000001, "title": "News", "type": "channel"},
                    "giveaway_message_id": 12,
                    "winners_selection_date": 1717000000,
                    "winner_count": 1,
                    "winners": [{"id": 5550000001, "is_bot": False, "first_name": "Ana"}],
                }
            },
            "1 winner",
        ),
    ],
)
def test_a_giveaway_post_and_its_results_are_messages_not_dropped(
    shape: dict[str, Any], name: str
) -> None:
    # Bot API: a channel post carrying a Giveaway or GiveawayWinners (no text, no caption)
    update = {
        "update_id": 900000010,
        "channel_post": {
            "message_id": 12,
            "sender_chat": {"id": -1001700000001, "title": "News", "type": "channel"},
            "chat": {"id": -1001700000001, "title": "News", "type": "channel"},
            "date": 1716907000,
            **shape,
        },
    }
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.kind == "message"
    (kind,) = shape
    assert [(a.kind, a.name) for a in event.attachments] == [(kind, name)]


# Bot API error answers ------------------------------------------------------------------


def error_answer(**parameters: Any) -> dict[str, Any]:
    return {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 5",
        "parameters": parameters,
    }


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        (5, 5.0),
        (10**400, MAX_RETRY_AFTER),  # too big for a float
        (float("inf"), MAX_RETRY_AFTER),
        (float("nan"), None),
        (-3, None),
        ("5", None),
        (True, None),
        (10**9, MAX_RETRY_AFTER),
    ],
)
def test_any_retry_after_reads_as_a_usable_wait(retry_after: Any, expected: float | None) -> None:
    with pytest.raises(TelegramError) as caught:
        _result("sendMessage", 429, error_answer(retry_after=retry_after))
    assert caught.value.retry_after == expected
    refused = _delivery_error(caught.value)
    assert isinstance(refused, RateLimited)
    assert 0 < refused.retry_after <= MAX_RETRY_AFTER


@pytest.mark.parametrize("odd", [True, 10**400, "-100123", 1.5])
def test_a_migrate_to_chat_id_that_is_no_chat_id_is_not_followed(odd: Any) -> None:
    with pytest.raises(TelegramError) as caught:
        _result("sendMessage", 400, error_answer(migrate_to_chat_id=odd))
    assert caught.value.migrate_to_chat_id is None


@pytest.mark.parametrize("code", [True, 10**400, "429", None])
def test_an_odd_error_code_falls_back_to_the_http_status(code: Any) -> None:
    with pytest.raises(TelegramError) as caught:
        _result("getUpdates", 502, {"ok": False, "error_code": code, "description": 7})
    assert caught.value.code == 502 and caught.value.description == "HTTP 502"


# the poll loop --------------------------------------------------------------------------


class ScriptedApi:
    """Answers getUpdates from a script (a list, an exception to raise, any other value),
    then long-polls forever; records the offset of every poll."""

    def __init__(self, script: list[Any]):
        self.script = list(script)
        self.offsets: list[Any] = []
        self.exhausted = asyncio.Event()

    async def call(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        if method != "getUpdates":
            return {}
        self.offsets.append((params or {}).get("offset"))
        if not self.script:
            self.exhausted.set()
            await asyncio.Event().wait()
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def run_poller(ctx: ContractContext, script: list[Any]) -> ScriptedApi:
    """Poll through `script` (with tiny backoffs) and stop once it is used up."""
    adapter = TelegramAdapter(ctx.account, {"token": TOKEN})
    ctx.bind(adapter)
    api = ScriptedApi(script)
    settings = PollSettings(25, 100, ("message",), 1.0, 0.01, 0.02)
    poller = Poller(api, ctx, ctx.account, settings, lambda update: {})  # type: ignore[arg-type]
    await poller.start()
    try:
        await asyncio.wait_for(api.exhausted.wait(), 10)
    finally:
        await poller.stop()
    return api


def relayed(update_id: int, text: str) -> dict[str, Any]:
    """An update as a relay that re-serialises numbers as strings passes it on."""
    update = copy.deepcopy(MESSAGE)
    update["update_id"] = str(update_id)
    update["message"]["text"] = text
    update["message"]["message_id"] = str(update_id % 1000)
    return update


async def test_string_update_ids_from_a_relay_move_the_offset_on(
    contract_context: ContractContext,
) -> None:
    batch = [relayed(700, "a"), relayed(701, "b")]
    api = await run_poller(contract_context, [batch])
    assert api.offsets == [None, 702]
    assert await contract_context.get_state("offset") == "702"
    assert [e.event_id for e in contract_context.events] == [event_id_of(u) for u in batch]
    assert [e.event_id.partition(":")[0] for e in contract_context.events] == ["700", "701"]


async def test_an_unexpected_error_in_a_poll_does_not_end_polling(
    contract_context: ContractContext, caplog: pytest.LogCaptureFixture
) -> None:
    update = copy.deepcopy(MESSAGE)
    api = await run_poller(contract_context, [RuntimeError("boom"), [update]])
    assert api.offsets == [None, None, MESSAGE["update_id"] + 1]
    assert [e.event_id for e in contract_context.events] == [event_id_of(MESSAGE)]
    assert "RuntimeError" in caplog.text


async def test_a_store_that_cannot_be_read_at_start_delays_polling_not_ends_it(
    contract_context: ContractContext,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a worker taking the account just after its database restarted: the first read of
    # the saved offset failed, and the poller task ended without a word, keeping the
    # account (and its lease) while nothing was ever polled
    await contract_context.set_state("offset", "41")
    real = contract_context.get_state
    failures: list[str] = []

    async def restarting(key: str) -> str | None:
        if len(failures) < 3:
            failures.append(key)
            raise StoreError("the database system is starting up")
        return await real(key)

    monkeypatch.setattr(contract_context, "get_state", restarting)
    update = copy.deepcopy(MESSAGE)
    api = await run_poller(contract_context, [[update]])
    assert failures == ["offset"] * 3
    assert api.offsets[0] == 41  # polled from the saved offset once it could be read
    assert [e.event_id for e in contract_context.events] == [event_id_of(MESSAGE)]
    assert caplog.text.count("could not read the saved offset") == 1


async def test_a_store_away_for_a_while_is_logged_once_then_counted_not_per_try(
    contract_context: ContractContext,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    real = contract_context.ingest_many
    tries: list[int] = []

    async def away(raws: Any, **kwargs: Any) -> Any:
        if len(tries) < 24:
            tries.append(len(raws))
            raise StoreError("connection to the database was lost")
        return await real(raws, **kwargs)

    monkeypatch.setattr(contract_context, "ingest_many", away)
    update = copy.deepcopy(MESSAGE)
    await run_poller(contract_context, [[update]] * 25)
    assert len(tries) == 24
    assert [e.event_id for e in contract_context.events] == [event_id_of(MESSAGE)]
    assert caplog.text.count("Traceback") == 1
    assert caplog.text.count("still cannot store updates") == 2  # at 10 and 20
    assert "storing updates works again, after 24 tries" in caplog.text


async def test_an_answer_that_is_not_a_list_is_retried_after_a_backoff(
    contract_context: ContractContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    update = copy.deepcopy(MESSAGE)
    api = await run_poller(contract_context, [{"not": "a list"}, {"still": "not"}, [update]])
    assert api.offsets == [None, None, None, MESSAGE["update_id"] + 1]
    assert [e.event_id for e in contract_context.events] == [event_id_of(MESSAGE)]
    # logged once per kind of failure, as other getUpdates failures are
    assert caplog.text.count("not a list") == 1


# nulls: what serialisers of typed Update models write for every unset optional field ----


def test_null_update_fields_are_absent_fields() -> None:
    callback = {
        "update_id": 900000020,
        "message": None,
        "edited_message": None,
        "channel_post": None,
        "message_reaction": None,
        "callback_query": {"id": "4382", "from": {"id": 5550000001}, "data": "ok"},
    }
    assert normalize_update(callback, "tg", BOT) is None


def test_a_photo_with_null_text_and_caption_is_a_photo_message() -> None:
    update = copy.deepcopy(MESSAGE)
    update["message"].update(
        text=None,
        caption=None,
        entities=None,
        forward_origin=None,
        animation=None,
        media_group_id=None,
        document={"file_id": "BQAD", "file_name": "a.pdf"},
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.text == ""
    assert [a.kind for a in event.attachments] == ["document"]
    assert "forwarded" not in event.meta and "media_group_id" not in event.meta


def test_a_service_message_with_null_content_fields_is_still_a_service_message() -> None:
    update = copy.deepcopy(MESSAGE)
    del update["message"]["text"]
    update["message"].update(
        text=None, caption=None, photo=None, sticker=None, new_chat_members=[{"id": 5}]
    )
    assert normalize_update(update, "tg", BOT) is None

"""Telegram Business: a bot connected to a business account answers the business's customers.

The payloads below follow the Bot API server's own writers (tdlib/telegram-bot-api,
Client.cpp: JsonMessage puts ``business_connection_id`` and ``sender_business_bot``
first, JsonBusinessConnection writes ``can_reply`` beside Bot API 9.0's ``rights``,
JsonBusinessMessagesDeleted has no date); ids, names and texts are our own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from backchannel.errors import NormalizeError, Rejected
from backchannel.model import Address, Outbound, Sender
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.testing import RecordingAgent
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.business import (
    BusinessConnection,
    business_chat,
    parse_business_chat,
)
from backchannel_telegram.normalize import BotIdentity, normalize_update, split_update
from backchannel_telegram.testing import (
    BUSINESS_CONNECTION_NOT_FOUND,
    FakeTelegram,
    event_id_of,
)

BOT = BotIdentity(id="7000000001", username="helper_bot")
ACCOUNT = "tg"
CONNECTION = "AQIDBAUGBwgJCgsMDQ4PEBES-_x"
OWNER = {"id": 5550000001, "is_bot": False, "first_name": "Marta", "last_name": "Shop"}
CUSTOMER = {"id": 5550000002, "is_bot": False, "first_name": "Ana", "username": "ana_l"}
CHAT = {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"}
BIZ = f"biz:{CONNECTION}:5550000002"


def business_message(**changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "business_connection_id": CONNECTION,
        "message_id": 41,
        "from": dict(CUSTOMER),
        "chat": dict(CHAT),
        "date": 1716907000,
        "text": "do you ship to Porto?",
    }
    message.update(changes)
    return {"update_id": 800000101, "business_message": message}


def test_a_customer_message_is_a_direct_message_in_the_business_chat() -> None:
    got = normalize_update(business_message(), ACCOUNT, BOT)
    assert got is not None
    assert got.address == Address(ACCOUNT, BIZ)
    assert (got.kind, got.conversation_kind, got.text) == (
        "message",
        "direct",
        "do you ship to Porto?",
    )
    assert got.sender == Sender("5550000002", "Ana", "ana_l", False)
    assert got.event_id == "800000101:1716907000" and got.platform_message_id == "41"
    assert got.conversation_title == "Ana (Telegram Business)"
    assert got.meta["business_connection_id"] == CONNECTION
    assert got.meta["chat_id"] == 5550000002
    assert "business_owner" not in got.meta
    # the customer's own chat with the bot is another conversation
    direct = normalize_update(
        {"update_id": 800000102, "message": business_message()["business_message"]},
        ACCOUNT,
        BOT,
    )
    assert direct is not None and direct.address == Address(ACCOUNT, "5550000002")


def test_the_owner_writing_in_the_chat_is_the_business_side() -> None:
    update = business_message(
        **{"from": dict(OWNER), "text": "yes, 3 days @helper_bot"},
        entities=[{"offset": 12, "length": 11, "type": "mention"}],
    )
    got = normalize_update(update, ACCOUNT, BOT)
    assert got is not None and got.address == Address(ACCOUNT, BIZ)
    assert got.meta["business_owner"] is True
    assert got.sender.id == "5550000001" and got.sender.name == "Marta Shop (business owner)"
    assert not got.mentions_me  # the business speaking, not someone asking the bot


def test_what_this_bot_sent_for_the_business_is_its_own_echo() -> None:
    # the Bot API server writes `from` = the business account, `sender_business_bot` = us
    bot_user = {"id": 7000000001, "is_bot": True, "first_name": "Helper", "username": "helper_bot"}
    echo = business_message(**{"from": dict(OWNER), "sender_business_bot": bot_user})
    assert normalize_update(echo, ACCOUNT, BOT) is None
    # its edit is kept: the owner correcting the bot's words in their app (the echo of the
    # bot's own edit lands on the row with the words it already has)
    edited = {"update_id": 800000103, "edited_business_message": echo["business_message"]}
    correction = normalize_update(edited, ACCOUNT, BOT)
    assert correction is not None and correction.kind == "edit"
    assert correction.platform_message_id == "41" and correction.meta["business_owner"] is True
    # another bot answering for the business (an earlier connection) is the business side
    other = {**bot_user, "id": 7000000009, "first_name": "Other"}
    got = normalize_update(
        business_message(**{"from": dict(OWNER), "sender_business_bot": other}), ACCOUNT, BOT
    )
    assert got is not None and got.meta["business_owner"] is True
    assert got.meta["sender_business_bot"] == "Other"


def test_an_edited_business_message_is_an_edit_of_it_there() -> None:
    message = business_message(text="do you ship to Lisbon?", edit_date=1716907300)
    update = {"update_id": 800000104, "edited_business_message": message["business_message"]}
    got = normalize_update(update, ACCOUNT, BOT)
    assert got is not None
    assert (got.kind, got.address.chat, got.platform_message_id) == ("edit", BIZ, "41")
    assert got.event_id == "800000104:1716907300" and got.text == "do you ship to Lisbon?"
    assert got.meta["attachments_complete"] is True


def test_deleted_business_messages_become_one_delete_each() -> None:
    update: dict[str, Any] = {
        "update_id": 800000105,
        "deleted_business_messages": {
            "business_connection_id": CONNECTION,
            "chat": dict(CHAT),
            "message_ids": [41, 42],
        },
    }
    parts = split_update(update)
    assert [p["deleted_business_messages"]["message_ids"] for p in parts] == [[41], [42]]
    assert all(p["update_id"] == 800000105 for p in parts)
    events = [normalize_update(p, ACCOUNT, BOT) for p in parts]
    assert [(e.kind, e.address.chat, e.platform_message_id) for e in events if e] == [
        ("delete", BIZ, "41"),
        ("delete", BIZ, "42"),
    ]
    assert [e.event_id for e in events if e] == [
        f"800000105:delete:{BIZ}:41",
        f"800000105:delete:{BIZ}:42",
    ]
    assert [event_id_of(p) for p in parts] == [e.event_id for e in events if e]
    assert all(e is not None and e.sender.is_unknown for e in events)  # nobody is named
    # unsplit, it is no one Event: the receivers split it first
    with pytest.raises(NormalizeError, match="split_update"):
        normalize_update(update, ACCOUNT, BOT)
    empty = {**update, "deleted_business_messages": {**update["deleted_business_messages"]}}
    empty["deleted_business_messages"]["message_ids"] = []
    assert normalize_update(empty, ACCOUNT, BOT) is None
    assert split_update(business_message()) == [business_message()]


def test_a_business_connection_update_is_no_event_and_says_what_the_bot_may_do() -> None:
    update: dict[str, Any] = {
        "update_id": 800000106,
        "business_connection": {
            "id": CONNECTION,
            "user": dict(OWNER),
            "user_chat_id": 5550000001,
            "date": 1716900000,
            "is_enabled": True,
            "can_reply": True,
            "rights": {"can_reply": True, "can_read_messages": True},
        },
    }
    assert normalize_update(update, ACCOUNT, BOT) is None
    connection = BusinessConnection.from_update(update["business_connection"])
    assert connection == BusinessConnection(CONNECTION, "5550000001", True, True)
    assert connection.refusal() is None
    # Bot API 9.0: rights without can_reply take the right away, whatever the old flag says
    no_reply = {**update["business_connection"], "rights": {"can_read_messages": True}}
    refusal = BusinessConnection.from_update(no_reply).refusal()  # type: ignore[union-attr]
    assert refusal is not None and "does not let the bot reply" in refusal
    # before 9.0: only can_reply
    old = {k: v for k, v in update["business_connection"].items() if k != "rights"}
    assert BusinessConnection.from_update({**old, "can_reply": False}).can_reply is False  # type: ignore[union-attr]
    off = BusinessConnection.from_update({**old, "is_enabled": False})
    assert off is not None and "is disabled" in (off.refusal() or "")
    assert BusinessConnection.from_state(CONNECTION, off.to_state()) == off
    # a Boolean on the wire: anything else there does not say the connection is on
    unclear: Any
    for unclear in ("false", "true", 0, 1, None, []):
        seen = BusinessConnection.from_update({**old, "is_enabled": unclear})
        assert seen is not None and seen.enabled is False, unclear
    unsaid = {k: v for k, v in old.items() if k != "is_enabled"}
    assert BusinessConnection.from_update(unsaid).enabled is True  # type: ignore[union-attr]


@pytest.mark.parametrize("connection", [{"id": "bad id", "is_enabled": False}, {"id": 5}, {}, "x"])
def test_a_business_connection_the_bot_cannot_read_is_dead_lettered_not_dropped(
    connection: Any,
) -> None:
    # the owner connected, or cut off, the bot: dropping that in silence hides why sends fail
    with pytest.raises(NormalizeError) as caught:
        normalize_update({"update_id": 7, "business_connection": connection}, ACCOUNT, BOT)
    assert caught.value.where == "business_connection.id"


@pytest.mark.parametrize("connection_id", [CONNECTION, "a:b", "x/y", "100%", "ünï"])
def test_a_business_address_parses_back_to_its_connection_and_chat(connection_id: str) -> None:
    chat = business_chat(connection_id, 5550000002)
    assert parse_business_chat(chat) == (connection_id, 5550000002)
    assert "/" not in chat and chat.count(":") == 2  # an address key stays account/chat
    assert parse_business_chat("5550000002") is None


@pytest.mark.parametrize(
    "chat",
    [
        "biz:",
        "biz:abc",
        "biz::5",
        "biz:abc:0",
        "biz:abc:-5",
        "biz:abc:05",
        "biz:abc:+5",
        "biz:a%3ab:5",  # written other than business_chat writes it
        "biz:%ff:5",
    ],
)
def test_a_malformed_business_address_is_refused(chat: str) -> None:
    with pytest.raises(ValueError, match="not a business chat address"):
        parse_business_chat(chat)


@pytest.mark.parametrize(
    ("update", "where"),
    [
        (business_message(business_connection_id=None), "business_message.business_connection_id"),
        (business_message(business_connection_id=""), "business_message.business_connection_id"),
        (business_message(business_connection_id=7), "business_message.business_connection_id"),
        (business_message(chat={"type": "private"}), "business_message.chat.id"),
        # a business chat is a private chat: its id is the customer's, a positive number
        (business_message(chat={**CHAT, "id": -100000002}), "business_message.chat.id"),
        (business_message(chat={**CHAT, "id": 0}), "business_message.chat.id"),
        (
            {
                "update_id": 1,
                "deleted_business_messages": {
                    "business_connection_id": CONNECTION,
                    "chat": {**CHAT, "id": -5},
                    "message_ids": [41],
                },
            },
            "deleted_business_messages.chat.id",
        ),
        (
            {
                "update_id": 1,
                "deleted_business_messages": {
                    "business_connection_id": CONNECTION,
                    "chat": dict(CHAT),
                    "message_ids": "41",
                },
            },
            "deleted_business_messages.message_ids",
        ),
        (
            {
                "update_id": 1,
                "deleted_business_messages": {"business_connection_id": CONNECTION, "chat": 5},
            },
            "deleted_business_messages.chat",
        ),
    ],
)
def test_malformed_business_updates_name_their_field(update: dict[str, Any], where: str) -> None:
    with pytest.raises(NormalizeError) as caught:
        normalize_update(update, ACCOUNT, BOT)
    assert caught.value.where == where


@pytest.mark.parametrize("agent", [False, "x", 7, [], {}, {"id": None}, {"id": True}])
def test_a_sender_business_bot_that_names_no_bot_leaves_the_customer_a_customer(
    agent: Any,
) -> None:
    got = normalize_update(business_message(sender_business_bot=agent), ACCOUNT, BOT)
    assert got is not None
    assert "business_owner" not in got.meta and "sender_business_bot" not in got.meta
    assert got.sender == Sender("5550000002", "Ana", "ana_l", False)


def test_an_edit_date_no_clock_reads_keeps_the_messages_date() -> None:
    for edit_date in (2**62, 10**11, 0, -5):
        update = {
            "update_id": 800000110,
            "edited_business_message": {
                **business_message(text="to Lisbon?")["business_message"],
                "edit_date": edit_date,
            },
        }
        got = normalize_update(update, ACCOUNT, BOT)
        assert got is not None and got.sent_at == 1716907000, edit_date


def test_only_the_owners_own_messages_start_no_run() -> None:
    """The owner's own words are marked NO_RUN, which the policy reads: stored and shown,
    no run, whatever `respond` says; the access rules still decide who is held."""
    from backchannel.model import NO_RUN
    from backchannel.policy import Policy

    customer = normalize_update(business_message(), ACCOUNT, BOT)
    owner = normalize_update(business_message(**{"from": dict(OWNER)}), ACCOUNT, BOT)
    assert customer is not None and owner is not None
    assert NO_RUN not in customer.meta and owner.meta[NO_RUN] is True
    assert Policy(respond="always").triggers(customer)
    assert not Policy(respond="always").triggers(owner)
    assert not Policy(access="allowlist", allow=["nobody"]).may_reach(owner)  # still held


# --- end to end: FakeTelegram <-> adapter <-> switchboard <-> SQLite store ---------------


def reply_to_trigger(run: Run) -> str:
    assert run.trigger is not None
    return f"answer to {run.trigger.text}"


@pytest.mark.parametrize("mode", ["polling", "webhook"])
async def test_a_customer_is_answered_in_the_business_chat_and_the_owner_is_not(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any, mode: str
) -> None:
    owner = fake.user("Marta", "Shop", username="marta_shop")
    customer = fake.user("Ana", username="ana_l")
    connection = fake.business_connection(owner)
    agent = RecordingAgent(reply_to_trigger)
    board = await board_for(fake, agent, mode)

    asked = fake.inject_business_message(connection, customer, "do you ship to Porto?")
    await agent.wait_runs(1)
    await board.wait_idle()
    (reply,) = fake.sent
    assert reply.business_connection_id == connection["id"]
    assert (reply.chat_id, reply.text) == (customer["id"], "answer to do you ship to Porto?")
    assert reply.reply_to == asked["business_message"]["message_id"]
    (call,) = fake.calls_to("sendMessage")
    assert call["business_connection_id"] == connection["id"]
    assert call["chat_id"] == str(customer["id"])  # the real chat, as Telegram knows it
    # the typing indicator went through the connection too
    assert all(
        c.get("business_connection_id") == connection["id"] for c in fake.calls_to("sendChatAction")
    )

    # the business owner answers the next question themselves: stored, shown, no run
    fake.inject_business_message(connection, customer, "and to Faro?")
    await agent.wait_runs(2)
    owner_update = fake.inject_business_message(
        connection, customer, "Faro too, 2 days", from_owner=True
    )
    await fake.wait_for(lambda: fake.is_acked(owner_update["update_id"]), what="the owner's ack")
    await board.wait_idle()
    assert len(agent.runs) == 2  # the owner's message started none

    address = Address("tg", business_chat(connection["id"], customer["id"]))
    conversation = await store.find_conversation(address)
    assert conversation is not None and conversation.kind == "direct"
    assert conversation.title == "Ana (Telegram Business)"
    rows = await store.transcript(conversation.id, 20)
    assert [(m.direction, m.sender.name, m.text, m.held) for m in rows] == [
        ("in", "Ana", "do you ship to Porto?", False),
        ("out", rows[1].sender.name, "answer to do you ship to Porto?", False),
        ("in", "Ana", "and to Faro?", False),
        ("out", rows[3].sender.name, "answer to and to Faro?", False),
        ("in", "Marta Shop (business owner)", "Faro too, 2 days", False),
    ]  # the bot's own sends, echoed back by Telegram, are not stored again
    assert rows[4].meta.get("business_owner") is True and not rows[4].triggers
    assert conversation.trigger_seq == 3  # the customer's last question, not the owner's

    # the customer edits, then two messages are deleted: they land on their rows
    first = asked["business_message"]["message_id"]
    edit = fake.inject_business_edit(connection, customer, first, "do you ship to Braga?")
    gone = fake.inject_business_delete(
        connection, customer, [first, owner_update["business_message"]["message_id"]]
    )
    await fake.wait_for(lambda: fake.is_acked(gone["update_id"]), what="the delete's ack")
    await fake.wait_for(lambda: fake.is_acked(edit["update_id"]), what="the edit's ack")
    rows = await store.transcript(conversation.id, 20)
    assert rows[0].text == "do you ship to Braga?" and rows[0].edited_at is not None
    assert [m.deleted_at is not None for m in rows] == [True, False, False, False, True]
    assert len(agent.runs) == 2

    # the owner corrects the bot's answer in their own app: Telegram sends the edit with the
    # bot still named as its sender, and the transcript takes the owner's words
    corrected = fake.inject_business_edit(connection, customer, reply.message_id, "3 days, sorry")
    assert corrected["edited_business_message"]["sender_business_bot"]["id"] == fake.bot["id"]
    await fake.wait_for(lambda: fake.is_acked(corrected["update_id"]), what="the edit's ack")
    await board.wait_idle()
    rows = await store.transcript(conversation.id, 20)
    assert (rows[1].direction, rows[1].text) == ("out", "3 days, sorry")
    assert len(rows) == 5 and len(agent.runs) == 2


async def test_the_customer_writing_to_the_bot_directly_is_another_conversation(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    owner = fake.user("Marta", "Shop")
    customer = fake.user("Ana", username="ana_l")
    connection = fake.business_connection(owner)
    agent = RecordingAgent(reply_to_trigger)
    board = await board_for(fake, agent)
    fake.inject_business_message(connection, customer, "to the shop")
    await agent.wait_runs(1)
    fake.inject_message(fake.private_chat(customer), customer, "to the bot")
    await agent.wait_runs(2)
    await board.wait_idle()

    by_text = {m.text: m for m in fake.sent}
    assert by_text["answer to to the shop"].business_connection_id == connection["id"]
    assert by_text["answer to to the bot"].business_connection_id is None
    assert {m.chat_id for m in fake.sent} == {customer["id"]}  # one chat id, two conversations
    business = await store.find_conversation(
        Address("tg", business_chat(connection["id"], customer["id"]))
    )
    direct = await store.find_conversation(Address("tg", str(customer["id"])))
    assert business is not None and direct is not None and business.id != direct.id
    assert [m.text for m in await store.transcript(direct.id, 10)] == [
        "to the bot",
        "answer to to the bot",
    ]


async def test_a_disabled_connection_refuses_sends_in_one_line_even_after_a_restart(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any, tmp_path: Path
) -> None:
    owner = fake.user("Marta", "Shop")
    customer = fake.user("Ana")
    connection = fake.business_connection(owner)
    agent = RecordingAgent(reply_to_trigger)
    board = await board_for(fake, agent)
    fake.inject_business_message(connection, customer, "hello?")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert len(fake.sent) == 1

    turned_off = fake.set_business_connection(connection, enabled=False)
    await fake.wait_for(lambda: fake.is_acked(turned_off["update_id"]), what="the update's ack")
    address = Address("tg", business_chat(connection["id"], customer["id"]))
    outcome = await board.send(address, "are you there?")
    assert "disabled" in outcome and "\n" not in outcome
    assert len(fake.calls_to("sendMessage")) == 1  # refused here, not by Telegram
    await board.stop()

    # a new process knows it from the store, before any update says so again
    agent2 = RecordingAgent(reply_to_trigger)
    reopened = SQLiteStore(tmp_path / "state" / "backchannel.db")
    board2 = await board_for(fake, agent2, reopened=reopened)
    outcome = await board2.send(address, "still there?")
    assert "disabled" in outcome
    assert len(fake.calls_to("sendMessage")) == 1

    # turned on again: sends go through
    turned_on = fake.set_business_connection(connection, enabled=True)
    await fake.wait_for(lambda: fake.is_acked(turned_on["update_id"]), what="the update's ack")
    outcome = await board2.send(address, "back now")
    assert "sent" in outcome
    assert fake.business_sent_texts(connection, customer)[-1] == "back now"


async def test_the_owner_may_be_set_to_start_runs(fake: FakeTelegram, board_for: Any) -> None:
    owner = fake.user("Marta", "Shop")
    customer = fake.user("Ana")
    connection = fake.business_connection(owner)
    agent = RecordingAgent()
    board = await board_for(fake, agent, business_owner_triggers=True)
    fake.inject_business_message(connection, customer, "hi")
    await agent.wait_runs(1)
    fake.inject_business_message(connection, customer, "I'll take it from here", from_owner=True)
    await agent.wait_runs(2)
    await board.wait_idle()


async def test_sending_through_a_connection_names_it_and_the_real_chat(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    owner = fake.user("Marta", "Shop")
    customer = fake.user("Ana")
    connection = fake.business_connection(owner, deliver=False)
    asked = fake.inject_business_message(connection, customer, "hi", deliver=False)
    address = Address(adapter.account, business_chat(connection["id"], customer["id"]))

    await adapter.check_address(address)  # getBusinessConnection knows it
    receipt = await adapter.send(
        Outbound(address, "hello", reply_to=str(asked["business_message"]["message_id"]))
    )
    sent = fake.calls_to("sendMessage")[-1]
    assert sent["chat_id"] == str(customer["id"])
    assert sent["business_connection_id"] == connection["id"]
    edited = await adapter.send(
        Outbound(address, "hello!", kind="edit", target=receipt.platform_message_id)
    )
    assert edited.platform_message_id == receipt.platform_message_id
    assert fake.calls_to("editMessageText")[-1]["business_connection_id"] == connection["id"]
    assert fake.business_sent_texts(connection) == ["hello!"]
    await adapter.typing(address)
    assert fake.calls_to("sendChatAction")[-1] == {
        "action": "typing",
        "business_connection_id": connection["id"],
        "chat_id": str(customer["id"]),
    }
    with pytest.raises(Rejected, match="cannot react"):
        await adapter.send(Outbound(address, "👍", kind="reaction", target="1"))
    with pytest.raises(Rejected, match="no threads"):
        await adapter.send(Outbound(Address(adapter.account, address.chat, "5"), "x"))


async def test_an_unknown_or_malformed_business_address_is_refused(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    customer = fake.user("Ana")
    unknown = Address(adapter.account, business_chat("NoSuchConnection", customer["id"]))
    with pytest.raises(Rejected, match="business connection not found"):
        await adapter.check_address(unknown)
    with pytest.raises(Rejected) as caught:
        await adapter.send(Outbound(unknown, "hello"))
    assert caught.value.reason == BUSINESS_CONNECTION_NOT_FOUND
    with pytest.raises(Rejected, match="not a business chat address"):
        await adapter.check_address(Address(adapter.account, "biz:x:007"))
    owner = fake.user("Marta")
    connection = fake.business_connection(owner, deliver=False)
    mine = Address(adapter.account, business_chat(connection["id"], owner["id"]))
    with pytest.raises(Rejected, match="owner's own"):
        await adapter.check_address(mine)


async def test_the_fake_answers_a_connection_that_may_not_reply_as_telegram_does(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    owner = fake.user("Marta")
    customer = fake.user("Ana")
    connection = fake.business_connection(owner, can_reply=False, deliver=False)
    fake.inject_business_message(connection, customer, "hi", deliver=False)
    address = Address(adapter.account, business_chat(connection["id"], customer["id"]))
    # the adapter has not seen the connection's update: Telegram itself refuses
    with pytest.raises(Rejected) as caught:
        await adapter.send(Outbound(address, "hello"))
    assert caught.value.reason == "Bad Request: BUSINESS_PEER_INVALID"
    # getBusinessConnection tells the adapter why, in one line, and it remembers it
    with pytest.raises(Rejected, match="does not let the bot reply"):
        await adapter.check_address(address)
    calls = len(fake.calls)
    with pytest.raises(Rejected, match="does not let the bot reply"):
        await adapter.send(Outbound(address, "hello"))
    assert len(fake.calls) == calls

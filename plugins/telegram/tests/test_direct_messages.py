"""Channel direct messages (Bot API 9.2): one conversation per user's topic, answers into it.

A channel's direct messages chat is a supergroup with ``is_direct_messages``
in which every user writing to the channel has a topic of their own
(``direct_messages_topic``); a send there needs ``direct_messages_topic_id``.
"""

from __future__ import annotations

import copy
from typing import Any

import aiohttp
import pytest
from backchannel.errors import NormalizeError, Rejected
from backchannel.model import Address, Outbound
from backchannel.policy import Policy
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.normalize import BotIdentity, normalize_update
from backchannel_telegram.testing import DM_TOPIC_REQUIRED, FakeTelegram

from .conftest import answer_trigger

BOT = BotIdentity(id="123456789", username="backchannel_test_bot")
DM_CHAT = -1002800000005
ANA = {"id": 5550000003, "is_bot": False, "first_name": "Ana", "last_name": "Lima"}
#: a reader's message in a channel's direct messages chat, as the Bot API sends it
MESSAGE: dict[str, Any] = {
    "update_id": 900000001,
    "message": {
        "message_id": 12,
        "from": ANA,
        "chat": {"id": DM_CHAT, "title": "News", "type": "supergroup", "is_direct_messages": True},
        "date": 1716907100,
        "direct_messages_topic": {"topic_id": ANA["id"], "user": ANA},
        "text": "is the next issue out on Friday?",
    },
}


def with_topic(topic: Any, *, key: str = "message") -> dict[str, Any]:
    """MESSAGE (or its edit) with `topic` as direct_messages_topic ("absent" drops it)."""
    update = copy.deepcopy(MESSAGE)
    if key != "message":
        update[key] = update.pop("message")
        update[key]["edit_date"] = 1716907130
    if isinstance(topic, str) and topic == "absent":
        del update[key]["direct_messages_topic"]
    else:
        update[key]["direct_messages_topic"] = topic
    return update


# --- normalize ------------------------------------------------------------------


def test_two_readers_of_a_channel_are_two_direct_conversations() -> None:
    bruno = {"id": 5550000004, "is_bot": False, "first_name": "Bruno"}
    second = copy.deepcopy(MESSAGE)
    second["message"].update(
        {"from": bruno, "direct_messages_topic": {"topic_id": bruno["id"], "user": bruno}}
    )
    ana_event = normalize_update(MESSAGE, "tg", BOT)
    bruno_event = normalize_update(second, "tg", BOT)
    assert ana_event is not None and bruno_event is not None
    assert ana_event.address == Address("tg", str(DM_CHAT), "dm:5550000003")
    assert bruno_event.address == Address("tg", str(DM_CHAT), "dm:5550000004")
    assert ana_event.conversation_kind == bruno_event.conversation_kind == "direct"
    assert ana_event.conversation_title == "Ana Lima (direct messages to News)"
    assert bruno_event.conversation_title == "Bruno (direct messages to News)"
    # "direct": every message reaches the agent, as in a private chat (respond = "mention")
    assert Policy(respond="mention").triggers(ana_event)


def test_the_channel_answering_in_a_topic_is_filed_in_that_readers_conversation() -> None:
    update = copy.deepcopy(MESSAGE)
    update["message"]["from"] = {"id": 136817688, "is_bot": True, "first_name": "Channel"}
    update["message"]["sender_chat"] = {"id": -1001800000001, "title": "News", "type": "channel"}
    got = normalize_update(update, "tg", BOT)
    assert got is not None
    assert got.address.thread == "dm:5550000003"
    assert got.sender.id == "-1001800000001"
    assert got.conversation_title == "Ana Lima (direct messages to News)"


def test_an_edit_stays_in_its_topic() -> None:
    got = normalize_update(
        with_topic(MESSAGE["message"]["direct_messages_topic"], key="edited_message"), "tg", BOT
    )
    assert got is not None
    assert (got.kind, got.address.thread, got.conversation_kind) == (
        "edit",
        "dm:5550000003",
        "direct",
    )


def test_the_bots_own_message_and_a_service_message_there_are_nothing() -> None:
    own = copy.deepcopy(MESSAGE)
    own["message"]["from"] = {"id": int(BOT.id or 0), "is_bot": True, "first_name": "Helper"}
    assert normalize_update(own, "tg", BOT) is None
    service = with_topic("absent")
    del service["message"]["text"]
    service["message"]["pinned_message"] = {"message_id": 3, "date": 1716907000}
    assert normalize_update(service, "tg", BOT) is None  # no content, no topic: not an error


def test_a_topic_is_honoured_even_when_the_chat_does_not_say_what_it_is() -> None:
    update = copy.deepcopy(MESSAGE)
    del update["message"]["chat"]["is_direct_messages"]  # a relay that drops it
    got = normalize_update(update, "tg", BOT)
    assert got is not None and got.address.thread == "dm:5550000003"


def test_a_topic_id_written_as_a_string_of_digits_is_the_same_topic() -> None:
    got = normalize_update(with_topic({"topic_id": "5550000003"}), "tg", BOT)
    assert got is not None and got.address.thread == "dm:5550000003"
    # with no user the title is the chat's own
    assert got.conversation_title == "News (direct messages)"


@pytest.mark.parametrize(
    ("topic", "where"),
    [
        ("absent", "message.direct_messages_topic"),
        (None, "message.direct_messages_topic"),
        ([ANA["id"]], "message.direct_messages_topic"),
        ("5550000003", "message.direct_messages_topic"),
        (5550000003, "message.direct_messages_topic"),
        ({"user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": None, "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": "x", "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": 1.5, "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": True, "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": 0, "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": -5, "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": 2**63, "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": 2**70, "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": "9" * 5000, "user": ANA}, "message.direct_messages_topic.topic_id"),
        ({"topic_id": {"id": 1}, "user": ANA}, "message.direct_messages_topic.topic_id"),
    ],
)
def test_a_message_there_with_no_usable_topic_is_a_normalize_error(topic: Any, where: str) -> None:
    # filed under the chat it would join every reader's messages in one conversation
    # (where Telegram refuses every answer): a dead letter naming the field instead
    with pytest.raises(NormalizeError) as caught:
        normalize_update(with_topic(topic), "tg", BOT)
    assert caught.value.where == where
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200
    if where.endswith("topic_id"):
        with pytest.raises(NormalizeError) as edited:
            normalize_update(with_topic(topic, key="edited_message"), "tg", BOT)
        assert edited.value.where == "edited_message.direct_messages_topic.topic_id"


def test_an_odd_user_in_the_topic_leaves_the_title_to_the_chat() -> None:
    got = normalize_update(with_topic({"topic_id": 77, "user": "Ana"}), "tg", BOT)
    assert got is not None
    assert (got.address.thread, got.conversation_title) == ("dm:77", "News (direct messages)")


def test_outside_a_direct_messages_chat_a_null_topic_is_absent() -> None:
    update = copy.deepcopy(MESSAGE)
    update["message"]["chat"] = {"id": -1001900000002, "title": "Team", "type": "supergroup"}
    update["message"]["direct_messages_topic"] = None
    got = normalize_update(update, "tg", BOT)
    assert got is not None
    assert (got.address.thread, got.conversation_kind) == (None, "group")


# --- the adapter and the fake ---------------------------------------------------------


def channel_with_readers(fake: FakeTelegram) -> tuple[dict[str, Any], ...]:
    """A channel's direct messages chat with Alice and Bob having written: (chat, alice, bob,
    alice's message, bob's message)."""
    news = fake.channel("News", username="newsroom")
    chat = fake.direct_messages_chat(news)
    assert fake.direct_messages_chat(news) is chat  # one per channel
    alice, bob = fake.user("Alice", username="alice"), fake.user("Bob")
    asked = fake.inject_message(chat, alice, "when is the next issue?")["message"]
    other = fake.inject_message(chat, bob, "typo on page 4")["message"]
    return chat, alice, bob, asked, other


async def test_a_reply_goes_to_the_readers_topic_with_direct_messages_topic_id(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat, alice, bob, asked, _ = channel_with_readers(fake)
    assert asked["direct_messages_topic"] == {"topic_id": alice["id"], "user": alice}
    address = Address("test", str(chat["id"]), f"dm:{alice['id']}")
    receipt = await adapter.send(Outbound(address, "Friday", reply_to=str(asked["message_id"])))
    (params,) = fake.calls_to("sendMessage")
    assert params["direct_messages_topic_id"] == alice["id"]
    assert "message_thread_id" not in params
    sent = fake.sent[-1]
    assert (sent.direct_messages_topic_id, sent.thread_id, sent.reply_to) == (
        alice["id"],
        None,
        asked["message_id"],
    )
    assert receipt.platform_message_id == str(sent.message_id)
    assert fake.sent_texts(chat, direct_messages_topic=alice["id"]) == ["Friday"]
    assert fake.sent_texts(chat, direct_messages_topic=bob["id"]) == []


async def test_a_long_answer_sends_every_part_to_the_topic(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat, alice, _, _, _ = channel_with_readers(fake)
    text = "\n\n".join(" ".join(f"word{n}-{k}" for k in range(400)) for n in range(3))
    await adapter.send(Outbound(Address("test", str(chat["id"]), f"dm:{alice['id']}"), text))
    assert len(fake.sent) >= 2
    assert {m.direct_messages_topic_id for m in fake.sent} == {alice["id"]}


async def test_the_fake_refuses_a_send_there_without_the_topic_as_telegram_does(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat, alice, _, _, _ = channel_with_readers(fake)
    with pytest.raises(Rejected, match=DM_TOPIC_REQUIRED):
        await adapter.send(Outbound(Address("test", str(chat["id"])), "to whom?"))
    # a forum's topic parameter is not the direct messages topic
    with pytest.raises(Rejected, match="Bad Request: topic not found"):
        await adapter.send(Outbound(Address("test", str(chat["id"]), str(alice["id"])), "x"))
    # a user who never wrote has no topic
    with pytest.raises(Rejected, match="Bad Request: topic not found"):
        await adapter.send(Outbound(Address("test", str(chat["id"]), "dm:424242"), "x"))
    assert fake.sent == []
    assert DM_TOPIC_REQUIRED == "Bad Request: channel direct messages topic must be specified"


@pytest.mark.parametrize(
    "thread",
    ["dm:", "dm:0", "dm:-3", "dm:+5", "dm:05", "dm: 5", "dm:5 ", "dm:1_0", "dm:x", f"dm:{2**63}"],
)
async def test_a_topic_not_in_canonical_form_is_refused_before_any_call(
    fake: FakeTelegram, adapter: TelegramAdapter, thread: str
) -> None:
    chat, _, _, _, _ = channel_with_readers(fake)
    address = Address("test", str(chat["id"]), thread)
    with pytest.raises(Rejected, match="is not a channel direct messages topic"):
        await adapter.send(Outbound(address, "x"))
    with pytest.raises(Rejected, match="is not a channel direct messages topic"):
        await adapter.check_address(address)
    assert fake.calls_to("sendMessage") == [] and fake.calls_to("getChat") == []


async def test_edits_reactions_and_typing_in_a_topic(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat, alice, _, asked, _ = channel_with_readers(fake)
    address = Address("test", str(chat["id"]), f"dm:{alice['id']}")
    receipt = await adapter.send(Outbound(address, "draft"))
    target = receipt.platform_message_id
    await adapter.send(Outbound(address, "final", kind="edit", target=target))
    assert fake.sent[-1].edits == ["draft"] and fake.sent[-1].text == "final"
    await adapter.send(Outbound(address, "👍", kind="reaction", target=str(asked["message_id"])))
    assert fake.reactions[-1] == (
        chat["id"],
        asked["message_id"],
        [{"type": "emoji", "emoji": "👍"}],
    )
    # sendChatAction takes no direct messages topic: nothing is shown to the whole chat
    await adapter.typing(address)
    assert fake.calls_to("sendChatAction") == []


async def test_check_address_takes_a_topic_only_in_a_direct_messages_chat(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat, alice, _, _, _ = channel_with_readers(fake)
    forum = fake.supergroup("Eng", forum=True)
    topic = fake.create_topic(forum, "Deploys", alice)
    private = fake.private_chat(alice)
    dm_chat = str(chat["id"])
    await adapter.check_address(Address("test", dm_chat, f"dm:{alice['id']}"))
    await adapter.check_address(Address("test", str(forum["id"]), str(topic)))
    refused = {
        (dm_chat, None): "is a channel's direct messages chat",
        (dm_chat, str(alice["id"])): "is a channel's direct messages chat",
        (str(forum["id"]), f"dm:{alice['id']}"): "is not a channel's direct messages chat",
        (str(private["id"]), f"dm:{alice['id']}"): "is not a channel's direct messages chat",
    }
    for (chat_id, thread), reason in refused.items():
        with pytest.raises(Rejected, match=reason):
            await adapter.check_address(Address("test", chat_id, thread))


async def test_the_fakes_direct_messages_chat_and_its_getchat(fake: FakeTelegram) -> None:
    news = fake.channel("News")
    chat = fake.direct_messages_chat(news)
    assert chat["is_direct_messages"] is True and chat["type"] == "supergroup"
    assert chat["title"] == "News" and chat["id"] != news["id"]
    async with aiohttp.ClientSession() as session:
        url = f"{fake.url}/bot{fake.token}/getChat"
        async with session.post(url, json={"chat_id": chat["id"]}) as response:
            info = (await response.json())["result"]
    assert info["is_direct_messages"] is True and info["parent_chat"] == news


def test_a_reaction_is_placed_in_the_topic_this_process_saw_its_message_in() -> None:
    adapter = TelegramAdapter("tg", {"token": "123456789:AAH-not-a-real-token_0123456789"})
    assert adapter.normalize(copy.deepcopy(MESSAGE)) is not None
    reaction: dict[str, Any] = {
        "update_id": 900000002,
        "message_reaction": {
            "chat": MESSAGE["message"]["chat"],
            "message_id": 12,
            "user": ANA,
            "date": 1716907140,
            "old_reaction": [],
            "new_reaction": [{"type": "emoji", "emoji": "🙏"}],
        },
    }
    got = adapter.normalize(reaction)
    assert got is not None
    assert (got.address.thread, got.conversation_kind) == ("dm:5550000003", "direct")
    # a message it never saw: the chat (the store then finds the one topic holding it)
    reaction["message_reaction"]["message_id"] = 99
    unseen = adapter.normalize(reaction)
    assert unseen is not None and unseen.address.thread is None


# --- end to end ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["polling", "webhook"])
async def test_each_reader_gets_a_conversation_and_the_answer_in_their_topic(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any, mode: str
) -> None:
    agent = RecordingAgent(answer_trigger)
    board = await board_for(fake, agent, mode)
    chat, alice, bob, asked, other = channel_with_readers(fake)
    await agent.wait_runs(2)
    await board.wait_idle()

    conversations = {c.address.thread: c for c in await store.conversations("tg")}
    assert set(conversations) == {f"dm:{alice['id']}", f"dm:{bob['id']}"}
    for reader, message in ((alice, asked), (bob, other)):
        conversation = conversations[f"dm:{reader['id']}"]
        assert conversation.kind == "direct"
        assert conversation.title == f"{reader['first_name']} (direct messages to News)"
        rows = await store.window(conversation.id, 10)
        assert [(m.direction, m.text) for m in rows] == [
            ("in", message["text"]),
            ("out", f"answer to {message['text']}"),
        ]
        (answer,) = [m for m in fake.sent if m.direct_messages_topic_id == reader["id"]]
        assert (answer.chat_id, answer.reply_to) == (chat["id"], message["message_id"])
        assert answer.text == f"answer to {message['text']}"
    assert len(fake.sent) == 2
    assert all("message_thread_id" not in p for p in fake.calls_to("sendMessage"))
    # no conversation for the chat itself, where Telegram takes no answer
    assert await store.find_conversation(Address("tg", str(chat["id"]))) is None


async def test_an_operator_send_takes_a_topic_and_refuses_the_bare_chat(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    board = await board_for(fake, RecordingAgent(lambda run: None))
    news = fake.channel("News")
    chat = fake.direct_messages_chat(news)
    alice = fake.user("Alice")
    fake.inject_message(chat, alice, "hello channel")
    await board.wait_idle()
    bare = Address("tg", str(chat["id"]))
    with pytest.raises(Rejected, match="is a channel's direct messages chat"):
        await board.send(bare, "to everyone?")
    assert await store.find_conversation(bare) is None
    for thread in ("dm:0", "dm:+1", f"dm:0{alice['id']}"):
        with pytest.raises(Rejected, match="is not a channel direct messages topic"):
            await board.send(Address("tg", str(chat["id"]), thread), "x")
    topic = Address("tg", str(chat["id"]), f"dm:{alice['id']}")
    assert (await board.send(topic, "we read you")).startswith("sent")
    assert fake.sent_texts(chat, direct_messages_topic=alice["id"]) == ["we read you"]


async def test_after_a_restart_the_same_conversations_and_reactions_land_there(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    agent = RecordingAgent(answer_trigger)
    first = await board_for(fake, agent)
    chat, alice, bob, asked, _ = channel_with_readers(fake)
    await agent.wait_runs(2)
    await first.wait_idle()
    before = {c.address: c.id for c in await store.conversations("tg")}
    await first.stop()  # closes the store too

    reopened = SQLiteStore(store.path)
    again = Switchboard(reopened)
    again.add_account(
        TelegramAdapter("tg", fake.settings()),
        Binding(agent, respond="mention"),
        secrets=[fake.token],
    )
    await again.start()
    try:
        # the new process does not remember the topic of Alice's message, and the
        # reaction does not say it: the store finds the one conversation holding it
        reaction = fake.inject_reaction(chat, alice, asked["message_id"], ["🙏"])
        fake.inject_message(chat, alice, "thanks!")
        await agent.wait_runs(3)
        await again.wait_idle()
        await fake.wait_for(lambda: fake.is_acked(reaction["update_id"]), what="the reaction")
        await again.wait_idle()
        after = {c.address: c.id for c in await reopened.conversations("tg")}
        assert after == before  # same addresses, same conversations, none added
        alices = after[Address("tg", str(chat["id"]), f"dm:{alice['id']}")]
        rows = await reopened.window(alices, 10)
        assert [(m.direction, m.text, m.reactions) for m in rows] == [
            ("in", "when is the next issue?", (("Alice", "🙏"),)),
            ("out", "answer to when is the next issue?", ()),
            ("in", "thanks!", ()),
            ("out", "answer to thanks!", ()),
        ]
        assert fake.sent_texts(chat, direct_messages_topic=alice["id"])[-1] == "answer to thanks!"
        assert fake.sent_texts(chat, direct_messages_topic=bob["id"]) == [
            "answer to typo on page 4"
        ]
    finally:
        await again.stop()


# --- topics in a private chat (a bot's threaded mode) ---------------------------------


def _private_topic_update(text: str, **extra: Any) -> dict[str, Any]:
    chat = {"id": ANA["id"], "type": "private", "first_name": "Ana"}
    message = {"message_id": 40, "from": ANA, "chat": chat, "date": 1767225600, "text": text}
    return {"update_id": 900000040, "message": {**message, **extra}}


@pytest.mark.parametrize("text", ["hello, from my topic", "/help"])
def test_a_topic_of_a_private_chat_is_its_own_conversation_and_still_direct(text: str) -> None:
    # the default policy answers it as every private chat (before: a "thread" needing a
    # mention, so the bot stayed silent in its own threaded mode)
    entities = [{"type": "bot_command", "offset": 0, "length": 5}] if text == "/help" else None
    update = _private_topic_update(
        text, message_thread_id=77, is_topic_message=True, entities=entities
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert event.address == Address("tg", str(ANA["id"]), "77")
    assert event.conversation_kind == "direct"
    assert Policy(respond="mention").triggers(event)
    plain = normalize_update(_private_topic_update(text, entities=entities), "tg", BOT)
    assert plain is not None and plain.mentions_me == event.mentions_me

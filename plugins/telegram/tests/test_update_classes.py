"""Update classes a second review went through: replies to what has no words (stories,
polls, photos), gifts, private chats' topics, and the kinds that must stay quiet."""

from __future__ import annotations

from typing import Any

import pytest
from backchannel.model import Address, Outbound
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.normalize import BotIdentity, normalize_update
from backchannel_telegram.testing import FakeTelegram

BOT = BotIdentity(id="7000000001", username="helper_bot", commands=frozenset({"report"}))
ANA = {"id": 5550000002, "is_bot": False, "first_name": "Ana"}
BEN = {"id": 5550000003, "is_bot": False, "first_name": "Ben"}
PRIVATE = {"id": 5550000002, "type": "private", "first_name": "Ana"}
GROUP = {"id": -1001700000001, "type": "supergroup", "title": "Ops"}
FORUM = {"id": -1001700000002, "type": "supergroup", "title": "Eng", "is_forum": True}
NEWS = {"id": -1001800000001, "type": "channel", "title": "News"}


def message(chat: dict[str, Any] = GROUP, **fields: Any) -> dict[str, Any]:
    return {
        "update_id": 900,
        "message": {"message_id": 20, "date": 1760000000, "chat": chat, "from": ANA, **fields},
    }


def replied(**fields: Any) -> dict[str, Any]:
    return {"message_id": 3, "date": 1759990000, "chat": GROUP, "from": BEN, **fields}


@pytest.mark.parametrize(
    ("target", "quote"),
    [
        (
            replied(poll={"id": "1", "question": "Lunch?", "options": [{"text": "Pizza"}]}),
            "[poll: Lunch? (Pizza)]",
        ),
        (
            replied(checklist={"title": "Ship", "tasks": [{"id": 1, "text": "tag"}]}),
            "[checklist: Ship (tag)]",
        ),
        (
            replied(photo=[{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}]),
            "[photo]",
        ),
        (replied(sticker={"file_id": "s", "file_unique_id": "u", "emoji": "🔥"}), "[sticker: 🔥]"),
        # a target whose file is broken still says whose it is, and breaks nothing
        (replied(document={"file_name": "x.pdf"}), None),
    ],
)
def test_a_reply_to_a_message_without_words_says_what_it_shared(
    target: dict[str, Any], quote: str | None
) -> None:
    event = normalize_update(message(text="done", reply_to_message=target), "tg", BOT)
    assert event is not None and event.reply_to == "3"
    assert event.meta["reply_from"] == "Ben"
    assert event.meta.get("reply_quote") == quote


def test_a_reply_to_a_story_names_its_poster() -> None:
    story = {"chat": {"id": 5550000003, "type": "private", "first_name": "Ben"}, "id": 4}
    event = normalize_update(message(PRIVATE, text="great view", reply_to_story=story), "tg", BOT)
    assert event is not None and event.text == "great view" and event.reply_to is None
    assert (event.meta["reply_from"], event.meta["reply_quote"]) == ("Ben", "[story]")
    # a channel's story, answered in a group
    story = {"chat": NEWS, "id": 9}
    event = normalize_update(message(text="nice", reply_to_story=story), "tg", BOT)
    assert event is not None and event.meta["reply_from"] == "News"


def test_a_gift_with_a_note_is_a_message_with_the_note_as_its_words() -> None:
    gift = {"gift": {"id": "g", "star_count": 50}, "text": "thanks for the help!"}
    event = normalize_update(message(PRIVATE, gift=gift), "tg", BOT)
    assert event is not None and event.text == "thanks for the help!"
    assert [(a.kind, a.name) for a in event.attachments] == [("gift", "50 ⭐")]
    # without a note, and with a gift that says little: still the gift, no words
    event = normalize_update(message(PRIVATE, gift={"gift": "?"}), "tg", BOT)
    assert event is not None and event.text == ""
    assert [(a.kind, a.name) for a in event.attachments] == [("gift", None)]


@pytest.mark.parametrize(
    "update",
    [
        # another bot's command in a group
        message(
            text="/report@other_bot", entities=[{"type": "bot_command", "offset": 0, "length": 17}]
        ),
        # a bare command that is not ours
        message(text="/start", entities=[{"type": "bot_command", "offset": 0, "length": 6}]),
        # our handle inside another bot's
        message(
            text="/report@super_helper_bot",
            entities=[{"type": "bot_command", "offset": 0, "length": 24}],
        ),
    ],
)
def test_a_command_for_another_bot_does_not_mention_this_one(update: dict[str, Any]) -> None:
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.mentions_me is False


def test_commands_for_this_bot_in_captions_and_after_astral_text_mention_it() -> None:
    photo = [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}]
    caption = message(
        photo=photo,
        caption="/report@Helper_Bot now",
        caption_entities=[{"type": "bot_command", "offset": 0, "length": 18}],
    )
    event = normalize_update(caption, "tg", BOT)
    assert event is not None and event.mentions_me and event.text == "/report@Helper_Bot now"
    astral = message(
        text="🚀🚀 @helper_bot go", entities=[{"type": "mention", "offset": 5, "length": 11}]
    )
    event = normalize_update(astral, "tg", BOT)
    assert event is not None and event.mentions_me


@pytest.mark.parametrize(
    "update",
    [
        {
            "update_id": 901,
            "message_reaction_count": {
                "chat": NEWS,
                "message_id": 9,
                "date": 1760000000,
                "reactions": [{"type": {"type": "emoji", "emoji": "👍"}, "total_count": 3}],
            },
        },
        {
            "update_id": 902,
            "callback_query": {"id": "1", "from": ANA, "chat_instance": "c", "data": "d"},
        },
        {"update_id": 903, "inline_query": {"id": "1", "from": ANA, "query": "q", "offset": ""}},
        {
            "update_id": 904,
            "my_chat_member": {
                "chat": PRIVATE,
                "from": ANA,
                "date": 1760000000,
                "old_chat_member": {"status": "member", "user": {"id": 7000000001}},
                "new_chat_member": {"status": "kicked", "user": {"id": 7000000001}},
            },
        },
        # Bot API 10.0's guest mode: answered only with answerGuestQuery, not supported
        {
            "update_id": 905,
            "guest_message": {
                "message_id": 10,
                "guest_query_id": "q",
                "guest_bot_caller_user": ANA,
                "guest_bot_caller_chat": GROUP,
                "from": ANA,
                "date": 1760000000,
                "chat": GROUP,
                "text": "@helper_bot hi",
            },
        },
        message(FORUM, message_thread_id=7, is_topic_message=True, forum_topic_closed={}),
        message(FORUM, general_forum_topic_hidden={}),
        message(new_chat_title="Ops 2"),
        message(PRIVATE, unique_gift={"gift": {"name": "Cap-1"}, "origin": "upgrade"}),
    ],
)
def test_kinds_that_say_nothing_to_the_agent_give_no_event(update: dict[str, Any]) -> None:
    assert normalize_update(update, "tg", BOT) is None


def test_general_topic_messages_and_replies_there_have_no_thread() -> None:
    # a reply in a forum's General topic carries message_thread_id (the replied thread),
    # but no is_topic_message: it is the forum's own conversation
    target = {**replied(text="x"), "chat": FORUM}
    update = message(FORUM, text="ok", message_thread_id=3, reply_to_message=target)
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.address == Address("tg", str(FORUM["id"]))
    assert event.conversation_kind == "group" and event.reply_to == "3"


async def test_an_operator_send_to_a_private_chats_topic_is_not_refused(
    fake: FakeTelegram,
) -> None:
    """Bot API 9.3: topics in a private chat with a bot; getChat says nothing of them."""
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    adapter = TelegramAdapter("tg", fake.settings())
    try:
        address = Address("tg", str(chat["id"]), "61")
        await adapter.check_address(address)
        receipt = await adapter.send(Outbound(address, "in your topic"))
        assert receipt.platform_message_id is not None
        assert fake.sent[-1].thread_id == 61 and fake.sent[-1].chat_id == chat["id"]
    finally:
        await adapter.stop()


async def test_the_discussion_groups_copy_of_the_bots_channel_post_is_its_own(
    fake: FakeTelegram,
) -> None:
    """A post the bot makes in a channel is copied into the linked discussion group
    (is_automatic_forward): that copy is the bot's own words, not a message to answer
    (with respond = "always" it would start a run on them), and a comment on it
    replies to the bot."""
    news = fake.channel("News")
    group = fake.supergroup("News chat")
    alice = fake.user("Alice")
    adapter = TelegramAdapter("tg", fake.settings())
    try:
        receipt = await adapter.send(Outbound(Address("tg", str(news["id"])), "release is out"))
        post_id = int(receipt.platform_message_id or 0)
        origin = {"type": "channel", "chat": news, "message_id": post_id, "date": 1760000000}
        copy = {
            "message_id": 900,
            "date": 1760000001,
            "chat": group,
            "from": {"id": 777000, "is_bot": False, "first_name": "Telegram"},
            "sender_chat": news,
            "is_automatic_forward": True,
            "forward_origin": origin,
            "text": "release is out",
        }
        assert adapter.normalize({"update_id": 1, "message": copy}) is None
        comment = fake.inject_message(group, alice, "which version?", deliver=False)
        comment["message"]["reply_to_message"] = copy
        event = adapter.normalize(comment)
        assert event is not None and event.mentions_me and event.reply_to == "900"
        # another channel post's copy (not the bot's) is a forward, and no reply to the bot
        other = {
            **copy,
            "message_id": 901,
            "forward_origin": {**origin, "message_id": post_id + 1000},
        }
        event = adapter.normalize({"update_id": 2, "message": other})
        assert event is not None and event.meta["forwarded_from"] == "News"
        comment["message"]["reply_to_message"] = other
        event = adapter.normalize(comment)
        assert event is not None and not event.mentions_me
    finally:
        await adapter.stop()

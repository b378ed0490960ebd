"""normalize_update on Bot API payloads shaped as Telegram documents and sends them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel.model import ATTACHMENTS_COMPLETE
from backchannel_telegram.normalize import BotIdentity, migration_of, normalize_update

BOT = BotIdentity(id="123456789", username="backchannel_test_bot")

# The "Message with text" example from Telegram's webhook guide, verbatim in
# shape: no chat.type, no from.is_bot (old payloads omit both).
DOCS_TEXT: dict[str, Any] = {
    "update_id": 10000,
    "message": {
        "date": 1441645532,
        "chat": {
            "last_name": "Test Lastname",
            "id": 1111111,
            "first_name": "Test",
            "username": "Test",
        },
        "message_id": 1365,
        "from": {
            "last_name": "Test Lastname",
            "id": 1111111,
            "first_name": "Test",
            "username": "Test",
        },
        "text": "/start",
    },
}
DOCS_REPLY: dict[str, Any] = {
    "update_id": 10000,
    "message": {
        "date": 1441645532,
        "chat": {
            "last_name": "Test Lastname",
            "id": 1111111,
            "type": "private",
            "first_name": "Test Firstname",
            "username": "Testusername",
        },
        "message_id": 1365,
        "from": {
            "last_name": "Test Lastname",
            "id": 1111111,
            "first_name": "Test Firstname",
            "username": "Testusername",
        },
        "text": "/start",
        "reply_to_message": {
            "date": 1441645000,
            "chat": {
                "last_name": "Reply Lastname",
                "type": "private",
                "id": 1111112,
                "first_name": "Reply Firstname",
                "username": "Testusername",
            },
            "message_id": 1334,
            "text": "Original",
        },
    },
}
DOCS_EDITED: dict[str, Any] = {
    "update_id": 10001,
    "edited_message": {
        "date": 1441645532,
        "chat": {
            "last_name": "Test Lastname",
            "type": "private",
            "id": 1111111,
            "first_name": "Test Firstname",
            "username": "Testusername",
        },
        "message_id": 1365,
        "from": {
            "last_name": "Test Lastname",
            "id": 1111111,
            "first_name": "Test Firstname",
            "username": "Testusername",
        },
        "text": "Edited text",
        "edit_date": 1441646600,
    },
}
DOCS_DOCUMENT: dict[str, Any] = {
    "update_id": 10000,
    "message": {
        "date": 1441645532,
        "chat": {
            "last_name": "Test Lastname",
            "type": "private",
            "id": 1111111,
            "first_name": "Test Firstname",
            "username": "Testusername",
        },
        "message_id": 1365,
        "from": {
            "last_name": "Test Lastname",
            "id": 1111111,
            "first_name": "Test Firstname",
            "username": "Testusername",
        },
        "document": {
            "file_id": "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX",
            "file_name": "Testfile.pdf",
            "mime_type": "application/pdf",
            "file_size": 536392,
        },
    },
}
DOCS_VOICE: dict[str, Any] = {
    "update_id": 10000,
    "message": {
        **{k: v for k, v in DOCS_DOCUMENT["message"].items() if k != "document"},
        "voice": {
            "file_id": "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX",
            "duration": 5,
            "mime_type": "audio/ogg",
            "file_size": 23000,
        },
    },
}

ALICE: dict[str, Any] = {
    "id": 5551234,
    "is_bot": False,
    "first_name": "Alice",
    "last_name": "Liddell",
    "username": "alice",
    "language_code": "en",
}
FORUM: dict[str, Any] = {
    "id": -1001987654321,
    "title": "Engineering",
    "type": "supergroup",
    "is_forum": True,
}
GROUP: dict[str, Any] = {"id": -4012345678, "title": "Ops", "type": "group"}


def group_message(text: str, update_id: int = 500, /, **extra: Any) -> dict[str, Any]:
    message = {"message_id": 42, "from": ALICE, "chat": GROUP, "date": 1760000000, "text": text}
    message.update(extra)
    return {"update_id": update_id, "message": message}


def test_docs_text_example_is_a_direct_message() -> None:
    event = normalize_update(DOCS_TEXT, "tg", BOT)
    assert event is not None
    assert event.event_id == "10000:1441645532"  # update_id:date
    assert event.kind == "message"
    assert event.text == "/start"
    assert event.address.chat == "1111111" and event.address.thread is None
    assert event.conversation_kind == "direct"
    assert event.sender.id == "1111111"
    assert event.sender.name == "Test Test Lastname"
    assert event.sender.handle == "Test"
    assert not event.sender.is_bot
    assert event.platform_message_id == "1365"
    assert event.sent_at == 1441645532.0


def test_docs_reply_example_sets_reply_to() -> None:
    event = normalize_update(DOCS_REPLY, "tg", BOT)
    assert event is not None and event.reply_to == "1334"
    assert not event.mentions_me  # the replied message is not the bot's


def test_docs_edit_example_is_an_edit_of_the_message() -> None:
    event = normalize_update(DOCS_EDITED, "tg", BOT)
    assert event is not None
    assert event.kind == "edit"
    assert event.platform_message_id == "1365"
    assert event.text == "Edited text"
    assert event.sent_at == 1441646600.0
    assert event.event_id == "10001:1441646600"  # update_id:edit_date
    # an edited message comes whole: its files (none here) replace the stored ones
    assert event.meta[ATTACHMENTS_COMPLETE] is True
    message = normalize_update(DOCS_REPLY, "tg", BOT)
    assert message is not None and ATTACHMENTS_COMPLETE not in message.meta


def test_each_edit_of_one_message_has_its_own_event_id() -> None:
    second = copy.deepcopy(DOCS_EDITED)
    second["update_id"] = 10002
    second["edited_message"]["text"] = "Edited again"
    first_event = normalize_update(DOCS_EDITED, "tg", BOT)
    second_event = normalize_update(second, "tg", BOT)
    assert first_event and second_event
    assert first_event.event_id != second_event.event_id
    assert first_event.platform_message_id == second_event.platform_message_id


def test_an_update_id_telegram_reuses_after_a_quiet_week_is_another_event() -> None:
    """After a week without updates Telegram picks the next update_id at random: a new
    message may carry the id of one already stored, and must not be its duplicate."""
    old = group_message("before the quiet week", 500)
    new = group_message("after it", 500, message_id=43, date=1760000000 + 8 * 86400)
    old_event, new_event = normalize_update(old, "tg", BOT), normalize_update(new, "tg", BOT)
    assert old_event is not None and new_event is not None
    assert old_event.event_id == "500:1760000000"
    assert new_event.event_id == "500:1760691200"
    # a redelivery of the very same update (a webhook retry, a getUpdates re-read) is
    # still the same event, so the store still drops it as a duplicate
    again = normalize_update(copy.deepcopy(old), "tg", BOT)
    assert again is not None and again.event_id == old_event.event_id


def test_a_reused_update_id_on_a_reaction_or_an_edit_is_another_event() -> None:
    def reaction(date: int) -> dict[str, Any]:
        return {
            "update_id": 800,
            "message_reaction": {
                "chat": GROUP,
                "message_id": 41,
                "user": ALICE,
                "date": date,
                "old_reaction": [],
                "new_reaction": [{"type": "emoji", "emoji": "👍"}],
            },
        }

    first, later = (
        normalize_update(reaction(1760000300), "tg", BOT),
        normalize_update(reaction(1760700000), "tg", BOT),
    )
    assert first is not None and later is not None
    assert (first.event_id, later.event_id) == ("800:1760000300", "800:1760700000")
    edit = copy.deepcopy(DOCS_EDITED)
    edit["edited_message"]["edit_date"] = 1442300000
    edited = normalize_update(edit, "tg", BOT)
    assert edited is not None and edited.event_id == "10001:1442300000"
    # an edit without edit_date (never sent by Telegram, but accepted) takes the date
    del edit["edited_message"]["edit_date"]
    undated = normalize_update(edit, "tg", BOT)
    assert undated is not None and undated.event_id == "10001:1441645532"


def test_docs_document_and_voice_examples_become_attachments() -> None:
    document = normalize_update(DOCS_DOCUMENT, "tg", BOT)
    voice = normalize_update(DOCS_VOICE, "tg", BOT)
    assert document is not None and voice is not None
    (doc,) = document.attachments
    assert (doc.kind, doc.name, doc.mime, doc.size, doc.ref) == (
        "document",
        "Testfile.pdf",
        "application/pdf",
        536392,
        "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX",
    )
    assert document.text == ""
    (note,) = voice.attachments
    assert (note.kind, note.mime, note.size) == ("voice", "audio/ogg", 23000)


def test_photo_keeps_the_largest_size_and_the_caption() -> None:
    update = group_message(
        "",
        photo=[
            {
                "file_id": "small",
                "file_unique_id": "u1",
                "file_size": 1000,
                "width": 90,
                "height": 90,
            },
            {
                "file_id": "large",
                "file_unique_id": "u2",
                "file_size": 90000,
                "width": 1280,
                "height": 1280,
            },
        ],
        caption="look @backchannel_test_bot",
        caption_entities=[{"type": "mention", "offset": 5, "length": 21}],
    )
    del update["message"]["text"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert event.text == "look @backchannel_test_bot"
    assert event.mentions_me
    (photo,) = event.attachments
    assert (photo.kind, photo.ref, photo.size, photo.mime) == (
        "photo",
        "large",
        90000,
        "image/jpeg",
    )


def test_animation_is_reported_once_not_also_as_document() -> None:
    doc = {
        "file_id": "anim",
        "file_unique_id": "a",
        "file_name": "x.gif.mp4",
        "mime_type": "video/mp4",
        "file_size": 5,
    }
    update = group_message(
        "", animation={**doc, "width": 1, "height": 1, "duration": 1}, document=doc
    )
    del update["message"]["text"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None and [a.kind for a in event.attachments] == ["animation"]


def test_sticker_contact_and_location_are_described() -> None:
    update = group_message(
        "",
        sticker={
            "file_id": "st",
            "file_unique_id": "s",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": "😀",
        },
    )
    del update["message"]["text"]
    sticker = normalize_update(update, "tg", BOT)
    assert sticker is not None and (sticker.attachments[0].kind, sticker.attachments[0].name) == (
        "sticker",
        "😀",
    )
    update = group_message("", location={"latitude": 51.5, "longitude": -0.12})
    del update["message"]["text"]
    place = normalize_update(update, "tg", BOT)
    assert place is not None and place.attachments[0].name == "51.500000,-0.120000"
    update = group_message("", contact={"phone_number": "+441234", "first_name": "Bob"})
    del update["message"]["text"]
    contact = normalize_update(update, "tg", BOT)
    assert contact is not None and contact.attachments[0].name == "Bob +441234"


def test_several_attachments_keep_their_order_and_a_venue_names_its_own_place() -> None:
    # keys in an order unlike the reported one: files first, then things shared by name
    update = group_message(
        "",
        poll={"question": "Lunch?"},
        dice={"emoji": "🎲", "value": 4},
        location={"latitude": 1.0, "longitude": 2.0},
        venue={"title": "Cafe", "address": "Main St", "location": {"latitude": 1, "longitude": 2}},
        contact={"first_name": "Bob", "last_name": "Ray", "phone_number": "+100"},
        document={"file_id": "d1", "file_name": "a.pdf", "mime_type": "application/pdf"},
        video={"file_id": "v1", "file_size": 10},
        photo=[{"file_id": "small", "file_size": 1}, {"file_id": "large", "file_size": 9}],
    )
    del update["message"]["text"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert [(a.kind, a.name, a.mime, a.size, a.ref) for a in event.attachments] == [
        ("photo", None, "image/jpeg", 9, "large"),
        ("video", None, None, 10, "v1"),
        ("document", "a.pdf", "application/pdf", None, "d1"),
        ("contact", "Bob Ray +100", None, None, None),
        ("venue", "Cafe, Main St, 1.000000,2.000000", None, None, None),
        ("dice", "🎲 4", None, None, None),
        ("poll", "Lunch?", None, None, None),
    ]
    # a venue that is not an object does not hide the location beside it
    update["message"]["venue"] = "Cafe"
    update["message"]["video"] = {"file_size": 10}  # and a file without a file_id is an error
    with pytest.raises(NormalizeError, match=r"message\.video\.file_id"):
        normalize_update(update, "tg", BOT)
    del update["message"]["video"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert [a.kind for a in event.attachments] == [
        "photo",
        "document",
        "contact",
        "location",
        "dice",
        "poll",
    ]


def test_a_polls_options_and_a_checklists_tasks_are_listed_after_its_title() -> None:
    options = [{"text": "Pizza", "voter_count": 0}, {"text": "Sushi", "voter_count": 2}]
    update = group_message("", poll={"id": "1", "question": "Lunch?", "options": options})
    del update["message"]["text"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert [(a.kind, a.name) for a in event.attachments] == [("poll", "Lunch? (Pizza / Sushi)")]
    tasks = [{"id": 1, "text": "tag v2"}, {"id": 2, "text": "publish notes"}]
    update = group_message("", checklist={"title": "Release", "tasks": tasks})
    del update["message"]["text"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert [(a.kind, a.name) for a in event.attachments] == [
        ("checklist", "Release (tag v2 / publish notes)")
    ]
    # items of the wrong shape are skipped; no title still lists the items
    broken = [None, {"text": 5}, "Tea", {"text": "Coffee"}]
    update = group_message("", poll={"options": broken}, checklist={"title": "T", "tasks": "x"})
    del update["message"]["text"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert [(a.kind, a.name) for a in event.attachments] == [
        ("poll", "poll (Coffee)"),
        ("checklist", "T"),
    ]


def test_web_app_data_is_what_the_user_sent_from_the_button() -> None:
    update: dict[str, Any] = {
        "update_id": 501,
        "message": {
            "message_id": 43,
            "from": ALICE,
            "chat": {"id": ALICE["id"], "type": "private", "first_name": "Alice"},
            "date": 1760000000,
            "web_app_data": {"data": "order #42: 2 pizzas", "button_text": "Order"},
        },
    }
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.conversation_kind == "direct"
    assert event.text == "order #42: 2 pizzas"
    assert [(a.kind, a.name) for a in event.attachments] == [("web_app_data", "Order")]
    # data or a button of the wrong type is no text and no name, not an error
    update["message"]["web_app_data"] = {"data": ["x"], "button_text": 7}
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.text == ""
    assert [(a.kind, a.name) for a in event.attachments] == [("web_app_data", None)]


def test_mention_entity_counts_utf16_offsets() -> None:
    text = "👋🏽 hey @backchannel_test_bot, and @alice"
    # 👋🏽 is four UTF-16 units: the entity offsets Telegram sends count those
    update = group_message(
        text,
        entities=[
            {"type": "mention", "offset": 9, "length": 21},
            {"type": "mention", "offset": 36, "length": 6},
        ],
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.mentions_me
    assert event.conversation_kind == "group"
    assert event.conversation_title == "Ops"


def test_mention_of_someone_else_is_not_a_mention_of_the_bot() -> None:
    update = group_message("hi @alice", entities=[{"type": "mention", "offset": 3, "length": 6}])
    event = normalize_update(update, "tg", BOT)
    assert event is not None and not event.mentions_me


def test_text_mention_of_the_bot_and_command_addressed_to_it_are_mentions() -> None:
    update = group_message(
        "Backchannel help",
        entities=[
            {
                "type": "text_mention",
                "offset": 0,
                "length": 11,
                "user": {"id": 123456789, "is_bot": True, "first_name": "Backchannel"},
            }
        ],
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.mentions_me
    command = group_message(
        "/help@backchannel_test_bot", entities=[{"type": "bot_command", "offset": 0, "length": 26}]
    )
    event = normalize_update(command, "tg", BOT)
    assert event is not None and event.mentions_me


def test_reply_to_the_bot_is_a_mention() -> None:
    bot_message = {
        "message_id": 41,
        "from": {
            "id": 123456789,
            "is_bot": True,
            "first_name": "Backchannel",
            "username": "backchannel_test_bot",
        },
        "chat": GROUP,
        "date": 1760000000,
        "text": "earlier answer",
    }
    event = normalize_update(group_message("thanks", reply_to_message=bot_message), "tg", BOT)
    assert event is not None and event.mentions_me and event.reply_to == "41"


def test_forum_topic_message_lives_in_the_topic_and_does_not_reply_to_its_creation() -> None:
    created: dict[str, Any] = {
        "message_id": 7,
        "from": ALICE,
        "chat": FORUM,
        "date": 1760000000,
        "message_thread_id": 7,
        "is_topic_message": True,
        "forum_topic_created": {"name": "Deploys", "icon_color": 7322096},
    }
    update: dict[str, Any] = {
        "update_id": 600,
        "message": {
            "message_id": 9,
            "from": ALICE,
            "chat": FORUM,
            "date": 1760000100,
            "message_thread_id": 7,
            "is_topic_message": True,
            "reply_to_message": created,
            "text": "deploy is red",
        },
    }
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert (event.address.chat, event.address.thread) == ("-1001987654321", "7")
    assert event.conversation_kind == "thread"
    # the creation message it carries names the topic: the conversation's title says it
    assert event.conversation_title == "Engineering / Deploys"
    assert event.meta["topic_name"] == "Deploys"
    assert event.reply_to is None
    assert normalize_update({"update_id": 599, "message": created}, "tg", BOT) is None
    # a name no title should hold (lines, a thousand characters) is one line, cut; no name
    # or not a string: the forum's title alone
    for name, title in (
        ("Deploys\n\tand  rollbacks", "Engineering / Deploys and rollbacks"),
        ("x" * 1000, "Engineering / " + "x" * 128),
        ("", "Engineering"),
        (None, "Engineering"),
        (7, "Engineering"),
    ):
        named = {**created, "forum_topic_created": {"name": name, "icon_color": 1}}
        odd = {"update_id": 601, "message": {**update["message"], "reply_to_message": named}}
        got = normalize_update(odd, "tg", BOT)
        assert got is not None and got.conversation_title == title, name
    # the creation message of another topic (a stray reply) does not name this one
    other = {**created, "message_id": 8, "message_thread_id": 8}
    stray = {"update_id": 602, "message": {**update["message"], "reply_to_message": other}}
    got = normalize_update(stray, "tg", BOT)
    assert got is not None and got.conversation_title == "Engineering"


def test_reply_inside_a_forum_topic_keeps_its_target() -> None:
    target = {
        "message_id": 9,
        "from": ALICE,
        "chat": FORUM,
        "date": 1760000100,
        "message_thread_id": 7,
        "is_topic_message": True,
        "text": "deploy is red",
    }
    update = {
        "update_id": 601,
        "message": {
            "message_id": 10,
            "from": ALICE,
            "chat": FORUM,
            "date": 1760000200,
            "message_thread_id": 7,
            "is_topic_message": True,
            "reply_to_message": target,
            "text": "still red",
        },
    }
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.reply_to == "9" and event.address.thread == "7"


def test_reply_thread_in_a_plain_supergroup_is_not_a_separate_conversation() -> None:
    chat = {"id": -1001000000002, "title": "Plain", "type": "supergroup"}
    target = {"message_id": 3, "from": ALICE, "chat": chat, "date": 1, "text": "q"}
    update = {
        "update_id": 602,
        "message": {
            "message_id": 4,
            "from": ALICE,
            "chat": chat,
            "date": 2,
            "message_thread_id": 3,
            "reply_to_message": target,
            "text": "a",
        },
    }
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.address.thread is None and event.reply_to == "3"


@pytest.mark.parametrize(
    "service",
    [
        {"new_chat_members": [ALICE]},
        {"left_chat_member": ALICE},
        {"pinned_message": {"message_id": 1, "chat": GROUP, "date": 1}},
        {"new_chat_title": "Ops 2"},
        {"group_chat_created": True},
        {"migrate_to_chat_id": -1001000000009},
        {"message_auto_delete_timer_changed": {"message_auto_delete_time": 86400}},
        {"forum_topic_closed": {}},
    ],
)
def test_service_messages_are_not_for_the_agent(service: dict[str, Any]) -> None:
    update = group_message("x", **service)
    del update["message"]["text"]
    assert normalize_update(update, "tg", BOT) is None


def test_the_bots_own_message_is_none() -> None:
    update = group_message(
        "my words", **{"from": {"id": 123456789, "is_bot": True, "first_name": "Backchannel"}}
    )
    assert normalize_update(update, "tg", BOT) is None


def test_anonymous_admin_speaks_as_the_group() -> None:
    update = group_message(
        "from the admins",
        sender_chat=GROUP,
        **{
            "from": {
                "id": 1087968824,
                "is_bot": True,
                "first_name": "Group",
                "username": "GroupAnonymousBot",
            }
        },
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert event.sender.id == str(GROUP["id"]) and event.sender.name == "Ops"
    assert not event.sender.is_bot


def test_channel_post_is_a_message_from_the_channel() -> None:
    channel = {"id": -1001555000111, "title": "News", "type": "channel", "username": "news"}
    update = {
        "update_id": 700,
        "channel_post": {
            "message_id": 5,
            "sender_chat": channel,
            "chat": channel,
            "date": 1760000000,
            "text": "release 1.2 is out",
            "author_signature": "Dana",
        },
    }
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert event.sender.name == "Dana" and event.sender.handle == "news"
    assert event.conversation_kind == "group"


def test_message_reaction_becomes_a_reaction_on_the_target() -> None:
    update = {
        "update_id": 800,
        "message_reaction": {
            "chat": GROUP,
            "message_id": 41,
            "user": ALICE,
            "date": 1760000300,
            "old_reaction": [],
            "new_reaction": [{"type": "emoji", "emoji": "👍"}],
        },
    }
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert (event.kind, event.text, event.platform_message_id) == ("reaction", "👍", "41")
    assert event.sender.handle == "alice"
    assert event.event_id == "800:1760000300"  # update_id:date


def test_reaction_taken_back_has_empty_text() -> None:
    update = {
        "update_id": 801,
        "message_reaction": {
            "chat": GROUP,
            "message_id": 41,
            "user": ALICE,
            "date": 1760000300,
            "old_reaction": [{"type": "emoji", "emoji": "👍"}],
            "new_reaction": [],
        },
    }
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.text == "" and event.meta["old_reaction"] == ["👍"]


def test_migrated_supergroup_messages_are_filed_under_the_original_group() -> None:
    supergroup = {"id": -1001000000077, "title": "Ops", "type": "supergroup"}
    notice = {
        "update_id": 900,
        "message": {
            "message_id": 1,
            "from": ALICE,
            "chat": supergroup,
            "date": 1,
            "migrate_from_chat_id": GROUP["id"],
        },
    }
    assert migration_of(notice) == (str(GROUP["id"]), str(supergroup["id"]))
    assert normalize_update(notice, "tg", BOT) is None
    update = {
        "update_id": 901,
        "message": {
            "message_id": 2,
            "from": ALICE,
            "chat": supergroup,
            "date": 2,
            "text": "still here",
        },
    }
    aliases = {str(supergroup["id"]): str(GROUP["id"])}
    event = normalize_update(update, "tg", BOT, aliases)
    assert event is not None
    assert event.address.chat == str(GROUP["id"])
    assert event.meta["chat_id"] == supergroup["id"]
    assert event.meta["migrated_from_chat_id"] == GROUP["id"]


def test_updates_of_other_kinds_are_none() -> None:
    callback = {
        "update_id": 1,
        "callback_query": {
            "id": "4382bfdwdsb323b2d9",
            "from": ALICE,
            "data": "x",
            "chat_instance": "1",
        },
    }
    assert normalize_update(callback, "tg", BOT) is None


def test_extra_unknown_fields_are_tolerated() -> None:
    update = group_message("hi", some_future_field={"x": 1}, link_preview_options={})
    update["some_future_update_field"] = True
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.text == "hi"


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"message": {}}, "update_id"),
        ({"update_id": 1, "message": []}, "message"),
        ({"update_id": 1, "message": {"message_id": 1, "date": 1, "text": "x"}}, "message.chat"),
        (
            {"update_id": 1, "message": {"message_id": 1, "chat": {"id": "abc"}, "date": 1}},
            "message.chat.id",
        ),
        (
            {
                "update_id": 1,
                "message": {"message_id": 1, "chat": {"id": 5}, "date": 1, "text": "x"},
            },
            "message.from",
        ),
        (
            {
                "update_id": 1,
                "message": {
                    "message_id": 1,
                    "chat": {"id": 5},
                    "date": 1,
                    "from": {"id": 5},
                    "text": 7,
                },
            },
            "message.text",
        ),
        (
            {
                "update_id": 1,
                "message": {
                    "message_id": 1,
                    "chat": {"id": 5},
                    "date": 1,
                    "from": {"id": 5},
                    "document": {"file_name": "x"},
                },
            },
            "message.document.file_id",
        ),
    ],
)
def test_malformed_updates_say_where(payload: dict[str, Any], where: str) -> None:
    with pytest.raises(NormalizeError) as caught:
        normalize_update(payload, "tg", BOT)
    assert caught.value.where == where


# --- links, forwards and what a reply says of its target ------------------------------

BEN: dict[str, Any] = {"id": 5559876, "is_bot": False, "first_name": "Ben", "last_name": "Ng"}


def test_text_link_keeps_its_url_after_its_words() -> None:
    url = "https://github.com/org/repo/pull/42"
    update = group_message(
        "please review this and ping Ben",
        entities=[
            {"type": "bold", "offset": 0, "length": 6},
            {"type": "text_link", "offset": 14, "length": 4, "url": url},
            {"type": "text_mention", "offset": 28, "length": 3, "user": BEN},
        ],
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert event.text == (f"please review this ({url}) and ping Ben (tg://user?id={BEN['id']})")


def test_text_links_count_utf16_units_over_emoji_and_in_captions() -> None:
    # 🚀 is two UTF-16 units; 👩‍💻 five: offsets after them count those
    update = group_message(
        "🚀 docs, 👩‍💻 then the board",
        entities=[
            {"type": "text_link", "offset": 0, "length": 2, "url": "https://launch.example"},
            {"type": "text_link", "offset": 3, "length": 4, "url": "https://docs.example"},
            {"type": "text_link", "offset": 9, "length": 5, "url": "https://dev.example"},
            {"type": "text_link", "offset": 24, "length": 5, "url": "https://board.example"},
            {"type": "text_link", "offset": 0, "length": 0, "url": "https://empty.example"},
            {"type": "text_link", "offset": 3, "length": 4, "url": 7},
        ],
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None
    assert event.text == (
        "🚀 (https://launch.example) docs (https://docs.example), "
        "👩‍💻 (https://dev.example) then the board (https://board.example)"
    )
    photo = group_message(
        "",
        photo=[{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}],
        caption="schéma here",
        caption_entities=[{"type": "text_link", "offset": 7, "length": 4, "url": "https://s.x"}],
    )
    del photo["message"]["text"]
    event = normalize_update(photo, "tg", BOT)
    assert event is not None and event.text == "schéma here (https://s.x)"
    # a link whose words are its URL is not said twice
    same = group_message(
        "https://s.x",
        entities=[{"type": "text_link", "offset": 0, "length": 11, "url": "https://s.x"}],
    )
    event = normalize_update(same, "tg", BOT)
    assert event is not None and event.text == "https://s.x"


@pytest.mark.parametrize(
    ("fields", "origin"),
    [
        ({"forward_origin": {"type": "user", "sender_user": BEN, "date": 1}}, "Ben Ng"),
        (
            {"forward_origin": {"type": "hidden_user", "sender_user_name": "Carl", "date": 1}},
            "Carl",
        ),
        (
            {
                "forward_origin": {
                    "type": "chat",
                    "sender_chat": {"id": -100777, "type": "supergroup", "title": "Admins"},
                    "author_signature": "Ed",
                    "date": 1,
                }
            },
            "Admins (Ed)",
        ),
        (
            {
                "forward_origin": {
                    "type": "channel",
                    "chat": {"id": -100778, "type": "channel", "title": "News"},
                    "message_id": 5,
                    "date": 1,
                }
            },
            "News",
        ),
        ({"forward_from": BEN, "forward_date": 1}, "Ben Ng"),
        (
            {
                "forward_from_chat": {"id": -100778, "type": "channel", "title": "News"},
                "forward_signature": "Ed",
                "forward_date": 1,
            },
            "News (Ed)",
        ),
        ({"forward_sender_name": "Carl", "forward_date": 1}, "Carl"),
        ({"forward_date": 1}, None),
    ],
)
def test_a_forward_names_its_origin_and_a_mention_in_it_is_not_for_the_bot(
    fields: dict[str, Any], origin: str | None
) -> None:
    text = "please pay it @backchannel_test_bot"
    mention = [{"type": "mention", "offset": 14, "length": 21}]
    event = normalize_update(group_message(text, entities=mention, **fields), "tg", BOT)
    assert event is not None and event.text == text
    assert event.meta["forwarded"] is True and event.meta.get("forwarded_from") == origin
    assert not event.mentions_me
    # the same words written by the sender do mention the bot
    event = normalize_update(group_message(text, entities=mention), "tg", BOT)
    assert event is not None and event.mentions_me and "forwarded" not in event.meta


def test_a_forwarded_caption_mention_is_not_for_the_bot() -> None:
    update = group_message(
        "",
        photo=[{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}],
        caption="@backchannel_test_bot look",
        caption_entities=[{"type": "mention", "offset": 0, "length": 21}],
        forward_origin={"type": "user", "sender_user": BEN, "date": 1},
    )
    del update["message"]["text"]
    event = normalize_update(update, "tg", BOT)
    assert event is not None and not event.mentions_me
    assert event.meta["forwarded_from"] == "Ben Ng"


def test_a_reply_says_who_wrote_its_target_and_what_it_said() -> None:
    replied = {
        "message_id": 77,
        "from": BEN,
        "chat": GROUP,
        "date": 1759999000,
        "text": "prod db is at 95% disk, I think we should drop the audit table",
    }
    event = normalize_update(group_message("is that safe?", reply_to_message=replied), "tg", BOT)
    assert event is not None and event.reply_to == "77"
    assert event.meta["reply_from"] == "Ben Ng"
    assert event.meta["reply_quote"] == replied["text"]
    # the part the user quoted, when there is one
    quoted = group_message(
        "really?", reply_to_message=replied, quote={"text": "drop the audit table", "position": 42}
    )
    event = normalize_update(quoted, "tg", BOT)
    assert event is not None and event.meta["reply_quote"] == "drop the audit table"
    # a long target is cut; a caption is its words; an anonymous admin is the chat's name
    long = {**replied, "text": "x" * 1000}
    event = normalize_update(group_message("?", reply_to_message=long), "tg", BOT)
    assert event is not None
    assert event.meta["reply_quote"] == "x" * 299 + "…"
    anonymous = {
        "message_id": 78,
        "from": {"id": 1087968824, "is_bot": True, "first_name": "Group"},
        "sender_chat": {"id": GROUP["id"], "type": "group", "title": "Ops"},
        "chat": GROUP,
        "date": 1759999000,
        "photo": [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}],
        "caption": "the new dashboard",
    }
    event = normalize_update(group_message("nice", reply_to_message=anonymous), "tg", BOT)
    assert event is not None and event.reply_to == "78"
    assert (event.meta["reply_from"], event.meta["reply_quote"]) == ("Ops", "the new dashboard")
    # every value is a string
    assert all(isinstance(event.meta[key], str) for key in ("reply_from", "reply_quote"))


def test_an_external_reply_has_no_target_here_but_says_who_and_what() -> None:
    external = {
        "origin": {"type": "user", "sender_user": BEN, "date": 1759990000},
        "chat": {"id": -1001800000009, "type": "supergroup", "title": "Other"},
        "message_id": 5,
    }
    update = group_message(
        "is this right?",
        external_reply=external,
        quote={"text": "password is hunter2", "position": 11},
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.reply_to is None
    assert (event.meta["reply_from"], event.meta["reply_quote"]) == (
        "Ben Ng",
        "password is hunter2",
    )
    # a channel's photo, no words, no quote: who, and what it shared
    channel = {
        "origin": {
            "type": "channel",
            "chat": {"id": -1001800000001, "type": "channel", "title": "News"},
            "message_id": 9,
            "author_signature": "Ed",
            "date": 1759990000,
        },
        "chat": {"id": -1001800000001, "type": "channel", "title": "News"},
        "message_id": 9,
        "photo": [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}],
    }
    event = normalize_update(group_message("seen this?", external_reply=channel), "tg", BOT)
    assert event is not None and event.reply_to is None
    assert (event.meta["reply_from"], event.meta["reply_quote"]) == ("News (Ed)", "[photo]")
    # a message of another topic of this very chat is here: its id is the target
    here = {**external, "chat": FORUM, "message_id": 12}
    event = normalize_update(group_message("x", chat=FORUM, external_reply=here), "tg", BOT)
    assert event is not None and event.reply_to == "12"


def test_a_forum_topics_mark_on_every_message_says_nothing_of_a_reply() -> None:
    created = {
        "message_id": 7,
        "from": ALICE,
        "chat": FORUM,
        "date": 1759990000,
        "message_thread_id": 7,
        "forum_topic_created": {"name": "Deploys", "icon_color": 1},
        "is_topic_message": True,
    }
    update = group_message(
        "deploy now?",
        chat=FORUM,
        message_thread_id=7,
        is_topic_message=True,
        reply_to_message=created,
    )
    event = normalize_update(update, "tg", BOT)
    assert event is not None and event.reply_to is None
    assert "reply_from" not in event.meta and "reply_quote" not in event.meta


def test_another_bots_message_is_a_bots_in_a_group_and_in_a_private_chat() -> None:
    """Bot-to-Bot Communication Mode: another bot's messages reach this one, marked
    by ``from.is_bot`` (what the core's bot_turns counts); a person's never are."""
    for chat in (
        {"id": -1001234567890, "type": "supergroup", "title": "Ops"},
        {"id": 987654321, "type": "private", "first_name": "Helper"},
    ):
        for is_bot in (True, False):
            update = {
                "update_id": 20001,
                "message": {
                    "message_id": 7,
                    "date": 1700000000,
                    "chat": chat,
                    "from": {
                        "id": 987654321,
                        "is_bot": is_bot,
                        "first_name": "Helper",
                        "username": "helper_bot" if is_bot else "helper",
                    },
                    "text": "done: the build is green",
                },
            }
            event = normalize_update(update, "tg", BOT)
            assert event is not None
            assert (event.sender.id, event.sender.is_bot) == ("987654321", is_bot)

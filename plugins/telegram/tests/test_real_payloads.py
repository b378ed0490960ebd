"""normalize_update on the shapes Telegram really sends, and on mangled copies of them.

Each payload below follows a shape published by Telegram or captured from the
live Bot API and shown in public code or issues; the source is named above it.
Values (names, ids, file ids, texts) are our own, so no one's data is copied.
The last tests mutate these payloads at random: whatever comes in, normalize
gives an Event, None, or a NormalizeError, never another exception.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel.model import Event, to_json
from backchannel.testing import mutate_payload
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.normalize import BotIdentity, migration_of, normalize_update

BOT = BotIdentity(id="7000000001", username="helper_bot")
ACCOUNT = "tg"


def load(text: str) -> dict[str, Any]:
    payload = json.loads(text)
    assert isinstance(payload, dict)
    return payload


# --- sources: core.telegram.org/bots/webhooks "testing your bot" examples -----

# "Forwarded message": old-style forward_from / forward_date, chat without type.
WEBHOOK_FORWARDED = """
{"update_id": 10000,
 "message": {"date": 1441645532,
   "chat": {"last_name": "Lastname", "id": 1111111, "first_name": "Ana", "username": "ana"},
   "message_id": 1365,
   "from": {"last_name": "Lastname", "id": 1111111, "first_name": "Ana", "username": "ana"},
   "forward_from": {"last_name": "Other", "id": 2222222, "first_name": "Ben"},
   "forward_date": 1441645550,
   "text": "/start"}}
"""

# "Message with bold and italic entities" (the guide's entity example).
WEBHOOK_ENTITIES = """
{"update_id": 10000,
 "message": {"date": 1441645532,
   "chat": {"last_name": "Lastname", "id": 1111111, "type": "private", "first_name": "Ana"},
   "message_id": 1365,
   "from": {"last_name": "Lastname", "id": 1111111, "first_name": "Ana"},
   "text": "Bold and italics",
   "entities": [{"type": "italic", "offset": 9, "length": 7},
                {"type": "bold", "offset": 0, "length": 4}]}}
"""

# "Message with audio": performer and title, no file_name.
WEBHOOK_AUDIO = """
{"update_id": 10000,
 "message": {"date": 1441645532,
   "chat": {"id": 1111111, "type": "private", "first_name": "Ana"},
   "message_id": 1365,
   "from": {"id": 1111111, "first_name": "Ana"},
   "audio": {"file_id": "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX", "duration": 243,
             "mime_type": "audio/mpeg", "file_size": 3897500,
             "title": "Evening Song", "performer": "The Band"}}}
"""

# "Callback query" and "Inline query": not messages, not for the agent.
WEBHOOK_CALLBACK = """
{"update_id": 10000,
 "callback_query": {"id": "4382bfdwdsb323b2d9",
   "from": {"id": 1111111, "first_name": "Ana", "username": "ana"},
   "data": "Data from button callback",
   "inline_message_id": "1234csdbsk4839"}}
"""
WEBHOOK_INLINE = """
{"update_id": 10000,
 "inline_query": {"id": "134567890097", "from": {"id": 1111111, "first_name": "Ana"},
   "query": "inline query", "offset": ""}}
"""

# --- source: Bayselonarrend/OpenIntegrations docs, getUpdates / send* results --
# (captured from the live Bot API: forum service messages, a channel pin,
# an animation that also carries `document`, a forward with forward_origin,
# a poll; width redacted to "***" in the capture, kept as a wrong-typed field)

CAPTURED_CHANNEL_PIN = """
{"update_id": 291365945,
 "channel_post": {"message_id": 4605,
   "sender_chat": {"id": -1001800000001, "title": "News", "username": "newsroom", "type": "channel"},
   "chat": {"id": -1001800000001, "title": "News", "username": "newsroom", "type": "channel"},
   "date": 1716906762,
   "pinned_message": {"message_id": 4590,
     "sender_chat": {"id": -1001800000001, "title": "News", "type": "channel"},
     "chat": {"id": -1001800000001, "title": "News", "type": "channel"},
     "date": 1716906624, "text": "pinned words"}}}
"""

CAPTURED_TOPIC_CREATED = """
{"update_id": 291365946,
 "message": {"message_id": 2391,
   "from": {"id": 5550000001, "is_bot": false, "first_name": "Mod"},
   "chat": {"id": -1001900000002, "title": "Team", "is_forum": true, "type": "supergroup"},
   "date": 1716906786, "message_thread_id": 2391,
   "forum_topic_created": {"name": "Releases", "icon_color": 7322096,
                           "icon_custom_emoji_id": "5357419403325481346"},
   "is_topic_message": true}}
"""

CAPTURED_TOPIC_EDITED = """
{"update_id": 291365947,
 "message": {"message_id": 2393,
   "from": {"id": 5550000001, "is_bot": false, "first_name": "Mod"},
   "chat": {"id": -1001900000002, "title": "Team", "is_forum": true, "type": "supergroup"},
   "date": 1716906786, "message_thread_id": 2391,
   "reply_to_message": {"message_id": 2391,
     "from": {"id": 5550000001, "is_bot": false, "first_name": "Mod"},
     "chat": {"id": -1001900000002, "title": "Team", "is_forum": true, "type": "supergroup"},
     "date": 1716906786, "message_thread_id": 2391,
     "forum_topic_created": {"name": "Releases", "icon_color": 7322096},
     "is_topic_message": true},
   "forum_topic_edited": {"name": "Releases 2"},
   "is_topic_message": true}}
"""

CAPTURED_GENERAL_HIDDEN = """
{"update_id": 291365954,
 "message": {"message_id": 2400,
   "from": {"id": 5550000001, "is_bot": false, "first_name": "Mod"},
   "chat": {"id": -1001900000002, "title": "Team", "is_forum": true, "type": "supergroup"},
   "date": 1716906880, "general_forum_topic_hidden": {}}}
"""

CAPTURED_ANIMATION = """
{"update_id": 291365960,
 "message": {"message_id": 18554,
   "from": {"id": 461000001, "is_bot": false, "first_name": "Anton", "last_name": "T",
            "username": "anton_t", "language_code": "ru", "is_premium": true},
   "chat": {"id": 461000001, "first_name": "Anton", "last_name": "T", "username": "anton_t",
            "type": "private"},
   "date": 1766874897,
   "animation": {"file_name": "cat.gif.mp4", "mime_type": "video/mp4", "duration": 3,
     "width": "***", "height": 220,
     "thumbnail": {"file_id": "AAMCthumb", "file_unique_id": "AQADthumb", "file_size": 11352,
                   "width": "***", "height": 220},
     "file_id": "CgACAgIAAxkDAAJIem", "file_unique_id": "AgAD_5Q", "file_size": 84965},
   "document": {"file_name": "cat.gif.mp4", "mime_type": "video/mp4",
     "file_id": "CgACAgIAAxkDAAJIem", "file_unique_id": "AgAD_5Q", "file_size": 84965},
   "caption": "Строковое значение 🐈"}}
"""

CAPTURED_FORWARD_ORIGIN = """
{"update_id": 291365961,
 "message": {"message_id": 18057,
   "from": {"id": 461000001, "is_bot": false, "first_name": "Anton"},
   "chat": {"id": 461000001, "first_name": "Anton", "type": "private"},
   "date": 1765108789,
   "forward_origin": {"type": "channel",
     "chat": {"id": -1001800000001, "title": "News", "username": "newsroom", "type": "channel"},
     "message_id": 23031, "date": 1765108518},
   "forward_from_chat": {"id": -1001800000001, "title": "News", "type": "channel"},
   "forward_from_message_id": 23031, "forward_date": 1765108518,
   "text": "Полужирный текст",
   "entities": [{"offset": 0, "length": 16, "type": "bold"}]}}
"""

CAPTURED_POLL = """
{"update_id": 291365962,
 "message": {"message_id": 18379,
   "from": {"id": 461000001, "is_bot": false, "first_name": "Anton"},
   "chat": {"id": 461000001, "first_name": "Anton", "type": "private"},
   "date": 1765389280,
   "poll": {"id": "5316759437560518415", "question": "Favourite colour?",
     "options": [{"text": "Red", "voter_count": 0}, {"text": "Blue", "voter_count": 0}],
     "total_voter_count": 0, "is_closed": false, "is_anonymous": false,
     "type": "regular", "allows_multiple_answers": false}}}
"""

# --- source: defstudio/telegraph issue #692 (a captured group upgrade) ---------

CAPTURED_MIGRATE_TO = """
{"message": {"chat": {"id": -4518000001, "type": "group", "title": "Test group",
                      "all_members_are_administrators": false},
   "date": 1731694471,
   "from": {"id": 62000001, "is_bot": false, "username": "someone", "first_name": "Some",
            "is_premium": true, "language_code": "ru"},
   "message_id": 153, "migrate_to_chat_id": -1002471000001},
 "update_id": 61708811}
"""

# --- source: aiogram tests/types/dataset.py (dicts taken from real updates) ---

AIOGRAM_STICKER = """
{"update_id": 123456789,
 "message": {"message_id": 12345,
   "from": {"id": 12345678, "is_bot": false, "first_name": "First", "last_name": "Last",
            "username": "user", "language_code": "ru"},
   "chat": {"id": 12345678, "first_name": "First", "last_name": "Last", "username": "user",
            "type": "private"},
   "date": 1508771450,
   "sticker": {"width": 512, "height": 512, "emoji": "🛠", "set_name": "StickerSet",
     "thumb": {"file_id": "AAbbthumb", "file_size": 1234, "width": 128, "height": 128},
     "file_id": "AAbbCCddEEffGGhh1234567890", "file_size": 12345}}}
"""

AIOGRAM_GAME = """
{"update_id": 123456790,
 "message": {"message_id": 12346,
   "from": {"id": 12345678, "is_bot": false, "first_name": "First"},
   "chat": {"id": 12345678, "first_name": "First", "type": "private"},
   "date": 1508824810,
   "game": {"title": "Karate Kid", "description": "A small game",
     "photo": [{"file_id": "AgADphoto", "file_size": 1101, "width": 90, "height": 51}]}}}
"""

AIOGRAM_PAYMENT = """
{"update_id": 123456791,
 "message": {"message_id": 9768,
   "from": {"id": 12345678, "is_bot": false, "first_name": "First"},
   "chat": {"id": 12345678, "first_name": "First", "type": "private"},
   "date": 1508761169,
   "successful_payment": {"currency": "USD", "total_amount": 6250,
     "invoice_payload": "COUPON", "telegram_payment_charge_id": "_",
     "provider_payment_charge_id": "12345678901234_test"}}}
"""

# --- source: Bot API reference (core.telegram.org/bots/api), field by field ---

# A user in a forum topic replies to the bot's message there (Message fields
# message_thread_id, is_topic_message, reply_to_message, quote).
API_TOPIC_REPLY_TO_BOT = """
{"update_id": 800000001,
 "message": {"message_id": 77,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Zoë", "username": "zoe"},
   "chat": {"id": -1001900000002, "title": "Team", "is_forum": true, "type": "supergroup"},
   "date": 1716907000, "message_thread_id": 2391, "is_topic_message": true,
   "reply_to_message": {"message_id": 70,
     "from": {"id": 7000000001, "is_bot": true, "first_name": "Helper", "username": "helper_bot"},
     "chat": {"id": -1001900000002, "title": "Team", "is_forum": true, "type": "supergroup"},
     "date": 1716906990, "message_thread_id": 2391, "is_topic_message": true,
     "text": "Shall I deploy?"},
   "quote": {"text": "deploy", "position": 9, "is_manual": true},
   "text": "yes please 🚀"}}
"""

# A reply to a message in another chat: only external_reply, no reply_to_message.
API_EXTERNAL_REPLY = """
{"update_id": 800000002,
 "message": {"message_id": 78,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Zoë"},
   "chat": {"id": -4000000003, "title": "Ops", "type": "group"},
   "date": 1716907001,
   "external_reply": {"origin": {"type": "user", "sender_user": {"id": 42, "is_bot": false,
                      "first_name": "X"}, "date": 1716900000},
                      "chat": {"id": -1001800000001, "type": "channel", "title": "News"},
                      "message_id": 5},
   "text": "see this @helper_bot",
   "entities": [{"offset": 9, "length": 11, "type": "mention"}]}}
"""

# A discussion group receives its linked channel's post: from is the service
# user 777000 "Telegram", sender_chat is the channel, is_automatic_forward.
API_AUTOMATIC_FORWARD = """
{"update_id": 800000003,
 "message": {"message_id": 300,
   "from": {"id": 777000, "is_bot": false, "first_name": "Telegram"},
   "sender_chat": {"id": -1001800000001, "title": "News", "username": "newsroom",
                   "type": "channel"},
   "chat": {"id": -1001700000004, "title": "News chat", "type": "supergroup"},
   "date": 1716907002, "is_automatic_forward": true,
   "forward_origin": {"type": "channel", "chat": {"id": -1001800000001, "type": "channel",
                      "title": "News"}, "message_id": 23032, "date": 1716907001},
   "text": "New release out"}}
"""

# Members joined (new_chat_members and the legacy new_chat_participant): service.
API_NEW_MEMBERS = """
{"update_id": 800000004,
 "message": {"message_id": 301,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Zoë"},
   "chat": {"id": -1001700000004, "title": "News chat", "type": "supergroup"},
   "date": 1716907003,
   "new_chat_participant": {"id": 7000000001, "is_bot": true, "first_name": "Helper"},
   "new_chat_member": {"id": 7000000001, "is_bot": true, "first_name": "Helper"},
   "new_chat_members": [{"id": 7000000001, "is_bot": true, "first_name": "Helper"}]}}
"""

# MessageReactionUpdated from an anonymous group admin: actor_chat, no user;
# custom emoji and paid reactions (ReactionTypeCustomEmoji / ReactionTypePaid).
API_REACTION_ANONYMOUS = """
{"update_id": 800000005,
 "message_reaction": {"chat": {"id": -1001700000004, "title": "News chat", "type": "supergroup"},
   "message_id": 300,
   "actor_chat": {"id": -1001700000004, "title": "News chat", "type": "supergroup"},
   "date": 1716907004,
   "old_reaction": [{"type": "emoji", "emoji": "👍"}],
   "new_reaction": [{"type": "emoji", "emoji": "👍"},
                    {"type": "custom_emoji", "custom_emoji_id": "5368324170671202286"},
                    {"type": "paid"}]}}
"""

# Anonymous reaction counts: nobody to answer, not for the agent.
API_REACTION_COUNT = """
{"update_id": 800000006,
 "message_reaction_count": {"chat": {"id": -1001800000001, "type": "channel", "title": "News"},
   "message_id": 23031, "date": 1716907005,
   "reactions": [{"type": {"type": "emoji", "emoji": "🔥"}, "total_count": 12}]}}
"""

# The bot was added to a chat (my_chat_member): not a message.
API_MY_CHAT_MEMBER = """
{"update_id": 800000007,
 "my_chat_member": {"chat": {"id": -4000000003, "title": "Ops", "type": "group"},
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Zoë"},
   "date": 1716907006,
   "old_chat_member": {"user": {"id": 7000000001, "is_bot": true, "first_name": "Helper"},
                       "status": "left"},
   "new_chat_member": {"user": {"id": 7000000001, "is_bot": true, "first_name": "Helper"},
                       "status": "member"}}}
"""

# A caption edited on a photo inside a forum topic (edited_message, edit_date).
API_EDITED_CAPTION_IN_TOPIC = """
{"update_id": 800000008,
 "edited_message": {"message_id": 80,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Zoë"},
   "chat": {"id": -1001900000002, "title": "Team", "is_forum": true, "type": "supergroup"},
   "date": 1716907010, "edit_date": 1716907099,
   "message_thread_id": 2391, "is_topic_message": true,
   "photo": [{"file_id": "small", "file_unique_id": "s", "file_size": 900, "width": 90, "height": 60},
             {"file_id": "large", "file_unique_id": "l", "file_size": 90000, "width": 1280,
              "height": 853}],
   "caption": "diagram v2 for @helper_bot",
   "caption_entities": [{"offset": 15, "length": 11, "type": "mention"}],
   "has_media_spoiler": true, "show_caption_above_media": true}}
"""

# A channel post signed by its author, with no `from` (channels have none).
API_SIGNED_CHANNEL_POST = """
{"update_id": 800000009,
 "channel_post": {"message_id": 23040,
   "chat": {"id": -1001800000001, "title": "News", "username": "newsroom", "type": "channel"},
   "date": 1716907020, "author_signature": "Editor Eve",
   "text": "Tonight: maintenance window"}}
"""

# A video note and a voice message replying to the bot in a plain group.
API_VIDEO_NOTE_REPLY = """
{"update_id": 800000010,
 "message": {"message_id": 90,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Zoë"},
   "chat": {"id": -4000000003, "title": "Ops", "type": "group"},
   "date": 1716907030,
   "reply_to_message": {"message_id": 89,
     "from": {"id": 7000000001, "is_bot": true, "first_name": "Helper", "username": "helper_bot"},
     "chat": {"id": -4000000003, "title": "Ops", "type": "group"},
     "date": 1716907029, "text": "Record it?"},
   "video_note": {"file_id": "DQACAgvn", "file_unique_id": "vn1", "length": 240,
                  "duration": 7, "file_size": 310000}}}
"""

# Forwarded story, checklist and paid media (Bot API 7.x-9.x content kinds).
API_STORY = """
{"update_id": 800000011,
 "message": {"message_id": 91,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Zoë"},
   "chat": {"id": 5550000002, "first_name": "Zoë", "type": "private"},
   "date": 1716907040,
   "forward_origin": {"type": "user", "sender_user": {"id": 42, "is_bot": false,
                      "first_name": "X"}, "date": 1716907000},
   "story": {"chat": {"id": 42, "first_name": "Xavier", "type": "private"}, "id": 17}}}
"""
API_CHECKLIST = """
{"update_id": 800000012,
 "message": {"message_id": 92,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Zoë"},
   "chat": {"id": 5550000002, "first_name": "Zoë", "type": "private"},
   "date": 1716907041,
   "checklist": {"title": "Release steps",
     "tasks": [{"id": 1, "text": "tag"}, {"id": 2, "text": "announce"}]}}}
"""
API_PAID_MEDIA = """
{"update_id": 800000013,
 "channel_post": {"message_id": 23041,
   "sender_chat": {"id": -1001800000001, "title": "News", "type": "channel"},
   "chat": {"id": -1001800000001, "title": "News", "type": "channel"},
   "date": 1716907042,
   "paid_media": {"star_count": 25, "paid_media": [{"type": "preview", "width": 100}]}}}
"""

# A bot command addressed to this bot in a group, after astral-plane emoji
# (entity offsets count UTF-16 units), with a very long text.
API_LONG_COMMAND = json.dumps(
    {
        "update_id": 800000014,
        "message": {
            "message_id": 93,
            "from": {"id": 5550000002, "is_bot": False, "first_name": "Zoë"},
            "chat": {"id": -4000000003, "title": "Ops", "type": "group"},
            "date": 1716907050,
            "text": "🦊🦊 /ask@helper_bot " + "pourquoi? " * 400,
            "entities": [{"offset": 5, "length": 15, "type": "bot_command"}],
        },
    }
)

# Ids as strings (relays and loggers that re-serialise int64 ids).
RELAYED_STRING_IDS = """
{"update_id": "800000015",
 "message": {"message_id": "94",
   "from": {"id": "5550000002", "is_bot": false, "first_name": "Zoë"},
   "chat": {"id": "-4000000003", "title": "Ops", "type": "group"},
   "date": "1716907060", "text": "ids as strings"}}
"""

# --- source: Bot API 9.2 reference, channel direct messages, field by field --------
# (Chat.is_direct_messages, Message.direct_messages_topic = DirectMessagesTopic
# {topic_id, user}; the Bot API server writes the topic's user id as topic_id.)
# Kept out of ALL_PAYLOADS so the mangled cases recorded from that list, and the
# benches built from it, stay as they were; they are recorded and mangled below.

# A reader writes to the channel: the message is in their own topic.
API_DIRECT_MESSAGE = """
{"update_id": 800000040,
 "message": {"message_id": 12,
   "from": {"id": 5550000003, "is_bot": false, "first_name": "Ana", "last_name": "Lima",
            "username": "ana_l", "language_code": "pt-br"},
   "chat": {"id": -1002800000005, "title": "News", "type": "supergroup",
            "is_direct_messages": true},
   "date": 1716907100,
   "direct_messages_topic": {"topic_id": 5550000003,
     "user": {"id": 5550000003, "is_bot": false, "first_name": "Ana", "last_name": "Lima",
              "username": "ana_l", "language_code": "pt-br"}},
   "text": "/start Olá! Is the next issue out on Friday?",
   "entities": [{"offset": 0, "length": 6, "type": "bot_command"}]}}
"""

# Another reader, a photo with a caption, replying to the channel's answer in their topic.
API_DIRECT_MESSAGE_PHOTO_REPLY = """
{"update_id": 800000041,
 "message": {"message_id": 15,
   "from": {"id": 5550000004, "is_bot": false, "first_name": "Bruno"},
   "chat": {"id": -1002800000005, "title": "News", "type": "supergroup",
            "is_direct_messages": true},
   "date": 1716907160,
   "direct_messages_topic": {"topic_id": 5550000004,
     "user": {"id": 5550000004, "is_bot": false, "first_name": "Bruno"}},
   "reply_to_message": {"message_id": 14,
     "from": {"id": 7000000001, "is_bot": true, "first_name": "Helper",
              "username": "helper_bot"},
     "chat": {"id": -1002800000005, "title": "News", "type": "supergroup",
              "is_direct_messages": true},
     "date": 1716907150,
     "direct_messages_topic": {"topic_id": 5550000004,
       "user": {"id": 5550000004, "is_bot": false, "first_name": "Bruno"}},
     "text": "Send us a picture of the misprint?"},
   "photo": [{"file_id": "AgACAgQAAxkBAAIBdm0001s", "file_unique_id": "AQADdm0001s",
              "file_size": 1300, "width": 90, "height": 68},
             {"file_id": "AgACAgQAAxkBAAIBdm0001", "file_unique_id": "AQADdm0001",
              "file_size": 88000, "width": 1280, "height": 960}],
   "caption": "page 4, second column"}}
"""

# A channel admin answers in Ana's topic on behalf of the channel: sender_chat is
# the channel, `from` the Channel_Bot placeholder, signed; an edit of it later.
API_DIRECT_MESSAGE_EDITED_CHANNEL_ANSWER = """
{"update_id": 800000042,
 "edited_message": {"message_id": 13,
   "from": {"id": 136817688, "is_bot": true, "first_name": "Channel",
            "username": "Channel_Bot"},
   "sender_chat": {"id": -1001800000001, "title": "News", "username": "newsroom",
                   "type": "channel"},
   "chat": {"id": -1002800000005, "title": "News", "type": "supergroup",
            "is_direct_messages": true},
   "date": 1716907120, "edit_date": 1716907130, "author_signature": "Editor Eve",
   "direct_messages_topic": {"topic_id": 5550000003,
     "user": {"id": 5550000003, "is_bot": false, "first_name": "Ana", "last_name": "Lima",
              "username": "ana_l", "language_code": "pt-br"}},
   "text": "Yes, Friday at 9."}}
"""

# Ana reacts to that answer: MessageReactionUpdated names the chat, not the topic.
API_DIRECT_MESSAGE_REACTION = """
{"update_id": 800000043,
 "message_reaction": {"chat": {"id": -1002800000005, "title": "News", "type": "supergroup",
                               "is_direct_messages": true},
   "message_id": 13,
   "user": {"id": 5550000003, "is_bot": false, "first_name": "Ana", "last_name": "Lima"},
   "date": 1716907140,
   "old_reaction": [],
   "new_reaction": [{"type": "emoji", "emoji": "🙏"}]}}
"""

# The channel announces its direct messages price (Message.direct_message_price_changed,
# a service message in the channel itself): nothing for the agent.
API_DIRECT_MESSAGE_PRICE = """
{"update_id": 800000044,
 "channel_post": {"message_id": 23050,
   "sender_chat": {"id": -1001800000001, "title": "News", "username": "newsroom",
                   "type": "channel"},
   "chat": {"id": -1001800000001, "title": "News", "username": "newsroom", "type": "channel"},
   "date": 1716907099,
   "direct_message_price_changed": {"are_direct_messages_enabled": true,
                                    "direct_message_star_count": 0}}}
"""

DIRECT_MESSAGES_PAYLOADS = [
    API_DIRECT_MESSAGE,
    API_DIRECT_MESSAGE_PHOTO_REPLY,
    API_DIRECT_MESSAGE_EDITED_CHANNEL_ANSWER,
    API_DIRECT_MESSAGE_REACTION,
    API_DIRECT_MESSAGE_PRICE,
]


# --- sources: Telegram Business, as tdlib/telegram-bot-api (Client.cpp) writes it -------
# JsonBusinessConnection: id, user, user_chat_id, date, is_enabled, can_reply beside
# Bot API 9.0's rights (only the rights given are written).
API_BUSINESS_CONNECTION = """
{"update_id": 800000060,
 "business_connection": {"id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
   "user": {"id": 5550000001, "is_bot": false, "first_name": "Marta", "last_name": "Shop",
            "username": "marta_shop", "language_code": "pt-br", "is_premium": true},
   "user_chat_id": 5550000001, "date": 1716900000, "is_enabled": true, "can_reply": true,
   "rights": {"can_reply": true, "can_read_messages": true}}}
"""

# JsonMessage of a business message: business_connection_id first; a customer writes.
API_BUSINESS_MESSAGE = """
{"update_id": 800000061,
 "business_message": {"business_connection_id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
   "message_id": 41,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Ana", "username": "ana_l",
            "language_code": "pt-br"},
   "chat": {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"},
   "date": 1716907000, "text": "do you ship to Porto?"}}
"""

# The business owner answers in the chat themselves.
API_BUSINESS_OWNER_MESSAGE = """
{"update_id": 800000062,
 "business_message": {"business_connection_id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
   "message_id": 42,
   "from": {"id": 5550000001, "is_bot": false, "first_name": "Marta", "last_name": "Shop",
            "username": "marta_shop"},
   "chat": {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"},
   "date": 1716907010,
   "reply_to_message": {"business_connection_id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
     "message_id": 41,
     "from": {"id": 5550000002, "is_bot": false, "first_name": "Ana", "username": "ana_l"},
     "chat": {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"},
     "date": 1716907000, "text": "do you ship to Porto?"},
   "text": "Yes, in 3 days."}}
"""

# What the bot sent on the business's behalf comes back: sender_business_bot is the bot.
API_BUSINESS_BOT_ECHO = """
{"update_id": 800000063,
 "business_message": {"business_connection_id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
   "sender_business_bot": {"id": 7000000001, "is_bot": true, "first_name": "Helper",
                           "username": "helper_bot"},
   "message_id": 43,
   "from": {"id": 5550000001, "is_bot": false, "first_name": "Marta", "last_name": "Shop"},
   "chat": {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"},
   "date": 1716907020, "text": "Anything else?"}}
"""

API_BUSINESS_EDITED = """
{"update_id": 800000064,
 "edited_business_message": {"business_connection_id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
   "message_id": 41,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Ana", "username": "ana_l"},
   "chat": {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"},
   "date": 1716907000, "edit_date": 1716907030, "text": "do you ship to Braga?"}}
"""

# JsonBusinessMessagesDeleted: no date, no sender; one id (the adapter splits longer lists).
API_BUSINESS_DELETED = """
{"update_id": 800000065,
 "deleted_business_messages": {"business_connection_id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
   "chat": {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"},
   "message_ids": [42]}}
"""

# A customer answers the business account's story (Message.reply_to_story: a Story, its
# poster chat and id; no reply_to_message).
API_BUSINESS_STORY_REPLY = """
{"update_id": 800000066,
 "business_message": {"business_connection_id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
   "message_id": 44,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Ana", "username": "ana_l"},
   "chat": {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"},
   "date": 1716907040,
   "reply_to_story": {"chat": {"id": 5550000001, "first_name": "Marta", "last_name": "Shop",
                               "type": "private"}, "id": 12},
   "text": "is the blue one still in stock?"}}
"""

# A customer sends the business a gift with a note (Message.gift, a GiftInfo: the gift,
# owned_gift_id for business accounts, the note in its `text`); no text of its own.
API_BUSINESS_GIFT = """
{"update_id": 800000067,
 "business_message": {"business_connection_id": "AQIDBAUGBwgJCgsMDQ4PEBES-_x",
   "message_id": 45,
   "from": {"id": 5550000002, "is_bot": false, "first_name": "Ana", "username": "ana_l"},
   "chat": {"id": 5550000002, "first_name": "Ana", "username": "ana_l", "type": "private"},
   "date": 1716907050,
   "gift": {"gift": {"id": "5170145012310081615",
                     "sticker": {"file_id": "CAACAgIAAxUAAWbiGift", "file_unique_id": "AgADgift",
                                 "type": "custom_emoji", "width": 512, "height": 512,
                                 "is_animated": true, "is_video": false, "emoji": "💝"},
                     "star_count": 15},
            "owned_gift_id": "vU2ZxnCkEwIJgift",
            "convert_star_count": 13,
            "text": "thank you for the fast delivery!"}}}
"""

BUSINESS_PAYLOADS = [
    API_BUSINESS_CONNECTION,
    API_BUSINESS_MESSAGE,
    API_BUSINESS_OWNER_MESSAGE,
    API_BUSINESS_BOT_ECHO,
    API_BUSINESS_EDITED,
    API_BUSINESS_DELETED,
    API_BUSINESS_STORY_REPLY,
    API_BUSINESS_GIFT,
]


def event(payload: str, bot: BotIdentity = BOT) -> Event:
    result = normalize_update(load(payload), ACCOUNT, bot)
    assert result is not None
    return result


# --- what each shape becomes ---------------------------------------------------


def test_old_style_forward_without_chat_type_is_a_direct_message() -> None:
    got = event(WEBHOOK_FORWARDED)
    assert (got.conversation_kind, got.text, got.meta["forwarded"]) == ("direct", "/start", True)
    assert got.sender.name == "Ana Lastname"


def test_formatting_entities_do_not_change_the_text_or_mention_the_bot() -> None:
    got = event(WEBHOOK_ENTITIES)
    assert got.text == "Bold and italics" and not got.mentions_me


def test_audio_without_file_name_is_named_by_performer_and_title() -> None:
    (audio,) = event(WEBHOOK_AUDIO).attachments
    assert (audio.kind, audio.name, audio.mime, audio.size) == (
        "audio",
        "The Band - Evening Song",
        "audio/mpeg",
        3897500,
    )


@pytest.mark.parametrize(
    "payload",
    [
        WEBHOOK_CALLBACK,
        WEBHOOK_INLINE,
        CAPTURED_CHANNEL_PIN,
        CAPTURED_TOPIC_CREATED,
        CAPTURED_TOPIC_EDITED,
        CAPTURED_GENERAL_HIDDEN,
        CAPTURED_MIGRATE_TO,
        AIOGRAM_PAYMENT,
        API_NEW_MEMBERS,
        API_REACTION_COUNT,
        API_MY_CHAT_MEMBER,
    ],
    ids=[
        "callback_query",
        "inline_query",
        "channel_pin",
        "topic_created",
        "topic_edited",
        "general_topic_hidden",
        "migrate_to_chat_id",
        "successful_payment",
        "new_chat_members",
        "message_reaction_count",
        "my_chat_member",
    ],
)
def test_service_messages_and_other_update_kinds_are_not_for_the_agent(payload: str) -> None:
    assert normalize_update(load(payload), ACCOUNT, BOT) is None
    assert normalize_update(load(payload), ACCOUNT, BotIdentity()) is None


def test_captured_animation_is_one_attachment_with_its_unicode_caption() -> None:
    got = event(CAPTURED_ANIMATION)
    assert got.text == "Строковое значение 🐈"
    assert [(a.kind, a.name, a.ref, a.size) for a in got.attachments] == [
        ("animation", "cat.gif.mp4", "CgACAgIAAxkDAAJIem", 84965)
    ]
    assert got.sender == got.sender.__class__("461000001", "Anton T", "anton_t", False)


def test_forward_origin_marks_the_message_forwarded() -> None:
    got = event(CAPTURED_FORWARD_ORIGIN)
    assert got.meta["forwarded"] is True and got.text == "Полужирный текст"


def test_poll_is_described_by_its_question_and_options() -> None:
    assert [(a.kind, a.name) for a in event(CAPTURED_POLL).attachments] == [
        ("poll", "Favourite colour? (Red / Blue)")
    ]


def test_captured_group_upgrade_is_followed() -> None:
    assert migration_of(load(CAPTURED_MIGRATE_TO)) == ("-4518000001", "-1002471000001")


def test_sticker_is_named_by_its_emoji() -> None:
    (sticker,) = event(AIOGRAM_STICKER).attachments
    assert (sticker.kind, sticker.name, sticker.ref) == (
        "sticker",
        "🛠",
        "AAbbCCddEEffGGhh1234567890",
    )


def test_a_shared_game_is_described_not_dropped() -> None:
    assert [(a.kind, a.name) for a in event(AIOGRAM_GAME).attachments] == [("game", "Karate Kid")]


def test_reply_to_the_bot_in_a_topic_is_a_mention_in_that_topic() -> None:
    got = event(API_TOPIC_REPLY_TO_BOT)
    assert got.address.thread == "2391" and got.conversation_kind == "thread"
    assert (got.reply_to, got.mentions_me, got.text) == ("70", True, "yes please 🚀")


def test_external_reply_has_no_local_target_and_the_mention_counts() -> None:
    got = event(API_EXTERNAL_REPLY)
    assert got.reply_to is None and got.mentions_me


def test_automatic_forward_speaks_as_the_channel_not_the_service_user() -> None:
    got = event(API_AUTOMATIC_FORWARD)
    assert (got.sender.id, got.sender.name, got.sender.handle) == (
        "-1001800000001",
        "News",
        "newsroom",
    )


def test_anonymous_admin_reaction_adds_the_new_emojis_only() -> None:
    got = event(API_REACTION_ANONYMOUS)
    assert (got.kind, got.platform_message_id, got.sender.id) == (
        "reaction",
        "300",
        "-1001700000004",
    )
    assert got.text == "custom_emoji:5368324170671202286"
    assert got.meta["new_reaction"] == ["👍", "custom_emoji:5368324170671202286", "⭐"]


def test_edited_caption_in_a_topic_is_an_edit_there_mentioning_the_bot() -> None:
    got = event(API_EDITED_CAPTION_IN_TOPIC)
    assert (got.kind, got.address.thread, got.platform_message_id) == ("edit", "2391", "80")
    assert got.sent_at == 1716907099.0 and got.mentions_me
    assert [(a.kind, a.ref) for a in got.attachments] == [("photo", "large")]


def test_signed_channel_post_is_from_its_author() -> None:
    got = event(API_SIGNED_CHANNEL_POST)
    assert (got.sender.id, got.sender.name) == ("-1001800000001", "Editor Eve")
    assert got.conversation_kind == "group"


def test_video_note_replying_to_the_bot_mentions_it() -> None:
    got = event(API_VIDEO_NOTE_REPLY)
    assert got.mentions_me and got.reply_to == "89"
    assert [(a.kind, a.size) for a in got.attachments] == [("video_note", 310000)]


@pytest.mark.parametrize(
    ("payload", "kind", "name"),
    [
        (API_STORY, "story", "Xavier"),
        (API_CHECKLIST, "checklist", "Release steps (tag / announce)"),
        (API_PAID_MEDIA, "paid_media", "25 ⭐"),
    ],
)
def test_newer_content_kinds_become_attachments(payload: str, kind: str, name: str) -> None:
    assert [(a.kind, a.name) for a in event(payload).attachments] == [(kind, name)]


def test_a_customers_reply_to_the_business_story_says_it_answers_a_story() -> None:
    got = event(API_BUSINESS_STORY_REPLY)
    assert got.text == "is the blue one still in stock?" and got.reply_to is None
    assert (got.meta["reply_from"], got.meta["reply_quote"]) == ("Marta Shop", "[story]")


def test_a_customers_gift_keeps_the_words_sent_with_it() -> None:
    got = event(API_BUSINESS_GIFT)
    assert got.kind == "message" and got.text == "thank you for the fast delivery!"
    assert [(a.kind, a.name) for a in got.attachments] == [("gift", "15 ⭐")]
    assert got.meta.get("business_owner") is None  # the customer's: it starts a run


def test_long_command_after_astral_emoji_is_addressed_to_the_bot() -> None:
    got = event(API_LONG_COMMAND)
    assert got.mentions_me and len(got.text) > 4000


def test_each_reader_of_a_channels_direct_messages_has_a_direct_conversation() -> None:
    ana, bruno = event(API_DIRECT_MESSAGE), event(API_DIRECT_MESSAGE_PHOTO_REPLY)
    assert ana.address.chat == bruno.address.chat == "-1002800000005"
    assert (ana.address.thread, bruno.address.thread) == ("dm:5550000003", "dm:5550000004")
    assert ana.conversation_kind == bruno.conversation_kind == "direct"
    assert ana.conversation_title == "Ana Lima (direct messages to News)"
    assert ana.sender.id == "5550000003" and ana.mentions_me  # a bare /command, as in private
    assert bruno.reply_to == "14" and bruno.mentions_me  # a real reply, to the bot
    assert [a.kind for a in bruno.attachments] == ["photo"]


def test_the_channels_edited_answer_stays_in_the_readers_topic() -> None:
    got = event(API_DIRECT_MESSAGE_EDITED_CHANNEL_ANSWER)
    assert (got.kind, got.address.thread, got.conversation_kind) == (
        "edit",
        "dm:5550000003",
        "direct",
    )
    assert (got.sender.id, got.sender.name) == ("-1001800000001", "Editor Eve")
    assert got.event_id == "800000042:1716907130"


def test_a_direct_messages_reaction_names_the_chat_only() -> None:
    # Telegram's MessageReactionUpdated has no topic: the adapter's memory or the
    # store's one-holder rule places it (see test_direct_messages.py)
    got = event(API_DIRECT_MESSAGE_REACTION)
    assert (got.kind, got.address.thread, got.text) == ("reaction", None, "🙏")
    assert normalize_update(load(API_DIRECT_MESSAGE_PRICE), ACCOUNT, BOT) is None


def test_string_ids_are_read_as_the_same_ids() -> None:
    got = event(RELAYED_STRING_IDS)
    assert (got.event_id, got.platform_message_id, got.address.chat, got.sender.id) == (
        "800000015:1716907060",
        "94",
        "-4000000003",
        "5550000002",
    )
    assert got.sent_at == 1716907060.0


# --- robustness: mangled real payloads ------------------------------------------

ALL_PAYLOADS = [
    WEBHOOK_FORWARDED,
    WEBHOOK_ENTITIES,
    WEBHOOK_AUDIO,
    WEBHOOK_CALLBACK,
    WEBHOOK_INLINE,
    CAPTURED_CHANNEL_PIN,
    CAPTURED_TOPIC_CREATED,
    CAPTURED_TOPIC_EDITED,
    CAPTURED_GENERAL_HIDDEN,
    CAPTURED_ANIMATION,
    CAPTURED_FORWARD_ORIGIN,
    CAPTURED_POLL,
    CAPTURED_MIGRATE_TO,
    AIOGRAM_STICKER,
    AIOGRAM_GAME,
    AIOGRAM_PAYMENT,
    API_TOPIC_REPLY_TO_BOT,
    API_EXTERNAL_REPLY,
    API_AUTOMATIC_FORWARD,
    API_NEW_MEMBERS,
    API_REACTION_ANONYMOUS,
    API_REACTION_COUNT,
    API_MY_CHAT_MEMBER,
    API_EDITED_CAPTION_IN_TOPIC,
    API_SIGNED_CHANNEL_POST,
    API_VIDEO_NOTE_REPLY,
    API_STORY,
    API_CHECKLIST,
    API_PAID_MEDIA,
    API_LONG_COMMAND,
    RELAYED_STRING_IDS,
]
ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    2**70,
    1.5,
    True,
    "",
    "12",
    "x",
    "½",
    [],
    {},
    [None],
    {"a": 1},
]


def _mutate(payload: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    mangled: dict[str, Any] = mutate_payload(
        payload, rng, changes=(1, 4), odd_values=ODD_VALUES, drop_chance=0.4
    )
    return mangled


def _check_types(got: Event) -> None:
    """The Event's fields have their declared types, whatever the payload held."""
    assert isinstance(got.text, str) and isinstance(got.event_id, str)
    assert isinstance(got.address.chat, str)
    thread = got.address.thread
    assert thread is None or thread.isdigit() or (thread[:3] == "dm:" and thread[3:].isdigit())
    assert isinstance(got.sender.id, str) and isinstance(got.sender.name, str)
    assert got.sender.handle is None or isinstance(got.sender.handle, str)
    assert got.reply_to is None or got.reply_to.lstrip("-").isdigit()
    for item in got.attachments:
        assert item.name is None or isinstance(item.name, str)
        assert item.mime is None or isinstance(item.mime, str)
        assert item.size is None or isinstance(item.size, int)
        assert item.ref is None or isinstance(item.ref, str)
    assert got.conversation_title is None or isinstance(got.conversation_title, str)
    json.dumps(dict(got.meta))


def test_there_are_at_least_fifteen_real_shapes() -> None:
    assert len(ALL_PAYLOADS) >= 15


def _mangled_outcomes(
    payloads: Sequence[str],
    seed: int,
    checks: Sequence[Callable[[dict[str, Any]], Any]],
    *,
    each_event: Callable[[Event], None] = lambda event: None,
    others: bool = False,
) -> None:
    """Mangle `payloads` 400 times: each check gives an Event, None (or, with `others`,
    what else a check returns: `migration_of`'s pair) or a one-line NormalizeError, and
    the mutations reach every outcome."""
    rng = random.Random(seed)
    seen: dict[str, int] = {"event": 0, "none": 0, "error": 0}
    for _ in range(400):
        mangled = _mutate(load(rng.choice(payloads)), rng)
        for check in checks:
            try:
                got = check(mangled)
            except NormalizeError as error:
                seen["error"] += 1
                assert "\n" not in str(error) and str(error)
                continue
            if isinstance(got, Event):
                seen["event"] += 1
                _check_types(got)
                each_event(got)
            elif got is None:
                seen["none"] += 1
            else:
                assert others, got
    assert all(seen.values()), seen  # the mutations reached every outcome


def _adapter() -> TelegramAdapter:
    return TelegramAdapter(ACCOUNT, {"token": "7000000001:AAH-not-a-real-token_0123456789"})


@pytest.mark.parametrize("seed", range(8))
def test_mangled_real_payloads_give_an_event_none_or_a_normalize_error(seed: int) -> None:
    checks: list[Callable[[dict[str, Any]], Any]] = [
        lambda p: normalize_update(p, ACCOUNT, BOT, {"-4000000003": "-4000000000"}),
        lambda p: normalize_update(p, ACCOUNT, BotIdentity()),
        migration_of,
        _adapter().normalize,  # what the switchboard calls, topic memory included
    ]
    _mangled_outcomes(ALL_PAYLOADS, seed, checks, others=True)


@pytest.mark.parametrize("seed", range(4))
def test_mangled_direct_messages_payloads_give_an_event_none_or_a_normalize_error(
    seed: int,
) -> None:
    checks = [lambda p: normalize_update(p, ACCOUNT, BOT), _adapter().normalize]
    _mangled_outcomes(DIRECT_MESSAGES_PAYLOADS, seed, checks)


@pytest.mark.parametrize("seed", range(4))
def test_mangled_business_payloads_give_an_event_none_or_a_normalize_error(seed: int) -> None:
    def in_a_business_chat(event: Event) -> None:
        assert event.address.chat.startswith("biz:")

    checks = [lambda p: normalize_update(p, ACCOUNT, BOT), _adapter().normalize]
    _mangled_outcomes(BUSINESS_PAYLOADS, seed, checks, each_event=in_a_business_chat)


def _group_command(text: str, length: int, offset: int = 0) -> str:
    # Bot API "bot_command" MessageEntity in a group, as privacy-mode bots receive it
    return json.dumps(
        {
            "update_id": 800000020,
            "message": {
                "message_id": 95,
                "from": {"id": 5550000002, "is_bot": False, "first_name": "Zoë"},
                "chat": {"id": -4000000003, "title": "Ops", "type": "group"},
                "date": 1716907070,
                "text": text,
                "entities": [{"offset": offset, "length": length, "type": "bot_command"}],
            },
        }
    )


@pytest.mark.parametrize(
    ("text", "length", "offset", "mentioned"),
    [
        ("/help", 5, 0, True),  # a bare command that is one of ours
        ("/start", 6, 0, False),  # a bare command that is not: meant for another bot
        ("/help@helper_bot", 16, 0, True),
        ("/start@helper_bot", 17, 0, True),  # named: ours whatever our menu says
        ("/help@other_bot", 15, 0, False),
        ("try /help", 5, 4, False),  # not opening the message: quoted, not given
    ],
)
def test_group_commands_address_the_bot_only_when_named_or_its_own(
    text: str, length: int, offset: int, mentioned: bool
) -> None:
    ours = BotIdentity(BOT.id, BOT.username, frozenset({"help"}))
    assert event(_group_command(text, length, offset), ours).mentions_me is mentioned
    # knowing no commands of its own, a bare command in a group wakes no bot
    assert event(_group_command(text, length, offset), BotIdentity()).mentions_me is False


@pytest.mark.parametrize(
    ("text", "length", "offset", "other"),
    [
        ("/help@other_bot", 15, 0, True),  # someone else's, by name
        ("/start@Other_Bot now", 15, 0, True),
        ("/help@helper_bot", 16, 0, False),  # ours
        ("/help", 5, 0, False),  # bare: for whichever bot has it
        ("try /help@other_bot", 15, 4, False),  # quoted, not given
    ],
)
def test_a_command_named_for_another_bot_starts_no_run_even_where_every_message_does(
    text: str, length: int, offset: int, other: bool
) -> None:
    """In a group whose binding answers every message (respond = always), /cmd@other_bot
    is still someone else's: stored and shown, but for no run of ours. A bot that does
    not know its own name cannot tell, and marks nothing."""
    from backchannel.model import NO_RUN
    from backchannel.policy import Policy

    got = event(_group_command(text, length, offset), BOT)
    assert (got.meta.get(NO_RUN) is True) is other
    assert Policy(respond="always").triggers(got) is not other
    nameless = event(_group_command(text, length, offset), BotIdentity())
    assert NO_RUN not in nameless.meta


def test_a_bare_command_in_a_private_chat_is_for_the_bot() -> None:
    private = json.loads(_group_command("/start", 6))
    private["message"]["chat"] = {"id": 5550000002, "first_name": "Zoë", "type": "private"}
    assert event(json.dumps(private), BotIdentity()).mentions_me


def test_an_adapter_that_was_never_started_normalizes_every_real_shape() -> None:
    settings = {"token": "7000000001:AAH-not-a-real-token_0123456789", "username": "helper_bot"}
    adapter = TelegramAdapter(ACCOUNT, settings)
    got = [adapter.normalize(load(payload)) for payload in ALL_PAYLOADS]
    events = [e for e in got if e is not None]
    assert len(events) == 20 and all(e.account == ACCOUNT for e in events)
    for one in events:
        _check_types(one)
    # the adapter knows the bot from its token and settings, as normalize_update did
    (reply,) = [e for e in events if e.event_id == "800000001:1716907000"]
    assert reply.mentions_me and reply.address.thread == "2391"


# --- exact outputs: every real payload (and mangled ones) against recorded events ------

#: what normalize made of each payload when it was last changed on purpose (see below)
EXPECTED_EVENTS = Path(__file__).with_name("real_payload_events.json")
#: recorded mangled payloads: each gave a different outcome than the others kept
MANGLED_KEPT = 80
COMMANDS_BOT = BotIdentity(id="7000000001", username="helper_bot", commands=frozenset({"ask"}))
ALIASES = {"-1002471000001": "-4518000001", "-4000000003": "-4000000000"}


def _outcome(compute: Callable[[], Any]) -> Any:
    """One normalize result as JSON-ready data: the Event's fields, None, or the error."""
    try:
        got = compute()
    except NormalizeError as error:
        return {"error": str(error), "where": error.where}
    if isinstance(got, Event):
        fields = to_json(got)
        assert fields.pop("raw") is not None
        if got.kind == "delete" and got.event_id.split(":")[1] == "delete":
            # a deleted business message carries no date: its time is when it was read
            fields["sent_at"] = "(when read)"
        return fields
    return got


def _outcomes(payload: dict[str, Any]) -> dict[str, Any]:
    adapter = TelegramAdapter(ACCOUNT, {"token": "7000000001:AAH-not-a-real-token_0123456789"})
    return {
        "commands_bot_aliases": _outcome(
            lambda: normalize_update(load(json.dumps(payload)), ACCOUNT, COMMANDS_BOT, ALIASES)
        ),
        "no_bot": _outcome(lambda: normalize_update(load(json.dumps(payload)), ACCOUNT)),
        "adapter": _outcome(lambda: adapter.normalize(load(json.dumps(payload)))),
        "migration_of": _outcome(lambda: migration_of(load(json.dumps(payload)))),
    }


def _cases() -> list[dict[str, Any]]:
    named = ALL_PAYLOADS + DIRECT_MESSAGES_PAYLOADS + BUSINESS_PAYLOADS
    names = {text: name for name, text in globals().items() if text in named}
    cases = [{"name": names[text], "payload": load(text)} for text in named]
    rng = random.Random(2026)
    seen: set[str] = set()
    for number in range(2_000):
        if len(seen) >= MANGLED_KEPT:
            break
        mangled = _mutate(load(rng.choice(ALL_PAYLOADS)), rng)
        try:
            json.dumps(mangled, allow_nan=False)
        except ValueError:
            continue
        key = json.dumps(_outcomes(mangled)["commands_bot_aliases"], sort_keys=True)
        if key not in seen:
            seen.add(key)
            cases.append({"name": f"mangled {number}", "payload": mangled})
    return cases


def test_every_payload_gives_exactly_the_recorded_event() -> None:
    """Fails when any field of any outcome changes (ids, text, kinds, meta, errors, ...).

    After a deliberate change of what normalize makes, re-record with
    ``BACKCHANNEL_RECORD_EVENTS=1 pytest plugins/telegram/tests/test_real_payloads.py``
    and review the diff of real_payload_events.json.
    """
    if os.environ.get("BACKCHANNEL_RECORD_EVENTS") == "1":
        recorded = [{**case, "expected": _outcomes(case["payload"])} for case in _cases()]
        EXPECTED_EVENTS.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
    recorded = json.loads(EXPECTED_EVENTS.read_text())
    assert len(recorded) >= len(ALL_PAYLOADS) + MANGLED_KEPT // 2
    for case in recorded:
        got = json.dumps(_outcomes(case["payload"]), sort_keys=True)
        want = json.dumps(case["expected"], sort_keys=True)
        assert got == want, case["name"]

"""normalize on payloads shaped like real Gateway / REST captures, and on mutations of them.

Every payload below follows a shape Discord documents (discord-api-docs:
docs/resources/message.mdx, docs/events/gateway-events.mdx, docs/resources/
channel.mdx, docs/resources/poll.mdx, docs/resources/sticker.mdx) or that client
libraries model for real traffic (discord-api-types' GatewayMessage*DispatchData,
discord.py's types/message.py). Ids, names and texts are our own. Each one
must give a sensible Event, None, or a one-line NormalizeError: never another
exception.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel.framing import format_message
from backchannel.model import Address, Event, Message, Sender
from backchannel.policy import Policy
from backchannel.testing import ContractContext, mutate_payload
from backchannel_discord import DiscordAdapter
from backchannel_discord.normalize import normalize_payload

BOT = "1180000000000000001"
GUILD = "1180000000000000100"
GENERAL = "1180000000000000200"
THREAD = "1180000000000000300"
DM = "1180000000000000400"
ALICE = "1180000000000000500"


def load(text: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(text)
    return payload


def norm(raw: Any) -> Event | None:
    return normalize_payload(raw, account="ops", bot_id=BOT)


# -- 1. docs/resources/message.mdx "Example Message": a bare REST Message object,
#       no guild_id (so a DM), old-style discriminator, a reaction, avatar hash
REST_EXAMPLE = load("""
{
  "reactions": [{"count": 1, "count_details": {"burst": 0, "normal": 1}, "me": false,
                 "me_burst": false, "emoji": {"id": null, "name": "🔥"}, "burst_colors": []}],
  "attachments": [], "tts": false, "embeds": [],
  "timestamp": "2024-03-02T10:11:12.345000+00:00",
  "mention_everyone": false, "id": "1213400000000000001", "pinned": false,
  "edited_timestamp": null,
  "author": {"username": "Rowan", "discriminator": "4321", "id": "1180000000000000501",
             "avatar": "a_0123456789abcdef0123456789abcdef"},
  "mention_roles": [], "content": "Hot off the press", "channel_id": "1180000000000000400",
  "mentions": [], "type": 0
}
""")

# -- 2. gateway-events.mdx "Message Create": the dispatch envelope with the extra fields
#       guild_id, member (partial, no user) and mentions carrying a partial member;
#       new usernames: discriminator "0" and a global_name
GUILD_MENTION = load("""
{"op": 0, "s": 41, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "tts": false, "timestamp": "2025-01-05T08:00:00.000000+00:00",
  "pinned": false, "nonce": "1325400000000000000",
  "mentions": [{"username": "backchannel", "public_flags": 0, "id": "1180000000000000001",
                "global_name": null, "discriminator": "0", "bot": true, "avatar": null,
                "member": {"roles": ["1180000000000000901"], "premium_since": null,
                           "pending": false, "nick": null, "mute": false,
                           "joined_at": "2024-12-01T00:00:00.000000+00:00", "flags": 0,
                           "deaf": false, "communication_disabled_until": null,
                           "banner": null, "avatar": null}}],
  "mention_roles": [], "mention_everyone": false,
  "member": {"roles": [], "premium_since": null, "pending": false, "nick": "Ally",
             "mute": false, "joined_at": "2023-06-01T12:00:00.000000+00:00", "flags": 0,
             "deaf": false, "communication_disabled_until": null, "banner": null,
             "avatar": null},
  "id": "1325400000000000001", "flags": 0, "embeds": [], "edited_timestamp": null,
  "content": "<@1180000000000000001> can you check the deploy?", "components": [],
  "channel_id": "1180000000000000200",
  "author": {"username": "alice.w", "public_flags": 0, "id": "1180000000000000500",
             "global_name": "Alice W", "discriminator": "0", "clan": null,
             "avatar_decoration_data": null, "avatar": "0123456789abcdef0123456789abcdef"},
  "attachments": [], "guild_id": "1180000000000000100"
}}
""")

# -- 3. message.mdx: REPLY (type 19) with message_reference (type 0 = DEFAULT) and the
#       referenced_message, here one of the bot's own messages
REPLY_TO_BOT = load("""
{"op": 0, "s": 42, "t": "MESSAGE_CREATE", "d": {
  "type": 19, "tts": false, "timestamp": "2025-01-05T08:01:00.000000+00:00",
  "id": "1325400000000000003", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "thanks, and the staging one?",
  "author": {"username": "alice.w", "id": "1180000000000000500", "global_name": "Alice W",
             "discriminator": "0"},
  "member": {"roles": [], "nick": null, "joined_at": "2023-06-01T12:00:00.000000+00:00",
             "deaf": false, "mute": false, "flags": 0},
  "mentions": [{"username": "backchannel", "id": "1180000000000000001", "discriminator": "0",
                "bot": true}],
  "mention_roles": [], "mention_everyone": false, "attachments": [], "embeds": [],
  "pinned": false, "edited_timestamp": null, "flags": 0, "components": [],
  "message_reference": {"type": 0, "message_id": "1325400000000000002",
                        "channel_id": "1180000000000000200",
                        "guild_id": "1180000000000000100"},
  "referenced_message": {
    "type": 0, "id": "1325400000000000002", "channel_id": "1180000000000000200",
    "content": "Deploy 812 is green.", "timestamp": "2025-01-05T08:00:30.000000+00:00",
    "author": {"username": "backchannel", "id": "1180000000000000001", "discriminator": "0",
               "bot": true, "global_name": null},
    "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "pinned": false,
    "mention_everyone": false, "tts": false, "edited_timestamp": null, "flags": 0,
    "components": []
  }
}}
""")

# -- 4. message.mdx note [4]: "referenced_message" present but null: the replied-to
#       message was deleted; the reference still names it
REPLY_TO_DELETED = load("""
{"op": 0, "s": 43, "t": "MESSAGE_CREATE", "d": {
  "type": 19, "id": "1325400000000000004", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "what did it say?",
  "timestamp": "2025-01-05T08:02:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "bob", "id": "1180000000000000502", "discriminator": "0",
             "global_name": "Bob"},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "mention_everyone": false, "pinned": false,
  "message_reference": {"type": 0, "message_id": "1325400000000000000",
                        "channel_id": "1180000000000000200",
                        "guild_id": "1180000000000000100"},
  "referenced_message": null
}}
""")

# -- 5. message.mdx "Example Crossposted Message": flags 2 (IS_CROSSPOST), a
#       message_reference to the source channel, mention_channels; a webhook posts it
CROSSPOST = load("""
{"op": 0, "s": 44, "t": "MESSAGE_CREATE", "d": {
  "reactions": [], "attachments": [], "tts": false, "embeds": [],
  "timestamp": "2025-01-05T09:00:00.000000+00:00", "mention_everyone": false,
  "id": "1325400000000000005", "pinned": false, "edited_timestamp": null,
  "webhook_id": "1180000000000000777",
  "author": {"username": "Release Notes #announcements", "discriminator": "0000",
             "id": "1180000000000000777", "avatar": null, "bot": true},
  "mention_roles": [],
  "mention_channels": [{"id": "1180000000000000888", "guild_id": "1180000000000000889",
                        "name": "announcements", "type": 5}],
  "content": "Version 3 is out! Details in <#1180000000000000888>.",
  "channel_id": "1180000000000000200", "guild_id": "1180000000000000100",
  "mentions": [], "type": 0, "flags": 2,
  "message_reference": {"type": 0, "channel_id": "1180000000000000888",
                        "guild_id": "1180000000000000889",
                        "message_id": "1325300000000000000"}
}}
""")

# -- 6. gateway-events.mdx "Message Update" (full object since 2024): an edit
MESSAGE_EDIT = load("""
{"op": 0, "s": 45, "t": "MESSAGE_UPDATE", "d": {
  "type": 0, "tts": false, "timestamp": "2025-01-05T08:00:00.000000+00:00",
  "pinned": false, "mentions": [], "mention_roles": [], "mention_everyone": false,
  "member": {"roles": [], "nick": null, "joined_at": "2023-06-01T12:00:00.000000+00:00",
             "deaf": false, "mute": false, "flags": 0},
  "id": "1325400000000000001", "flags": 0, "embeds": [],
  "edited_timestamp": "2025-01-05T08:05:00.123000+00:00",
  "content": "can you check the deploy? (edited: prod, not staging)", "components": [],
  "channel_id": "1180000000000000200",
  "author": {"username": "alice.w", "id": "1180000000000000500", "global_name": "Alice W",
             "discriminator": "0"},
  "attachments": [], "guild_id": "1180000000000000100"
}}
""")

# -- 7. gateway-events.mdx warning: an update may be a subset (always id and
#       channel_id): the embed unfurl that follows a posted link
EMBED_UNFURL_UPDATE = load("""
{"op": 0, "s": 46, "t": "MESSAGE_UPDATE", "d": {
  "id": "1325400000000000006", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100",
  "embeds": [{"type": "link", "url": "https://example.org/post",
              "title": "A post", "description": "about things"}]
}}
""")

# -- 8/9. gateway-events.mdx "Message Delete" fields: id, channel_id, guild_id? (absent in DMs)
GUILD_DELETE = load("""
{"op": 0, "s": 47, "t": "MESSAGE_DELETE",
 "d": {"id": "1325400000000000001", "channel_id": "1180000000000000200",
       "guild_id": "1180000000000000100"}}
""")
DM_DELETE = load("""
{"op": 0, "s": 48, "t": "MESSAGE_DELETE",
 "d": {"id": "1325400000000000010", "channel_id": "1180000000000000400"}}
""")

# -- 10. message.mdx attachment object: an image (width/height, proxy_url, placeholder)
#        and a plain file with no content_type, in a DM
DM_WITH_ATTACHMENTS = load("""
{"op": 0, "s": 49, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000011", "channel_id": "1180000000000000400",
  "content": "", "timestamp": "2025-01-05T10:00:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "alice.w", "id": "1180000000000000500", "global_name": "Alice W",
             "discriminator": "0"},
  "mentions": [], "mention_roles": [], "embeds": [], "tts": false, "pinned": false,
  "mention_everyone": false, "flags": 0, "components": [],
  "attachments": [
    {"id": "1325400000000000901", "filename": "screenshot.png", "size": 183112,
     "url": "https://cdn.discordapp.com/attachments/1/2/screenshot.png?ex=1&is=2&hm=3",
     "proxy_url": "https://media.discordapp.net/attachments/1/2/screenshot.png",
     "width": 1280, "height": 720, "content_type": "image/png",
     "placeholder": "abcdEFGH", "placeholder_version": 1},
    {"id": "1325400000000000902", "filename": "notes", "size": 12,
     "url": "https://cdn.discordapp.com/attachments/1/2/notes",
     "proxy_url": "https://media.discordapp.net/attachments/1/2/notes"}
  ]
}}
""")

# -- 11. message.mdx flags IS_VOICE_MESSAGE (1 << 13): no text, one ogg attachment with
#        duration_secs and waveform
VOICE_MESSAGE = load("""
{"op": 0, "s": 50, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000012", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "", "flags": 8192,
  "timestamp": "2025-01-05T10:01:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "bob", "id": "1180000000000000502", "discriminator": "0",
             "global_name": "Bob"},
  "member": {"roles": [], "joined_at": "2024-01-01T00:00:00.000000+00:00",
             "deaf": false, "mute": false, "flags": 0},
  "mentions": [], "mention_roles": [], "embeds": [], "tts": false, "pinned": false,
  "mention_everyone": false, "components": [],
  "attachments": [{"id": "1325400000000000903", "filename": "voice-message.ogg",
                   "size": 20480, "url": "https://cdn.discordapp.com/attachments/1/2/v.ogg",
                   "proxy_url": "https://media.discordapp.net/attachments/1/2/v.ogg",
                   "content_type": "audio/ogg", "duration_secs": 4.2,
                   "waveform": "AAAAAAAAAAAA", "flags": 0}]
}}
""")

# -- 12. another bot: author.bot true, the text only in a rich embed
BOT_EMBED_ONLY = load("""
{"op": 0, "s": 51, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000013", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "",
  "timestamp": "2025-01-05T10:02:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "CI Bot", "id": "1180000000000000600", "discriminator": "7312",
             "bot": true, "avatar": null},
  "member": {"roles": ["1180000000000000902"], "joined_at": "2024-01-01T00:00:00.000000+00:00",
             "deaf": false, "mute": false, "flags": 0},
  "mentions": [], "mention_roles": [], "tts": false, "pinned": false,
  "mention_everyone": false, "attachments": [], "components": [],
  "embeds": [{"type": "rich", "title": "Build #812 failed",
              "description": "tests/test_api.py::test_login", "color": 15158332,
              "fields": [{"name": "branch", "value": "main", "inline": true}]}]
}}
""")

# -- 12a. components/reference.mdx (components v2, flag IS_COMPONENTS_V2 = 1 << 15): no
#         content; a container (17) holding text displays (10), a section (9) with a
#         thumbnail accessory, a separator (14) and an action row (1) of buttons
COMPONENTS_V2 = load("""
{"op": 0, "s": 51, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000032", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "", "flags": 32768,
  "timestamp": "2025-01-05T10:02:40.000000+00:00", "edited_timestamp": null,
  "author": {"username": "Status", "id": "1180000000000000601", "discriminator": "0",
             "bot": true},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false,
  "components": [{"type": 17, "id": 1, "accent_color": 703487, "components": [
    {"type": 10, "id": 2, "content": "## Incident 42"},
    {"type": 9, "id": 3,
     "components": [{"type": 10, "id": 4, "content": "API latency is back to normal."}],
     "accessory": {"type": 11, "id": 5, "media": {"url": "https://example.org/ok.png"}}},
    {"type": 14, "id": 6, "divider": true, "spacing": 1},
    {"type": 1, "id": 7, "components": [{"type": 2, "id": 8, "style": 5, "label": "Details",
                                         "url": "https://example.org/42"}]}
  ]}]
}}
""")

# -- 12b. user.mdx `system` flag: a message from Discord's official system user
SYSTEM_USER = load("""
{"op": 0, "s": 51, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000031", "channel_id": "1180000000000000400",
  "content": "Your account security settings changed.",
  "timestamp": "2025-01-05T10:02:30.000000+00:00", "edited_timestamp": null,
  "author": {"username": "Discord", "id": "643945264868098049", "discriminator": "0000",
             "system": true, "public_flags": 1},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false
}}
""")

# -- 13. the bot's own message echoed back by the Gateway
OWN_MESSAGE = load("""
{"op": 0, "s": 52, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000014", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "On it.", "nonce": "b12.0.1a2b3c4d",
  "timestamp": "2025-01-05T10:03:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "backchannel", "id": "1180000000000000001", "discriminator": "0",
             "bot": true},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false
}}
""")

# -- 14. message types: USER_JOIN (7), CHANNEL_PINNED_MESSAGE (6, with a reference to the
#        pinned message), THREAD_CREATED (18, content is the thread name),
#        THREAD_STARTER_MESSAGE (21), AUTO_MODERATION_ACTION (24), POLL_RESULT (46)
SYSTEM_MESSAGES = [
    load(f"""
{{"op": 0, "s": 53, "t": "MESSAGE_CREATE", "d": {{
  "type": {message_type}, "id": "13254000000000001{message_type:02d}",
  "channel_id": "1180000000000000200", "guild_id": "1180000000000000100",
  "content": "{content}", "timestamp": "2025-01-05T10:04:00.000000+00:00",
  "edited_timestamp": null,
  "author": {{"username": "alice.w", "id": "1180000000000000500", "discriminator": "0"}},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false,
  "message_reference": {{"type": 0, "message_id": "1325400000000000001",
                         "channel_id": "1180000000000000200"}}
}}}}
""")
    for message_type, content in [
        (7, ""),
        (6, ""),
        (18, "incident 42"),
        (21, ""),
        (24, ""),
        (46, ""),
    ]
]

# -- 15. a message in a thread: `position` is sent only for messages in threads
#        (message.mdx); captured without the adapter's cache context
THREAD_MESSAGE = load("""
{"op": 0, "s": 54, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "position": 7, "id": "1325400000000000015",
  "channel_id": "1180000000000000300", "guild_id": "1180000000000000100",
  "content": "<@1180000000000000001> status of incident 42?",
  "timestamp": "2025-01-05T10:05:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "alice.w", "id": "1180000000000000500", "discriminator": "0",
             "global_name": "Alice W"},
  "member": {"roles": [], "nick": null, "joined_at": "2023-06-01T12:00:00.000000+00:00",
             "deaf": false, "mute": false, "flags": 0},
  "mentions": [{"id": "1180000000000000001", "username": "backchannel", "bot": true,
                "discriminator": "0"}],
  "mention_roles": [], "attachments": [], "embeds": [], "tts": false, "pinned": false,
  "mention_everyone": false, "flags": 0, "components": []
}}
""")

# what the adapter hands to ctx.ingest for that payload: the parent it knows from
# discord.py's cache or from GET /channels/{thread id}
THREAD_MESSAGE_AS_HANDED_OVER: dict[str, Any] = {
    **THREAD_MESSAGE,
    "backchannel": {"channel_type": 11, "channel_name": "incident 42", "parent_id": GENERAL},
}

# -- 16. channel.mdx forum: a forum post's first message has the thread's own id,
#        position 0; the adapter's context says it is a public thread (type 11)
FORUM_STARTER = load("""
{"op": 0, "s": 55, "t": "MESSAGE_CREATE",
 "backchannel": {"channel_type": 11, "channel_name": "Printer on fire",
                 "parent_id": "1180000000000000210", "parent_name": "help",
                 "guild_name": "Ops"},
 "d": {
  "type": 0, "position": 0, "id": "1180000000000000300",
  "channel_id": "1180000000000000300", "guild_id": "1180000000000000100",
  "content": "It is on fire. Ideas?", "flags": 0,
  "timestamp": "2025-01-05T10:06:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "carol", "id": "1180000000000000503", "discriminator": "0",
             "global_name": "Carol"},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false
}}
""")

# -- 17. message.mdx message snapshots: a forward (message_reference type 1 = FORWARD,
#        flags HAS_SNAPSHOT 1 << 14), the forwarded text and file in message_snapshots
FORWARD = load("""
{"op": 0, "s": 56, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000017", "channel_id": "1180000000000000400",
  "content": "", "flags": 16384, "timestamp": "2025-01-05T10:07:00.000000+00:00",
  "edited_timestamp": null,
  "author": {"username": "alice.w", "id": "1180000000000000500", "discriminator": "0"},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false,
  "message_reference": {"type": 1, "message_id": "1325300000000000077",
                        "channel_id": "1180000000000000999",
                        "guild_id": "1180000000000000998"},
  "message_snapshots": [{"message": {
    "type": 0, "content": "Maintenance window moved to Friday 🚧", "embeds": [],
    "attachments": [{"id": "1", "filename": "plan.pdf", "size": 5000,
                     "url": "https://cdn.discordapp.com/attachments/9/9/plan.pdf",
                     "proxy_url": "https://media.discordapp.net/attachments/9/9/plan.pdf",
                     "content_type": "application/pdf"}],
    "timestamp": "2025-01-04T18:00:00.000000+00:00", "edited_timestamp": null,
    "flags": 0, "mentions": [], "mention_roles": [], "components": []}}]
}}
""")

# -- 18. another app's slash-command response: type 20, webhook_id is the application
#        id, interaction_metadata names who ran it
SLASH_RESPONSE = load("""
{"op": 0, "s": 57, "t": "MESSAGE_CREATE", "d": {
  "type": 20, "id": "1325400000000000018", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "application_id": "1180000000000000700",
  "webhook_id": "1180000000000000700", "content": "🎲 You rolled a 4.",
  "timestamp": "2025-01-05T10:08:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "Dice", "id": "1180000000000000700", "discriminator": "1234",
             "bot": true},
  "interaction_metadata": {"id": "1325400000000000999", "type": 2,
                           "user": {"id": "1180000000000000500", "username": "alice.w"},
                           "authorizing_integration_owners": {"0": "1180000000000000100"}},
  "interaction": {"id": "1325400000000000999", "type": 2, "name": "roll",
                  "user": {"id": "1180000000000000500", "username": "alice.w"}},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false, "flags": 0, "components": []
}}
""")

# -- 19. sticker.mdx sticker item (id, name, format_type): a sticker-only message
STICKER_ONLY = load("""
{"op": 0, "s": 58, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000019", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "",
  "timestamp": "2025-01-05T10:09:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "bob", "id": "1180000000000000502", "discriminator": "0"},
  "sticker_items": [{"id": "749054660769218631", "name": "Wave", "format_type": 3}],
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false
}}
""")

# -- 20. poll.mdx poll create request shape as a message's `poll`: no content
POLL = load("""
{"op": 0, "s": 59, "t": "MESSAGE_CREATE", "d": {
  "type": 0, "id": "1325400000000000020", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "",
  "timestamp": "2025-01-05T10:10:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "carol", "id": "1180000000000000503", "discriminator": "0"},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false,
  "poll": {"question": {"text": "Lunch?"},
           "answers": [{"answer_id": 1, "poll_media": {"text": "Pizza", "emoji": {"name": "🍕"}}},
                       {"answer_id": 2, "poll_media": {"text": "Sushi"}}],
           "expiry": "2025-01-06T10:10:00.000000+00:00", "allow_multiselect": false,
           "layout_type": 1,
           "results": {"is_finalized": false, "answer_counts": []}}
}}
""")

# -- 21. unicode, custom emoji markup, a role mention, a legacy nickname mention
#        `<@!id>` of the bot, and a 4000-character body (Nitro's limit)
LONG_UNICODE = load(
    json.dumps(
        {
            "op": 0,
            "s": 60,
            "t": "MESSAGE_CREATE",
            "d": {
                "type": 0,
                "id": "1325400000000000021",
                "channel_id": GENERAL,
                "guild_id": GUILD,
                "content": f"<@!{BOT}> Grüße 👋🏽 <:blobwave:1180000000000000950> <@&1180000000000000901> "
                + "ß" * 3900,
                "timestamp": "2025-01-05T10:11:00Z",
                "edited_timestamp": None,
                "author": {"username": "dörte", "id": "1180000000000000504", "discriminator": "0"},
                "mentions": [],
                "mention_roles": ["1180000000000000901"],
                "attachments": [],
                "embeds": [],
                "tts": False,
                "pinned": False,
                "mention_everyone": False,
            },
        }
    )
)

# -- 22. ids as JSON numbers (some capture tools and older libraries re-encode them),
#        a message from the REST history endpoint (no guild_id, no member)
NUMERIC_IDS = load("""
{"type": 0, "id": 1325400000000000022, "channel_id": 1180000000000000400,
 "content": "numbers", "timestamp": "2025-01-05T10:12:00.000000+00:00",
 "author": {"username": "alice.w", "id": 1180000000000000500, "discriminator": "0"},
 "mentions": [{"id": 1180000000000000001, "username": "backchannel"}],
 "attachments": [], "embeds": []}
""")

# -- 22b. the least a Message object may carry on the wire: no type (DEFAULT), no
#         content (no Message Content intent and no mention), no timestamp
MINIMAL = load("""
{"op": 0, "t": "MESSAGE_CREATE", "s": 60,
 "d": {"id": "1325400000000000033", "channel_id": "1180000000000000200",
       "guild_id": "1180000000000000100", "author": {"id": "1180000000000000500"}}}
""")

# -- 23. gateway-events.mdx: MESSAGE_CREATE "guild_id - unless it is an ephemeral message";
#        an ephemeral (flags 1 << 6) interaction response with no author
EPHEMERAL = load("""
{"op": 0, "s": 61, "t": "MESSAGE_CREATE", "d": {
  "type": 20, "id": "1325400000000000023", "channel_id": "1180000000000000200",
  "content": "Only you can see this", "flags": 64, "webhook_id": "1180000000000000700",
  "timestamp": "2025-01-05T10:13:00.000000+00:00", "edited_timestamp": null,
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false
}}
""")

# -- 24. a message that started a thread carries the thread channel object (`thread`);
#        it stays a message of the parent channel
STARTED_A_THREAD = load("""
{"op": 0, "s": 62, "t": "MESSAGE_UPDATE", "d": {
  "type": 0, "id": "1325400000000000024", "channel_id": "1180000000000000200",
  "guild_id": "1180000000000000100", "content": "let's discuss in a thread", "flags": 32,
  "timestamp": "2025-01-05T10:14:00.000000+00:00", "edited_timestamp": null,
  "author": {"username": "alice.w", "id": "1180000000000000500", "discriminator": "0"},
  "thread": {"id": "1325400000000000024", "type": 11, "name": "discussion",
             "parent_id": "1180000000000000200", "guild_id": "1180000000000000100",
             "owner_id": "1180000000000000500", "message_count": 0, "member_count": 1,
             "thread_metadata": {"archived": false, "auto_archive_duration": 1440,
                                 "locked": false,
                                 "archive_timestamp": "2025-01-05T10:14:00.000000+00:00"}},
  "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "tts": false,
  "pinned": false, "mention_everyone": false
}}
""")

# -- 25. a reaction as captured, with no member object (the reacting user by id only)
REACTION_ADD = load("""{"op": 0, "s": 64, "t": "MESSAGE_REACTION_ADD",
            "d": {"user_id": "1180000000000000500", "type": 0, "message_id": "1325400000000000002",
                  "message_author_id": "1180000000000000001", "emoji": {"name": "👍", "id": null},
                  "channel_id": "1180000000000000200", "guild_id": "1180000000000000100",
                  "burst": false, "burst_colors": []}}""")

# -- 26. other dispatches the adapter may see: MESSAGE_DELETE_BULK (the adapter splits
#        it), TYPING_START, and a heartbeat ACK
OTHER_DISPATCHES = [
    load("""{"op": 0, "s": 63, "t": "MESSAGE_DELETE_BULK",
            "d": {"ids": ["1325400000000000001", "1325400000000000003"],
                  "channel_id": "1180000000000000200", "guild_id": "1180000000000000100"}}"""),
    load("""{"op": 0, "s": 65, "t": "TYPING_START",
            "d": {"user_id": "1180000000000000500", "timestamp": 1736071200,
                  "channel_id": "1180000000000000200"}}"""),
    load("""{"op": 11, "d": null, "s": null, "t": null}"""),
]

ALL_PAYLOADS: list[dict[str, Any]] = [
    REACTION_ADD,
    REST_EXAMPLE,
    GUILD_MENTION,
    REPLY_TO_BOT,
    REPLY_TO_DELETED,
    CROSSPOST,
    MESSAGE_EDIT,
    EMBED_UNFURL_UPDATE,
    GUILD_DELETE,
    DM_DELETE,
    DM_WITH_ATTACHMENTS,
    VOICE_MESSAGE,
    BOT_EMBED_ONLY,
    COMPONENTS_V2,
    SYSTEM_USER,
    OWN_MESSAGE,
    *SYSTEM_MESSAGES,
    THREAD_MESSAGE_AS_HANDED_OVER,
    FORUM_STARTER,
    FORWARD,
    SLASH_RESPONSE,
    STICKER_ONLY,
    POLL,
    LONG_UNICODE,
    NUMERIC_IDS,
    MINIMAL,
    EPHEMERAL,
    STARTED_A_THREAD,
    *OTHER_DISPATCHES,
]


def event(raw: dict[str, Any]) -> Event:
    found = norm(raw)
    assert isinstance(found, Event)
    return found


# ------------------------------------------------------------ what each real shape gives


def test_rest_example_message_without_guild_is_a_direct_message() -> None:
    got = event(REST_EXAMPLE)
    assert (got.kind, got.conversation_kind, got.address.chat) == ("message", "direct", DM)
    assert got.text == "Hot off the press"
    assert (got.sender.name, got.sender.handle) == ("Rowan", "Rowan#4321")
    assert got.sent_at == pytest.approx(1709374272.345)


def test_guild_mention_uses_the_nick_and_mentions_the_bot() -> None:
    got = event(GUILD_MENTION)
    assert (got.conversation_kind, got.address.chat, got.meta["guild_id"]) == (
        "group",
        GENERAL,
        GUILD,
    )
    assert got.mentions_me
    assert (got.sender.id, got.sender.name, got.sender.handle) == (ALICE, "Ally", "alice.w")
    assert not got.sender.is_bot


def test_reply_to_the_bot_points_at_the_bot_message_and_mentions_it() -> None:
    got = event(REPLY_TO_BOT)
    assert got.reply_to == "1325400000000000002"
    assert got.mentions_me
    assert got.sender.name == "Alice W"


def test_reply_to_a_deleted_message_keeps_the_reference() -> None:
    got = event(REPLY_TO_DELETED)
    assert got.reply_to == "1325400000000000000"
    assert not got.mentions_me


def test_crosspost_from_a_followed_channel_is_a_bot_message_not_a_reply() -> None:
    got = event(CROSSPOST)
    assert got.reply_to is None
    assert got.sender.is_bot
    assert got.sender.handle == "Release Notes #announcements"
    assert got.meta["webhook_id"] == "1180000000000000777"


def test_full_message_update_is_an_edit_unique_per_edited_timestamp() -> None:
    got = event(MESSAGE_EDIT)
    assert got.kind == "edit"
    assert got.platform_message_id == "1325400000000000001"
    assert got.event_id == "1325400000000000001:edit:2025-01-05T08:05:00.123000+00:00"
    assert got.text.startswith("can you check the deploy?")
    assert got.sent_at == pytest.approx(1736064300.123)


def test_partial_update_with_only_embeds_is_ignored() -> None:
    assert norm(EMBED_UNFURL_UPDATE) is None


def test_deletes_in_a_guild_and_in_a_dm_target_the_message() -> None:
    guild, direct = event(GUILD_DELETE), event(DM_DELETE)
    assert (guild.kind, guild.platform_message_id, guild.conversation_kind) == (
        "delete",
        "1325400000000000001",
        "group",
    )
    assert (direct.kind, direct.address.chat, direct.conversation_kind) == ("delete", DM, "direct")


def test_attachments_without_text_are_metadata_with_kind_from_the_mime_type() -> None:
    got = event(DM_WITH_ATTACHMENTS)
    assert got.text == ""
    image, plain = got.attachments
    assert (image.kind, image.name, image.mime, image.size) == (
        "image",
        "screenshot.png",
        "image/png",
        183112,
    )
    assert image.ref is not None and image.ref.startswith("https://cdn.discordapp.com/")
    assert (plain.kind, plain.name, plain.mime) == ("file", "notes", None)


def test_voice_message_is_an_audio_attachment() -> None:
    (voice,) = event(VOICE_MESSAGE).attachments
    assert (voice.kind, voice.name, voice.mime, voice.size) == (
        "audio",
        "voice-message.ogg",
        "audio/ogg",
        20480,
    )


def test_embed_only_bot_message_reads_as_the_embed_text() -> None:
    got = event(BOT_EMBED_ONLY)
    assert got.sender.is_bot
    assert got.sender.handle == "CI Bot#7312"
    assert got.text == "Build #812 failed\ntests/test_api.py::test_login\nbranch: main"


def test_components_v2_message_reads_as_its_text_displays() -> None:
    got = event(COMPONENTS_V2)
    assert got.sender.is_bot
    assert got.text == "## Incident 42\nAPI latency is back to normal."


def test_discords_system_user_is_marked_as_automated() -> None:
    got = event(SYSTEM_USER)
    assert got.sender.is_bot
    assert (got.sender.name, got.sender.handle) == ("Discord", "Discord")


def test_own_message_echo_is_none() -> None:
    assert norm(OWN_MESSAGE) is None


@pytest.mark.parametrize("payload", SYSTEM_MESSAGES, ids=lambda p: f"type{p['d']['type']}")
def test_system_messages_are_none(payload: dict[str, Any]) -> None:
    assert norm(payload) is None


def test_thread_message_is_addressed_under_its_parent_channel() -> None:
    got = event(THREAD_MESSAGE_AS_HANDED_OVER)
    assert (got.conversation_kind, got.address.chat, got.address.thread) == (
        "thread",
        GENERAL,
        THREAD,
    )
    assert got.mentions_me


def test_thread_message_without_its_parent_is_refused_not_given_a_second_address() -> None:
    # off the wire a thread message names only the thread; without the parent there
    # is no address that every message of the thread would share
    with pytest.raises(NormalizeError, match=f"thread {THREAD} without its parent") as caught:
        norm(copy.deepcopy(THREAD_MESSAGE))
    assert caught.value.where == "backchannel.parent_id"


def test_forum_post_starter_is_a_thread_titled_by_the_forum() -> None:
    got = event(FORUM_STARTER)
    assert got.conversation_kind == "thread"
    assert got.conversation_title == "#help › Printer on fire (Ops)"
    assert (got.address.chat, got.address.thread) == ("1180000000000000210", THREAD)


def test_forward_carries_the_snapshot_text_and_files_and_is_not_a_reply() -> None:
    got = event(FORWARD)
    assert got.reply_to is None
    assert got.text == "Maintenance window moved to Friday 🚧"
    assert [a.name for a in got.attachments] == ["plan.pdf"]
    assert got.meta["forwarded_from"]["channel_id"] == "1180000000000000999"


def test_forward_of_a_message_that_mentioned_the_bot_is_no_mention() -> None:
    forward = copy.deepcopy(FORWARD)
    forward["d"]["message_snapshots"][0]["message"]["content"] = f"<@{BOT}> see this"
    got = event(forward)
    assert got.text == f"<@{BOT}> see this"
    assert not got.mentions_me


def test_other_apps_slash_command_response_is_kept_as_a_bot_message() -> None:
    got = event(SLASH_RESPONSE)
    assert got.sender.is_bot
    assert got.text == "🎲 You rolled a 4."
    assert got.reply_to is None


def test_sticker_only_message_shows_the_sticker_as_an_attachment() -> None:
    got = event(STICKER_ONLY)
    assert [(a.kind, a.name, a.ref) for a in got.attachments] == [
        ("sticker", "Wave", "749054660769218631")
    ]
    assert got.meta["stickers"] == ["Wave"]


def test_poll_shows_its_question_and_answers_as_an_attachment() -> None:
    (poll,) = event(POLL).attachments
    assert (poll.kind, poll.name) == ("poll", "Lunch? (Pizza / Sushi)")


def test_long_unicode_text_with_a_legacy_nick_mention_is_kept_whole() -> None:
    got = event(LONG_UNICODE)
    assert got.text == LONG_UNICODE["d"]["content"]
    assert len(got.text) > 3900
    assert got.mentions_me
    assert got.sender.handle == "dörte"
    assert got.sent_at == pytest.approx(1736071860.0)


def test_role_mention_counts_as_a_mention_only_when_it_is_the_bots_role() -> None:
    # a guild message whose only mention is a role; the adapter's context names the bot's role
    message = copy.deepcopy(MESSAGE_EDIT)
    message["t"] = "MESSAGE_CREATE"
    message["d"].update(
        content="<@&1180000000000000901> ping", mention_roles=["1180000000000000901"]
    )
    assert not event(message).mentions_me
    message["backchannel"] = {"bot_role_id": "1180000000000000901"}
    assert event(message).mentions_me
    message["backchannel"] = {"bot_role_id": "1180000000000000902"}
    assert not event(message).mentions_me


def test_numeric_ids_read_as_snowflake_strings() -> None:
    got = event(NUMERIC_IDS)
    assert (got.event_id, got.address.chat, got.sender.id) == (
        "1325400000000000022",
        DM,
        ALICE,
    )
    assert got.mentions_me


def test_minimal_message_falls_back_on_the_snowflake_time_and_the_user_id() -> None:
    got = event(MINIMAL)
    assert (got.kind, got.text, got.conversation_kind) == ("message", "", "group")
    assert (got.sender.id, got.sender.name, got.sender.handle) == (ALICE, "", None)
    assert got.sender.label == ALICE
    assert got.sent_at == pytest.approx(((1325400000000000033 >> 22) + 1420070400000) / 1000)


def test_ephemeral_message_without_author_is_none() -> None:
    assert norm(EPHEMERAL) is None


def test_message_that_started_a_thread_stays_in_the_parent_channel() -> None:
    # an update with a `thread` but no edited_timestamp changes no text
    assert norm(STARTED_A_THREAD) is None
    created = event({**STARTED_A_THREAD, "t": "MESSAGE_CREATE"})
    assert (created.conversation_kind, created.address.chat) == ("group", GENERAL)


def test_a_captured_reaction_is_a_reaction_on_its_message_by_the_user_id() -> None:
    got = event(REACTION_ADD)
    assert (got.kind, got.text, got.platform_message_id) == (
        "reaction",
        "👍",
        "1325400000000000002",
    )
    assert (got.address.chat, got.sender.id, got.conversation_kind) == (
        "1180000000000000200",
        "1180000000000000500",
        "group",
    )
    assert got.event_id == "1325400000000000002:react:1180000000000000500:👍:64"


@pytest.mark.parametrize("payload", OTHER_DISPATCHES, ids=lambda p: str(p["t"]))
def test_other_dispatches_are_none(payload: dict[str, Any]) -> None:
    assert norm(payload) is None


# ------------------------------------------------------------ robustness


@pytest.mark.parametrize("payload", ALL_PAYLOADS)
def test_every_real_shape_gives_an_event_or_none(payload: dict[str, Any]) -> None:
    result = norm(copy.deepcopy(payload))
    assert result is None or _well_formed(result)


_ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    True,
    1.5,
    "",
    "x",
    "²",
    "١٢٣",
    [],
    [None],
    [[1]],
    {},
    {"id": None},
    {"a": [None]},
    "9" * 40,
]


def _mutate(raw: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Drop a key, or put an odd value (wrong type, null, nested null) somewhere, 1-3 times."""
    mangled: dict[str, Any] = mutate_payload(raw, rng, odd_values=_ODD_VALUES, drop_chance=0.3)
    return mangled


@pytest.mark.parametrize("seed", range(6))
def test_mutated_real_payloads_give_only_event_none_or_normalize_error(seed: int) -> None:
    rng = random.Random(seed)
    outcomes = {"event": 0, "none": 0, "error": 0}
    for _ in range(2500):
        raw = _mutate(rng.choice(ALL_PAYLOADS), rng)
        try:
            result = norm(raw)
        except NormalizeError as error:
            message = str(error)
            assert message and "\n" not in message, f"not one line: {message!r}"
            outcomes["error"] += 1
            continue
        except Exception as error:  # pragma: no cover - the failure being tested for
            pytest.fail(f"{type(error).__name__}: {error} for {json.dumps(raw)[:2000]}")
        if result is None:
            outcomes["none"] += 1
        else:
            assert _well_formed(result), raw
            outcomes["event"] += 1
    # the mutations must exercise all three outcomes, or this test proves little
    assert all(outcomes.values()), outcomes


def test_non_object_payloads_are_normalize_errors() -> None:
    raws: list[Any] = [[], "MESSAGE_CREATE", 7, None]
    for raw in raws:
        with pytest.raises(NormalizeError):
            norm(raw)


def _well_formed(event: Event) -> bool:
    """The Event's fields have the types the store and framing rely on."""
    assert isinstance(event.text, str)
    assert event.address.account == "ops"
    assert event.address.chat.isdigit()
    assert isinstance(event.sender.name, str)
    assert event.sender.handle is None or isinstance(event.sender.handle, str)
    assert isinstance(event.sender.is_bot, bool)
    assert isinstance(event.mentions_me, bool)
    assert isinstance(event.sent_at, float)
    assert event.platform_message_id is None or event.platform_message_id.isdigit()
    assert event.reply_to is None or event.reply_to.isdigit()
    for attachment in event.attachments:
        assert isinstance(attachment.kind, str)
        assert attachment.name is None or isinstance(attachment.name, str)
        assert attachment.mime is None or isinstance(attachment.mime, str)
        assert attachment.size is None or type(attachment.size) is int
        assert attachment.ref is None or isinstance(attachment.ref, str)
    json.dumps(dict(event.meta))  # the store keeps meta as JSON
    assert event.conversation_title is None or isinstance(event.conversation_title, str)
    return True


# ------------------------------------------------------------ through the store


def bound(contract_context: ContractContext) -> ContractContext:
    """The contract context bound to an adapter that knows who the bot is (as after READY)."""
    adapter = DiscordAdapter(contract_context.account, {"token": "x.y.z"})
    adapter.me = Sender(BOT, "backchannel", "backchannel", is_bot=True)
    return contract_context.bind(adapter)


# -- 27. another app's deferred slash-command response: Discord creates it LOADING
#        (flags 1 << 7, "Dice is thinking...") with no content, and the app's answer
#        completes it with a full MESSAGE_UPDATE that clears LOADING and leaves
#        edited_timestamp null (no one edited it)
DEFERRED_LOADING = copy.deepcopy(SLASH_RESPONSE)
DEFERRED_LOADING["d"].update(content="", flags=128)
DEFERRED_DONE = copy.deepcopy(SLASH_RESPONSE)
DEFERRED_DONE.update(s=58, t="MESSAGE_UPDATE")


async def test_a_deferred_response_is_filled_in_by_the_update_that_completes_it(
    contract_context: ContractContext,
) -> None:
    ctx = bound(contract_context)
    assert (await ctx.ingest(DEFERRED_LOADING)).status == "stored"
    still_loading = copy.deepcopy(DEFERRED_LOADING)
    still_loading.update(s=57, t="MESSAGE_UPDATE")
    assert norm(still_loading) is None  # nothing to show yet
    done = await ctx.ingest(DEFERRED_DONE)
    assert done.event is not None and done.event.kind == "edit"
    assert done.event.event_id == "1325400000000000018:completed"
    (row,) = await ctx.transcript(Address(ctx.account, GENERAL))
    assert (row.sender.name, row.text) == ("Dice", "🎲 You rolled a 4.")
    # an embed or a link preview added afterwards (a full update, still no edit time) is
    # that completion again, not a change
    unfurled = copy.deepcopy(DEFERRED_DONE)
    unfurled["s"] = 59
    unfurled["d"]["embeds"] = [{"type": "link", "url": "https://example.org/dice"}]
    assert (await ctx.ingest(unfurled)).status == "duplicate"
    # an answer given in an embed alone fills it in as well
    in_embed = copy.deepcopy(DEFERRED_DONE)
    in_embed["d"].update(content="", embeds=[{"type": "rich", "title": "You rolled a 4"}])
    assert event(in_embed).text == "You rolled a 4"
    # a person's message's full update without an edit time (a link preview) changes nothing
    preview = copy.deepcopy(GUILD_MENTION)
    preview["t"] = "MESSAGE_UPDATE"
    preview["d"]["embeds"] = [{"type": "link", "url": "https://example.org/deploy"}]
    assert norm(preview) is None


# -- 28. webhook.mdx "Execute Webhook" username override: one incoming webhook (a Matrix
#        bridge) posting as each person it relays; the author is the webhook (its id is
#        the webhook's), named as the post asked
HOOK = "1180000000000000777"


def bridged(name: str, number: int) -> dict[str, Any]:
    return {
        "op": 0,
        "s": 70 + number,
        "t": "MESSAGE_CREATE",
        "d": {
            "type": 0,
            "id": str(1325400000000000200 + number),
            "channel_id": GENERAL,
            "guild_id": GUILD,
            "webhook_id": HOOK,
            "author": {
                "id": HOOK,
                "username": name,
                "discriminator": "0000",
                "bot": True,
                "avatar": None,
            },
            "content": f"message {number}",
            "timestamp": f"2025-01-05T10:0{number}:00.000000+00:00",
            "edited_timestamp": None,
            "attachments": [],
            "embeds": [],
            "mentions": [],
            "mention_roles": [],
            "tts": False,
            "pinned": False,
            "mention_everyone": False,
            "flags": 0,
        },
    }


async def test_each_name_a_webhook_posts_as_is_a_sender_of_its_own(
    contract_context: ContractContext,
) -> None:
    ctx = bound(contract_context)
    names = ["Alice (via Matrix)", "Bob (via Matrix)", "Carol (via Matrix)", "Alice (via Matrix)"]
    senders = [event(bridged(name, i)).sender for i, name in enumerate(names)]
    assert len({s.id for s in senders}) == 3 and senders[0] == senders[3]
    assert all(s.id.startswith(f"webhook:{HOOK}:") and s.is_bot for s in senders)
    assert [s.name for s in senders] == names
    for i, name in enumerate(names):
        await ctx.ingest(bridged(name, i))
    conversation = await ctx.store.find_conversation(Address(ctx.account, GENERAL))
    assert conversation is not None
    participants = await ctx.store.participants(conversation.id)
    assert sorted(p.sender.name for p in participants) == sorted(set(names))
    # a persona named like the owner (their name, their handle, their id) is not the owner,
    # nor anyone an allowlist names: no persona's id is a snowflake
    owner = Policy(access="owner", owner=ALICE)
    allow = Policy(access="allowlist", allow=[ALICE, HOOK])
    for name in ("Alice W", "alice.w", ALICE, BOT):
        fake_owner = event(bridged(name, 5))
        assert fake_owner.sender.id != ALICE and fake_owner.sender.is_bot
        assert not owner.may_reach(fake_owner) and not allow.may_reach(fake_owner)
    # nor is it the bot: a persona named like it is stored, and its reply to the bot
    # counts only as what it is
    assert event(bridged(BOT, 6)).sender.id != BOT
    # an app's own webhook (interaction responses: webhook_id is the application's id) is
    # that app's bot user, as before, and the bot's own responses are its own
    assert event(SLASH_RESPONSE).sender.id == "1180000000000000700"
    own = copy.deepcopy(SLASH_RESPONSE)
    own["d"]["author"]["id"] = own["d"]["webhook_id"] = own["d"]["application_id"] = BOT
    assert norm(own) is None


# -- 29. gateway-events.mdx Message Reaction Add / Remove with `burst` and `type` (1:
#        a super reaction): one user's normal and super reaction of one emoji
def reaction(kind: str, s: int, *, burst: bool, emoji: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "user_id": "1180000000000000501",
        "message_id": "1325400000000000001",
        "channel_id": GENERAL,
        "guild_id": GUILD,
        "emoji": emoji,
        "burst": burst,
        "type": 1 if burst else 0,
    }
    if kind == "MESSAGE_REACTION_ADD":
        bob = {"id": "1180000000000000501", "username": "bob", "global_name": "Bob"}
        data.update(
            message_author_id=ALICE,
            burst_colors=["#ff8a00"] if burst else [],
            member={"user": bob, "roles": [], "joined_at": "2024-01-01T00:00:00+00:00"},
        )
    return {"op": 0, "s": s, "t": kind, "d": data, "backchannel": {"session_id": "sess1"}}


async def test_a_super_reaction_comes_off_alone_and_leaves_the_normal_one(
    contract_context: ContractContext,
) -> None:
    ctx = bound(contract_context)
    await ctx.ingest(GUILD_MENTION)
    fire = {"id": None, "name": "🔥"}
    parrot = {"id": "1180000000000000950", "name": "parrot"}

    async def reactions() -> Any:
        (row,) = await ctx.transcript(Address(ctx.account, GENERAL))
        return row.reactions

    for emoji in (fire, parrot):
        await ctx.ingest(reaction("MESSAGE_REACTION_ADD", 1, burst=False, emoji=emoji))
        await ctx.ingest(reaction("MESSAGE_REACTION_ADD", 2, burst=True, emoji=emoji))
        await ctx.ingest(reaction("MESSAGE_REACTION_REMOVE", 3, burst=True, emoji=emoji))
        assert await reactions() == (("Bob", ":parrot:" if emoji is parrot else "🔥"),)
        # and the other way round: the super one stays when the normal one comes off
        await ctx.ingest(reaction("MESSAGE_REACTION_ADD", 4, burst=True, emoji=emoji))
        await ctx.ingest(reaction("MESSAGE_REACTION_REMOVE", 5, burst=False, emoji=emoji))
        shown = ":parrot: (super)" if emoji is parrot else "🔥 (super)"
        assert await reactions() == (("Bob", shown),)
        await ctx.ingest(reaction("MESSAGE_REACTION_REMOVE", 6, burst=True, emoji=emoji))
        assert await reactions() == ()
    super_fire = event(reaction("MESSAGE_REACTION_ADD", 7, burst=True, emoji=fire))
    assert super_fire.meta["burst"] is True and super_fire.meta["emoji_key"] == "burst:🔥"
    assert ":burst:🔥:" in super_fire.event_id


# -- 30. user, channel and role mention markup (message.mdx "Message Formatting"): the
#        mentions array names the user (with a partial member), the adapter's cache the
#        role and channel
MENTIONS = copy.deepcopy(GUILD_MENTION)
MENTIONS["d"].update(
    content=(
        "<@1180000000000000501> can you review <#1180000000000000200>? cc <@&1180000000000000901>"
        " <@!1180000000000000001> <@1180000000000000999> <#1180000000000000299>"
    ),
    mentions=[
        {
            "id": "1180000000000000501",
            "username": "bob",
            "global_name": "Bob",
            "member": {"nick": "Bobby", "roles": []},
        },
        {"id": BOT, "username": "backchannel", "global_name": None, "bot": True},
    ],
    mention_roles=["1180000000000000901"],
)


def test_mentions_read_as_names_with_the_markup_to_mention_back() -> None:
    cached = {
        **MENTIONS,
        "backchannel": {
            "channel_name": "general",
            "role_names": {"1180000000000000901": "Reviewers"},
        },
    }
    got = event(cached)
    assert got.text == (
        "@Bobby (<@1180000000000000501>) can you review #general (<#1180000000000000200>)?"
        " cc @Reviewers (<@&1180000000000000901>) @backchannel (<@!1180000000000000001>)"
        # neither named in the payload nor in the cache: left as it is
        " <@1180000000000000999> <#1180000000000000299>"
    )
    assert got.mentions_me  # read on the markup as Discord sent it
    # the agent reads who is meant, and the markup its answer pings them with
    row = Message(1, 1, "in", got.sender, got.text, got.sent_at)
    assert "Ally: @Bobby (<@1180000000000000501>) can you" in format_message(row)["content"]
    # without the adapter's cache, roles and other channels stay markup
    assert "cc <@&1180000000000000901>" in event(MENTIONS).text

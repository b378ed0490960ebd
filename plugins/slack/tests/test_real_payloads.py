"""normalize on the shapes Slack really sends, as published by Slack and by client libraries.

Each payload is written out as JSON in our own words and ids, keeping the shape
(which keys, nesting, types, odd values) of its source, named in a comment. The
adapter under test is built but not started, the way a user normalizing a
captured payload would use it: the bot's identity then comes from ``bot_user_id``
in the settings (at start, from auth.test), never from a payload's
``authorizations``.

A randomized test at the end mutates these payloads (drops keys, swaps types,
nests nulls) and checks that only an Event, None or a NormalizeError comes out.
"""

from __future__ import annotations

import json
import logging
import random
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel.model import Address, Event
from backchannel.testing import mutate_payload
from backchannel_slack.adapter import SlackAdapter, _thread_key

BOT_USER = "U0BOTBOT1"  # the app's bot user in these payloads (authorizations[0].user_id)
BOT_ID = "B0BOTBOT1"


def adapter(**settings: Any) -> SlackAdapter:
    """An unstarted adapter: normalize is pure and needs no connection."""
    return SlackAdapter(
        "test", {"bot_token": "xoxb-1-2-abc", "app_token": "xapp-1-A1-2-def", **settings}
    )


def load(text: str) -> dict[str, Any]:
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


def norm(payload: dict[str, Any], **settings: Any) -> Event | None:
    return adapter(**settings).normalize(payload)


def must(payload: dict[str, Any], **settings: Any) -> Event:
    event = norm(payload, **settings)
    assert event is not None
    return event


# --- Slack's docs: message.channels (docs.slack.dev/reference/events/message.channels).
# The sample's authorization is a user install (is_bot false) for the same user who
# wrote the message: that must not make the message "ours".
MESSAGE_CHANNELS = """
{
  "token": "one-long-verification-token",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "channel": "C0GENERAL",
    "user": "U0ALICE01",
    "text": "Deploy went out at noon.",
    "ts": "1700000000.000100",
    "event_ts": "1700000000.000100",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "authorizations": [
    {"team_id": "T0TEAM001", "user_id": "U0ALICE01", "is_bot": false, "is_enterprise_install": false}
  ],
  "event_id": "Ev0AAAA0001",
  "event_time": 1700000000
}
"""


def test_docs_channel_message_with_a_user_authorization_is_kept() -> None:
    event = must(load(MESSAGE_CHANNELS))
    assert event.address == Address("test", "C0GENERAL")
    assert event.conversation_kind == "group"
    assert event.event_id == "C0GENERAL:1700000000.000100"
    assert event.sender.id == "U0ALICE01" and not event.sender.is_bot
    assert event.text == "Deploy went out at noon."
    assert event.sent_at == pytest.approx(1700000000.0001)


# --- A DM captured from a real workspace (MercuryTechnologies/slack-web,
# tests/golden/SlackWebhookEvent/messageIm.json): rich_text blocks, client_msg_id,
# context fields, a bot authorization with enterprise_id null.
MESSAGE_IM = """
{
  "token": "aaaa",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "client_msg_id": "9b1c2d3e-0000-4a4a-8b8b-123456789abc",
    "type": "message",
    "text": "can you summarise yesterday's incident?",
    "user": "U0ALICE01",
    "ts": "1700000100.000200",
    "team": "T0TEAM001",
    "blocks": [{"type": "rich_text", "block_id": "a1B", "elements": [
      {"type": "rich_text_section", "elements": [
        {"type": "text", "text": "can you summarise yesterday's incident?"}]}]}],
    "channel": "D0DIRECT1",
    "event_ts": "1700000100.000200",
    "channel_type": "im"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0002",
  "event_time": 1700000100,
  "authorizations": [
    {"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1", "is_bot": true,
     "is_enterprise_install": false}
  ],
  "is_ext_shared_channel": false,
  "event_context": "4-eyJldCI6Im1lc3NhZ2UifQ"
}
"""


def test_captured_dm_is_a_direct_conversation() -> None:
    event = must(load(MESSAGE_IM))
    assert event.address == Address("test", "D0DIRECT1")
    assert event.conversation_kind == "direct"
    assert event.text == "can you summarise yesterday's incident?"
    assert not event.mentions_me


# --- Slack's docs: message.app_home (docs.slack.dev/reference/events/message.app_home):
# channel_type "app_home", authed_teams instead of authorizations.
MESSAGE_APP_HOME = """
{
  "token": "one-long-verification-token",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "user": "U0ALICE01",
    "text": "How many builds failed today?",
    "ts": "1700000200.000001",
    "channel": "D0APPHOME",
    "event_ts": "1700000200.000001",
    "channel_type": "app_home"
  },
  "type": "event_callback",
  "authed_teams": ["T0TEAM001"],
  "event_id": "Ev0AAAA0003",
  "event_time": 1700000200
}
"""


def test_app_home_message_is_a_direct_conversation() -> None:
    event = must(load(MESSAGE_APP_HOME))
    assert event.conversation_kind == "direct"
    assert event.address == Address("test", "D0APPHOME")


# --- Slack's docs: app_mention (docs.slack.dev/reference/events/app_mention): no
# channel_type, event_ts without a dot, the mention in label form in newer clients.
APP_MENTION = """
{
  "token": "ZZZZZZWSxiZZZ2yIvs3peJ",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "app_mention",
    "user": "U0ALICE01",
    "text": "<@U0BOTBOT1|helper> is the build green? \\ud83d\\ude80",
    "ts": "1700000300.000016",
    "channel": "C0GENERAL",
    "event_ts": "1700000300000016"
  },
  "type": "event_callback",
  "authed_users": ["U0BOTBOT1"],
  "event_id": "Ev0AAAA0004",
  "event_time": 1700000300
}
"""


def test_app_mention_opens_the_thread_under_it() -> None:
    event = must(load(APP_MENTION), bot_user_id=BOT_USER)
    assert event.mentions_me
    assert event.address == Address("test", "C0GENERAL", "1700000300.000016")
    assert event.conversation_kind == "thread"
    assert event.text.endswith("green? \U0001f680")
    # the same message as a `message` event has the same identity (one transcript row)
    assert event.event_id == "C0GENERAL:1700000300.000016"


# --- AI-app split view message (slackapi/bolt-python tests/scenario_tests_async/
# test_events_assistant.py): a thread inside a DM, enterprise W-ids, empty user_profile,
# source_team differing from team.
ASSISTANT_THREAD_MESSAGE = """
{
  "token": "verification_token",
  "team_id": "T0TEAM001",
  "enterprise_id": "E0GRID001",
  "api_app_id": "A0APP0001",
  "event": {
    "user": "W0CAROL01",
    "type": "message",
    "ts": "1700000400.887259",
    "text": "When was Slack released?",
    "team": "T0TEAM001",
    "user_team": "T0TEAM001",
    "source_team": "T0TEAM002",
    "user_profile": {},
    "thread_ts": "1700000398.626339",
    "parent_user_id": "W0CAROL01",
    "channel": "D0DIRECT2",
    "event_ts": "1700000400.887259",
    "channel_type": "im",
    "assistant_thread": {"action_token": "1064.9604.afce"}
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0005",
  "event_time": 1700000400,
  "authorizations": [
    {"enterprise_id": "E0GRID001", "team_id": "T0TEAM001", "user_id": "W0BOTBOT1", "is_bot": true,
     "is_enterprise_install": false}
  ]
}
"""


def test_assistant_thread_in_a_dm_is_its_own_direct_conversation() -> None:
    # its own conversation (the thread), and a DM still: the default policy answers it,
    # as every DM (before, a "thread" needing a mention: the bot stayed silent in it)
    from backchannel.policy import Policy

    event = must(load(ASSISTANT_THREAD_MESSAGE))
    assert event.address == Address("test", "D0DIRECT2", "1700000398.626339")
    assert event.conversation_kind == "direct"
    assert not event.mentions_me and Policy(respond="mention").triggers(event)
    assert event.sender.id == "W0CAROL01" and event.sender.handle == "W0CAROL01"
    assert event.reply_to == "1700000398.626339"


# --- A reply in a thread the bot started: parent_user_id is the bot (Slack's message
# event docs, "threaded replies").
THREAD_REPLY_TO_BOT = """
{
  "type": "event_callback",
  "team_id": "T0TEAM001",
  "event_id": "Ev0AAAA0006",
  "event_time": 1700000500,
  "authorizations": [{"team_id": "T0TEAM001", "user_id": "U0BOTBOT1", "is_bot": true}],
  "event": {
    "type": "message",
    "user": "U0ALICE01",
    "text": "thanks, and the other region?",
    "ts": "1700000500.000300",
    "thread_ts": "1700000450.000100",
    "parent_user_id": "U0BOTBOT1",
    "channel": "C0GENERAL",
    "event_ts": "1700000500.000300",
    "channel_type": "channel"
  }
}
"""


def test_reply_in_the_bots_thread_mentions_the_bot() -> None:
    event = must(load(THREAD_REPLY_TO_BOT), bot_user_id=BOT_USER)
    assert event.mentions_me
    assert event.address == Address("test", "C0GENERAL", "1700000450.000100")
    assert event.meta["thread_ts"] == "1700000450.000100"


# --- thread_broadcast (slackapi/bolt-python test_message_thread_broadcast.py): a
# reply also sent to the channel, carrying the thread's root message.
THREAD_BROADCAST = """
{
  "token": "verification-token",
  "team_id": "T0TEAM001",
  "enterprise_id": "E0GRID001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "subtype": "thread_broadcast",
    "text": "Summary: rollback done :white_check_mark:",
    "user": "U0ALICE01",
    "ts": "1700000600.007500",
    "thread_ts": "1700000550.000500",
    "root": {
      "client_msg_id": "1a2b", "type": "message", "text": "Rollback thread :bow:",
      "user": "U0ALICE01", "ts": "1700000550.000500", "team": "T0TEAM001",
      "thread_ts": "1700000550.000500", "reply_count": 17, "reply_users_count": 1,
      "latest_reply": "1700000600.007500", "reply_users": ["U0ALICE01"], "is_locked": false
    },
    "client_msg_id": "3c4d",
    "channel": "C0GENERAL",
    "event_ts": "1700000600.007500",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0007",
  "event_time": 1700000600,
  "authorizations": [{"enterprise_id": "E0GRID001", "team_id": "T0TEAM001",
    "user_id": "U0BOTBOT1", "is_bot": true, "is_enterprise_install": false}],
  "is_ext_shared_channel": false,
  "event_context": "1-message-T0TEAM001-C0GENERAL"
}
"""


def test_thread_broadcast_lands_in_its_thread() -> None:
    event = must(load(THREAD_BROADCAST))
    assert event.address == Address("test", "C0GENERAL", "1700000550.000500")
    assert event.meta["also_sent_to_channel"] is True


# --- Another app's bot posting with a bot user (slackapi/bolt-python
# test_message_bot.py, bot_message_event_payload): bot_id + user + bot_profile.
OTHER_APP_BOT = """
{
  "type": "event_callback",
  "team_id": "T0TEAM001",
  "event_id": "Ev0AAAA0008",
  "event_time": 1700000700,
  "authorizations": [{"team_id": "T0TEAM001", "user_id": "U0BOTBOT1", "is_bot": true}],
  "event": {
    "bot_id": "B0OTHER01",
    "type": "message",
    "text": "Nightly report is ready.",
    "user": "U0OTHERB1",
    "ts": "1700000700.000900",
    "team": "T0TEAM001",
    "bot_profile": {"id": "B0OTHER01", "deleted": false, "name": "reporter",
      "updated": 1607307935, "app_id": "A0OTHER01",
      "icons": {"image_36": "https://a.slack-edge.com/bot_36.png"}, "team_id": "T0TEAM001"},
    "channel": "C0GENERAL",
    "event_ts": "1700000700.000900",
    "channel_type": "channel"
  }
}
"""


def test_other_apps_bot_is_kept_and_marked_a_bot() -> None:
    event = must(load(OTHER_APP_BOT))
    assert event.sender.is_bot
    assert event.sender.id == "U0OTHERB1"
    assert event.sender.name == "reporter"


# --- A classic bot_message from an integration (MercuryTechnologies/slack-web,
# message_subtype_bot_message.json): no user, username + icons, a link-only text.
CLASSIC_BOT_MESSAGE = """
{
  "token": "d90z",
  "team_id": "T0TEAM001",
  "context_team_id": "T0TEAM001",
  "context_enterprise_id": null,
  "api_app_id": "A0APP0001",
  "event": {
    "subtype": "bot_message",
    "text": "<https://example.slack.com/archives/C0OPS0001/p1700000790876929>",
    "username": "Reacji Channeler",
    "icons": {"emoji": "bulb"},
    "type": "message",
    "ts": "1700000800.440469",
    "bot_id": "B0REACJI1",
    "app_id": "A0REACJI1",
    "blocks": [{"type": "rich_text", "block_id": "nmh", "elements": [
      {"type": "rich_text_section", "elements": [
        {"type": "link", "url": "https://example.slack.com/archives/C0OPS0001/p1700000790876929"}]}]}],
    "channel": "C0IDEAS01",
    "event_ts": "1700000800.440469",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0009",
  "event_time": 1700000800,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}],
  "is_ext_shared_channel": false
}
"""


def test_classic_bot_message_is_from_its_bot_id_and_username() -> None:
    event = must(load(CLASSIC_BOT_MESSAGE))
    assert event.sender.id == "B0REACJI1"
    assert event.sender.name == "Reacji Channeler"
    assert event.sender.is_bot and event.sender.handle is None


# --- The app's own post echoed back (Slack sends it like any message): bot_id and
# the bot user from authorizations -> not for the transcript.
OWN_ECHO = """
{
  "type": "event_callback",
  "team_id": "T0TEAM001",
  "event_id": "Ev0AAAA0010",
  "event_time": 1700000900,
  "authorizations": [{"team_id": "T0TEAM001", "user_id": "U0BOTBOT1", "is_bot": true}],
  "event": {
    "bot_id": "B0BOTBOT1",
    "type": "message",
    "text": "Here is the summary you asked for.",
    "user": "U0BOTBOT1",
    "ts": "1700000900.000100",
    "app_id": "A0APP0001",
    "bot_profile": {"id": "B0BOTBOT1", "name": "helper", "app_id": "A0APP0001"},
    "thread_ts": "1700000300.000016",
    "parent_user_id": "U0ALICE01",
    "channel": "C0GENERAL",
    "event_ts": "1700000900.000100",
    "channel_type": "channel"
  }
}
"""


def test_own_echo_is_not_for_the_transcript() -> None:
    assert norm(load(OWN_ECHO), bot_user_id=BOT_USER) is None
    # also when the payload has no authorizations
    payload = load(OWN_ECHO)
    del payload["authorizations"]
    assert norm(payload, bot_user_id=BOT_USER, bot_id=BOT_ID) is None


# --- file_share with an image (slackapi/bolt-python test_message_file_share.py): many
# file fields, thumbnails, private URLs that must not become the attachment ref.
FILE_SHARE_IMAGE = """
{
  "token": "xxx",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "text": "Here is the graph",
    "files": [{
      "id": "F0GRAPH01", "created": 1700001000, "timestamp": 1700001000,
      "name": "latency.png", "title": "latency.png", "mimetype": "image/png",
      "filetype": "png", "pretty_type": "PNG", "user": "U0ALICE01", "editable": false,
      "size": 92582, "mode": "hosted", "is_external": false, "external_type": "",
      "is_public": true, "public_url_shared": false, "display_as_bot": false, "username": "",
      "url_private": "https://files.slack.com/files-pri/T0TEAM001-F0GRAPH01/latency.png",
      "url_private_download": "https://files.slack.com/files-pri/T0TEAM001-F0GRAPH01/download/latency.png",
      "media_display_type": "unknown", "thumb_64": "https://files.slack.com/t64.png",
      "thumb_360_w": 360, "thumb_360_h": 115, "original_w": 1134, "original_h": 362,
      "thumb_tiny": "AwAPADCkCAOc", "permalink": "https://example.slack.com/files/U0ALICE01/F0GRAPH01/latency.png",
      "has_rich_preview": false
    }],
    "upload": false,
    "user": "U0ALICE01",
    "display_as_bot": false,
    "ts": "1700001000.593159",
    "blocks": [{"type": "rich_text", "block_id": "ba4", "elements": [
      {"type": "rich_text_section", "elements": [{"type": "text", "text": "Here is the graph"}]}]}],
    "client_msg_id": "ca08",
    "channel": "C0GENERAL",
    "subtype": "file_share",
    "event_ts": "1700001000.593159",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0011",
  "event_time": 1700001000,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}],
  "is_ext_shared_channel": false,
  "event_context": "4-xxx"
}
"""


def test_file_share_keeps_file_metadata() -> None:
    event = must(load(FILE_SHARE_IMAGE))
    (attachment,) = event.attachments
    assert (attachment.kind, attachment.name, attachment.mime) == (
        "image",
        "latency.png",
        "image/png",
    )
    assert attachment.size == 92582 and attachment.ref == "F0GRAPH01"
    assert event.text == "Here is the graph"


# --- A file in a Slack Connect DM (MercuryTechnologies/slack-web,
# message_file_share_slack_connect.json): the file is only an id with
# file_access "check_file_info", created 0, user "".
FILE_SHARE_CONNECT = """
{
  "token": "aaaa",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "text": "the contract draft",
    "files": [{"id": "F0CONNECT", "mode": "file_access", "file_access": "check_file_info",
               "created": 0, "timestamp": 0, "user": ""}],
    "upload": true,
    "user": "U0ALICE01",
    "display_as_bot": false,
    "ts": "1700001100.874149",
    "client_msg_id": "a5a1",
    "channel": "D0DIRECT1",
    "subtype": "file_share",
    "event_ts": "1700001100.874149",
    "channel_type": "im"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0012",
  "event_time": 1700001100,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}],
  "is_ext_shared_channel": false
}
"""


def test_slack_connect_file_without_details_is_still_an_attachment() -> None:
    event = must(load(FILE_SHARE_CONNECT))
    (attachment,) = event.attachments
    assert attachment.kind == "file" and attachment.ref == "F0CONNECT"
    assert attachment.name is None and attachment.size is None


# --- An email forwarded into a channel (MercuryTechnologies/slack-web,
# email_message.json): from USLACKBOT with a bot_id, empty text, an email file.
EMAIL_FILE = """
{
  "token": "aaaa",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "text": "",
    "files": [{"id": "F0EMAIL01", "created": 1700001200, "timestamp": 1700001190,
      "name": "Quarterly numbers", "title": "Quarterly numbers", "mimetype": "text/html",
      "filetype": "email", "pretty_type": "Email", "user": "USLACKBOT", "size": 6212,
      "mode": "email", "subject": "Quarterly numbers",
      "from": [{"address": "cfo@example.com", "name": "CFO", "original": "CFO <cfo@example.com>"}],
      "cc": [], "attachments": [], "headers": {"in_reply_to": null, "reply_to": null},
      "bot_id": "B0EMAIL01", "file_access": "visible"}],
    "upload": true,
    "user": "USLACKBOT",
    "display_as_bot": true,
    "bot_id": "B0EMAIL01",
    "ts": "1700001200.292829",
    "channel": "C0FINANCE",
    "subtype": "file_share",
    "event_ts": "1700001200.292829",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0013",
  "event_time": 1700001200,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}]
}
"""


def test_emailed_file_from_slackbot_is_a_bot_message_with_the_file() -> None:
    event = must(load(EMAIL_FILE))
    assert event.sender.id == "USLACKBOT" and event.sender.is_bot
    assert event.attachments[0].name == "Quarterly numbers"
    assert event.text == ""


# --- Slackbot writing in a DM (MercuryTechnologies/slack-web, slackbotIm.json): user
# USLACKBOT and no bot_id.
SLACKBOT_IM = """
{
  "token": "aaaa",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "text": "You have been removed from #ops-private by <@U0ALICE01>",
    "user": "USLACKBOT",
    "ts": "1700001300.425039",
    "team": "T0TEAM001",
    "blocks": [{"type": "rich_text", "block_id": "ZRe", "elements": [
      {"type": "rich_text_section", "elements": [
        {"type": "text", "text": "You have been removed from #ops-private by "},
        {"type": "user", "user_id": "U0ALICE01"}]}]}],
    "channel": "D0SLACKBT",
    "event_ts": "1700001300.425039",
    "channel_type": "im"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0014",
  "event_time": 1700001300,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}]
}
"""


def test_slackbot_is_marked_a_bot() -> None:
    event = must(load(SLACKBOT_IM))
    assert event.sender.id == "USLACKBOT" and event.sender.is_bot
    assert event.conversation_kind == "direct"


# --- A forwarded message (MercuryTechnologies/slack-web, forwarded_message.json):
# empty text; the words are in a legacy attachment with is_share and a fallback.
FORWARDED = """
{
  "token": "d90z",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "user": "U0ALICE01",
    "type": "message",
    "ts": "1700001400.110719",
    "text": "",
    "team": "T0TEAM001",
    "attachments": [{
      "ts": "1700001380.623809", "author_id": "U0ALICE01", "channel_id": "C0OPS0001",
      "channel_team": "T0TEAM001", "is_msg_unfurl": true,
      "message_blocks": [{"team": "T0TEAM001", "channel": "C0OPS0001", "ts": "1700001380.623809",
        "message": {"blocks": [{"type": "rich_text", "block_id": "nX", "elements": [
          {"type": "rich_text_section", "elements": [{"type": "text", "text": "db is at 91%"}]}]}]}}],
      "color": "D0D0D0", "from_url": "https://example.slack.com/archives/C0OPS0001/p1700001380623809",
      "is_share": true, "fallback": "[November 14th, 2023 10:24 PM] alice: db is at 91%",
      "text": "db is at 91%", "author_name": "alice", "mrkdwn_in": ["text"],
      "footer": "Slack Conversation"
    }],
    "channel": "C0GENERAL",
    "event_ts": "1700001400.110719",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0015",
  "event_time": 1700001400,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}]
}
"""


def test_forwarded_message_reads_the_words_of_its_attachment() -> None:
    event = must(load(FORWARDED))
    assert event.text == "[November 14th, 2023 10:24 PM] alice: db is at 91%"


# --- An integration's notification (MercuryTechnologies/slack-web,
# github_notification_ts_string.json): empty text, attachment with numeric id, actions.
INTEGRATION_NOTIFICATION = """
{
  "token": "aaaa",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "user": "U0GITHUB1",
    "type": "message",
    "ts": "1700001500.581159",
    "bot_id": "B0GITHUB1",
    "app_id": "A0GITHUB1",
    "text": "",
    "team": "T0TEAM001",
    "bot_profile": {"id": "B0GITHUB1", "deleted": false, "name": "GitHub", "updated": 1700001400,
      "app_id": "A0GITHUB1", "team_id": "T0TEAM001"},
    "attachments": [{"id": 1, "ts": "1700001499.123456", "color": "36a64f",
      "fallback": "[acme/api] Issue opened by bob", "text": "Login fails on Safari",
      "pretext": "Issue created by <https://github.com/bob|bob>",
      "title": "<https://github.com/acme/api/issues/2|#2 Login fails>",
      "callback_id": "issue-opened-interaction", "mrkdwn_in": ["text"],
      "actions": [{"id": "1", "name": "comment", "text": "Comment", "type": "button", "value": "{}"}]}],
    "channel": "C0DEV0001",
    "event_ts": "1700001500.581159",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0016",
  "event_time": 1700001500,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}]
}
"""


def test_integration_notification_reads_its_attachments_words() -> None:
    # the fallback, then what the card shows that the fallback does not say
    event = must(load(INTEGRATION_NOTIFICATION))
    assert event.text == (
        "[acme/api] Issue opened by bob\n"
        "Issue created by <https://github.com/bob|bob>\n"
        "<https://github.com/acme/api/issues/2|#2 Login fails>\n"
        "Login fails on Safari"
    )
    assert event.sender.name == "GitHub" and event.sender.is_bot


# --- A blocks-only message with empty text (Block Kit: header + section fields, the
# shape of MercuryTechnologies/slack-web circleci.json without its text).
BLOCKS_ONLY = """
{
  "type": "event_callback",
  "team_id": "T0TEAM001",
  "event_id": "Ev0AAAA0017",
  "event_time": 1700001600,
  "event": {
    "bot_id": "B0CI00001",
    "type": "message",
    "text": "",
    "user": "U0CI00001",
    "ts": "1700001600.237089",
    "blocks": [
      {"type": "header", "block_id": "+6hb", "text": {"type": "plain_text", "text": "Job Failed :red_circle:", "emoji": true}},
      {"type": "section", "block_id": "jO2E", "fields": [{"type": "mrkdwn", "text": "*Job*: build", "verbatim": false},
        {"type": "mrkdwn", "text": "*Branch*: main", "verbatim": false}],
       "accessory": {"type": "image", "image_url": "https://example.com/ci.png", "alt_text": "CI"}},
      {"type": "actions", "block_id": "eeK", "elements": [{"type": "button", "action_id": "zH",
        "text": {"type": "plain_text", "text": "View Job", "emoji": true}, "url": "https://ci.example.com/1"}]}
    ],
    "channel": "C0DEV0001",
    "event_ts": "1700001600.237089",
    "channel_type": "channel"
  }
}
"""


def test_blocks_only_message_reads_the_block_text() -> None:
    event = must(load(BLOCKS_ONLY), bot_user_id=BOT_USER)
    assert event.text.splitlines() == [
        "Job Failed :red_circle:",
        "*Job*: build",
        "*Branch*: main",
    ]  # buttons are controls, not words


def test_rich_text_only_message_reads_as_mrkdwn() -> None:
    # rich_text element types from Slack's Block Kit reference (rich text block)
    payload = load(MESSAGE_IM)
    payload["event"]["text"] = ""
    payload["event"]["blocks"] = [
        {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_section",
                    "elements": [
                        {"type": "broadcast", "range": "here"},
                        {"type": "text", "text": " ping "},
                        {"type": "user", "user_id": "U0BOTBOT1"},
                        {"type": "text", "text": " and "},
                        {"type": "usergroup", "usergroup_id": "S0ONCALL1"},
                        {"type": "text", "text": " in "},
                        {"type": "channel", "channel_id": "C0OPS0001"},
                        {"type": "emoji", "name": "fire", "unicode": "1f525"},
                    ],
                },
                {
                    "type": "rich_text_list",
                    "style": "bullet",
                    "elements": [
                        {"type": "rich_text_section", "elements": [{"type": "text", "text": "a"}]},
                        {"type": "rich_text_section", "elements": [{"type": "text", "text": "b"}]},
                    ],
                },
                {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": "x = 1"}]},
            ],
        }
    ]
    event = must(payload, bot_user_id=BOT_USER)
    assert event.text.splitlines() == [
        "<!here> ping <@U0BOTBOT1> and <!subteam^S0ONCALL1> in <#C0OPS0001>:fire:",
        "a",
        "b",
        "x = 1",
    ]
    assert event.mentions_me  # the bot's mention in the blocks counts


# --- Slack's docs: message_changed (docs.slack.dev/reference/events/message/message_changed).
MESSAGE_CHANGED_DOCS = """
{
  "token": "XXYYZZ",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "subtype": "message_changed",
    "hidden": true,
    "channel": "C0GENERAL",
    "ts": "1700001755.000001",
    "message": {
      "type": "message",
      "user": "U0ALICE01",
      "text": "Hello, world! (fixed)",
      "ts": "1700001723.000005",
      "edited": {"user": "U0ALICE01", "ts": "1700001755.000001"}
    }
  },
  "type": "event_callback",
  "authorizations": [{"team_id": "T0TEAM001", "user_id": "U0ALICE01", "is_bot": false,
    "is_enterprise_install": false}],
  "event_id": "Ev0AAAA0018",
  "event_time": 1700001755
}
"""


def test_docs_message_changed_is_an_edit_of_the_original() -> None:
    event = must(load(MESSAGE_CHANGED_DOCS))
    assert event.kind == "edit"
    assert event.platform_message_id == "1700001723.000005"
    assert event.event_id == "edit:C0GENERAL:1700001723.000005:1700001755.000001"
    assert event.text == "Hello, world! (fixed)"


# --- message_changed whose inner message has no ts (slackapi/bolt-python
# test_message_changed.py): the ts is only on previous_message.
MESSAGE_CHANGED_NO_INNER_TS = """
{
  "token": "verification-token",
  "team_id": "T0TEAM001",
  "enterprise_id": "E0GRID001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "subtype": "message_changed",
    "message": {
      "type": "message", "text": "updated message", "user": "U0ALICE01", "team": "T0TEAM001",
      "edited": {"user": "U0ALICE01", "ts": "1700001862.000000"},
      "blocks": [{"type": "rich_text", "block_id": "xw", "elements": [
        {"type": "rich_text_section", "elements": [{"type": "text", "text": "updated message"}]}]}]
    },
    "previous_message": {
      "type": "message", "text": "original message", "user": "U0ALICE01", "team": "T0TEAM001",
      "ts": "1700001838.901939"
    },
    "channel": "C0GENERAL",
    "hidden": true,
    "ts": "1700001862.013600",
    "event_ts": "1700001862.013600",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0019",
  "event_time": 1700001862,
  "authorizations": [{"enterprise_id": "E0GRID001", "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}],
  "is_ext_shared_channel": false,
  "event_context": "1-message-T0TEAM001-C0GENERAL"
}
"""


def test_message_changed_without_inner_ts_uses_the_previous_messages_ts() -> None:
    event = must(load(MESSAGE_CHANGED_NO_INNER_TS))
    assert event.kind == "edit"
    assert event.platform_message_id == "1700001838.901939"
    assert event.text == "updated message"


# --- A link unfurl arriving as message_changed (MercuryTechnologies/slack-web,
# messageChange.json): same text, attachments added, no `edited` -> not an edit.
UNFURL_CHANGE = """
{
  "token": "aaaa",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "subtype": "message_changed",
    "message": {
      "client_msg_id": "de34", "type": "message",
      "text": "<https://example.slack.com/archives/C0OPS0001/p1700001900304369>",
      "user": "U0ALICE01", "team": "T0TEAM001",
      "attachments": [{"from_url": "https://example.slack.com/archives/C0OPS0001/p1700001900304369",
        "ts": "1700001900.304369", "author_id": "U0ALICE01", "channel_id": "C0OPS0001",
        "is_msg_unfurl": true, "fallback": "[...] alice: asdf"}],
      "ts": "1700001950.000200", "source_team": "T0TEAM001", "user_team": "T0TEAM001"
    },
    "previous_message": {
      "client_msg_id": "de34", "type": "message",
      "text": "<https://example.slack.com/archives/C0OPS0001/p1700001900304369>",
      "user": "U0ALICE01", "ts": "1700001950.000200", "team": "T0TEAM001"
    },
    "channel": "C0GENERAL",
    "hidden": true,
    "ts": "1700001951.000300",
    "event_ts": "1700001951.000300",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0020",
  "event_time": 1700001951,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}]
}
"""


def test_unfurl_is_not_an_edit() -> None:
    assert norm(load(UNFURL_CHANGE)) is None


# --- An AI-app thread title update (slackapi/bolt-python test_events_assistant.py,
# message_changed_event_body): subtype assistant_app_thread, "edited": {} -> ignored.
ASSISTANT_TITLE_CHANGE = """
{
  "type": "event_callback",
  "team_id": "T0TEAM001",
  "event_id": "Ev0AAAA0021",
  "event_time": 1700002000,
  "event": {
    "type": "message",
    "subtype": "message_changed",
    "message": {"text": "New chat", "subtype": "assistant_app_thread", "user": "U0ALICE01",
      "type": "message", "edited": {}, "thread_ts": "1700001998.626339", "reply_count": 2,
      "assistant_app_thread": {"title": "When was Slack released?", "title_blocks": [], "artifacts": []},
      "ts": "1700001998.626339"},
    "previous_message": {"text": "New chat", "subtype": "assistant_app_thread", "user": "U0ALICE01",
      "type": "message", "edited": {}, "thread_ts": "1700001998.626339"},
    "channel": "D0DIRECT2",
    "hidden": true,
    "ts": "1700002001.028300",
    "event_ts": "1700002001.028300",
    "channel_type": "im"
  }
}
"""


def test_assistant_thread_title_change_is_ignored() -> None:
    assert norm(load(ASSISTANT_TITLE_CHANGE), bot_user_id=BOT_USER) is None


# --- Slack's docs: message_deleted (api.slack.com/events/message/message_deleted): no
# previous_message at all, authed_users instead of authorizations.
MESSAGE_DELETED_DOCS = """
{
  "token": "XXYYZZ",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "subtype": "message_deleted",
    "hidden": true,
    "channel": "C0GENERAL",
    "ts": "1700002155.000001",
    "deleted_ts": "1700002149.000002"
  },
  "type": "event_callback",
  "authed_users": ["U0BOTBOT1", "U0ALICE01"],
  "event_id": "Ev0AAAA0022",
  "event_time": 1700002155
}
"""


def test_docs_delete_without_previous_message() -> None:
    event = must(load(MESSAGE_DELETED_DOCS))
    assert event.kind == "delete"
    assert event.platform_message_id == "1700002149.000002"
    assert event.address == Address("test", "C0GENERAL")
    assert event.sent_at == pytest.approx(1700002155.000001)


# --- Slack's docs: message_replied (docs.slack.dev/reference/events/message/message_replied),
# as its "Bug alert" says the Events API dispatches it: without its subtype. The thread's
# root is nested in `message`; the event itself names no user or bot.
MESSAGE_REPLIED_AS_DISPATCHED = """
{
  "token": "XXYYZZ",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "message": {
      "type": "message",
      "user": "U0ALICE01",
      "text": "Was there a deploy today?",
      "thread_ts": "1700002000.003543",
      "reply_count": 1,
      "replies": [{"user": "U0BOB0001", "ts": "1700002100.017503"}],
      "ts": "1700002000.003543"
    },
    "hidden": true,
    "channel": "C0GENERAL",
    "event_ts": "1700002101.017506",
    "ts": "1700002101.017506"
  },
  "type": "event_callback",
  "authorizations": [{"team_id": "T0TEAM001", "user_id": "U0BOTBOT1", "is_bot": true,
    "is_enterprise_install": false}],
  "event_id": "Ev0AAAA0030",
  "event_time": 1700002101
}
"""


def test_message_replied_without_its_subtype_is_ignored_not_malformed() -> None:
    payload = load(MESSAGE_REPLIED_AS_DISPATCHED)
    for each in (adapter(), adapter(bot_user_id=BOT_USER, bot_id=BOT_ID)):
        assert each.normalize(payload) is None
        # and as its docs type it, with the subtype
        typed = load(MESSAGE_REPLIED_AS_DISPATCHED)
        typed["event"]["subtype"] = "message_replied"
        assert each.normalize(typed) is None


def test_message_changed_and_deleted_without_their_subtype_are_read_by_their_shape() -> None:
    changed = load(MESSAGE_CHANGED_NO_INNER_TS)
    del changed["event"]["subtype"]
    event = must(changed)
    assert (event.kind, event.text) == ("edit", "updated message")
    assert event.platform_message_id == "1700001838.901939"
    # the docs' edit, which has no previous_message: the nested message says it was edited
    docs = load(MESSAGE_CHANGED_DOCS)
    del docs["event"]["subtype"]
    assert must(docs).event_id == "edit:C0GENERAL:1700001723.000005:1700001755.000001"
    # an unfurl (same words, not edited) is still no edit
    unfurl = load(UNFURL_CHANGE)
    del unfurl["event"]["subtype"]
    assert norm(unfurl) is None
    for text in (MESSAGE_DELETED_DOCS, MESSAGE_DELETED_IN_THREAD):
        deleted = load(text)
        del deleted["event"]["subtype"]
        event = must(deleted)
        assert event.kind == "delete"
        assert event.platform_message_id == deleted["event"]["deleted_ts"]
    # a thread parent deleted while replies remain: edited into a tombstone
    tombstone = load(MESSAGE_CHANGED_NO_INNER_TS)
    del tombstone["event"]["subtype"]
    tombstone["event"]["message"] = {
        "type": "message",
        "subtype": "tombstone",
        "text": "This message was deleted.",
        "user": "USLACKBOT",
        "hidden": True,
        "thread_ts": "1700001838.901939",
        "ts": "1700001838.901939",
    }
    del tombstone["event"]["previous_message"]
    assert must(tombstone).kind == "delete"


async def test_an_edit_without_its_subtype_in_the_bots_thread_knows_the_bot_is_in_it() -> None:
    changed = load(MESSAGE_CHANGED_NO_INNER_TS)
    del changed["event"]["subtype"]
    changed["event"]["message"]["thread_ts"] = "1700001800.000100"
    slack = adapter()
    slack._threads.add(_thread_key(Address("test", "C0GENERAL", "1700001800.000100")))
    assert await slack._thread_facts(changed) == {"bot_in_thread": True}


# --- A delete captured from a workspace (MercuryTechnologies/slack-web,
# message_deleted.json) of a reply inside a thread.
MESSAGE_DELETED_IN_THREAD = """
{
  "token": "aaaa",
  "team_id": "T0TEAM001",
  "api_app_id": "A0APP0001",
  "event": {
    "type": "message",
    "subtype": "message_deleted",
    "hidden": true,
    "channel": "C0GENERAL",
    "previous_message": {"client_msg_id": "de35", "type": "message",
      "text": "This message will be deleted", "user": "U0ALICE01", "ts": "1700002282.046509",
      "thread_ts": "1700002200.000100", "parent_user_id": "U0ALICE01", "team": "T0TEAM001"},
    "deleted_ts": "1700002282.046509",
    "ts": "1700002283.001500",
    "event_ts": "1700002283.001500",
    "channel_type": "channel"
  },
  "type": "event_callback",
  "event_id": "Ev0AAAA0023",
  "event_time": 1700002283,
  "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
    "is_bot": true, "is_enterprise_install": false}],
  "is_ext_shared_channel": false
}
"""


def test_delete_of_a_thread_reply_targets_the_thread() -> None:
    event = must(load(MESSAGE_DELETED_IN_THREAD))
    assert event.kind == "delete"
    assert event.address == Address("test", "C0GENERAL", "1700002200.000100")
    assert event.sender.id == "U0ALICE01"


# --- A whole Socket Mode envelope as captured off the websocket (gist of a Socket Mode
# message_changed, and slack-sdk's SocketModeRequest): the body is under "payload".
SOCKET_MODE_ENVELOPE = """
{
  "envelope_id": "f34c6197-a7ef-45ed-acad-4d5a3147ec86",
  "payload": {
    "token": "Pct6",
    "team_id": "T0TEAM001",
    "api_app_id": "A0APP0001",
    "event": {
      "client_msg_id": "0837", "type": "message", "text": "Hello world", "user": "U0ALICE01",
      "ts": "1700002400.971779", "team": "T0TEAM001", "channel": "C0GENERAL",
      "event_ts": "1700002400.971779", "channel_type": "channel"
    },
    "type": "event_callback",
    "event_id": "Ev0AAAA0024",
    "event_time": 1700002400,
    "authorizations": [{"enterprise_id": null, "team_id": "T0TEAM001", "user_id": "U0BOTBOT1",
      "is_bot": true, "is_enterprise_install": false}],
    "is_ext_shared_channel": false,
    "event_context": "4-eyJ"
  },
  "type": "events_api",
  "accepts_response_payload": false,
  "retry_attempt": 0,
  "retry_reason": ""
}
"""


def test_whole_socket_mode_envelope_is_unwrapped() -> None:
    event = must(load(SOCKET_MODE_ENVELOPE))
    assert event.event_id == "C0GENERAL:1700002400.971779"
    assert event.text == "Hello world"


def test_socket_mode_envelope_with_a_broken_payload_says_where() -> None:
    payload = load(SOCKET_MODE_ENVELOPE)
    payload["payload"] = "not an object"
    with pytest.raises(NormalizeError, match="payload"):
        norm(payload)


# --- Service messages and other events that are not transcript rows (Slack's docs for
# channel_join, ekm_access_denied, reaction_added to a file; url_verification; Socket Mode
# hello).
NOT_FOR_THE_TRANSCRIPT = [
    """{"type": "event_callback", "event": {"type": "message", "subtype": "channel_join",
        "ts": "1700002500.000002", "user": "U0ALICE01", "text": "<@U0ALICE01> has joined the channel",
        "inviter": "U0BOB0001", "channel": "C0GENERAL", "channel_type": "channel"}}""",
    """{"type": "event_callback", "event": {"type": "message", "subtype": "ekm_access_denied",
        "ts": "1700002501.000002", "user": "UREVOKED0", "text": "Your admins have suspended everyone's access to this content.",
        "channel": "C0GENERAL"}}""",
    """{"type": "event_callback", "event": {"type": "reaction_added", "user": "U0ALICE01",
        "reaction": "thumbsup", "item_user": "U0BOB0001",
        "item": {"type": "file", "file": "F0FILE0001"},
        "event_ts": "1700002502.000100"}}""",
    """{"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification"}""",
    """{"type": "hello", "num_connections": 1, "debug_info": {"host": "applink-1"},
        "connection_info": {"app_id": "A0APP0001"}}""",
]


@pytest.mark.parametrize("text", NOT_FOR_THE_TRANSCRIPT, ids=range(len(NOT_FOR_THE_TRANSCRIPT)))
def test_service_messages_and_other_events_are_none(text: str) -> None:
    assert norm(load(text)) is None


def test_very_long_unicode_text_is_kept_whole() -> None:
    payload = load(MESSAGE_CHANNELS)
    body = "Zürich 🚀 数据 " * 3000 + "<@U0BOTBOT1>"
    payload["event"]["text"] = body
    event = must(payload, bot_user_id=BOT_USER)
    assert event.text == body and len(event.text) > 30000
    assert event.mentions_me


def test_numeric_ts_values_are_read_with_slacks_six_decimals() -> None:
    payload = load(THREAD_REPLY_TO_BOT)
    payload["event"]["ts"] = 1700000500.0003
    payload["event"]["thread_ts"] = 1700000450.0001
    event = must(payload)
    assert event.event_id == "C0GENERAL:1700000500.000300"
    assert event.address == Address("test", "C0GENERAL", "1700000450.000100")


def test_thread_ts_of_the_wrong_type_is_a_clear_error() -> None:
    payload = load(THREAD_REPLY_TO_BOT)
    payload["event"]["thread_ts"] = {"ts": "1"}
    with pytest.raises(NormalizeError, match=r"event\.thread_ts"):
        norm(payload)


# --- Slack's docs: bot_message (api.slack.com/events/message/bot_message) gives
# bot_id + username + icons; here without the bot_id, as a username-only integration.
USERNAME_ONLY_BOT = """
{"type": "event_callback", "team_id": "T0TEAM001", "event": {
  "type": "message", "subtype": "bot_message", "ts": "1700002600.000010",
  "text": "Pushing is the answer", "username": "github", "icons": {},
  "channel": "C0DEV0001", "channel_type": "channel"}}
"""


def test_bot_message_with_only_a_username_is_from_that_bot() -> None:
    event = must(load(USERNAME_ONLY_BOT), bot_user_id=BOT_USER)
    # the username is free text: as an id it is marked, so it never reads as a user's
    assert event.sender.id == "username:github" and event.sender.name == "github"
    assert event.sender.is_bot
    forged = json.loads(USERNAME_ONLY_BOT)
    forged["event"]["username"] = "U0OWNER01"
    impostor = must(forged, bot_user_id=BOT_USER)
    assert (impostor.sender.id, impostor.sender.is_bot) == ("username:U0OWNER01", True)


# --- java-slack-sdk's json-logs/samples/events/MessagePayload.json: every field
# present with placeholder values ("" strings, 123 numbers).
SCHEMA_PLACEHOLDERS = """
{
  "token": "", "enterprise_id": "", "team_id": "", "api_app_id": "", "type": "event_callback",
  "authed_users": [""], "authed_teams": [""],
  "authorizations": [{"enterprise_id": "", "team_id": "", "user_id": "", "is_bot": false,
    "is_enterprise_install": false}],
  "is_ext_shared_channel": false, "event_id": "", "event_time": 123, "event_context": "",
  "event": {"client_msg_id": "", "type": "message", "team": "", "channel": "", "user": "",
    "bot_id": "", "bot_profile": {"id": "", "deleted": false, "name": "", "updated": 123},
    "text": "", "attachments": [{"msg_subtype": "", "fallback": "", "id": 123}],
    "ts": "", "thread_ts": "", "channel_type": "", "edited": {"user": "", "ts": ""}}
}
"""


def test_placeholder_payload_is_a_clear_error() -> None:
    with pytest.raises(NormalizeError) as caught:
        norm(load(SCHEMA_PLACEHOLDERS))
    message = str(caught.value)
    assert "channel" in message and "\n" not in message


# --- randomized robustness ------------------------------------------------------------

REAL = [
    MESSAGE_CHANNELS,
    MESSAGE_IM,
    MESSAGE_APP_HOME,
    APP_MENTION,
    ASSISTANT_THREAD_MESSAGE,
    THREAD_REPLY_TO_BOT,
    THREAD_BROADCAST,
    OTHER_APP_BOT,
    CLASSIC_BOT_MESSAGE,
    OWN_ECHO,
    FILE_SHARE_IMAGE,
    FILE_SHARE_CONNECT,
    EMAIL_FILE,
    SLACKBOT_IM,
    FORWARDED,
    INTEGRATION_NOTIFICATION,
    BLOCKS_ONLY,
    MESSAGE_CHANGED_DOCS,
    MESSAGE_CHANGED_NO_INNER_TS,
    UNFURL_CHANGE,
    ASSISTANT_TITLE_CHANGE,
    MESSAGE_DELETED_DOCS,
    MESSAGE_DELETED_IN_THREAD,
    MESSAGE_REPLIED_AS_DISPATCHED,
    SOCKET_MODE_ENVELOPE,
    USERNAME_ONLY_BOT,
    SCHEMA_PLACEHOLDERS,
]

#: what a mutation may put in place of a value: other types, nulls, nested nulls, odd strings
ODD_VALUES: list[Any] = [
    None,
    0,
    7,
    1.5,
    True,
    "",
    "x",
    "nan",
    [],
    [None],
    {},
    {"a": None},
    {"text": None, "ts": None},
    "U0BOTBOT1",
    "<@U0BOTBOT1>",
]


def mutate(rng: random.Random, payload: dict[str, Any]) -> dict[str, Any]:
    """Return a copy with 1-3 random changes: a key dropped or a value swapped."""
    mangled: dict[str, Any] = mutate_payload(payload, rng, odd_values=ODD_VALUES)
    return mangled


@pytest.mark.parametrize("seed", range(4))
def test_mutated_real_payloads_give_only_event_none_or_normalize_error(seed: int) -> None:
    rng = random.Random(seed)
    adapters = (adapter(), adapter(bot_user_id=BOT_USER, bot_id=BOT_ID))
    outcomes = {"event": 0, "none": 0, "error": 0}
    for text in REAL:
        original = load(text)
        for _ in range(150):
            payload = mutate(rng, original)
            for each in adapters:
                try:
                    event = each.normalize(payload)
                except NormalizeError as error:
                    assert "\n" not in str(error), str(error)
                    outcomes["error"] += 1
                    continue
                if event is None:
                    outcomes["none"] += 1
                    continue
                assert isinstance(event, Event)
                assert isinstance(event.text, str) and isinstance(event.sent_at, float)
                assert event.address.account == "test" and event.event_id
                outcomes["event"] += 1
    # the mutations are mild enough that every outcome happens
    assert all(count > 100 for count in outcomes.values()), outcomes


# --- the same payloads through the whole receiving path -------------------------------


@pytest.mark.parametrize("mode", ["socket", "events"])
async def test_real_payloads_delivered_by_slack_are_all_acked_and_stored_once(
    mode: str,
    slack: Any,
    contract_context: Any,
    start_adapter: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Name lookups, thread facts and the in-flight join all cope with real shapes."""
    caplog.set_level(logging.WARNING)
    adapter = await start_adapter(mode)
    bodies = [load(text) for text in REAL]
    bodies = [
        body.get("payload", body) if body.get("type") == "events_api" else body for body in bodies
    ]
    expected = {}
    for body in bodies:
        try:
            event = adapter.normalize(body)
        except NormalizeError:
            continue
        if event is not None:
            expected[event.event_id] = event.kind
    deliveries = [await slack.deliver(body) for body in bodies]
    for delivery in deliveries:
        await slack.wait_acked(delivery.event_id)
    assert all(d.acks == 1 for d in deliveries)
    assert {r.event.event_id: r.event.kind for r in contract_context.results if r.event} == expected
    assert [r.status for r in contract_context.results].count("stored") == len(expected) >= 20
    assert len(contract_context.malformed) == 1  # the placeholder payload
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# --- Slack's docs: reaction_added (docs.slack.dev/reference/events/reaction_added), the
# whole event_callback with its user-install authorization.
REACTION_ADDED = """
{
  "token": "XXYYZZ",
  "team_id": "T123ABC456",
  "api_app_id": "A123ABC456",
  "event": {
    "type": "reaction_added",
    "user": "U123ABC456",
    "reaction": "thumbsup",
    "item_user": "U222222222",
    "item": {"type": "message", "channel": "C123ABC456", "ts": "1360782400.498405",
             "channel_type": "channel"},
    "event_ts": "1360782804.083113"
  },
  "type": "event_callback",
  "authorizations": [{"team_id": "T123ABC456", "user_id": "U123ABC456", "is_bot": false,
                      "is_enterprise_install": false}],
  "event_id": "Ev123ABC456",
  "event_time": 123456789
}
"""


def test_docs_reaction_added_is_a_reaction_to_its_message() -> None:
    event = must(load(REACTION_ADDED))
    assert (event.kind, event.text, event.platform_message_id) == (
        "reaction",
        ":thumbsup:",
        "1360782400.498405",
    )
    assert (event.address.chat, event.address.thread) == ("C123ABC456", None)
    # the user install's authorization names the reacting user: that is not the app
    assert event.sender.id == "U123ABC456"

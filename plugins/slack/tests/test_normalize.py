"""normalize on payloads shaped as Slack documents and sends them (not built by the fake)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel.model import Address, Event
from backchannel_slack.normalize import BotIdentity, normalize_payload

BOT = BotIdentity(user_id="U061F7AUR", bot_id="B061F7JD2")


def envelope(event: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An Events API event_callback as Slack documents it."""
    return {
        "token": "XXYYZZ",
        "team_id": "T123ABC456",
        "api_app_id": "A123ABC456",
        "event": event,
        "type": "event_callback",
        "event_id": "Ev123ABC456",
        "event_time": 1515449522,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": "T123ABC456",
                "user_id": "U061F7AUR",
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": "4-eyJldCI6Im1lc3NhZ2UiLCJ0aWQiOiJUMTIzIn0",
        **extra,
    }


CHANNEL_MESSAGE = {
    "client_msg_id": "3e2a6b6e-2f6e-4b5a-9b0a-6c1f9a1d2b11",
    "type": "message",
    "text": "Live long and prospect.",
    "user": "U123ABC456",
    "ts": "1355517523.000005",
    "blocks": [{"type": "rich_text", "block_id": "Jmy", "elements": []}],
    "team": "T123ABC456",
    "channel": "C123ABC456",
    "event_ts": "1355517523.000005",
    "channel_type": "channel",
}

IM_MESSAGE = {
    "type": "message",
    "channel": "D024BE91L",
    "user": "U2147483697",
    "text": "Hello hello can you hear me?",
    "ts": "1355517523.000005",
    "event_ts": "1355517523.000005",
    "channel_type": "im",
}

APP_MENTION = {
    "type": "app_mention",
    "user": "U123ABC456",
    "text": "What is the hour of the pearl, <@U061F7AUR>?",
    "ts": "1515449522.000016",
    "channel": "C123ABC456",
    "event_ts": "1515449522000016",
}


def norm(payload: dict[str, Any], **kwargs: Any) -> Event | None:
    return normalize_payload(payload, account="work", me=BOT, **kwargs)


def test_channel_message_is_group_conversation_at_top_level() -> None:
    event = norm(envelope(CHANNEL_MESSAGE))
    assert event is not None
    assert event.address == Address("work", "C123ABC456")
    assert event.conversation_kind == "group"
    assert event.kind == "message"
    assert event.text == "Live long and prospect."
    assert event.event_id == "C123ABC456:1355517523.000005"
    assert event.platform_message_id == "1355517523.000005"
    assert event.sent_at == pytest.approx(1355517523.000005)
    assert event.sender.id == "U123ABC456"
    assert not event.sender.is_bot
    assert not event.mentions_me
    assert event.raw is not None and "token" not in event.raw


def test_private_channel_and_mpim_are_group_conversations() -> None:
    for channel_type, channel in (("group", "G123ABC456"), ("mpim", "G0MPIM12345")):
        event = norm(
            envelope({**CHANNEL_MESSAGE, "channel": channel, "channel_type": channel_type})
        )
        assert event is not None
        assert event.conversation_kind == "group"
        assert event.address == Address("work", channel)


def test_im_is_direct_conversation() -> None:
    event = norm(envelope(IM_MESSAGE))
    assert event is not None
    assert event.conversation_kind == "direct"
    assert event.address == Address("work", "D024BE91L")


def test_mention_in_channel_opens_the_thread_under_the_message() -> None:
    text = "hey <@U061F7AUR> can you look?"
    event = norm(envelope({**CHANNEL_MESSAGE, "text": text}))
    assert event is not None
    assert event.mentions_me
    assert event.conversation_kind == "thread"
    assert event.address == Address("work", "C123ABC456", "1355517523.000005")


def test_mention_with_label_form_is_recognised() -> None:
    event = norm(envelope({**CHANNEL_MESSAGE, "text": "<@U061F7AUR|backchannel> hi"}))
    assert event is not None and event.mentions_me


def test_mention_of_someone_else_is_not_a_mention_of_me() -> None:
    event = norm(envelope({**CHANNEL_MESSAGE, "text": "ask <@U061F7AURX> instead"}))
    assert event is not None and not event.mentions_me


def test_mention_stays_at_top_level_when_thread_on_mention_is_off() -> None:
    event = norm(envelope({**CHANNEL_MESSAGE, "text": "<@U061F7AUR> hi"}), thread_on_mention=False)
    assert event is not None
    assert event.mentions_me
    assert event.address == Address("work", "C123ABC456")


def test_app_mention_and_message_for_one_mention_share_one_event_id() -> None:
    ts = "1515449522.000016"
    message = {**CHANNEL_MESSAGE, "text": APP_MENTION["text"], "ts": ts, "event_ts": ts}
    from_message = norm(envelope(message, event_id="Ev0MESSAGE"))
    from_mention = norm(envelope(APP_MENTION, event_id="Ev0MENTION"))
    assert from_message is not None and from_mention is not None
    assert from_message.event_id == from_mention.event_id == f"C123ABC456:{ts}"
    assert from_message.address == from_mention.address
    assert from_mention.mentions_me and from_message.mentions_me
    assert from_mention.conversation_kind == from_message.conversation_kind == "thread"


def test_thread_reply_is_its_own_conversation() -> None:
    reply = {
        **CHANNEL_MESSAGE,
        "text": "agreed",
        "ts": "1355517600.000100",
        "event_ts": "1355517600.000100",
        "thread_ts": "1355517523.000005",
        "parent_user_id": "U999OTHER",
    }
    event = norm(envelope(reply))
    assert event is not None
    assert event.address == Address("work", "C123ABC456", "1355517523.000005")
    assert event.conversation_kind == "thread"
    assert event.reply_to == "1355517523.000005"
    assert not event.mentions_me


def test_reply_in_thread_the_bot_started_mentions_me() -> None:
    reply = {
        **CHANNEL_MESSAGE,
        "ts": "1355517600.000100",
        "thread_ts": "1355517523.000005",
        "parent_user_id": "U061F7AUR",
    }
    event = norm(envelope(reply))
    assert event is not None and event.mentions_me


def test_reply_in_thread_the_bot_takes_part_in_mentions_me() -> None:
    reply = {
        **CHANNEL_MESSAGE,
        "ts": "1355517600.000100",
        "thread_ts": "1355517523.000005",
        "parent_user_id": "U999OTHER",
    }
    event = norm(envelope(reply, _backchannel={"bot_in_thread": True}))
    assert event is not None and event.mentions_me


def test_thread_broadcast_lands_in_the_thread_and_says_so() -> None:
    broadcast = {
        "type": "message",
        "subtype": "thread_broadcast",
        "text": "also for everyone",
        "user": "U123ABC456",
        "ts": "1355517700.000200",
        "thread_ts": "1355517523.000005",
        "root": {"text": "parent", "user": "U999OTHER", "ts": "1355517523.000005"},
        "channel": "C123ABC456",
        "event_ts": "1355517700.000200",
        "channel_type": "channel",
    }
    event = norm(envelope(broadcast))
    assert event is not None
    assert event.address.thread == "1355517523.000005"
    assert event.meta["also_sent_to_channel"] is True


def test_message_changed_is_an_edit_of_the_original_ts() -> None:
    changed = {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": "C123ABC456",
        "ts": "1358878755.000001",
        "message": {
            "type": "message",
            "user": "U123ABC456",
            "text": "Hello, world!",
            "ts": "1355517523.000005",
            "edited": {"user": "U123ABC456", "ts": "1358878755.000001"},
        },
        "previous_message": {
            "type": "message",
            "user": "U123ABC456",
            "text": "Helo, world",
            "ts": "1355517523.000005",
        },
        "event_ts": "1358878755.000001",
        "channel_type": "channel",
    }
    event = norm(envelope(changed))
    assert event is not None
    assert event.kind == "edit"
    assert event.platform_message_id == "1355517523.000005"
    assert event.text == "Hello, world!"
    assert event.address == Address("work", "C123ABC456")
    second: dict[str, Any] = copy.deepcopy(changed)
    second["message"]["edited"]["ts"] = "1358878799.000001"
    second["ts"] = second["event_ts"] = "1358878799.000001"
    again = norm(envelope(second))
    assert again is not None and again.event_id != event.event_id


def test_edit_that_adds_or_removes_the_mention_stays_where_the_message_is() -> None:
    def changed(before: str, after: str) -> dict[str, Any]:
        return {
            "type": "message",
            "subtype": "message_changed",
            "hidden": True,
            "channel": "C123ABC456",
            "ts": "1358878755.000001",
            "message": {
                "type": "message",
                "user": "U123ABC456",
                "text": after,
                "ts": "1355517523.000005",
                "edited": {"user": "U123ABC456", "ts": "1358878755.000001"},
            },
            "previous_message": {
                "type": "message",
                "user": "U123ABC456",
                "text": before,
                "ts": "1355517523.000005",
            },
            "channel_type": "channel",
        }

    # the original mentioned the bot, so it was stored in the thread it roots
    removed = norm(envelope(changed("<@U061F7AUR> help", "never mind")))
    assert removed is not None and not removed.mentions_me
    assert removed.address == Address("work", "C123ABC456", "1355517523.000005")
    # the original did not, so it stayed at the channel's top level
    added = norm(envelope(changed("help", "<@U061F7AUR> help")))
    assert added is not None and added.mentions_me
    assert added.address == Address("work", "C123ABC456")


def test_message_changed_without_new_words_is_ignored() -> None:
    unfurl = {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": "C123ABC456",
        "ts": "1358878755.000001",
        "message": {
            "type": "message",
            "user": "U123ABC456",
            "text": "see https://example.com",
            "ts": "1355517523.000005",
            "attachments": [{"from_url": "https://example.com", "title": "Example"}],
        },
        "previous_message": {
            "type": "message",
            "user": "U123ABC456",
            "text": "see https://example.com",
            "ts": "1355517523.000005",
        },
        "event_ts": "1358878755.000001",
    }
    assert norm(envelope(unfurl)) is None


def test_message_deleted_is_a_delete_of_deleted_ts() -> None:
    deleted = {
        "type": "message",
        "subtype": "message_deleted",
        "hidden": True,
        "channel": "C123ABC456",
        "ts": "1358878755.000001",
        "deleted_ts": "1358878749.000002",
        "event_ts": "1358878755.000001",
        "previous_message": {
            "type": "message",
            "user": "U123ABC456",
            "text": "oops",
            "ts": "1358878749.000002",
        },
    }
    event = norm(envelope(deleted))
    assert event is not None
    assert event.kind == "delete"
    assert event.platform_message_id == "1358878749.000002"
    assert event.event_id == "delete:C123ABC456:1358878749.000002"


def test_delete_without_previous_message_still_normalizes() -> None:
    deleted = {
        "type": "message",
        "subtype": "message_deleted",
        "channel": "D024BE91L",
        "deleted_ts": "1358878749.000002",
        "event_ts": "1358878755.000001",
        "channel_type": "im",
    }
    event = norm(envelope(deleted))
    assert event is not None and event.kind == "delete"
    assert event.conversation_kind == "direct"


def test_file_share_keeps_file_metadata_not_urls() -> None:
    shared = {
        **CHANNEL_MESSAGE,
        "subtype": "file_share",
        "text": "the report",
        "files": [
            {
                "id": "F0123ABCD",
                "created": 1515449522,
                "name": "report.pdf",
                "title": "Q3 report",
                "mimetype": "application/pdf",
                "filetype": "pdf",
                "size": 52_341,
                "url_private": "https://files.slack.com/files-pri/T1-F0123ABCD/report.pdf",
            },
            {"id": "F0123ABCE", "name": "cat.png", "mimetype": "image/png", "size": 1024},
            {"id": "F0GONE", "mode": "tombstone"},
        ],
        "upload": False,
    }
    event = norm(envelope(shared))
    assert event is not None
    first, second, gone = event.attachments
    assert (first.kind, first.name, first.mime, first.size, first.ref) == (
        "file",
        "report.pdf",
        "application/pdf",
        52_341,
        "F0123ABCD",
    )
    assert second.kind == "image"
    assert gone.kind == "deleted_file" and gone.ref == "F0GONE"


def bot_post(text: str = "", **extra: Any) -> dict[str, Any]:
    """Another app's message: its words maybe only in blocks or attachments."""
    return {
        "type": "message",
        "subtype": "bot_message",
        "text": text,
        "ts": "1358877455.000010",
        "bot_id": "B0OTHER",
        "channel": "C123ABC456",
        "event_ts": "1358877455.000010",
        "channel_type": "channel",
        **extra,
    }


def text_of(message: dict[str, Any]) -> str:
    event = norm(envelope(message))
    assert event is not None
    return event.text


def test_a_markdown_block_reads_as_its_plain_text() -> None:
    markdown = {"type": "markdown", "block_id": "b1", "text": "**Deploy** finished for api"}
    assert text_of(bot_post(blocks=[markdown])) == "**Deploy** finished for api"
    assert text_of(bot_post(blocks=[{"type": "markdown", "text": {"x": 1}}])) == ""


def test_a_rich_text_date_reads_as_its_fallback_else_its_time() -> None:
    def section(date: dict[str, Any]) -> dict[str, Any]:
        elements = [{"type": "text", "text": "meeting on "}, {"type": "date", **date}]
        inner = {"type": "rich_text_section", "elements": elements}
        return {
            **CHANNEL_MESSAGE,
            "text": "",
            "blocks": [{"type": "rich_text", "elements": [inner]}],
        }

    stamp = {"timestamp": 1767225600, "format": "{date_short}"}
    assert text_of(section({**stamp, "fallback": "Jan 1st"})) == "meeting on Jan 1st"
    assert text_of(section(stamp)) == "meeting on 2026-01-01 00:00 UTC"
    for bad in (10**400, float("nan"), -1, True, "1767225600"):
        assert text_of(section({"timestamp": bad, "fallback": 3})) == "meeting on "


def test_a_message_shared_with_a_comment_keeps_both() -> None:
    share = {
        "is_share": True,
        "is_msg_unfurl": True,
        "author_id": "U0BOB",
        "author_name": "Bob",
        "text": f"<@{BOT.user_id}> prod db password rotated",
        "fallback": f"[January 1st, 2026 9:00 AM] Bob: <@{BOT.user_id}> prod db password rotated",
        "channel_id": "C0OTHER",
        "ts": "1767220000.000100",
        "message_blocks": [],
    }
    card = {"fallback": "an integration's card", "color": "good"}
    message = {**CHANNEL_MESSAGE, "text": "look at this", "attachments": [card, share]}
    event = norm(envelope(message))
    assert event is not None
    # the card's words too (an attachment is shown beside the text, not only when it is empty)
    assert event.text == (
        "look at this\nan integration's card\n"
        f"[January 1st, 2026 9:00 AM] Bob: <@{BOT.user_id}> prod db password rotated"
    )
    # a mention of the bot in the shared message is not the sender's
    assert not event.mentions_me and event.address.thread is None
    # nor when it is shared without a comment (a forward): its words are still kept
    forward = norm(envelope({**CHANNEL_MESSAGE, "text": "", "attachments": [share]}))
    assert forward is not None and forward.text == share["fallback"]
    assert not forward.mentions_me and forward.address.thread is None
    # and marked as passed on (the owner duplex never takes it as the sharer's own answer);
    # with a comment it is not: those words are the sender's
    assert forward.meta.get("forwarded") is True and "forwarded" not in event.meta
    # a share that only has the shared message's blocks
    blocks = [
        {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_section",
                    "elements": [{"type": "text", "text": "db is at 91%"}],
                }
            ],
        }
    ]
    only_blocks = {"message_blocks": [{"message": {"blocks": blocks}}, {"message": "x"}, 5]}
    message = {**CHANNEL_MESSAGE, "text": "fyi", "attachments": [only_blocks]}
    assert text_of(message) == "fyi\ndb is at 91%"


def test_legacy_attachments_with_only_fields_or_blocks_read_as_them() -> None:
    fields = [
        {"title": "Service", "value": "api", "short": True},
        {"title": "Status", "value": ""},
        {"title": None, "value": "down since 9:00"},
        "not a field",
    ]
    assert text_of(bot_post(attachments=[{"color": "danger", "fields": fields}])) == (
        "Service: api\nStatus\ndown since 9:00"
    )
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "inner block words"}}
    assert text_of(bot_post(attachments=[{"blocks": [section]}])) == "inner block words"
    # the fallback comes first, then what the card shows besides; broken parts are skipped
    with_fallback = {"fallback": "summary", "fields": fields, "blocks": [section]}
    broken = {"fields": "x", "blocks": {"type": "section"}, "message_blocks": "x"}
    assert text_of(bot_post(attachments=[with_fallback, broken])) == (
        "summary\nService: api\nStatus\ndown since 9:00\ninner block words"
    )


def test_other_bots_are_kept_and_marked() -> None:
    other = {
        "type": "message",
        "subtype": "bot_message",
        "text": "Deploy finished",
        "ts": "1358877455.000010",
        "username": "deploybot",
        "bot_id": "B0OTHER",
        "channel": "C123ABC456",
        "event_ts": "1358877455.000010",
        "channel_type": "channel",
    }
    event = norm(envelope(other))
    assert event is not None
    assert event.sender.is_bot
    assert event.sender.id == "B0OTHER"
    assert event.sender.name == "deploybot"


def test_other_app_posting_with_a_bot_user_is_kept() -> None:
    other = {
        **CHANNEL_MESSAGE,
        "user": "U0OTHERBOT",
        "bot_id": "B0OTHER",
        "bot_profile": {"name": "Jira"},
    }
    event = norm(envelope(other))
    assert event is not None and event.sender.is_bot and event.sender.name == "Jira"


def test_own_messages_are_dropped_by_user_id_or_bot_id_not_subtype() -> None:
    by_user = {**CHANNEL_MESSAGE, "user": "U061F7AUR", "bot_id": "B061F7JD2"}
    by_bot_id = {
        "type": "message",
        "subtype": "bot_message",
        "bot_id": "B061F7JD2",
        "text": "mine",
        "ts": "1.000001",
        "channel": "C123ABC456",
    }
    plain_bot_user = {**CHANNEL_MESSAGE, "user": "U061F7AUR"}
    for event in (by_user, by_bot_id, plain_bot_user):
        assert norm(envelope(event)) is None


def test_edits_and_deletes_of_own_messages_are_dropped() -> None:
    edit = {
        "type": "message",
        "subtype": "message_changed",
        "channel": "C123ABC456",
        "ts": "2.000001",
        "message": {
            "user": "U061F7AUR",
            "bot_id": "B061F7JD2",
            "text": "new",
            "ts": "1.000001",
            "edited": {"user": "B061F7JD2", "ts": "2.000001"},
        },
        "previous_message": {"user": "U061F7AUR", "text": "old", "ts": "1.000001"},
    }
    deleted = {
        "type": "message",
        "subtype": "message_deleted",
        "channel": "C123ABC456",
        "deleted_ts": "1.000001",
        "previous_message": {
            "user": "U061F7AUR",
            "bot_id": "B061F7JD2",
            "text": "x",
            "ts": "1.000001",
        },
    }
    assert norm(envelope(edit)) is None
    assert norm(envelope(deleted)) is None


def test_the_bot_identity_is_never_guessed_from_a_payload() -> None:
    # in an org-wide install authorizations[0] may be another app's bot: a message from the
    # user it names is someone else's message until auth.test says which bot we are
    unknown = BotIdentity()
    other_bot = envelope({**CHANNEL_MESSAGE, "user": "U061F7AUR"})
    event = normalize_payload(other_bot, account="work", me=unknown)
    assert event is not None and event.sender.id == "U061F7AUR"
    assert normalize_payload(other_bot, account="work", me=BotIdentity("U061F7AUR")) is None


def test_service_subtypes_and_other_events_are_ignored() -> None:
    join = {
        **CHANNEL_MESSAGE,
        "subtype": "channel_join",
        "text": "<@U123ABC456> has joined the channel",
    }
    on_a_file = {  # older apps still get reactions to files: not a transcript row
        "type": "reaction_added",
        "user": "U123ABC456",
        "reaction": "thumbsup",
        "item": {"type": "file", "file": "F123ABC456"},
        "event_ts": "1360782804.083113",
    }
    assert norm(envelope(join)) is None
    assert norm(envelope(on_a_file)) is None
    assert norm({"type": "url_verification", "challenge": "3eZbrw1a", "token": "x"}) is None


def test_names_from_enrichment_and_profile() -> None:
    event = norm(
        envelope(
            CHANNEL_MESSAGE,
            _backchannel={"user_names": {"U123ABC456": "Spock"}, "channel_name": "bridge"},
        )
    )
    assert event is not None
    assert event.sender.name == "Spock"
    assert event.conversation_title == "#bridge"
    with_profile = {
        **CHANNEL_MESSAGE,
        "user_profile": {"display_name": "", "real_name": "S'chn T'gai Spock", "name": "spock"},
    }
    event = norm(envelope(with_profile))
    assert event is not None
    assert event.sender.name == "S'chn T'gai Spock"
    assert event.sender.handle == "U123ABC456"  # mentions are written <@U123ABC456>


def test_bare_inner_event_is_accepted() -> None:
    event = norm(dict(IM_MESSAGE))
    assert event is not None and event.conversation_kind == "direct"


def test_extra_unknown_fields_are_tolerated() -> None:
    event = norm(
        envelope({**CHANNEL_MESSAGE, "new_field": {"x": 1}, "attachments": []}, future=True)
    )
    assert event is not None and event.text == "Live long and prospect."


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"type": "event_callback"}, "event"),
        (envelope({k: v for k, v in CHANNEL_MESSAGE.items() if k != "channel"}), "event.channel"),
        (envelope({k: v for k, v in CHANNEL_MESSAGE.items() if k != "ts"}), "event.ts"),
        (envelope({**CHANNEL_MESSAGE, "ts": "soon"}), "event.ts"),
        (envelope({**CHANNEL_MESSAGE, "text": 42}), "event.text"),
        (envelope({k: v for k, v in CHANNEL_MESSAGE.items() if k != "user"}), "event.user"),
        (envelope({**CHANNEL_MESSAGE, "files": {"id": "F1"}}), "event.files"),
        (
            envelope({"type": "message", "subtype": "message_changed", "channel": "C1"}),
            "event.message",
        ),
        (
            envelope({"type": "message", "subtype": "message_deleted", "channel": "C1"}),
            "event.deleted_ts",
        ),
        ({"event": CHANNEL_MESSAGE}, "type"),
    ],
)
def test_malformed_payloads_say_where(payload: dict[str, Any], where: str) -> None:
    with pytest.raises(NormalizeError) as caught:
        norm(payload)
    assert caught.value.where == where
    assert str(caught.value).startswith(where)


def test_thread_parent_turned_tombstone_is_a_delete() -> None:
    tombstone = {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": "C123ABC456",
        "ts": "1358878800.000001",
        "event_ts": "1358878800.000001",
        "message": {
            "type": "message",
            "subtype": "tombstone",
            "text": "This message was deleted.",
            "user": "USLACKBOT",
            "hidden": True,
            "ts": "1355517523.000005",
            "thread_ts": "1355517523.000005",
            "reply_count": 2,
        },
        "previous_message": {
            "type": "message",
            "user": "U123ABC456",
            "text": "the root",
            "ts": "1355517523.000005",
            "thread_ts": "1355517523.000005",
        },
    }
    event = norm(envelope(tombstone))
    assert event is not None
    assert event.kind == "delete"
    assert event.platform_message_id == "1355517523.000005"
    assert event.address == Address("work", "C123ABC456")


def test_change_of_a_service_message_or_one_without_author_is_ignored() -> None:
    for message in (
        {
            "type": "message",
            "subtype": "channel_topic",
            "text": "new topic",
            "user": "U1",
            "ts": "1.1",
        },
        {"type": "message", "text": "who wrote this?", "ts": "1.1", "edited": {"ts": "2.2"}},
    ):
        changed = {
            "type": "message",
            "subtype": "message_changed",
            "channel": "C123ABC456",
            "ts": "2.2",
            "message": message,
            "previous_message": {"type": "message", "text": "old", "ts": "1.1"},
        }
        assert norm(envelope(changed)) is None


REACTION: dict[str, Any] = {
    "type": "reaction_added",
    "user": "U123ABC456",
    "reaction": "thumbsup",
    "item_user": "U222222222",
    "item": {
        "type": "message",
        "channel": "C123ABC456",
        "ts": "1360782400.498405",
        "channel_type": "channel",
    },
    "event_ts": "1360782804.083113",
}


def test_reaction_added_is_a_reaction_to_its_message_addressed_to_the_channel() -> None:
    event = norm(envelope(REACTION))
    assert event is not None
    assert (event.kind, event.text, event.platform_message_id) == (
        "reaction",
        ":thumbsup:",
        "1360782400.498405",
    )
    # Slack does not say the thread: the store finds the conversation holding the message
    assert event.address == Address("work", "C123ABC456")
    assert event.conversation_kind == "group"
    assert event.sender.id == "U123ABC456" and not event.sender.is_bot
    assert event.event_id == (
        "reaction_added:C123ABC456:1360782400.498405:U123ABC456:thumbsup:1360782804.083113"
    )
    assert event.sent_at == pytest.approx(1360782804.083113)
    assert event.meta == {}


def test_reaction_removed_takes_it_away_and_is_its_own_event() -> None:
    removed = norm(envelope({**REACTION, "type": "reaction_removed"}))
    added = norm(envelope(REACTION))
    assert removed is not None and added is not None
    assert removed.meta == {"removed": True}
    assert removed.event_id != added.event_id
    item = {"type": "message", "channel": "D024BE91L", "ts": "1360782400.498405"}
    in_a_dm = {**REACTION, "item": {**item, "channel_type": "im"}}
    direct = norm(envelope(in_a_dm))
    assert direct is not None and direct.conversation_kind == "direct"


def test_own_reactions_are_not_stored_again() -> None:
    assert norm(envelope({**REACTION, "user": BOT.user_id})) is None


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("item", "1360782400.498405", "event.item"),
        ("item", {"type": "message", "channel": "C123ABC456"}, "event.item.ts"),
        ("user", None, "event.user"),
        ("reaction", 7, "event.reaction"),
        ("event_ts", [], "event.event_ts"),
    ],
)
def test_a_broken_reaction_says_which_field(field: str, value: Any, where: str) -> None:
    with pytest.raises(NormalizeError) as raised:
        norm(envelope({**REACTION, field: value}))
    assert raised.value.where == where


@pytest.mark.parametrize("user", [{"id": "U1"}, ["U1"], 12345, True])
def test_a_user_that_is_not_a_string_is_no_sender_id_not_its_repr(user: object) -> None:
    message = {**CHANNEL_MESSAGE, "user": user}
    with pytest.raises(NormalizeError, match="neither 'user' nor 'bot_id'"):
        normalize_payload(envelope(message), account="test", me=BOT)
    message["bot_id"] = "B0BOT"  # a bot's message says who it is another way
    event = normalize_payload(envelope(message), account="test", me=BOT)
    assert event is not None and event.sender.id == "B0BOT"


# --- blocks and attachments beside a non-empty text; links' URLs ------------------------


def test_blocks_words_replace_the_notification_fallback_text() -> None:
    # an integration posting Block Kit: `text` is only what a notification shows
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "Incident #4521"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "*CPU 99% on db-1*"}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": "*Assigned:* <@U0ANA>"}]},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "via PagerDuty"}]},
        {"type": "actions", "elements": [{"type": "button", "text": {"text": "Ack"}}]},
    ]
    assert text_of(bot_post("Incident triggered", blocks=blocks)) == (
        "Incident #4521\n*CPU 99% on db-1*\n*Assigned:* <@U0ANA>\nvia PagerDuty"
    )
    # blocks that say no more than the text leave the text as it is
    same = [{"type": "section", "text": {"type": "mrkdwn", "text": "Deploy *finished*"}}]
    assert text_of(bot_post("Deploy finished", blocks=same)) == "Deploy finished"
    # blocks without words (only controls) leave the text
    controls = [{"type": "actions", "elements": [{"type": "button", "text": {"text": "Ack"}}]}]
    assert text_of(bot_post("Approve?", blocks=controls)) == "Approve?"


def test_a_persons_message_is_its_text_not_its_rich_text_twice() -> None:
    text = "see <https://example.com/x?a=1&amp;b=2|the doc> <@U0BOB> &amp; ship it :rocket:"
    section = {
        "type": "rich_text_section",
        "elements": [
            {"type": "text", "text": "see "},
            {"type": "link", "url": "https://example.com/x?a=1&b=2", "text": "the doc"},
            {"type": "text", "text": " "},
            {"type": "user", "user_id": "U0BOB"},
            {"type": "text", "text": " & ship it "},
            {"type": "emoji", "name": "rocket"},
        ],
    }
    message = {
        **CHANNEL_MESSAGE,
        "text": text,
        "blocks": [{"type": "rich_text", "elements": [section]}],
    }
    assert text_of(message) == text


def test_attachments_words_follow_a_nonempty_text_once_and_bounded() -> None:
    card = {
        "fallback": "[org/repo] PR #42 opened by bob: Fix the crash on login",
        "title": "#42 Fix the crash on login",
        "text": "This fixes the NPE in LoginController",
        "fields": [{"title": "Reviewers", "value": "ana"}],
        "color": "36a64f",
    }
    assert text_of(bot_post("New pull request", attachments=[card])) == (
        "New pull request\n[org/repo] PR #42 opened by bob: Fix the crash on login\n"
        "This fixes the NPE in LoginController\nReviewers: ana"
    )
    # an attachment saying what the text says is not said again
    echo = {"fallback": "New pull request", "pretext": "new PULL request!"}
    assert text_of(bot_post("New pull request", attachments=[echo])) == "New pull request"
    # however much the attachments carry, a few thousand characters of it are kept
    huge = [{"text": f"part {n} " + "word " * 500} for n in range(40)]
    text = text_of(bot_post("alert", attachments=huge))
    assert text.startswith("alert\npart 0 word") and text.endswith("…")
    assert 4000 < len(text) < 4100
    # a mention of the bot in an integration's card addresses it; in a shared message not
    mention = {"text": f"<@{BOT.user_id}> please triage"}
    event = norm(envelope(bot_post("alert", attachments=[mention])))
    assert event is not None and event.mentions_me
    shared = {**mention, "is_share": True}
    event = norm(envelope(bot_post("alert", attachments=[shared])))
    assert event is not None and not event.mentions_me
    assert event.text == f"alert\n<@{BOT.user_id}> please triage"


def test_a_rich_text_link_keeps_its_url() -> None:
    section = {
        "type": "rich_text_section",
        "elements": [
            {"type": "text", "text": "runbook: "},
            {"type": "link", "url": "https://wiki.example.com/db-failover", "text": "failover"},
            {"type": "text", "text": ", raw: "},
            {"type": "link", "url": "https://status.example.com"},
        ],
    }
    message = {
        **CHANNEL_MESSAGE,
        "text": "",
        "blocks": [{"type": "rich_text", "elements": [section]}],
    }
    assert text_of(message) == (
        "runbook: failover (https://wiki.example.com/db-failover), raw: https://status.example.com"
    )

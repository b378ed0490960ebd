"""normalize on payloads shaped as Discord documents them (and as the gateway really sends them)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel.storable import storable_event
from backchannel_discord.normalize import normalize_payload, snowflake_time

BOT = "1100000000000000001"
GUILD = "197038439483310086"
CHANNEL = "290926798999357250"
THREAD = "1230000000000000077"

# the Message object example from Discord's docs (channel resource), as MESSAGE_CREATE carries it
DOCS_MESSAGE: dict[str, Any] = {
    "reactions": [{"count": 1, "me": False, "emoji": {"id": None, "name": "🔥"}}],
    "attachments": [],
    "tts": False,
    "embeds": [],
    "timestamp": "2017-07-11T17:27:07.299000+00:00",
    "mention_everyone": False,
    "id": "334385199974967042",
    "pinned": False,
    "edited_timestamp": None,
    "author": {
        "username": "Mason",
        "discriminator": "9999",
        "id": "53908099506183680",
        "avatar": "a_bab14f271d565501444b2ca3be944b25",
    },
    "mention_roles": [],
    "content": "Supa Hot",
    "channel_id": CHANNEL,
    "mentions": [],
    "type": 0,
}


def envelope(kind: str, data: dict[str, Any], **context: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"op": 0, "t": kind, "s": 12, "d": data}
    if context:
        payload["backchannel"] = context
    return payload


def in_guild(**extra: Any) -> dict[str, Any]:
    message = copy.deepcopy(DOCS_MESSAGE)
    message["guild_id"] = GUILD
    message["member"] = {
        "roles": [],
        "nick": None,
        "joined_at": "2016-06-01T10:00:00.000000+00:00",
        "deaf": False,
        "mute": False,
        "flags": 0,
    }
    message.update(extra)
    return message


def norm(raw: dict[str, Any]) -> Any:
    return normalize_payload(raw, account="main", bot_id=BOT)


def test_docs_message_in_a_guild_channel_is_a_group_message() -> None:
    event = norm(envelope("MESSAGE_CREATE", in_guild(), channel_name="general", guild_name="Ops"))
    assert event.kind == "message"
    assert event.event_id == "334385199974967042"
    assert event.platform_message_id == "334385199974967042"
    assert (event.address.account, event.address.chat, event.address.thread) == (
        "main",
        CHANNEL,
        None,
    )
    assert event.conversation_kind == "group"
    assert event.conversation_title == "#general (Ops)"
    assert event.text == "Supa Hot"
    assert event.sender.id == "53908099506183680"
    assert event.sender.name == "Mason"
    assert event.sender.handle == "Mason#9999"
    assert not event.sender.is_bot
    assert not event.mentions_me
    assert event.sent_at == pytest.approx(1499794027.299)
    assert event.meta["guild_id"] == GUILD


def test_sender_name_prefers_member_nick_then_global_name() -> None:
    message = in_guild()
    message["author"] = {**message["author"], "global_name": "Mason G", "discriminator": "0"}
    assert norm(envelope("MESSAGE_CREATE", message)).sender.name == "Mason G"
    message["member"]["nick"] = "Supa Mason"
    event = norm(envelope("MESSAGE_CREATE", message))
    assert event.sender.name == "Supa Mason"
    assert event.sender.handle == "Mason"


def test_message_without_guild_id_is_a_direct_conversation() -> None:
    event = norm(envelope("MESSAGE_CREATE", copy.deepcopy(DOCS_MESSAGE)))
    assert event.conversation_kind == "direct"
    assert event.address.chat == CHANNEL
    assert "guild_id" not in event.meta


def test_thread_message_is_its_own_conversation_titled_by_parent() -> None:
    message = in_guild(channel_id=THREAD, position=3)
    event = norm(
        envelope(
            "MESSAGE_CREATE",
            message,
            channel_type=11,
            channel_name="release plan",
            parent_id=CHANNEL,
            parent_name="general",
            guild_name="Ops",
        )
    )
    assert event.conversation_kind == "thread"
    assert (event.address.chat, event.address.thread) == (CHANNEL, THREAD)
    assert event.address.key == f"main/{CHANNEL}/{THREAD}"
    assert event.conversation_title == "#general › release plan (Ops)"
    assert "parent_channel_id" not in event.meta


@pytest.mark.parametrize("channel_type", [10, 11, 12])
def test_every_thread_type_is_addressed_under_its_parent(channel_type: int) -> None:
    message = in_guild(channel_id=THREAD)
    raw = envelope("MESSAGE_CREATE", message, channel_type=channel_type, parent_id=CHANNEL)
    event = norm(raw)
    assert (event.conversation_kind, event.address.chat, event.address.thread) == (
        "thread",
        CHANNEL,
        THREAD,
    )
    deleted = norm(
        envelope(
            "MESSAGE_DELETE",
            {"id": message["id"], "channel_id": THREAD, "guild_id": GUILD},
            channel_type=channel_type,
            parent_id=CHANNEL,
        )
    )
    assert deleted.address == event.address


def test_a_channel_the_adapter_could_not_learn_is_refused_for_every_kind() -> None:
    for kind, data in (
        ("MESSAGE_CREATE", in_guild(channel_id=THREAD)),
        ("MESSAGE_DELETE", {"id": "1", "channel_id": THREAD, "guild_id": GUILD}),
    ):
        with pytest.raises(NormalizeError, match=f"Discord channel {THREAD} is not in the bot"):
            norm(envelope(kind, data, channel_unknown=True))


def test_thread_message_captured_without_its_parent_is_refused_in_one_line() -> None:
    with pytest.raises(NormalizeError, match=f"Discord thread {THREAD} without its parent"):
        norm(envelope("MESSAGE_CREATE", in_guild(channel_id=THREAD, position=0)))


def test_reply_sets_reply_to_and_a_reply_to_the_bot_mentions_it() -> None:
    bot_message = in_guild(
        id="334385199974967000", author={"id": BOT, "username": "bc", "bot": True}
    )
    reply = in_guild(
        id="334385199974967099",
        type=19,
        content="thanks",
        message_reference={
            "type": 0,
            "message_id": "334385199974967000",
            "channel_id": CHANNEL,
            "guild_id": GUILD,
        },
        referenced_message=bot_message,
    )
    event = norm(envelope("MESSAGE_CREATE", reply))
    assert event.reply_to == "334385199974967000"
    assert event.mentions_me


def test_reply_to_someone_else_does_not_mention_the_bot() -> None:
    reply = in_guild(
        type=19,
        message_reference={"message_id": "1", "channel_id": CHANNEL},
        referenced_message=in_guild(id="1"),
    )
    event = norm(envelope("MESSAGE_CREATE", reply))
    assert event.reply_to == "1"
    assert not event.mentions_me


def test_forwarded_message_is_not_a_reply_and_carries_the_forwarded_text() -> None:
    forward = in_guild(
        message_reference={"type": 1, "message_id": "5", "channel_id": "6", "guild_id": "7"},
        message_snapshots=[{"message": {"content": "fwd", "type": 0, "attachments": []}}],
        content="",
    )
    event = norm(envelope("MESSAGE_CREATE", forward))
    assert event.reply_to is None
    assert event.text == "fwd"
    assert event.meta["forwarded_from"] == {"message_id": "5", "channel_id": "6", "guild_id": "7"}
    # the head says the words are someone else's (the snapshot names no author)
    from backchannel.framing import context_of

    assert event.meta["forwarded"] is True and context_of(event.meta) == ("", None, None)


ALERT_EMBED: dict[str, Any] = {
    "type": "rich",
    "author": {"name": "Grafana", "icon_url": "https://example.org/g.png"},
    "title": "CPU high",
    "description": "host db-1 at 97%",
    "fields": [
        {"name": "Runbook", "value": "restart the replica", "inline": False},
        {"name": "\u200b", "value": "no name shown", "inline": True},
        {"name": "Owner", "value": "\u200b"},
        {"name": 5, "value": None},
        "not a field",
    ],
    "footer": {"text": "fired 12:00", "icon_url": "https://example.org/f.png"},
    "color": 15158332,
}


def webhook_post(**extra: Any) -> dict[str, Any]:
    hook = {"id": "1180000000000000600", "username": "Grafana", "bot": True}
    return in_guild(content="", author=hook, webhook_id=hook["id"], **extra)


def test_an_embed_reads_as_author_title_description_fields_and_footer() -> None:
    event = norm(envelope("MESSAGE_CREATE", webhook_post(embeds=[ALERT_EMBED])))
    assert event.text == (
        "Grafana\nCPU high\nhost db-1 at 97%\nRunbook: restart the replica\n"
        "no name shown\nOwner\nfired 12:00"
    )
    only_fields = {"type": "rich", "fields": [{"name": "Status", "value": "DOWN: api"}]}
    event = norm(envelope("MESSAGE_CREATE", webhook_post(embeds=[only_fields, ALERT_EMBED])))
    assert event.text.startswith("Status: DOWN: api\n\nGrafana\nCPU high\n")
    # parts of the wrong shape are skipped, never an error
    broken = {"type": "rich", "fields": "x", "author": "x", "footer": {"text": 5}, "title": "t"}
    assert norm(envelope("MESSAGE_CREATE", webhook_post(embeds=[broken]))).text == "t"


def test_a_bot_message_with_text_and_a_rich_embed_reads_as_both() -> None:
    # a CI bot's "Build finished:" says the rest in its embed: both are the message
    build = {
        "type": "rich",
        "title": "Build #812 failed",
        "description": "tests/test_api.py::test_login",
        "fields": [{"name": "branch", "value": "main"}],
    }
    preview = {
        "type": "article",
        "url": "https://ci.example/812",
        "title": "CI",
        "description": "x",
    }
    post = webhook_post(embeds=[build, preview])
    post["content"] = "Build finished:"
    assert norm(envelope("MESSAGE_CREATE", post)).text == (
        "Build finished:\n\nBuild #812 failed\ntests/test_api.py::test_login\nbranch: main"
    )
    # link previews repeat the page a URL in the text names: never read, nor a person's
    # unfurls of type rich (a person cannot post a rich embed of their own)
    unfurled = in_guild(content="look https://x.example", embeds=[preview, ALERT_EMBED])
    assert norm(envelope("MESSAGE_CREATE", unfurled)).text == "look https://x.example"
    kinds = ("link", "image", "video", "gifv", "article")
    links = webhook_post(embeds=[{**preview, "type": kind} for kind in kinds])
    links["content"] = "see"
    assert norm(envelope("MESSAGE_CREATE", links)).text == "see"
    # bounded: no payload makes the embed text longer than Discord lets a message's be
    huge = webhook_post(embeds=[{"type": "rich", "description": "y" * 9000}] * 3)
    huge["content"] = "big"
    text = norm(envelope("MESSAGE_CREATE", huge)).text
    assert text.startswith("big\n\nyyy") and len(text) <= len("big\n\n") + 6000


def forward_of(**snapshot: Any) -> dict[str, Any]:
    return in_guild(
        content="",
        message_reference={"type": 1, "message_id": "5", "channel_id": "6", "guild_id": "7"},
        message_snapshots=[{"message": {"type": 0, "content": "", "attachments": [], **snapshot}}],
    )


def test_a_forward_of_an_embed_or_components_reads_as_their_text() -> None:
    event = norm(envelope("MESSAGE_CREATE", forward_of(embeds=[ALERT_EMBED])))
    assert event.text.startswith("Grafana\nCPU high\nhost db-1 at 97%\nRunbook: restart")
    assert event.meta["forwarded_from"]["message_id"] == "5"
    display = [{"type": 17, "components": [{"type": 10, "content": "deploy finished"}]}]
    event = norm(envelope("MESSAGE_CREATE", forward_of(components=display, flags=1 << 15)))
    assert event.text == "deploy finished"
    # the snapshot's own content comes first, then its embeds; a snapshot of the wrong
    # shape gives no text
    event = norm(envelope("MESSAGE_CREATE", forward_of(content="fwd", embeds=[ALERT_EMBED])))
    assert event.text.startswith("fwd\n\nGrafana\nCPU high\n")
    event = norm(envelope("MESSAGE_CREATE", forward_of(embeds="x", components={"type": 10})))
    assert event.text == ""


def test_a_forward_of_a_sticker_carries_the_sticker() -> None:
    sticker = {"id": "749054660769218631", "name": "wave", "format_type": 1}
    event = norm(envelope("MESSAGE_CREATE", forward_of(sticker_items=[sticker])))
    assert [(a.kind, a.name, a.ref) for a in event.attachments] == [
        ("sticker", "wave", "749054660769218631")
    ]
    assert event.meta["stickers"] == ["wave"]


def test_crosspost_reference_is_not_a_reply() -> None:
    crosspost = in_guild(
        flags=2,  # IS_CROSSPOST
        webhook_id="9",
        message_reference={"message_id": "5", "channel_id": "6", "guild_id": "7"},
    )
    assert norm(envelope("MESSAGE_CREATE", crosspost)).reply_to is None


def test_stickers_are_named_in_meta() -> None:
    sticker = {"id": "749054660769218631", "name": "Wave", "format_type": 3}
    event = norm(envelope("MESSAGE_CREATE", in_guild(content="", sticker_items=[sticker])))
    assert event.meta["stickers"] == ["Wave"]


@pytest.mark.parametrize(
    ("content", "mentions"),
    [
        (f"<@{BOT}> status?", [{"id": BOT, "username": "bc", "bot": True}]),
        (f"<@!{BOT}> status?", []),
    ],
)
def test_mention_of_the_bot_sets_mentions_me(content: str, mentions: list[Any]) -> None:
    event = norm(envelope("MESSAGE_CREATE", in_guild(content=content, mentions=mentions)))
    assert event.mentions_me


def test_own_messages_and_own_edits_are_none() -> None:
    mine = in_guild(author={"id": BOT, "username": "bc", "bot": True})
    assert norm(envelope("MESSAGE_CREATE", mine)) is None
    edited = {**mine, "edited_timestamp": "2017-07-11T17:30:00.000000+00:00"}
    assert norm(envelope("MESSAGE_UPDATE", edited)) is None


def test_other_bots_and_webhooks_are_kept_and_marked() -> None:
    other = in_guild(author={"id": "77", "username": "otherbot", "bot": True})
    assert norm(envelope("MESSAGE_CREATE", other)).sender.is_bot
    hook = in_guild(webhook_id="88", author={"id": "88", "username": "CI", "discriminator": "0000"})
    event = norm(envelope("MESSAGE_CREATE", hook))
    assert event.sender.is_bot
    assert event.meta["webhook_id"] == "88"


@pytest.mark.parametrize("system_type", [6, 7, 8, 18, 21])
def test_system_messages_are_not_for_the_agent(system_type: int) -> None:
    assert norm(envelope("MESSAGE_CREATE", in_guild(type=system_type, content=""))) is None


def test_edit_event_id_is_unique_per_edit_and_targets_the_message() -> None:
    first = in_guild(content="v2", edited_timestamp="2017-07-11T17:30:00.000000+00:00")
    second = in_guild(content="v3", edited_timestamp="2017-07-11T17:31:00.000000+00:00")
    one = norm(envelope("MESSAGE_UPDATE", first))
    two = norm(envelope("MESSAGE_UPDATE", second))
    assert one.kind == two.kind == "edit"
    assert one.platform_message_id == two.platform_message_id == "334385199974967042"
    assert one.event_id != two.event_id
    assert one.text == "v2"
    assert one.sent_at == pytest.approx(1499794200.0)


def test_partial_update_without_author_still_edits() -> None:
    partial = {
        "id": "334385199974967042",
        "channel_id": CHANNEL,
        "guild_id": GUILD,
        "content": "fixed typo",
        "edited_timestamp": "2017-07-11T17:30:00.000000+00:00",
    }
    event = norm(envelope("MESSAGE_UPDATE", partial))
    assert event.kind == "edit"
    assert event.text == "fixed typo"


def test_an_update_that_lists_the_files_says_its_list_is_complete() -> None:
    """An update with an `attachments` list carries the message's whole list (an empty one:
    the files were edited away); a partial one without the field says nothing of files."""
    from backchannel.model import ATTACHMENTS_COMPLETE

    stamp = "2017-07-11T17:30:00.000000+00:00"
    listed = norm(envelope("MESSAGE_UPDATE", in_guild(content="no file now", attachments=[],
                                                      edited_timestamp=stamp)))  # fmt: skip
    assert listed.meta[ATTACHMENTS_COMPLETE] is True and listed.attachments == ()
    partial = {"id": "334385199974967042", "channel_id": CHANNEL, "guild_id": GUILD,
               "content": "fixed typo", "edited_timestamp": stamp}  # fmt: skip
    assert ATTACHMENTS_COMPLETE not in norm(envelope("MESSAGE_UPDATE", partial)).meta
    created = norm(envelope("MESSAGE_CREATE", in_guild(content="hi", attachments=[])))
    assert ATTACHMENTS_COMPLETE not in created.meta


def test_update_that_changes_no_text_is_ignored() -> None:
    unfurl = {
        "id": "334385199974967042",
        "channel_id": CHANNEL,
        "guild_id": GUILD,
        "embeds": [{"type": "link", "url": "https://example.com"}],
    }
    assert norm(envelope("MESSAGE_UPDATE", unfurl)) is None


def test_delete_targets_the_message() -> None:
    event = norm(
        envelope(
            "MESSAGE_DELETE", {"id": "334385199974967042", "channel_id": CHANNEL, "guild_id": GUILD}
        )
    )
    assert event.kind == "delete"
    assert event.platform_message_id == "334385199974967042"
    assert event.event_id == "334385199974967042:delete"
    assert event.address.chat == CHANNEL


def test_attachments_become_metadata() -> None:
    attachment = {
        "id": "1100000000000000999",
        "filename": "graph.png",
        "size": 48213,
        "url": "https://cdn.discordapp.com/attachments/1/2/graph.png",
        "proxy_url": "https://media.discordapp.net/attachments/1/2/graph.png",
        "content_type": "image/png",
        "width": 640,
        "height": 480,
    }
    plain = {"id": "2", "filename": "notes", "size": 10, "url": "https://cdn/notes"}
    event = norm(envelope("MESSAGE_CREATE", in_guild(content="", attachments=[attachment, plain])))
    first, second = event.attachments
    assert (first.kind, first.name, first.mime, first.size) == (
        "image",
        "graph.png",
        "image/png",
        48213,
    )
    assert first.ref == attachment["url"]
    assert (second.kind, second.mime) == ("file", None)


def test_integer_ids_extra_fields_and_bare_message_objects_are_accepted() -> None:
    message = in_guild(id=334385199974967042, channel_id=int(CHANNEL), flags=0, poll=None)
    message["author"]["id"] = 53908099506183680
    message["some_future_field"] = {"x": 1}
    event = norm(message)  # a bare Message object, as REST returns it
    assert event.kind == "message"
    assert event.event_id == "334385199974967042"
    assert event.address.chat == CHANNEL


def test_missing_timestamp_falls_back_to_the_snowflake_time() -> None:
    message = in_guild()
    del message["timestamp"]
    assert norm(envelope("MESSAGE_CREATE", message)).sent_at == pytest.approx(
        snowflake_time("334385199974967042")
    )
    assert snowflake_time("175928847299117063") == pytest.approx(1462015105.796)


@pytest.mark.parametrize(
    "timestamp", ["9999-12-31T00:00:00+00:00", "0001-01-01T00:00:00+00:00", "yesterday"]
)
def test_a_timestamp_no_message_is_sent_at_falls_back_to_the_snowflake_time(
    timestamp: str,
) -> None:
    # a time the store refuses would have turned the message into a dead letter
    event = norm(envelope("MESSAGE_CREATE", in_guild(timestamp=timestamp)))
    assert event.sent_at == pytest.approx(snowflake_time("334385199974967042"))
    assert isinstance(storable_event(event, event.address.account), type(event))


def test_other_dispatches_are_not_for_the_agent() -> None:
    assert norm(envelope("TYPING_START", {"channel_id": CHANNEL, "user_id": "1"})) is None
    assert norm({"op": 11}) is None


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        (envelope("MESSAGE_CREATE", None), "d"),  # type: ignore[arg-type]
        (envelope("MESSAGE_CREATE", {**DOCS_MESSAGE, "id": None}), "d.id"),
        (envelope("MESSAGE_CREATE", {**DOCS_MESSAGE, "channel_id": "general"}), "d.channel_id"),
        (
            envelope("MESSAGE_CREATE", {k: v for k, v in DOCS_MESSAGE.items() if k != "author"}),
            "d.author",
        ),
        (envelope("MESSAGE_CREATE", {**DOCS_MESSAGE, "author": "Mason"}), "d.author"),
        (envelope("MESSAGE_CREATE", {**DOCS_MESSAGE, "content": ["x"]}), "d.content"),
        (envelope("MESSAGE_CREATE", {**DOCS_MESSAGE, "attachments": ["x"]}), "d.attachments.0"),
        (envelope("MESSAGE_DELETE", {"channel_id": CHANNEL}), "d.id"),
    ],
)
def test_malformed_payloads_say_where(payload: dict[str, Any], where: str) -> None:
    with pytest.raises(NormalizeError) as caught:
        norm(payload)
    assert caught.value.where == where


# MESSAGE_REACTION_ADD as the gateway sends it in a guild: the reacting member with its user
REACTION_ADD: dict[str, Any] = {
    "user_id": "53908099506183680",
    "type": 0,
    "message_id": "334385199974967042",
    "message_author_id": "80351110224678912",
    "member": {
        "user": {
            "username": "Mason",
            "global_name": "Mason M",
            "id": "53908099506183680",
            "discriminator": "0",
            "avatar": None,
        },
        "roles": [],
        "nick": None,
        "joined_at": "2016-06-01T10:00:00.000000+00:00",
        "deaf": False,
        "mute": False,
        "flags": 0,
    },
    "emoji": {"name": "🔥", "id": None},
    "channel_id": CHANNEL,
    "burst": False,
    "burst_colors": [],
    "guild_id": GUILD,
}


def test_a_reaction_in_a_guild_is_a_reaction_on_its_message() -> None:
    event = norm(envelope("MESSAGE_REACTION_ADD", REACTION_ADD, channel_name="general"))
    assert (event.kind, event.text, event.platform_message_id) == (
        "reaction",
        "🔥",
        "334385199974967042",
    )
    assert (event.address.chat, event.address.thread) == (CHANNEL, None)
    assert (event.sender.id, event.sender.name) == ("53908099506183680", "Mason M")
    assert event.event_id == "334385199974967042:react:53908099506183680:🔥:12"
    assert "removed" not in event.meta


def test_a_removal_names_only_the_user_and_is_its_own_event() -> None:
    removal = {k: v for k, v in REACTION_ADD.items() if k not in {"member", "message_author_id"}}
    bare = norm(envelope("MESSAGE_REACTION_REMOVE", removal))
    assert bare.meta["removed"] is True
    assert (bare.sender.id, bare.sender.name) == ("53908099506183680", "")
    assert bare.event_id == "334385199974967042:unreact:53908099506183680:🔥:12"
    named = norm(envelope("MESSAGE_REACTION_REMOVE", removal, user_name="Mason M"))
    assert named.sender.name == "Mason M"


def test_a_reaction_with_the_same_sequence_number_in_another_session_is_another_event() -> None:
    # Discord counts `s` from 1 in every gateway session: a re-add in a later session must not
    # collide with an earlier one, a replay after a resume (same session) must
    first = norm(envelope("MESSAGE_REACTION_ADD", REACTION_ADD, session_id="a1b2"))
    replayed = norm(envelope("MESSAGE_REACTION_ADD", REACTION_ADD, session_id="a1b2"))
    later = norm(envelope("MESSAGE_REACTION_ADD", REACTION_ADD, session_id="c3d4"))
    assert first.event_id == replayed.event_id
    assert first.event_id != later.event_id
    assert first.event_id == "334385199974967042:react:53908099506183680:🔥:a1b2:12"
    removal = {k: v for k, v in REACTION_ADD.items() if k not in {"member", "message_author_id"}}
    taken_back = norm(envelope("MESSAGE_REACTION_REMOVE", removal, session_id="c3d4"))
    assert taken_back.event_id == "334385199974967042:unreact:53908099506183680:🔥:c3d4:12"


def test_a_custom_emoji_reads_as_its_name_and_a_thread_reaction_lands_in_the_thread() -> None:
    custom = {**REACTION_ADD, "channel_id": THREAD, "emoji": {"name": "shipit", "id": "4242"}}
    event = norm(envelope("MESSAGE_REACTION_ADD", custom, channel_type=11, parent_id=CHANNEL))
    assert event.text == ":shipit:"
    assert (event.address.chat, event.address.thread) == (CHANNEL, THREAD)
    assert event.event_id.endswith(":4242:12")


def test_a_dm_reaction_is_direct_and_the_bots_own_is_not_for_the_transcript() -> None:
    dm = {k: v for k, v in REACTION_ADD.items() if k not in {"member", "guild_id"}}
    event = norm(envelope("MESSAGE_REACTION_ADD", dm))
    assert event.conversation_kind == "direct"
    assert norm(envelope("MESSAGE_REACTION_ADD", {**REACTION_ADD, "user_id": BOT})) is None


def test_a_moderators_clear_names_no_one_and_says_what_goes() -> None:
    # as Discord documents them: REMOVE_ALL has channel, message and guild; REMOVE_EMOJI adds
    # the emoji
    where = {"channel_id": CHANNEL, "message_id": "334385199974967042", "guild_id": GUILD}
    every = norm(envelope("MESSAGE_REACTION_REMOVE_ALL", where, session_id="a1b2"))
    assert (every.kind, every.text, every.meta["cleared"]) == ("reaction", "", "all")
    assert every.platform_message_id == "334385199974967042"
    assert every.sender.is_unknown
    assert every.event_id == "334385199974967042:unreact-all:a1b2:12"
    one = norm(
        envelope(
            "MESSAGE_REACTION_REMOVE_EMOJI",
            {**where, "emoji": {"name": "shipit", "id": "4242"}},
            session_id="a1b2",
        )
    )
    assert (one.text, one.meta["cleared"]) == (":shipit:", "emoji")
    assert one.sender.is_unknown
    assert one.event_id == "334385199974967042:unreact-emoji:4242:a1b2:12"
    with pytest.raises(NormalizeError) as raised:
        norm(envelope("MESSAGE_REACTION_REMOVE_EMOJI", where))
    assert raised.value.where == "d.emoji"
    with pytest.raises(NormalizeError) as raised:
        norm(envelope("MESSAGE_REACTION_REMOVE_ALL", {**where, "message_id": None}))
    assert raised.value.where == "d.message_id"


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("user_id", None, "d.user_id"),
        ("message_id", "abc", "d.message_id"),
        ("emoji", None, "d.emoji"),
        ("emoji", {"id": None, "name": None}, "d.emoji.name"),
        ("emoji", {"id": "x1", "name": "a"}, "d.emoji.id"),
    ],
)
def test_a_broken_reaction_says_which_field(field: str, value: Any, where: str) -> None:
    with pytest.raises(NormalizeError) as raised:
        norm(envelope("MESSAGE_REACTION_ADD", {**REACTION_ADD, field: value}))
    assert raised.value.where == where

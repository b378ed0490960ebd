"""Stored rows back to model values: the fast row -> Message path equals attrs' own __init__."""

from __future__ import annotations

import json

import pytest
from backchannel.model import Attachment, Message, Sender
from backchannel.store.rows import message_row, message_rows

ATTACHMENTS = [
    {"kind": "photo", "name": "cat.jpg", "mime": "image/jpeg", "size": 2048, "ref": "f1"}
]


def row(seq: int, **changes: object) -> tuple[object, ...]:
    """A full `MESSAGE_COLUMNS` row: every column set, as SQLite returns it."""
    columns: dict[str, object] = {
        "conversation_id": 7,
        "seq": seq,
        "direction": "in",
        "event_id": f"e{seq}",
        "sender_id": "42",
        "sender_name": "Alice",
        "sender_handle": "alice",
        "sender_is_bot": 0,
        "text": f"message {seq}",
        "platform_message_id": f"p{seq}",
        "reply_to": "p1",
        "reply_to_seq": 1,
        "mentions_me": 1,
        "attachments": json.dumps(ATTACHMENTS),
        "sent_at": 1700000000.5 + seq,
        "edited_at": 1700000100.0,
        "deleted_at": None,
        "held": 0,
        "triggers": 1,
        "status": "received",
        "status_reason": None,
        "reactions": json.dumps([["42", "👍"], ["43", "🎉"]]),
        "meta": json.dumps({"update_id": seq, "chat_type": "private"}),
    }
    columns.update(changes)
    return tuple(columns.values())


def expected(values: tuple[object, ...]) -> Message:
    """The Message attrs' __init__ makes of the same row (keywords, converters and all)."""
    (
        conversation_id, seq, direction, event_id, sender_id, sender_name, sender_handle,
        sender_is_bot, text, platform_message_id, reply_to, reply_to_seq, mentions_me,
        attachments, sent_at, edited_at, deleted_at, held, triggers, status, status_reason,
        reactions, meta,
    ) = values  # fmt: skip
    return Message(
        conversation_id=conversation_id,  # type: ignore[arg-type]
        seq=seq,  # type: ignore[arg-type]
        direction=direction,  # type: ignore[arg-type]
        sender=Sender(sender_id, sender_name, sender_handle, bool(sender_is_bot)),  # type: ignore[arg-type]
        text=text,  # type: ignore[arg-type]
        sent_at=sent_at,  # type: ignore[arg-type]
        platform_message_id=platform_message_id,  # type: ignore[arg-type]
        reply_to=reply_to,  # type: ignore[arg-type]
        reply_to_seq=reply_to_seq,  # type: ignore[arg-type]
        mentions_me=bool(mentions_me),
        attachments=[Attachment(**a) for a in json.loads(attachments)] if attachments else (),  # type: ignore[arg-type]
        edited_at=edited_at,  # type: ignore[arg-type]
        deleted_at=deleted_at,  # type: ignore[arg-type]
        held=bool(held),
        triggers=bool(triggers),
        status=status,  # type: ignore[arg-type]
        status_reason=status_reason,  # type: ignore[arg-type]
        event_id=event_id,  # type: ignore[arg-type]
        reactions=tuple((a, b) for a, b in json.loads(reactions)) if reactions else (),  # type: ignore[arg-type]
        meta=json.loads(meta) if meta else {},  # type: ignore[arg-type]
    )


ROWS = [
    row(1),
    row(2, attachments=None, reactions=None, meta=None, reply_to=None, reply_to_seq=None),
    row(3, direction="out", status="uncertain", status_reason="timed out", sender_is_bot=1),
    row(4, deleted_at=1700000200.0, held=1, triggers=0, mentions_me=0, event_id=None),
    row(5, sender_id="43", sender_name="Bob", sender_handle=None, meta=json.dumps({"n": [1]})),
]


def test_rows_become_the_messages_attrs_would_make() -> None:
    made = message_rows(ROWS)
    assert made == [expected(values) for values in ROWS]
    assert [message_row(values) for values in ROWS] == made
    assert repr(made) == repr([expected(values) for values in ROWS])  # same types as well
    for message in made:
        assert isinstance(message.attachments, tuple) and isinstance(message.reactions, tuple)


def test_messages_of_one_sender_share_it_but_never_their_meta() -> None:
    first, second, *_ = message_rows([row(1), row(2)])
    assert first.sender is second.sender
    first.meta["seen"] = True  # type: ignore[index]
    assert "seen" not in second.meta
    assert message_rows([row(1)])[0].meta == {"update_id": 1, "chat_type": "private"}
    assert message_rows([row(1, meta=None)])[0].meta == {}


@pytest.mark.parametrize("meta", ['{"a": 1} trailing', '{"a": ', " {}", "nan-sense"])
def test_meta_that_is_not_one_json_value_fails_as_json_loads_does(meta: str) -> None:
    try:
        json_answer: object = json.loads(meta)
    except json.JSONDecodeError as error:
        with pytest.raises(json.JSONDecodeError) as raised:
            message_rows([row(1, meta=meta)])
        assert str(raised.value) == str(error)
    else:
        assert message_rows([row(1, meta=meta)])[0].meta == json_answer


def test_reactions_written_before_the_sender_id_was_kept_are_matched_by_name() -> None:
    from backchannel.model import Address, Event
    from backchannel.store.rows import with_reaction

    legacy = json.dumps([["Bob", "👍"], ["Alice", "👍"]])
    bob = Sender("bob", "Bob")
    removal = Event(Address("a", "c"), "r1", bob, "reaction", "👍", meta={"removed": True})
    assert json.loads(with_reaction(legacy, removal)) == [["Alice", "👍"]]
    again = Event(Address("a", "c"), "r2", bob, "reaction", "👍")
    # Bob's own legacy entry becomes his, with his id; nobody else's changes
    assert json.loads(with_reaction(legacy, again)) == [["Bob", "👍", "bob"], ["Alice", "👍"]]


def test_a_removal_naming_only_the_user_id_keeps_the_name_of_their_other_reactions() -> None:
    # Discord's MESSAGE_REACTION_REMOVE names only the user id, and discord.py's cache may
    # not know them: their remaining reactions keep the name they were shown with
    from backchannel.model import Address, Event
    from backchannel.store.rows import with_reaction

    bob = Sender("53908", "Bob")
    reactions = None
    for emoji in ("👍", "🎉"):
        reactions = with_reaction(
            reactions, Event(Address("a", "c"), emoji, bob, "reaction", emoji)
        )
    anonymous = Sender("53908", "", None)
    removal = Event(Address("a", "c"), "r3", anonymous, "reaction", "👍", meta={"removed": True})
    assert json.loads(with_reaction(reactions, removal)) == [["Bob", "🎉", "53908"]]

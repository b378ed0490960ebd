"""Address, Sender and Event construct as their converters always did (their __init__ is
written out for speed): ids become text, None stays None, attachments become a tuple,
defaults are fresh, and the values stay frozen."""

from __future__ import annotations

import attrs
import pytest
from backchannel.model import Address, Attachment, Event, Sender, evolve, from_json, to_json


class Digits(str):
    """A str subclass: converted with str() like any other non-str value."""

    def __str__(self) -> str:
        return "converted"


def test_ids_that_are_not_text_become_text_and_text_is_kept_as_it_is() -> None:
    chat = "-100200"
    address = Address("tg", chat, 7)
    assert (address.chat, address.thread) == (chat, "7") and address.chat is chat
    assert Address("tg", -100200).thread is None and Address("tg", -100200).chat == "-100200"
    assert Sender(42).id == "42" and Sender("42", "Ana", None, True).is_bot is True
    assert Address("tg", Digits("1")).chat == "converted"
    event = Event(Address("tg", 1), 99, Sender(5), platform_message_id=3, reply_to=2)
    assert (event.event_id, event.platform_message_id, event.reply_to) == ("99", "3", "2")
    assert Event(Address("tg", 1), "1", Sender(5)).reply_to is None


def test_event_defaults_and_attachments_are_as_before() -> None:
    first = Event(Address("tg", 1), "1", Sender(5))
    second = Event(Address("tg", 1), "1", Sender(5))
    assert first.meta == {} and first.meta is not second.meta
    assert first.attachments == () and first.kind == "message" and first.sent_at > 0
    assert Event(Address("tg", 1), "1", Sender(5), sent_at=None).sent_at is None  # type: ignore[arg-type]
    photo = Attachment("photo", ref="f1")
    assert Event(Address("tg", 1), "1", Sender(5), attachments=[photo]).attachments == (photo,)
    assert Event(Address("tg", 1), "1", Sender(5), attachments=None).attachments == ()


def test_values_stay_frozen_comparable_and_convertible() -> None:
    event = Event(Address("tg", 1, 2), 9, Sender(5, "Ana"), text="hi", sent_at=1.0, meta={"k": 1})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.text = "changed"  # type: ignore[misc]
    assert event == Event(
        Address("tg", "1", "2"), "9", Sender("5", "Ana"), text="hi", sent_at=1.0, meta={"k": 1}
    )
    assert from_json(to_json(event), Event) == event
    assert evolve(event, event_id=10).event_id == "10"
    assert evolve(event.address, chat=3).chat == "3"


def test_an_outbound_of_an_unknown_kind_is_one_clear_error() -> None:
    # a plugin's typo ("react") was stored and handed to the adapter as it was
    from backchannel.model import Address, Outbound

    with pytest.raises(ValueError, match=r"Outbound kind must be .* got 'react'"):
        Outbound(Address("acct", "chat"), "👍", kind="react", target="1")  # type: ignore[arg-type]
    assert Outbound(Address("acct", "chat"), "👍", kind="reaction", target="1").kind == "reaction"

"""normalize: raw web chat payloads -> Events, and stored rows -> page frames."""

from __future__ import annotations

import pytest
from backchannel.errors import NormalizeError
from backchannel.model import Message, Sender
from backchannel_webchat.normalize import (
    conversation_chat,
    inbound_payload,
    message_frame,
    normalize,
    visitor_id,
)


def payload(**changes: object) -> dict[str, object]:
    base = inbound_payload(
        chat=conversation_chat(visitor_id("t" * 32), "tab1"),
        visitor=visitor_id("t" * 32),
        name="Ada",
        client_id="abc123",
        text="hello",
        sent_at=1_700_000_000.5,
    )
    return {**base, **changes}


def test_visitor_message_is_a_direct_message_that_mentions_the_agent() -> None:
    event = normalize("web", payload(title="Support"))
    assert event is not None
    assert event.address.account == "web" and event.address.thread is None
    assert event.conversation_kind == "direct" and event.conversation_title == "Support"
    assert event.mentions_me and event.kind == "message"
    assert (event.sender.name, event.sender.is_bot) == ("Ada", False)
    assert event.sent_at == 1_700_000_000.5
    assert event.platform_message_id == "abc123"


def test_event_id_comes_from_the_client_id_scoped_to_the_conversation() -> None:
    first = normalize("web", payload())
    again = normalize("web", payload(text="hello (resent)"))
    elsewhere = normalize("web", payload(chat="vffffffffffffffff.tab9"))
    assert first is not None and again is not None and elsewhere is not None
    assert first.event_id == again.event_id
    assert first.event_id != elsewhere.event_id


def test_optional_fields_may_be_missing_and_extra_fields_are_ignored() -> None:
    raw = payload(extra={"anything": 1}, future_field=True)
    raw["sender"] = {"id": "v1"}
    event = normalize("web", raw)
    assert event is not None
    assert event.sender.name == "Visitor" and event.conversation_title is None


def test_agent_messages_normalize_to_none() -> None:
    assert normalize("web", payload(role="agent")) is None


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"kind": "other"}, "kind"),
        ({"role": None}, "role"),
        ({"chat": ""}, "chat"),
        ({"client_id": "a b"}, "client_id"),
        ({"text": None}, "text"),
        ({"sender": None}, "sender"),
        ({"sender": {"name": "no id"}}, "sender.id"),
        ({"sent_at": True}, "sent_at"),
    ],
)
def test_malformed_payload_names_the_field(changes: dict[str, object], where: str) -> None:
    with pytest.raises(NormalizeError) as caught:
        normalize("web", payload(**changes))
    assert caught.value.where == where


def test_visitor_id_hides_the_token() -> None:
    token = "secret-token-of-a-visitor-0123456789"
    public = visitor_id(token)
    assert public.startswith("v") and len(public) == 17 and token not in public
    assert visitor_id(token) == public != visitor_id(token + "x")


def test_message_frame_shows_role_ids_edits_and_failed_status() -> None:
    inbound = Message(1, 1, "in", Sender("v1", "Ada"), "hi", 10.0, platform_message_id="c1")
    outbound = Message(
        1,
        2,
        "out",
        Sender("agent", "Bot", is_bot=True),
        "yo",
        11.0,
        platform_message_id="a-1",
        status="failed",
        edited_at=12.0,
        reply_to="c1",
    )
    assert message_frame(inbound) == {
        "type": "message",
        "seq": 1,
        "id": "c1",
        "client_id": "c1",
        "role": "visitor",
        "sender": "Ada",
        "text": "hi",
        "sent_at": 10.0,
    }
    frame = message_frame(outbound)
    assert (frame["role"], frame["edited"], frame["status"]) == ("agent", True, "failed")
    assert frame["reply_to"] == "c1"

"""normalize: decrypted relay messages (plain DMs, v1 and v2 session envelopes) -> Event."""

from __future__ import annotations

import json
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel.model import Address
from backchannel_tinyplace.normalize import normalize_relay_message

ME = "7xKXtg2CW87d97TXJSDpbD5jBkheTqA83TZRuJosgAsU"
PEER = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"

# the reference v1 sample the envelope's own conformance tests pin
V1: dict[str, Any] = {
    "envelope_version": "tinyplace.harness.session.v1",
    "version": 1,
    "bucket": {"unit": "hour", "start": "s", "end": "e"},
    "scope": {
        "type": "session",
        "key": "k",
        "cwd": "/repo",
        "wrapper_session_id": "w1",
        "harness_session_id": "h1",
    },
    "harness": {"provider": "claude", "command": "claude", "argv": ["-p"]},
    "message": {
        "id": "m1",
        "line": 3,
        "role": "agent",
        "text": "hi",
        "timestamp": "2026-07-02T00:00:00Z",
    },
    "source": {"path": "p", "record_type": "assistant"},
}


def v2(kind: str, payload: dict[str, Any], role: str = "agent") -> dict[str, Any]:
    return {
        "envelope_version": "tinyplace.harness.session.v2",
        "version": 2,
        "scope": {
            "type": "folder",
            "key": "repo",
            "cwd": "/w",
            "wrapper_session_id": "w2",
            "harness_session_id": "h2",
        },
        "harness": {"provider": "codex", "command": "codex", "argv": []},
        "event": {
            "id": "e1",
            "seq": 4,
            "ts": "2026-07-05T00:00:00Z",
            "turn_id": "t1",
            "role": role,
            "kind": kind,
            "payload": payload,
        },
        "source": {"path": "p", "record_type": "assistant"},
    }


def raw(plaintext: Any, **envelope: Any) -> dict[str, Any]:
    return {
        "envelope": {
            "id": "msg_1733000000000_1",
            "from": PEER,
            "to": ME,
            "timestamp": "2026-11-30T09:00:00.000Z",
            "deviceId": 1,
            "type": "CIPHERTEXT",
            **envelope,
        },
        "plaintext": plaintext if isinstance(plaintext, str) else json.dumps(plaintext),
    }


def normalize(payload: Any) -> Any:
    return normalize_relay_message(payload, "tp", ME)


def test_plain_dm_goes_to_the_peers_master_conversation() -> None:
    event = normalize(raw("hello"))
    assert event.address == Address("tp", PEER, "master")
    assert event.conversation_kind == "direct"
    assert event.text == "hello"
    assert event.event_id == f"{PEER}:msg_1733000000000_1"
    assert event.platform_message_id == "msg_1733000000000_1"
    assert event.sender.id == PEER and event.sender.is_bot
    assert event.mentions_me
    assert event.sent_at == pytest.approx(1796029200.0)


def test_v1_envelope_routes_by_wrapper_session_and_keeps_harness_facts_as_data() -> None:
    event = normalize(raw(V1))
    assert event.address == Address("tp", PEER, "w1")
    assert event.conversation_kind == "thread"
    assert event.text == "hi"
    assert event.platform_message_id == "m1"
    assert event.meta["provider"] == "claude"
    assert event.meta["cwd"] == "/repo"
    assert event.meta["line"] == 3
    assert event.meta["session"] == "w1"
    assert event.meta["relay_type"] == "CIPHERTEXT"


def test_v1_without_wrapper_id_falls_back_to_harness_session() -> None:
    body = {
        "envelope_version": "tinyplace.harness.session.v1",
        "scope": {"harness_session_id": "h-only"},
        "message": {"text": "legacy"},
    }
    assert normalize(raw(body)).address.thread == "h-only"


def test_user_and_owner_roles_are_the_peers_human_and_agent_role_is_the_peer() -> None:
    user = normalize(raw({**V1, "message": {**V1["message"], "role": "user"}}))
    assert user.sender.id == f"{PEER}#user" and not user.sender.is_bot
    assert "user of" in user.sender.name
    # the owner side's own v1 envelopes (OpenHuman's outgoing) say "owner": its human
    owner = normalize(raw({**V1, "message": {**V1["message"], "role": "owner"}}))
    assert owner.sender.id == f"{PEER}#user" and not owner.sender.is_bot
    agent = normalize(raw(V1))
    assert agent.sender.id == PEER and agent.sender.is_bot


def test_an_auto_reply_does_not_mention_the_agent() -> None:
    assert normalize(raw({**V1, "tp": {"v": 1, "auto": True}})).mentions_me is False
    assert normalize(raw({**V1, "tp": {"v": 1, "auto": "yes"}})).mentions_me is True
    assert normalize(raw(V1)).mentions_me is True


def test_tp_block_gives_reply_to_and_stays_in_meta() -> None:
    body = {
        **V1,
        "tp": {"v": 1, "from_session": "claude:1", "in_reply_to": "msg-abc", "x": {"no": 1}},
    }
    event = normalize(raw(body))
    assert event.reply_to == "msg-abc"
    assert event.meta["tp"] == {"v": 1, "from_session": "claude:1", "in_reply_to": "msg-abc"}


@pytest.mark.parametrize(
    ("kind", "payload", "role", "text"),
    [
        ("agent_message", {"text": "ok"}, "agent", "ok"),
        ("user_prompt", {"text": "do it", "source": "human"}, "user", "do it"),
        ("user_prompt", {"text": "do it", "source": "human"}, "owner", "do it"),
        ("error", {"message": "boom", "fatal": True}, "agent", "[error] boom"),
        (
            "approval_request",
            {"tool_name": "rm", "display": "rm -rf x", "reason": "destructive"},
            "agent",
            "[approval requested] rm -rf x (destructive)",
        ),
    ],
)
def test_v2_events_with_words_become_messages(
    kind: str, payload: Any, role: str, text: str
) -> None:
    event = normalize(raw(v2(kind, payload, role)))
    assert event.address == Address("tp", PEER, "w2")
    assert event.text == text
    assert event.meta["event_kind"] == kind
    assert event.meta["provider"] == "codex"
    assert event.sender.id == (f"{PEER}#user" if role in ("user", "owner") else PEER)


@pytest.mark.parametrize(
    "kind", ["status", "tool_call", "tool_result", "lifecycle", "agent_thinking", "quantum"]
)
def test_v2_progress_events_are_not_for_the_agent(kind: str) -> None:
    assert normalize(raw(v2(kind, {"state": "running"}))) is None


@pytest.mark.parametrize(
    "body",
    [
        '{"envelope_version":"tinyplace.harness.session.v3","scope":{"harness_session_id":"h"}}',
        '{"envelope_version":"tinyplace.harness.session.v1","scope":{"harness_session_id":""}}',
        '{"just": "json"}',
        "[1, 2]",
        "{not json",
    ],
)
def test_bodies_that_are_not_valid_envelopes_are_plain_text(body: str) -> None:
    event = normalize(raw(body))
    assert event.address.thread == "master"
    assert event.text == body


def test_ids_sent_as_numbers_and_extra_fields_are_accepted() -> None:
    event = normalize(raw("x", id=12345, contentHint="DEFAULT", extra={"a": 1}))
    assert event.event_id == f"{PEER}:12345"


def test_missing_timestamp_uses_receive_time() -> None:
    payload = raw("x")
    del payload["envelope"]["timestamp"]
    assert normalize(payload).sent_at > 1.7e9


def test_own_echo_is_not_for_the_agent() -> None:
    assert normalize(raw("mine", **{"from": ME})) is None


def test_redelivery_stub_has_the_same_event_id_and_no_text() -> None:
    event = normalize({"envelope": raw("x")["envelope"], "redelivered": True})
    assert event.event_id == f"{PEER}:msg_1733000000000_1"
    assert event.text == "" and event.meta == {"redelivered": True}


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ("not a mapping", "raw"),
        ({"plaintext": "x"}, "envelope"),
        ({"envelope": {"from": PEER}, "plaintext": "x"}, "envelope.id"),
        ({"envelope": {"id": "m"}, "plaintext": "x"}, "envelope.from"),
        ({"envelope": {"id": "m", "from": PEER}, "plaintext": 5}, "plaintext"),
        (
            raw({**V1, "scope": {"wrapper_session_id": "x" * 300}}),
            "plaintext.scope.wrapper_session_id",
        ),
        (
            raw({**V1, "scope": {"wrapper_session_id": "a\u0000b"}}),
            "plaintext.scope.wrapper_session_id",
        ),
    ],
)
def test_malformed_payloads_say_where(payload: Any, where: str) -> None:
    with pytest.raises(NormalizeError) as caught:
        normalize(payload)
    assert caught.value.where == where

"""normalize on the shapes real tiny.place peers send, and on mutations of them.

Each payload below is written in our own values after a shape published by the
tiny.place SDKs, the OpenHuman orchestration ingest and the Claude/Codex
harness plugins (the source of each is named above it). What normalize sees is
the relay envelope's routing fields plus the decrypted body, as the mailbox
reader hands them to `ctx.ingest`; the flat shapes (relay envelope with the
plaintext beside it, the SDK's `DecryptedMessage`) are accepted too.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from backchannel.errors import NormalizeError
from backchannel.model import Event
from backchannel.storable import storable_event
from backchannel.store import Inbound, SQLiteStore
from backchannel.testing import mutate_payload
from backchannel_tinyplace.normalize import normalize_relay_message
from backchannel_tinyplace.testing import v2_frame

ME = "7xKXtg2CW87d97TXJSDpbD5jBkheTqA83TZRuJosgAsU"
PEER = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"
#: the same kind of key in the SDK's base64 address form (has "/", "+" and "=")
PEER_B64 = "q/8Jm+3sZ0oYb1xv7Kc2dE4fGh5iJk6lMn7oPq8rSt0="


def relay(**fields: Any) -> dict[str, Any]:
    """A relay mailbox entry's routing fields, as `GET /messages` lists them.

    Shape: the SDKs' `MessageEnvelope` (id, from, to, ISO timestamp, deviceId
    int, type, optional contentHint); body and signal are left out because the
    mailbox reader strips the ciphertext before normalize sees the message.
    """
    return {
        "id": "msg_1764500000000_3",
        "from": PEER,
        "to": ME,
        "timestamp": "2026-11-30T09:15:02.481Z",
        "deviceId": 1,
        "type": "CIPHERTEXT",
        **fields,
    }


def wrap(decrypted: Any, **fields: Any) -> dict[str, Any]:
    plaintext = (
        decrypted if isinstance(decrypted, str) else json.dumps(decrypted, ensure_ascii=False)
    )
    return {"envelope": relay(**fields), "plaintext": plaintext}


# --- bodies ---------------------------------------------------------------------

# Rust SDK, sdk/rust/src/types/harness.rs test SAMPLE (and the TS SessionEnvelopeV1
# type): a wrapped Claude session's agent message, session-scoped, full frame.
CLAUDE_V1: dict[str, Any] = {
    "envelope_version": "tinyplace.harness.session.v1",
    "version": 1,
    "bucket": {"unit": "hour", "start": "2026-11-30T09:00:00Z", "end": "2026-11-30T10:00:00Z"},
    "scope": {
        "type": "session",
        "key": "sess-42",
        "cwd": "/home/dev/shop",
        "wrapper_session_id": "0b6f8c3e-wrap",
        "harness_session_id": "claude-7781",
    },
    "harness": {"provider": "claude", "command": "claude", "argv": ["--resume"]},
    "message": {
        "id": "m-31",
        "line": 12,
        "role": "agent",
        "text": "Tests pass; pushing the branch now.",
        "timestamp": "2026-11-30T09:15:01Z",
    },
    "source": {"path": "/home/dev/.claude/p.jsonl", "record_type": "assistant"},
}

# OpenHuman orchestration ingest test ENVELOPE: folder scope, Codex, role "user"
# (the peer relaying its human's words), no bucket and no source frame.
CODEX_USER_FOLDER_V1: dict[str, Any] = {
    "envelope_version": "tinyplace.harness.session.v1",
    "version": 1,
    "scope": {
        "type": "folder",
        "key": "my-repo",
        "cwd": "/w",
        "wrapper_session_id": "w-folder-1",
        "harness_session_id": "h-folder-1",
    },
    "harness": {"provider": "codex", "command": "codex", "argv": []},
    "message": {
        "id": "m7",
        "line": 7,
        "role": "user",
        "text": "please rebase on main",
        "timestamp": "2026-11-30T09:10:00Z",
    },
}

# Codex plugin mcp/format.mjs encodeEnvelope: plugin-built v1 with the `tp`
# extension; harness id empty, so wrapper_session_id is "<agent>:<label>"; line 0
# always; message id "msg-<hex>"; a reply carries tp.in_reply_to and to_session.
CODEX_PLUGIN_REPLY: dict[str, Any] = {
    "envelope_version": "tinyplace.harness.session.v1",
    "version": 1,
    "bucket": {
        "unit": "minute",
        "start": "2026-11-30T09:15:00.000Z",
        "end": "2026-11-30T09:16:00.000Z",
    },
    "scope": {
        "type": "session",
        "key": f"{PEER}:codex:1",
        "cwd": "/srv/app",
        "wrapper_session_id": f"{PEER}:codex:1",
        "harness_session_id": "",
    },
    "harness": {"provider": "codex", "command": "tinyplace-codex-plugin", "argv": []},
    "message": {
        "id": "msg-5e1d0c2b9a8f7e6d5c",
        "line": 0,
        "role": "agent",
        "text": "Done — see PR #12.",
        "timestamp": "2026-11-30T09:15:02.100Z",
    },
    "source": {"path": "plugin", "record_type": "dm"},
    "tp": {"v": 1, "from_session": "codex:1", "to_session": "reviewer", "in_reply_to": "msg-a1"},
}

# Codex plugin: the same builder with `auto: true` (its auto-responder's loop guard).
CODEX_PLUGIN_AUTO: dict[str, Any] = {
    **CODEX_PLUGIN_REPLY,
    "tp": {"v": 1, "from_session": "codex:1", "auto": True},
}

# Claude/Codex plugin agent-daemon notifyClosedTargets: a "session closed" notice,
# role "system", auto-tagged, threaded into the sender's conversation id.
CLOSED_SESSION_NOTICE: dict[str, Any] = {
    **CODEX_PLUGIN_REPLY,
    "scope": {**CODEX_PLUGIN_REPLY["scope"], "wrapper_session_id": "conv-uuid-9"},
    "message": {
        **CODEX_PLUGIN_REPLY["message"],
        "id": "sysclosed-msg-a1",
        "role": "system",
        "text": 'The session "claude:2" you addressed is no longer active.',
    },
    "tp": {
        "v": 1,
        "from_session": "system",
        "to_session": "codex:1",
        "in_reply_to": "msg-a1",
        "auto": True,
    },
}

# OpenHuman SessionEnvelopeV1::outgoing (harness conformance test): the owner's
# side writes role "owner" and puts one id in both session fields.
OPENHUMAN_OUTGOING: dict[str, Any] = {
    "envelope_version": "tinyplace.harness.session.v1",
    "version": 1,
    "bucket": {"unit": "minute", "start": "", "end": ""},
    "scope": {
        "type": "session",
        "key": "h9",
        "cwd": "",
        "wrapper_session_id": "h9",
        "harness_session_id": "h9",
    },
    "harness": {"provider": "", "command": "", "argv": []},
    "message": {
        "id": "m9",
        "line": 0,
        "role": "owner",
        "text": "reply body",
        "timestamp": "2026-07-04T00:00:00Z",
    },
    "source": {"path": "", "record_type": ""},
}

# Harness conformance test "legacy envelope with no per-pair id": only the
# version and a harness session id; no message at all.
LEGACY_NO_MESSAGE: dict[str, Any] = {
    "envelope_version": "tinyplace.harness.session.v1",
    "scope": {"harness_session_id": "h-only"},
}

# Codex harness wrapper: an agent message with `phase` (commentary vs final).
CODEX_PHASE: dict[str, Any] = {
    **CLAUDE_V1,
    "harness": {"provider": "codex", "command": "codex", "argv": ["exec"]},
    "message": {**CLAUDE_V1["message"], "phase": "commentary", "text": "Looking at the tests…"},
}


# Claude plugin hooks (session_info emit): the daemon's intro to its owner, v2
# kind "session_info", harness id may be empty, id a sha256 hex, seq 0.
SESSION_INFO: dict[str, Any] = {
    **v2_frame(
        "session_info",
        {
            "agent_address": PEER,
            "title": "shop · main",
            "capabilities": ["user_prompt", "agent_message", "status"],
            "resumed": False,
            "started_at": "2026-11-30T09:00:00.000Z",
        },
        id="4f1c" * 16,
        seq=0,
    ),
    "scope": {
        "type": "session",
        "key": f"{PEER}:claude:1",
        "cwd": "/srv/shop",
        "wrapper_session_id": "5d2f-uuid",
        "harness_session_id": "",
    },
}

# the smallest v2 the conformance tests accept: harness id only, event kind + payload
MINIMAL_V2: dict[str, Any] = {
    "envelope_version": "tinyplace.harness.session.v2",
    "scope": {"harness_session_id": "h-only"},
    "event": {"kind": "agent_message", "payload": {"text": "x"}},
}

# Codex plugin mcp/format.mjs legacy sentinels (pre-envelope peers): SOH-delimited
# "tp-auto" marks an auto-reply, "re:<id>" names the message answered.
LEGACY_AUTO_REPLY = "\x01tp-auto\x01\x01re:msg-77\x01On it."
LEGACY_AUTO_ONLY = "\x01tp-auto\x01ack"
# Codex plugin mcp/server.mjs RESET_SENTINEL: the ping that re-runs X3DH after drops
REHANDSHAKE_PING = "\x01tp-rehandshake\x01"

UNICODE_DM = "héllo 👋🏽 — עברית, 日本語, 👩‍👩‍👧 and a zero\u200bwidth space"
LONG_DM = ("A long status report line. " * 1200).strip()
CODE_DM = '{"foo": 1, "note": "a JSON snippet pasted in chat, not an envelope"}'


# --- the cases ------------------------------------------------------------------


def normalize(raw: Any) -> Event | None:
    return normalize_relay_message(raw, "tp", ME)


def test_claude_v1_agent_message_threads_under_the_wrapper_session() -> None:
    event = normalize(wrap(CLAUDE_V1))
    assert event is not None
    assert event.address.thread == "0b6f8c3e-wrap" and event.conversation_kind == "thread"
    assert event.text == "Tests pass; pushing the branch now."
    assert event.sender.id == PEER and event.sender.is_bot
    assert event.platform_message_id == "m-31"
    assert event.meta["provider"] == "claude" and event.meta["cwd"] == "/home/dev/shop"
    assert event.meta["line"] == 12
    assert event.sent_at == pytest.approx(1796030102.481)


def test_openhuman_folder_envelope_role_user_is_the_peers_human() -> None:
    event = normalize(wrap(CODEX_USER_FOLDER_V1))
    assert event is not None
    assert event.address.thread == "w-folder-1"
    assert event.sender.id == f"{PEER}#user" and not event.sender.is_bot
    assert event.text == "please rebase on main"


def test_codex_plugin_reply_keeps_in_reply_to_and_routes_on_the_label_session() -> None:
    event = normalize(wrap(CODEX_PLUGIN_REPLY))
    assert event is not None
    assert event.address.thread == f"{PEER}:codex:1"
    assert event.reply_to == "msg-a1"
    assert event.meta["tp"]["from_session"] == "codex:1"
    assert event.mentions_me is True


def test_codex_plugin_auto_reply_does_not_call_for_an_answer() -> None:
    event = normalize(wrap(CODEX_PLUGIN_AUTO))
    assert event is not None and event.mentions_me is False


def test_closed_session_notice_is_an_auto_reply_from_the_peer_in_the_shared_thread() -> None:
    event = normalize(wrap(CLOSED_SESSION_NOTICE))
    assert event is not None
    assert event.address.thread == "conv-uuid-9" and event.reply_to == "msg-a1"
    assert event.mentions_me is False and event.sender.id == PEER
    assert event.meta["role"] == "system"


def test_openhuman_outgoing_owner_envelope_is_a_session_message() -> None:
    event = normalize(wrap(OPENHUMAN_OUTGOING))
    assert event is not None
    assert event.address.thread == "h9" and event.text == "reply body"
    assert "provider" not in event.meta  # empty strings are not facts


def test_legacy_envelope_without_a_message_carries_no_words() -> None:
    assert normalize(wrap(LEGACY_NO_MESSAGE)) is None


def test_codex_phase_is_kept_as_data() -> None:
    event = normalize(wrap(CODEX_PHASE))
    assert event is not None and event.meta["phase"] == "commentary"


@pytest.mark.parametrize(
    ("kind", "payload", "text"),
    [
        ("agent_message", {"text": "hi there"}, "hi there"),
        ("user_prompt", {"text": "do it", "source": "human"}, "do it"),
        ("error", {"message": "boom", "fatal": True}, "[error] boom"),
        (
            "approval_request",
            {"call_id": "c9", "tool_name": "rm", "display": "rm -rf x", "reason": "destructive"},
            "[approval requested] rm -rf x (destructive)",
        ),
    ],
)
def test_v2_frames_with_words(kind: str, payload: dict[str, Any], text: str) -> None:
    event = normalize(wrap(v2_frame(kind, payload)))
    assert event is not None and event.text == text and event.address.thread == "w2"


# TS SDK types/harness.ts: `HarnessEventRole = "owner" | "agent"`, "owner == v1
# user", fixed per kind (owner iff user_prompt); `UserPromptPayload.source` is
# "human" | "openhuman_inject". The wrappers write role "owner" on every prompt.
@pytest.mark.parametrize(
    ("role", "source", "human"),
    [
        ("owner", "human", True),
        (None, "human", True),  # a frame that leaves the role out: owner, by its kind
        ("user", "human", True),  # the v1 word, from a peer that mixes them
        ("agent", "human", False),  # taken at its word
        ("owner", "openhuman_inject", False),  # the orchestrator wrote it, not the human
    ],
)
def test_v2_user_prompt_roles(role: str | None, source: str, human: bool) -> None:
    frame = v2_frame("user_prompt", {"text": "do it", "source": source}, role=role)
    if role is None:
        del frame["event"]["role"]
    event = normalize(wrap(frame))
    assert event is not None and event.text == "do it"
    if human:
        assert event.sender.id == f"{PEER}#user" and not event.sender.is_bot
    else:
        assert event.sender.id == PEER and event.sender.is_bot
    assert event.meta["role"] == (role or "owner")
    assert event.meta["prompt_source"] == source


@pytest.mark.parametrize("role", ["owner", "user"])
def test_v2_agent_words_claiming_a_human_role_are_still_the_agents(role: str) -> None:
    # the schema says owner iff user_prompt: an agent_message that says "owner" would pass
    # the peer agent's words off as its human's, and a person's message resets bot_turns
    event = normalize(wrap(v2_frame("agent_message", {"text": "done"}, role=role)))
    assert event is not None and event.text == "done"
    assert event.sender.id == PEER and event.sender.is_bot
    assert event.meta["role"] == "agent"


def test_v2_agent_words_are_the_peer_agent() -> None:
    frames: list[tuple[str, dict[str, Any]]] = [
        ("agent_message", {"text": "done"}),
        ("error", {"message": "boom", "fatal": True}),
        ("approval_request", {"tool_name": "rm", "display": "rm -rf x"}),
    ]
    for kind, payload in frames:
        got = normalize(wrap(v2_frame(kind, payload)))
        assert got is not None and got.sender.id == PEER and got.sender.is_bot
        assert "prompt_source" not in got.meta


@pytest.mark.parametrize(
    "body",
    [
        v2_frame("tool_call", {"call_id": "c1", "tool_name": "Bash", "input": {"cmd": "ls"}}),
        v2_frame("tool_result", {"call_id": "c1", "ok": True, "exit_code": 0, "output": "done"}),
        v2_frame("status", {"state": "running_tool", "detail": "compiling"}),
        v2_frame("lifecycle", {"phase": "session_end"}),
        v2_frame("agent_thinking", {"text": "hmm"}),
        v2_frame("quantum_teleport", {"flux": 42}),
        v2_frame("agent_message", {"text": ""}),
        SESSION_INFO,
    ],
)
def test_v2_frames_without_words_are_not_for_the_agent(body: dict[str, Any]) -> None:
    assert normalize(wrap(body)) is None


def test_minimal_v2_falls_back_to_the_harness_session() -> None:
    event = normalize(wrap(MINIMAL_V2))
    assert event is not None and event.address.thread == "h-only" and event.text == "x"


def test_legacy_sentinel_auto_reply_is_decoded() -> None:
    event = normalize(wrap(LEGACY_AUTO_REPLY))
    assert event is not None
    assert event.text == "On it." and event.reply_to == "msg-77"
    assert event.mentions_me is False and event.address.thread == "master"
    only = normalize(wrap(LEGACY_AUTO_ONLY))
    assert only is not None and only.text == "ack" and only.reply_to is None


def test_session_reset_ping_is_not_for_the_agent() -> None:
    assert normalize(wrap(REHANDSHAKE_PING, type="PREKEY_BUNDLE")) is None


def test_unicode_long_and_json_looking_plain_dms_stay_whole() -> None:
    for text in (UNICODE_DM, LONG_DM, CODE_DM):
        event = normalize(wrap(text))
        assert event is not None and event.text == text and event.address.thread == "master"


def test_deeply_nested_json_body_is_plain_text_not_a_crash() -> None:
    body = "{" + "[" * 50_000
    event = normalize(wrap('{"a":' + "[" * 50_000 + "]" * 50_000 + "}"))
    assert event is not None and event.address.thread == "master"
    assert normalize(wrap(body)) is not None


def test_prekey_bundle_entry_with_signal_fields_and_content_hint() -> None:
    # SDK MessageEnvelope + SignalMetadata (camelCase): a first message opening a session
    raw = wrap(
        "first contact",
        type="PREKEY_BUNDLE",
        contentHint="RESENDABLE",
        body="AAECAwQ=",
        signal={
            "ephemeralKey": "base64key",
            "signedPreKeyId": "1",
            "oneTimePreKeyId": "17",
            "messageNumber": 0,
            "previousChainLength": 0,
        },
    )
    event = normalize(raw)
    assert event is not None and event.text == "first contact"
    assert event.meta["relay_type"] == "PREKEY_BUNDLE"


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        ("2026-11-30T09:15:02.481Z", 1796030102.481),
        ("2026-11-30T09:15:02.481123+00:00", 1796030102.481123),
        ("2026-11-30T10:15:02+01:00", 1796030102.0),
        (1796030102481, 1796030102.481),  # epoch milliseconds
        (1796030102, 1796030102.0),
        ("1796030102481", 1796030102.481),
    ],
)
def test_relay_timestamps_in_the_forms_peers_send(timestamp: Any, expected: float) -> None:
    event = normalize(wrap("t", timestamp=timestamp))
    assert event is not None and event.sent_at == pytest.approx(expected)


@pytest.mark.parametrize(
    "timestamp",
    [
        None,
        "",
        "yesterday",
        pytest.param(10**400, id="huge"),
        float("nan"),
        -5,
        True,
        # readable, but no time a message is sent at: the store would refuse the message
        pytest.param(1767225600000000, id="microseconds"),
        pytest.param("1767225600000000", id="microseconds-string"),
        "9999-12-31T00:00:00Z",
        "0001-01-01T00:00:00Z",
    ],
)
def test_unreadable_timestamps_fall_back_to_receive_time(timestamp: Any) -> None:
    event = normalize(wrap("t", timestamp=timestamp))
    assert event is not None and 1.7e9 < event.sent_at < time.time() + 60
    assert isinstance(storable_event(event, event.address.account), type(event))


def test_base64_sender_address_is_kept_verbatim() -> None:
    event = normalize(wrap("hi", **{"from": PEER_B64}))
    assert event is not None and event.address.chat == PEER_B64
    assert event.event_id == f"{PEER_B64}:msg_1764500000000_3"


def test_flat_relay_envelope_with_plaintext_beside_it() -> None:
    event = normalize({**relay(), "body": "AAEC", "plaintext": "flat"})
    assert event is not None and event.text == "flat"


def test_sdk_decrypted_message_shape_with_bytes() -> None:
    # tinyplace.api.messages.DecryptedMessage: id, sender, plaintext (bytes), timestamp
    raw = {
        "id": "m-dec",
        "sender": PEER,
        "plaintext": json.dumps(CLAUDE_V1).encode(),
        "timestamp": "2026-11-30T09:15:02.481Z",
    }
    event = normalize(raw)
    assert event is not None and event.address.thread == "0b6f8c3e-wrap"
    with pytest.raises(NormalizeError, match="UTF-8"):
        normalize({**raw, "plaintext": b"\xff\xfe"})


def test_already_parsed_envelope_body_is_accepted() -> None:
    event = normalize({"envelope": relay(), "plaintext": CLAUDE_V1})
    assert event is not None and event.address.thread == "0b6f8c3e-wrap"


def test_redelivery_stub_and_echo() -> None:
    stub = normalize({"envelope": relay(), "redelivered": True})
    assert stub is not None and stub.event_id == f"{PEER}:msg_1764500000000_3"
    assert normalize(wrap("mine", **{"from": ME})) is None


@pytest.mark.parametrize(
    "raw",
    [
        {"envelope": relay(id=None), "plaintext": "x"},
        {"envelope": relay(id=""), "plaintext": "x"},
        {"envelope": {k: v for k, v in relay().items() if k != "from"}, "plaintext": "x"},
        {"envelope": relay()},
        {"envelope": relay(), "plaintext": None},
        {"envelope": "not an object", "plaintext": "x"},
        {"plaintext": "x"},
        [],
    ],
)
def test_broken_relay_shapes_are_one_line_normalize_errors(raw: Any) -> None:
    with pytest.raises(NormalizeError) as caught:
        normalize(raw)
    assert "\n" not in str(caught.value) and caught.value.where


async def test_lone_surrogate_escapes_and_nul_are_stored_not_retried_forever(
    store: SQLiteStore,
) -> None:
    # JSON may escape half a surrogate pair ("\\ud800"); UTF-8 cannot hold it, and a
    # store that refuses the row would leave the message (and its sender) stuck
    body = (
        '{"envelope_version":"tinyplace.harness.session.v1",'
        '"scope":{"wrapper_session_id":"w"},'
        '"harness":{"provider":"p\\udc00"},'
        '"message":{"id":"m\\ud83d","text":"half \\ud800 pair, a NUL \\u0000, a whole \\ud83d\\ude00"},'
        '"tp":{"v":1,"from_session":"\\udfff"}}'
    )
    event = normalize({"envelope": relay(), "plaintext": body})
    assert event is not None
    assert event.text == "half \ufffd pair, a NUL \x00, a whole 😀"
    (appended,) = await store.append_inbound([Inbound(event, triggers=True)])
    assert appended.status != "duplicate"
    flat = normalize({**relay(id="r\ud800"), "plaintext": "x\udc00y"})
    assert flat is not None and flat.text == "x\ufffdy"
    (again,) = await store.append_inbound([Inbound(flat, triggers=True)])
    assert again.status != "duplicate"


# --- mutations ------------------------------------------------------------------

SEEDS: list[Any] = [
    CLAUDE_V1,
    CODEX_USER_FOLDER_V1,
    CODEX_PLUGIN_REPLY,
    CODEX_PLUGIN_AUTO,
    CLOSED_SESSION_NOTICE,
    OPENHUMAN_OUTGOING,
    LEGACY_NO_MESSAGE,
    CODEX_PHASE,
    SESSION_INFO,
    MINIMAL_V2,
    v2_frame("agent_message", {"text": "hi"}),
    v2_frame("approval_request", {"tool_name": "rm", "display": "rm -rf x", "reason": "r"}),
    v2_frame("error", {"message": "boom"}),
    LEGACY_AUTO_REPLY,
    REHANDSHAKE_PING,
    UNICODE_DM,
    CODE_DM,
]
_ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    10**30,
    10**400,
    1.5,
    float("inf"),
    True,
    "",
    " ",
    "\x00",
    "x" * 600,
    [],
    [None],
    {},
    {"nested": None},
    "🙂",
    "\ud800",
]


def _mutate(node: Any, rng: random.Random) -> Any:
    """Return a copy of `node` with one random key dropped, retyped, or nulled."""
    return mutate_payload(node, rng, changes=(1, 1), odd_values=_ODD_VALUES, drop_chance=0.3)


def test_mutated_real_payloads_yield_only_events_none_or_normalize_errors() -> None:
    rng = random.Random(7)
    outcomes = {"event": 0, "none": 0, "error": 0}
    for _ in range(3000):
        body = rng.choice(SEEDS)
        if isinstance(body, dict) and rng.random() < 0.7:
            body = _mutate(body, rng)
            for _ in range(rng.randrange(3)):
                body = _mutate(body, rng) if isinstance(body, dict) else body
        plaintext = json.dumps(body) if not isinstance(body, str) else body
        raw: Any = {"envelope": relay(), "plaintext": plaintext}
        if rng.random() < 0.4:
            raw = _mutate(raw, rng)
        try:
            result = normalize(raw)
        except NormalizeError as error:
            assert "\n" not in str(error)
            outcomes["error"] += 1
            continue
        assert result is None or isinstance(result, Event)
        if isinstance(result, Event):
            assert isinstance(result.text, str) and isinstance(result.sent_at, float)
            assert result.sent_at == result.sent_at  # not NaN
            json.dumps(dict(result.meta))  # meta stays JSON-able for the store
            for text in (result.text, result.event_id, *result.address.key.split("/")):
                text.encode("utf-8")  # no lone surrogates: the store writes UTF-8
        outcomes["event" if result is not None else "none"] += 1
    # the mutations exercise all three outcomes, not just one
    assert all(count > 50 for count in outcomes.values()), outcomes

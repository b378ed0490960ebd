"""The harness session envelope that rides inside a decrypted tiny.place DM.

A decrypted DM body is either plain text or a JSON session envelope:

- ``tinyplace.harness.session.v1``: ``scope{wrapper_session_id,
  harness_session_id, cwd, ...}``, ``harness{provider, ...}``, one
  ``message{id, line, role, text, timestamp}``, and an optional ``tp{v,
  from_session, to_session, in_reply_to}`` extension block;
- ``tinyplace.harness.session.v2``: the same scope and harness, with one
  ``event{id, seq, ts, role, kind, payload}`` instead of ``message``.

Field names are snake_case on the wire. An envelope is valid when its version
tag matches and it names a session (``wrapper_session_id``, else
``harness_session_id``); anything else is a plain DM, as in the reference
parsers. Everything here is untrusted text from a peer.

Roles: v1 writes ``"user"`` for the peer's human and ``"agent"`` for the
session; v2 writes ``"owner"`` (the TS SDK's ``HarnessEventRole``: "owner ==
v1 user", set iff ``kind == "user_prompt"``) and ``"agent"``; the owner side's
own v1 envelopes (OpenHuman's ``SessionEnvelopeV1::outgoing``) say ``"owner"``
too. A v2 ``user_prompt`` names who wrote it in ``payload.source``: ``"human"``,
or ``"openhuman_inject"`` (the OpenHuman orchestrator's prompt, not its human's).

One JSON body is not a conversation at all: the SDK's group messaging hands a
group's sender key to each member over this same 1:1 channel
(``{"kind": "tinyplace/group-sender-key", ..., "distribution": {"chainKey":
...}}``). backchannel takes no part in group chats; such a body carries no
text, and nothing of it is kept.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from attrs import frozen
from tinyplace.messaging.group import GROUP_KEY_DM_KIND, parse_group_key_distribution

__all__ = [
    "ENVELOPE_V1",
    "ENVELOPE_V2",
    "HUMAN_ROLES",
    "SESSION_LABEL",
    "ParsedBody",
    "build_v1_envelope",
    "clean_text",
    "new_message_id",
    "parse_body",
]

ENVELOPE_V1 = "tinyplace.harness.session.v1"
ENVELOPE_V2 = "tinyplace.harness.session.v2"

#: v2 event kinds that carry words for the other side; the rest is progress noise
_V2_TEXT_KINDS = {"user_prompt", "agent_message"}
#: roles of the peer's human: v2 "owner" (also in the owner side's v1), v1 "user"
HUMAN_ROLES = frozenset({"owner", "user"})
#: the shape the harness plugins accept for a session label (`codex:1`, `reviewer`)
SESSION_LABEL = re.compile(r"[\w:-]{1,32}")
#: the pre-envelope auto-reply / reply-to control header (inside the ciphertext)
_AUTO_SENTINEL = "\x01tp-auto\x01"
_REPLY_OPEN = "\x01re:"
_REPLY_CLOSE = "\x01"
#: a harness plugin's session-reset ping: re-runs X3DH, carries no words
_REHANDSHAKE = "\x01tp-rehandshake\x01"


@frozen
class ParsedBody:
    """A decrypted DM body, read.

    `session` is None for a plain DM. `text` is None when the body is an
    envelope event that carries no words for a conversation (a v2 status or
    tool event), or a group sender-key handoff (`group_key_for` is then the
    group's id, "" when unreadable).
    """

    text: str | None
    session: str | None = None
    role: str | None = None
    message_id: str | None = None
    envelope_version: str | None = None
    provider: str | None = None
    cwd: str | None = None
    line: int | None = None
    event_kind: str | None = None
    timestamp: str | None = None
    phase: str | None = None
    tp: Mapping[str, Any] | None = None
    #: a v2 `user_prompt`'s `payload.source`: "human" or "openhuman_inject"
    prompt_source: str | None = None
    group_key_for: str | None = None


def parse_body(plaintext: str) -> ParsedBody:
    """Read a decrypted body: a v1 or v2 session envelope, else plain text."""
    if not plaintext.lstrip().startswith("{"):
        return _plain(plaintext)
    try:
        data = json.loads(plaintext, object_pairs_hook=_clean_object)
    except (ValueError, RecursionError):  # RecursionError: a peer's deeply nested JSON
        return _plain(plaintext)
    if not isinstance(data, dict):
        return _plain(plaintext)
    if data.get("kind") == GROUP_KEY_DM_KIND:
        return _group_key_handoff(plaintext)
    version = data.get("envelope_version")
    session = _session_key(data.get("scope"))
    if version not in (ENVELOPE_V1, ENVELOPE_V2) or session is None:
        return _plain(plaintext)
    harness = _mapping(data.get("harness"))
    scope = _mapping(data.get("scope"))
    tp = _mapping(data.get("tp"))
    common: dict[str, Any] = {
        "session": session,
        "envelope_version": version,
        "provider": _str(harness.get("provider")),
        "cwd": _str(scope.get("cwd")),
        "tp": {key: value for key, value in tp.items() if isinstance(value, str | int | bool)},
    }
    if version == ENVELOPE_V1:
        message = _mapping(data.get("message"))
        line = message.get("line")
        return ParsedBody(
            text=_str(message.get("text")) or None,
            role=_str(message.get("role")),
            message_id=_id(message.get("id")),
            line=line if isinstance(line, int) and not isinstance(line, bool) else None,
            timestamp=_str(message.get("timestamp")),
            phase=_str(message.get("phase")),
            **common,
        )
    event = _mapping(data.get("event"))
    kind = _str(event.get("kind")) or "unknown"
    payload = _mapping(event.get("payload"))
    return ParsedBody(
        text=_v2_text(kind, payload),
        role=_v2_role(kind, _str(event.get("role"))),
        message_id=_id(event.get("id")),
        event_kind=kind,
        timestamp=_str(event.get("ts")),
        prompt_source=_str(payload.get("source")) if kind == "user_prompt" else None,
        **common,
    )


def _v2_role(kind: str, named: str | None) -> str:
    """The schema fixes the role by kind (owner iff user_prompt). A frame without one gets
    that; a user_prompt is taken at its word (even one that says it is the agent's), but
    any other kind naming a human role is the agent's: an agent_message claiming "owner"
    passed the agent's words off as its human's (a person's message resets bot_turns)."""
    if kind == "user_prompt":
        return named or "owner"
    return named if named is not None and named not in HUMAN_ROLES else "agent"


def build_v1_envelope(
    session: str,
    text: str,
    message_id: str,
    *,
    in_reply_to: str | None = None,
    to_session: str | None = None,
    from_session: str | None = None,
    now: float | None = None,
) -> str:
    """Return a v1 envelope carrying `text` in `session`, as compact JSON.

    The session id goes into both `wrapper_session_id` and
    `harness_session_id`, so a compliant peer threads its reply under it.
    `to_session` is the label the peer's harness plugin gave its session (its
    `tp.from_session`): that plugin routes a reply to the session so named.
    """
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    start = moment.replace(second=0, microsecond=0)
    end = datetime.fromtimestamp(start.timestamp() + 60, UTC)
    tp: dict[str, Any] = {"v": 1}
    if from_session:
        tp["from_session"] = from_session
    if to_session:
        tp["to_session"] = to_session
    if in_reply_to:
        tp["in_reply_to"] = in_reply_to
    envelope = {
        "envelope_version": ENVELOPE_V1,
        "version": 1,
        "bucket": {"unit": "minute", "start": _iso(start), "end": _iso(end)},
        "scope": {
            "type": "session",
            "key": session,
            "cwd": "",
            "wrapper_session_id": session,
            "harness_session_id": session,
        },
        "harness": {"provider": "backchannel", "command": "backchannel", "argv": []},
        "message": {
            "id": message_id,
            "line": 0,
            "role": "agent",
            "text": text,
            "timestamp": _iso(moment),
        },
        "source": {"path": "backchannel", "record_type": "dm"},
        "tp": tp,
    }
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)


def new_message_id() -> str:
    """Return a fresh relay message id, unique across processes and restarts."""
    return f"msg_{int(time.time() * 1000)}_{secrets.token_hex(6)}"


def _session_key(scope: Any) -> str | None:
    scope = _mapping(scope)
    for key in ("wrapper_session_id", "harness_session_id"):
        value = scope.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def clean_text(text: str) -> str:
    """Return `text` with lone UTF-16 surrogates (from JSON ``\\ud800`` escapes) as U+FFFD.

    A peer's JSON may escape half a surrogate pair; such a string cannot be
    written as UTF-8, so the store would refuse the message on every retry.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _clean_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {
        clean_text(key): clean_text(value) if isinstance(value, str) else value
        for key, value in pairs
    }


def _group_key_handoff(plaintext: str) -> ParsedBody:
    """Read a group sender-key handoff: no text, only the group it is for.

    Its `distribution.chainKey` decrypts the group's messages: it must reach no
    transcript, model, log or dead letter. A body that says it is a handoff but
    that the SDK cannot read (a field missing or of the wrong type) is kept out
    the same way: it may hold a key all the same.
    """
    handoff = parse_group_key_distribution(plaintext.strip())
    group = handoff["groupId"] if handoff is not None else ""
    return ParsedBody(text=None, group_key_for=clean_text(group))


def _plain(plaintext: str) -> ParsedBody:
    """Read a plain DM, decoding the harness plugins' legacy control header.

    Before the v1 envelope, the Claude/Codex plugins marked an auto-reply with
    ``\\x01tp-auto\\x01`` and the answered message id with ``\\x01re:<id>\\x01``
    in front of the text; peers on old versions still send that. Their
    session-reset ping (``\\x01tp-rehandshake\\x01``) carries no words.
    """
    if plaintext == _REHANDSHAKE:
        return ParsedBody(text=None)
    if not plaintext.startswith(_AUTO_SENTINEL):
        return ParsedBody(text=plaintext or None)
    text = plaintext[len(_AUTO_SENTINEL) :]
    tp: dict[str, Any] = {"auto": True}
    if text.startswith(_REPLY_OPEN):
        end = text.find(_REPLY_CLOSE, len(_REPLY_OPEN))
        if end != -1:
            tp["in_reply_to"] = text[len(_REPLY_OPEN) : end]
            text = text[end + len(_REPLY_CLOSE) :]
    return ParsedBody(text=text or None, tp=tp)


def _v2_text(kind: str, payload: Mapping[str, Any]) -> str | None:
    if kind in _V2_TEXT_KINDS:
        return _str(payload.get("text")) or None
    if kind == "error":
        return f"[error] {_str(payload.get('message')) or ''}".rstrip()
    if kind == "approval_request":
        what = _str(payload.get("display")) or _str(payload.get("tool_name")) or "a tool call"
        reason = _str(payload.get("reason"))
        return f"[approval requested] {what}" + (f" ({reason})" if reason else "")
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _id(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) and value else None


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

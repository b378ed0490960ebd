"""A loopback tiny.place relay for tests, and a scriptable peer agent.

`FakeRelay` speaks the relay's wire format on 127.0.0.1 (port 0):

- ``GET /messages?agentId=&limit=`` lists a mailbox (``{"messages": null}``
  when empty), ``PUT /messages`` stores an envelope in the recipient's
  mailbox, ``DELETE /messages/{id}?agentId=`` acks (deletes) it;
- ``GET /keys/{id}/bundle`` serves the pre-key bundle and hands out each
  one-time pre-key once; ``PUT /keys/{id}/prekeys`` and
  ``PUT /keys/{id}/signed-prekey`` publish keys (signatures checked);
  ``GET /keys/{id}/health`` reports the pool;
- ``/contacts`` routes keep the pairing edge (pending, accepted, blocked); a
  DM is refused with 403 ``not_a_contact`` unless the sender is an accepted
  contact, or has at least asked to be one (such messages wait in the
  mailbox until the recipient decides).

Every signed request is verified as the SDK signs it: Ed25519 over
``METHOD\\nURI\\nDATE\\nNONCE\\nsha256(body)``, rejecting a bad signature,
a date more than `max_skew` seconds off, and a nonce seen before (401).

Faults: `fail_next` ("rate_limited", "server_error", "stored_then_error",
"rejected", "hang", "stored_then_hang", "reset"), `duplicate_next_listing`, `redeliver`,
`inject_undecryptable`. Group chats: `fan_out` puts a group envelope (the SDK's
`build_group_envelope`) in members' mailboxes, as the relay's group fan-out does.

`RelayPeer` is another agent on the relay, driven by test code with the
real SDK: signing, key publication, `send_encrypted`, decryption.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from attrs import define, field
from backchannel.testing import Watch
from backchannel.testing.loopback import serve_loopback
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from tinyplace import LocalSigner, TinyPlaceClient, TinyPlaceError
from tinyplace.api.messages import decode_agent_address
from tinyplace.crypto import derive_crypto_id
from tinyplace.signal import MemorySessionStore, SignalSession, X25519KeyPair
from tinyplace.signal.crypto import ed25519_pub_to_x25519_pub, ed25519_seed_to_x25519_keypair
from tinyplace.signal.keys import (
    build_pre_keys_request,
    build_signed_pre_key_request,
    generate_pre_keys,
    generate_signed_pre_key,
    verify_pre_key_signature,
)

from .contacts import ContactsApi
from .envelope import build_v1_envelope, clean_text, new_message_id, parse_body

__all__ = ["FakeRelay", "RelayPeer", "undecryptable_envelope", "v2_frame"]

Tap = Callable[[dict[str, Any]], Awaitable[None]]


@define
class _Fault:
    kind: str
    method: str
    path: str
    retry_after: float


@define
class _Relationship:
    requester: str
    addressee: str
    status: str  # pending | accepted | blocked
    blocked_by: str | None = None
    since: str = field(factory=lambda: _now_iso())

    def other(self, me: str) -> str:
        return self.addressee if me == self.requester else self.requester


def undecryptable_envelope(to: str, sender: str, **fields: Any) -> dict[str, Any]:
    """A relay envelope (CIPHERTEXT from `sender` to `to`) that no key can decrypt.

    `fields` replace or add to its fields (a hostile peer's choices, in tests).
    """
    envelope: dict[str, Any] = {
        "id": new_message_id(),
        "from": sender,
        "to": to,
        "timestamp": "2020-01-01T00:00:00.000Z",
        "deviceId": 1,
        "type": "CIPHERTEXT",
        "body": base64.b64encode(secrets.token_bytes(64)).decode(),
        "signal": {
            "ratchetKey": base64.b64encode(secrets.token_bytes(32)).decode(),
            "messageNumber": 0,
            "previousChainLength": 0,
        },
    }
    envelope.update(fields)
    return envelope


class FakeRelay:
    """A loopback tiny.place relay with fault injection. Use as ``async with FakeRelay() as r``."""

    def __init__(self, *, max_skew: float = 300.0) -> None:
        self.max_skew = max_skew
        self.mailboxes: dict[str, list[dict[str, Any]]] = defaultdict(list)
        #: every envelope ever stored, by (recipient, id), for redelivery
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.acked: list[tuple[str, str]] = []
        #: (method, path, status) of every request, in order
        self.requests: list[tuple[str, str, int]] = []
        self.listings: defaultdict[str, int] = defaultdict(int)
        self.identity_keys: dict[str, str] = {}
        self.signed_prekeys: dict[str, dict[str, Any]] = {}
        self.one_time_prekeys: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self.relationships: dict[frozenset[str], _Relationship] = {}
        self._nonces: dict[str, float] = {}
        self._faults: list[_Fault] = []
        #: requests held unanswered by a "hang" or "stored_then_hang" fault right now
        self.hanging = 0
        self._duplicate_listing: set[str] = set()
        self._taps: dict[str, Tap] = {}
        self._watch = Watch("FakeRelay")
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # lifecycle ---------------------------------------------------------------
    async def __aenter__(self) -> FakeRelay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> str:
        """Serve on 127.0.0.1 on a free port; return the base URL."""
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner, self.url = await serve_loopback(app, shutdown_timeout=1.0)
        return self.url

    async def close(self) -> None:
        """Release hanging requests and stop serving."""
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # test controls -------------------------------------------------------------
    def fail_next(
        self, kind: str, *, method: str = "PUT", path: str = "/messages", retry_after: float = 2.0
    ) -> None:
        """Answer the next matching request with a fault.

        kind: "rate_limited" (429 + Retry-After), "server_error" (500, nothing
        stored), "stored_then_error" (stores the envelope, then 500),
        "rejected" (403 not_a_contact), "hang" (no answer until the client
        gives up; `hanging` counts such requests), "stored_then_hang" (stores
        the envelope, then hangs), "reset" (the connection is dropped without an answer),
        "garbled" (a PUT is stored; answered 200 with a body that is not JSON),
        "cut_body" (a PUT is stored; the answer's body is cut off mid-way).
        """
        self._faults.append(_Fault(kind, method.upper(), path, retry_after))

    def duplicate_next_listing(self, agent_id: str) -> None:
        """List every message of the next mailbox listing for `agent_id` twice."""
        self._duplicate_listing.add(agent_id)

    def redeliver(self, agent_id: str, message_id: str) -> None:
        """Put an already delivered (even acked) envelope back into the mailbox."""
        envelope = self.stored[(agent_id, message_id)]
        self.mailboxes[agent_id].append(dict(envelope))

    def inject_undecryptable(self, to: str, sender: str) -> str:
        """Store a CIPHERTEXT from `sender` that no key can decrypt; return its id."""
        envelope = undecryptable_envelope(to, sender, timestamp=_now_iso())
        self._store(envelope)
        return str(envelope["id"])

    def fan_out(self, envelope: dict[str, Any], members: Iterable[str]) -> None:
        """Put a copy of a group envelope in each member's mailbox, as the group fan-out does.

        `envelope` is one the SDK's `build_group_envelope` made (`to` is the group,
        `signal.senderKeyId` the sender key), or a relay hint; each copy keeps its fields.
        """
        for member in members:
            self.stored[(member, str(envelope["id"]))] = dict(envelope)
            if all(m.get("id") != envelope["id"] for m in self.mailboxes[member]):
                self.mailboxes[member].append(dict(envelope))
        self._watch.changed()

    def make_contacts(self, a: str, b: str) -> None:
        """Record `a` and `b` as accepted contacts (as if one asked and the other accepted)."""
        self.relationships[frozenset((a, b))] = _Relationship(a, b, "accepted")

    def tap(self, agent_id: str, handler: Tap | None) -> None:
        """Hand envelopes sent to `agent_id` to `handler` (awaited before the PUT is answered)
        instead of its mailbox; None removes the tap."""
        if handler is None:
            self._taps.pop(agent_id, None)
        else:
            self._taps[agent_id] = handler

    def mailbox(self, agent_id: str) -> list[dict[str, Any]]:
        """The envelopes waiting for `agent_id`, oldest first."""
        return [dict(m) for m in self.mailboxes.get(agent_id, [])]

    def is_acked(self, agent_id: str, message_id: str) -> bool:
        return (agent_id, message_id) in self.acked

    def sent_by(self, agent_id: str) -> list[dict[str, Any]]:
        """Every envelope `agent_id` sent that the relay stored, oldest first."""
        return [e for e in self.stored.values() if e.get("from") == agent_id]

    async def wait_acked(self, agent_id: str, message_id: str, timeout: float = 10.0) -> None:
        await self.wait_for(
            lambda: self.is_acked(agent_id, message_id), timeout, f"ack of {message_id}"
        )

    async def wait_listed(self, agent_id: str, times: int, timeout: float = 10.0) -> None:
        """Return once `agent_id`'s mailbox has been listed `times` more times from now."""
        target = self.listings[agent_id] + times
        await self.wait_for(lambda: self.listings[agent_id] >= target, timeout, f"{times} listings")

    async def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        """Return once `predicate()` holds (re-checked after every request); AssertionError after `timeout`."""
        await self._watch.wait_for(predicate, timeout, what)

    # http ----------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response = await handler(request)
        except _Refused as refused:
            response = refused.response
        self.requests.append((request.method, request.path, response.status))
        self._watch.changed()
        return response

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        if parts[:1] == ["keys"] and len(parts) == 3 and parts[2] == "bundle" and method == "GET":
            return await self._fault(request) or self._bundle(parts[1])
        agent = self._authenticate(request, body)
        fault = await self._fault(request)
        if fault is not None:
            return fault
        if parts == ["messages"] and method == "GET":
            return await self._list(request, agent)
        if parts == ["messages"] and method == "PUT":
            return await self._put(request, agent, body)
        if len(parts) == 2 and parts[0] == "messages" and method == "DELETE":
            return await self._delete(request, agent, parts[1])
        if parts[:1] == ["keys"] and len(parts) == 3:
            return self._keys(method, parts[1], parts[2], agent, body)
        if parts[:1] == ["contacts"]:
            return self._contacts(method, parts[1:], agent)
        return _error(404, "not_found", f"no route {method} {request.path}")

    def _authenticate(self, request: web.Request, body: bytes) -> str:
        headers = request.headers
        date = headers.get("X-TinyPlace-Date", "")
        nonce = headers.get("X-TinyPlace-Nonce", "")
        public_key = headers.get("X-TinyPlace-Public-Key", "")
        signature = headers.get("X-TinyPlace-Signature", "")
        if not (date and nonce and public_key and signature):
            raise _http(401, "unauthenticated", "signature headers are missing")
        if signature.startswith("siws:"):
            raise _http(401, "unsupported_auth", "FakeRelay checks per-request signatures only")
        payload = "\n".join(
            (request.method, request.raw_path, date, nonce, hashlib.sha256(body).hexdigest())
        )
        try:
            key = base64.b64decode(public_key)
            VerifyKey(key).verify(payload.encode(), base64.b64decode(signature))
        except (BadSignatureError, ValueError):
            raise _http(401, "bad_signature", "the request signature does not verify") from None
        try:
            signed_at = datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise _http(401, "bad_signature", "X-TinyPlace-Date is not a timestamp") from None
        now = datetime.now(UTC).timestamp()
        if abs(now - signed_at) > self.max_skew:
            raise _http(401, "stale_signature", "the request was signed too long ago")
        self._nonces = {n: t for n, t in self._nonces.items() if now - t < 2 * self.max_skew}
        if nonce in self._nonces:
            raise _http(401, "replayed_nonce", "this nonce was used before")
        self._nonces[nonce] = now
        agent = derive_crypto_id(key)
        claimed = headers.get("X-Agent-ID")
        if claimed not in (None, agent, public_key):
            raise _http(403, "agent_mismatch", "X-Agent-ID does not match the signing key")
        return agent

    async def _fault(self, request: web.Request) -> web.StreamResponse | None:
        for fault in self._faults:
            if fault.method == request.method and request.path.startswith(fault.path):
                self._faults.remove(fault)
                break
        else:
            return None
        if fault.kind == "rate_limited":
            return web.json_response(
                {
                    "error": "Too many requests",
                    "code": "rate_limited",
                    "retry_after": fault.retry_after,
                },
                status=429,
                headers={"Retry-After": f"{fault.retry_after:g}"},
            )
        if fault.kind == "server_error":
            return _error(500, "internal", "injected server error")
        if fault.kind == "rejected":
            return _error(403, "not_a_contact", "You can only message your contacts")
        if fault.kind in ("hang", "stored_then_hang"):
            if fault.kind == "stored_then_hang":
                envelope = json.loads(await request.read())
                self._store({**envelope, "timestamp": envelope.get("timestamp") or _now_iso()})
            self.hanging += 1
            self._watch.changed()
            try:
                await self._closing.wait()
            finally:
                self.hanging -= 1
            return _error(503, "closing", "relay closing")
        if fault.kind == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        if fault.kind == "stored_then_error":
            envelope = json.loads(await request.read())
            self._store({**envelope, "timestamp": envelope.get("timestamp") or _now_iso()})
            return _error(500, "internal", "injected error after storing")
        if fault.kind in ("garbled", "cut_body"):
            if request.method == "PUT" and request.path == "/messages":
                envelope = json.loads(await request.read())
                self._store({**envelope, "timestamp": envelope.get("timestamp") or _now_iso()})
            if fault.kind == "garbled":  # a proxy's page instead of the relay's JSON
                return web.Response(status=200, text="<html>bad gateway</html>")
            response = web.StreamResponse(status=200)
            response.content_length = 4096  # promised, never delivered
            response.content_type = "application/json"
            await response.prepare(request)
            await response.write(b'{"id": "')
            if request.transport is not None:
                request.transport.abort()
            return response
        raise ValueError(f"unknown fault {fault.kind!r}")

    # mailbox -------------------------------------------------------------------
    async def _list(self, request: web.Request, agent: str) -> web.StreamResponse:
        owner = request.query.get("agentId", "")
        if owner != agent:
            return _error(403, "forbidden", "you can only list your own mailbox")
        limit = int(request.query.get("limit") or 100)
        messages = [dict(m) for m in self.mailboxes.get(owner, [])][:limit]
        if owner in self._duplicate_listing:
            self._duplicate_listing.discard(owner)
            messages = [m for m in messages for _ in (0, 1)]
        self.listings[owner] += 1
        return web.json_response({"messages": messages or None})

    async def _put(self, request: web.Request, agent: str, body: bytes) -> web.StreamResponse:
        try:
            envelope = json.loads(body)
        except ValueError:
            return _error(400, "invalid_json", "the body is not JSON")
        for key in ("id", "from", "to", "type", "body"):
            if not isinstance(envelope.get(key), str) or not envelope[key]:
                return _error(400, "invalid_envelope", f"envelope.{key} is required")
        if envelope["type"] not in ("CIPHERTEXT", "PREKEY_BUNDLE"):
            return _error(400, "invalid_envelope", "type must be CIPHERTEXT or PREKEY_BUNDLE")
        if envelope["from"] != agent:
            return _error(403, "sender_mismatch", "envelope.from is not the signing agent")
        if not self._may_message(agent, envelope["to"]):
            return _error(403, "not_a_contact", "You can only message your contacts")
        envelope.setdefault("timestamp", _now_iso())
        handler = self._taps.get(envelope["to"])
        if handler is not None:
            self.stored[(envelope["to"], envelope["id"])] = dict(envelope)
            await handler(dict(envelope))
        else:
            self._store(envelope)
        return web.json_response(envelope, status=201)

    async def _delete(self, request: web.Request, agent: str, message_id: str) -> web.Response:
        owner = request.query.get("agentId", "")
        if owner != agent:
            return _error(403, "forbidden", "you can only ack your own messages")
        box = self.mailboxes.get(owner, [])
        # ids are compared as the relay keeps them: half a surrogate pair is U+FFFD there
        gone = [m for m in box if clean_text(str(m.get("id"))) == clean_text(message_id)]
        if not gone:
            return _error(404, "not_found", "no such message")
        self.mailboxes[owner] = [m for m in box if all(m is not g for g in gone)]
        self.acked.extend((owner, str(m.get("id"))) for m in gone)
        return web.Response(status=204)

    def _store(self, envelope: dict[str, Any]) -> None:
        key = (envelope["to"], envelope["id"])
        self.stored[key] = dict(envelope)
        if all(m.get("id") != envelope["id"] for m in self.mailboxes[envelope["to"]]):
            self.mailboxes[envelope["to"]].append(dict(envelope))

    def _may_message(self, sender: str, recipient: str) -> bool:
        relation = self.relationships.get(frozenset((sender, recipient)))
        if relation is None or relation.status == "blocked":
            return False
        return relation.status == "accepted" or relation.requester == sender

    # keys ----------------------------------------------------------------------
    def _bundle(self, owner: str) -> web.Response:
        signed = self.signed_prekeys.get(owner)
        if signed is None:
            return _error(404, "no_keys", "this agent has published no pre-keys")
        bundle: dict[str, Any] = {
            "agentId": owner,
            "identityKey": self.identity_keys[owner],
            "signedPreKey": signed,
        }
        pool = self.one_time_prekeys[owner]
        if pool:
            bundle["oneTimePreKey"] = pool.pop(0)
        return web.json_response(bundle)

    def _keys(self, method: str, owner: str, what: str, agent: str, body: bytes) -> web.Response:
        if owner != agent:
            return _error(403, "forbidden", "you can only manage your own keys")
        identity_key = base64.b64encode(decode_agent_address(agent)).decode()
        if method == "GET" and what == "health":
            signed = self.signed_prekeys.get(owner)
            return web.json_response(
                {
                    "agentId": owner,
                    "signedPreKey": signed["keyId"] if signed else None,
                    "oneTimePreKeyCount": len(self.one_time_prekeys[owner]),
                }
            )
        request = json.loads(body or b"{}")
        if method == "PUT" and what == "signed-prekey":
            signed = request.get("signedPreKey")
            if not verify_pre_key_signature(identity_key, signed):
                return _error(400, "invalid_signature", "signed pre-key signature does not verify")
            self.identity_keys[owner] = identity_key
            self.signed_prekeys[owner] = signed
            return web.json_response({"ok": True})
        if method == "PUT" and what == "prekeys":
            keys = request.get("preKeys") or []
            if not all(verify_pre_key_signature(identity_key, k) for k in keys):
                return _error(400, "invalid_signature", "a pre-key signature does not verify")
            self.identity_keys[owner] = identity_key
            self.one_time_prekeys[owner].extend(keys)
            return web.json_response({"ok": True, "count": len(self.one_time_prekeys[owner])})
        return _error(404, "not_found", f"no route {method} /keys/{owner}/{what}")

    # contacts ------------------------------------------------------------------
    def _contacts(self, method: str, parts: list[str], me: str) -> web.Response:
        if method == "GET" and parts == []:
            views = [
                self._view(r, me)
                for r in self.relationships.values()
                if me in (r.requester, r.addressee) and r.status == "accepted"
            ]
            return web.json_response({"contacts": views})
        if method == "GET" and parts == ["requests"]:
            pending = [r for r in self.relationships.values() if r.status == "pending"]
            return web.json_response(
                {
                    "incoming": [self._view(r, me) for r in pending if r.addressee == me],
                    "outgoing": [self._view(r, me) for r in pending if r.requester == me],
                }
            )
        if not parts:
            return _error(404, "not_found", "no such contacts route")
        other, action = parts[0], (parts[1] if len(parts) > 1 else "")
        key = frozenset((me, other))
        relation = self.relationships.get(key)
        if method == "GET" and action == "status":
            return web.json_response(
                self._view(relation, me) if relation else {"cryptoId": other, "status": "none"}
            )
        if method == "POST" and action == "":
            if relation is None:
                relation = self.relationships[key] = _Relationship(me, other, "pending")
            elif relation.status == "blocked":
                return _error(403, "blocked", "this relationship is blocked")
            elif relation.status == "pending" and relation.addressee == me:
                relation.status = "accepted"
            return web.json_response(self._view(relation, me))
        if method == "POST" and action == "accept":
            if relation is None or relation.status != "pending" or relation.addressee != me:
                return _error(404, "no_pending_request", f"no pending request from {other}")
            relation.status = "accepted"
            return web.json_response(self._view(relation, me))
        if method == "POST" and action == "block":
            relation = self.relationships[key] = _Relationship(me, other, "blocked", blocked_by=me)
            return web.json_response(self._view(relation, me))
        if method == "POST" and action == "unblock":
            if relation is not None and relation.blocked_by == me:
                del self.relationships[key]
            return web.Response(status=204)
        if method == "DELETE" and action == "":
            if relation is not None and relation.blocked_by not in (None, me):
                return _error(403, "blocked", "the other agent blocked this relationship")
            self.relationships.pop(key, None)
            return web.Response(status=204)
        return _error(404, "not_found", "no such contacts route")

    @staticmethod
    def _view(relation: _Relationship, me: str) -> dict[str, Any]:
        return {
            "cryptoId": relation.other(me),
            "status": relation.status,
            "direction": "outgoing" if relation.requester == me else "incoming",
            "since": relation.since,
        }


class RelayPeer:
    """Another agent on a relay, driven by test code with the real SDK.

    It signs every request, publishes a pre-key bundle, sends with the SDK's
    `send_encrypted` and decrypts with its own `SignalSession` (in memory).
    """

    def __init__(self, relay_url: str, seed: bytes | None = None, *, timeout: float = 10.0):
        self.seed = seed or os.urandom(32)
        self.signer = LocalSigner.from_seed(self.seed, siws=False)
        self.agent_id = self.signer.agent_id
        pair = ed25519_seed_to_x25519_keypair(self.seed)
        self.store = MemorySessionStore(X25519KeyPair(pair.public_key, pair.private_key))
        self.session = SignalSession(self.store, pair.public_key)
        self.client = TinyPlaceClient(base_url=relay_url, signer=self.signer, timeout=timeout)
        self.contacts = ContactsApi(self.client.http)

    async def __aenter__(self) -> RelayPeer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.client.close()

    async def publish_keys(self, one_time: int = 5) -> None:
        """Publish a signed pre-key and `one_time` one-time pre-keys."""
        signed = await generate_signed_pre_key(self.signer, "spk_1")
        await self.store.store_signed_pre_key(signed)
        identity = self.signer.public_key_base64
        await self.client.keys.rotate_signed_pre_key(
            self.agent_id, build_signed_pre_key_request(signed, identity_key=identity)
        )
        keys = await generate_pre_keys(self.signer, 1, one_time)
        for key in keys:
            await self.store.store_pre_key(key)
        await self.client.keys.upload_pre_keys(
            self.agent_id, build_pre_keys_request(keys, identity_key=identity)
        )

    async def send_text(
        self,
        to: str,
        text: str,
        *,
        session: str | None = None,
        role: str = "agent",
        in_reply_to: str | None = None,
        message_id: str | None = None,
        from_session: str | None = None,
        auto: bool = False,
    ) -> str:
        """Send `text` (plain, or in a v1 envelope when `session` is given); return the relay id.

        `from_session` is the session label a harness plugin puts in `tp.from_session`;
        `auto` marks the envelope as an auto-reply (`tp.auto`, the plugins' loop guard).
        """
        message_id = message_id or new_message_id()
        body = text
        if session is not None:
            envelope = build_v1_envelope(
                session, text, message_id, in_reply_to=in_reply_to, from_session=from_session
            )
            data = json.loads(envelope)
            data["message"]["role"] = role
            data["harness"]["provider"] = "claude"
            if auto:
                data["tp"]["auto"] = True
            body = json.dumps(data)
        opening = not await self.session.has_session(to)
        try:
            await self.client.messages.send_encrypted(
                self.session, self.agent_id, to, body.encode(), message_id=message_id
            )
        except TinyPlaceError as error:
            # send_encrypted keeps the session it opened even when the relay refused the
            # opening PREKEY_BUNDLE; drop it so the next send opens a fresh one
            if opening and error.status not in (0, 500, 502, 503, 504):
                await self.session.remove_session(to)
            raise
        return message_id

    async def decrypt(self, envelope: dict[str, Any]) -> str:
        """Decrypt one envelope addressed to this peer."""
        sender = str(envelope["from"])
        sender_key = ed25519_pub_to_x25519_pub(decode_agent_address(sender))
        return (await self.session.decrypt(sender, sender_key, envelope)).decode()

    async def receive(self) -> list[tuple[dict[str, Any], str]]:
        """Drain this peer's mailbox: decrypt and ack each message; return (envelope, text)."""
        page = await self.client.messages.list(self.agent_id)
        received = []
        for envelope in page.get("messages") or []:
            received.append((envelope, await self.decrypt(envelope)))
            await self.client.messages.acknowledge(str(envelope["id"]), self.agent_id)
        return received

    @staticmethod
    def text_of(plaintext: str) -> str:
        """The words of a decrypted body (the envelope's message text, or the plain text)."""
        return parse_body(plaintext).text or ""


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": message, "code": code}, status=status)


class _Refused(Exception):
    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def _http(status: int, code: str, message: str) -> _Refused:
    return _Refused(_error(status, code, message))


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def v2_frame(kind: str, payload: dict[str, Any], **event: Any) -> dict[str, Any]:
    """A harness v2 frame (`tinyplace.harness.session.v2`), after the harness
    conformance tests' v2_wire (tiny.place SDK); `event` overrides the event's fields
    (``role``, ``id``, ``seq`` ...)."""
    return {
        "envelope_version": "tinyplace.harness.session.v2",
        "version": 2,
        "bucket": {"unit": "minute", "start": "s", "end": "e"},
        "scope": {
            "type": "folder",
            "key": "repo",
            "cwd": "/w",
            "wrapper_session_id": "w2",
            "harness_session_id": "h2",
        },
        "harness": {"provider": "claude", "command": "claude", "argv": []},
        "event": {
            "id": "e1",
            "seq": 4,
            "ts": "2026-07-05T00:00:00Z",
            "turn_id": "t1",
            "model": "opus",
            "role": "agent",
            "kind": kind,
            "payload": payload,
            **event,
        },
        "source": {"path": "p", "record_type": "assistant"},
    }

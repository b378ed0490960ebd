"""The fake REST API (/api/v10): the routes discord.py calls, rate-limit buckets, Discord's errors."""

from __future__ import annotations

import asyncio
import json
import math
import time
import zlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from attrs import define

from .gateway import GatewayServer
from .world import timestamp

__all__ = ["RestServer"]

_JSON = "application/json"
#: the longest message content a bot may post
MAX_CONTENT = 2000
# faults `fail_next` understands, with the status and body Discord sends
_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "forbidden": (403, {"message": "Missing Permissions", "code": 50013}),
    "missing_access": (403, {"message": "Missing Access", "code": 50001}),
    "unknown_channel": (404, {"message": "Unknown Channel", "code": 10003}),
    "unknown_message": (404, {"message": "Unknown Message", "code": 10008}),
    "bad_request": (
        400,
        {
            "message": "Invalid Form Body",
            "code": 50035,
            "errors": {
                "content": {
                    "_errors": [
                        {
                            "code": "BASE_TYPE_MAX_LENGTH",
                            "message": "Must be 2000 or fewer in length.",
                        }
                    ]
                }
            },
        },
    ),
    "server_error": (500, {"message": "500: Internal Server Error", "code": 0}),
    "bad_gateway": (502, {"message": "502: Bad Gateway", "code": 0}),
    "unavailable": (503, {"message": "503: Service Unavailable", "code": 0}),
}
#: every fault `fail_next` and `fail_next_read` understand
_FAULTS = frozenset(_ERRORS) | {"rate_limited", "cloudflare", "hang", "reset"}


@define
class _Fault:
    kind: str
    retry_after: float = 2.0
    is_global: bool = False
    skip: int = 0


def _new_fault(kind: str, retry_after: float, is_global: bool, skip: int) -> _Fault:
    """A fault to queue; ValueError for a kind the fake does not know."""
    if kind not in _FAULTS:
        raise ValueError(f"unknown fault {kind!r}")
    return _Fault(kind, retry_after, is_global, skip)


def _next_fault(queue: list[_Fault]) -> _Fault | None:
    """Take the fault for this request from `queue`: None while its first one still skips."""
    if not queue:
        return None
    if queue[0].skip > 0:
        queue[0].skip -= 1
        return None
    return queue.pop(0)


class RestServer(GatewayServer):
    """The REST side of the fake: one aiohttp handler for everything under /api/v10."""

    def __init__(
        self,
        *,
        token: str,
        bot_name: str,
        granted_intents: int,
        heartbeat_interval: float,
        bucket_limit: int,
        bucket_window: float,
    ):
        super().__init__(
            token=token,
            bot_name=bot_name,
            granted_intents=granted_intents,
            heartbeat_interval=heartbeat_interval,
        )
        self.bucket_limit = bucket_limit
        self.bucket_window = bucket_window
        #: what the bot posted, in order: the created messages, plus "allowed_mentions" as asked
        self.sent: list[dict[str, Any]] = []
        #: every REST request: (method, path, json body or None)
        self.requests: list[tuple[str, str, Any]] = []
        self.reactions: list[tuple[str, str, str]] = []
        self.typing: list[str] = []
        #: requests answered 429 because the client ignored the rate-limit headers
        self.over_limit = 0
        self._faults: list[_Fault] = []
        self._read_faults: list[_Fault] = []
        self._nonces: dict[str, tuple[str, float]] = {}
        self._hang = asyncio.Event()
        self._buckets: dict[str, tuple[int, float]] = {}

    # ------------------------------------------------------------ faults

    def fail_next(
        self, fault: str, *, retry_after: float = 2.0, is_global: bool = False, skip: int = 0
    ) -> None:
        """Answer the next bot write (POST/PATCH/PUT under /channels), after `skip` good ones, with `fault`.

        fault: "rate_limited" (429), "cloudflare" (Cloudflare's 429: no Via, a text
        body, Retry-After), "forbidden" (403 50013), "missing_access"
        (403 50001), "unknown_channel" (404 10003), "unknown_message" (404
        10008), "bad_request" (400 50035), "server_error" (500), "bad_gateway"
        (502), "unavailable" (503), "hang" (no answer until `release_hang` or
        close), "reset" (drop the connection without an answer).
        """
        self._faults.append(_new_fault(fault, retry_after, is_global, skip))

    def fail_next_read(
        self, fault: str, *, retry_after: float = 2.0, is_global: bool = False, skip: int = 0
    ) -> None:
        """Answer the next bot read (GET under /channels: Get Channel, Get Channel Messages) with `fault`.

        The same faults as `fail_next`, queued apart from the writes' ones.
        """
        self._read_faults.append(_new_fault(fault, retry_after, is_global, skip))

    def release_hang(self) -> None:
        self._hang.set()

    # ------------------------------------------------------------ routes

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            if raw and request.content_type == _JSON:
                body = json.loads(raw)
        self.requests.append((request.method, path, body))
        self._notify()
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        parts = [unquote(p) for p in path.strip("/").split("/")]
        try:
            return await self._route(request.method, parts, body, request)
        finally:
            self._notify()

    async def _route(
        self, method: str, parts: list[str], body: Any, request: web.Request
    ) -> web.StreamResponse:
        if parts == ["users", "@me"] and method == "GET":
            return self._json(200, {**self.bot, "verified": True, "mfa_enabled": False, "flags": 0})
        if parts == ["oauth2", "applications", "@me"] and method == "GET":
            return self._json(200, self.application_payload())
        if parts in (["gateway"], ["gateway", "bot"]) and method == "GET":
            answer: dict[str, Any] = {"url": f"ws{self.url.removeprefix('http')}/gateway"}
            if parts[-1] == "bot":
                answer["shards"] = 1
                answer["session_start_limit"] = {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 14400000,
                    "max_concurrency": 1,
                }
            return self._json(200, answer)
        if len(parts) == 2 and parts[0] == "channels" and method == "GET":
            # Get Channel: the channel object; a thread's names its parent in parent_id
            fault = _next_fault(self._read_faults)
            if fault is not None:
                return await self._fault(fault, f"get-channel:{parts[1]}", request)
            channel = self.channels.get(parts[1])
            if channel is None:
                return self._json(404, {"message": "Unknown Channel", "code": 10003})
            bucket = f"get-channel:{parts[1]}"
            over_limit = self._take(bucket)
            if over_limit is not None:
                return over_limit
            return self._limited(bucket, self._json(200, dict(channel)))
        if len(parts) >= 3 and parts[0] == "channels":
            channel_id = parts[1]
            if channel_id not in self.channels:
                return self._json(404, {"message": "Unknown Channel", "code": 10003})
            return await self._channel_route(method, channel_id, parts[2:], body, request)
        return self._json(404, {"message": "404: Not Found", "code": 0})

    async def _channel_route(
        self, method: str, channel_id: str, rest: list[str], body: Any, request: web.Request
    ) -> web.StreamResponse:
        if rest == ["typing"]:
            route = "typing"
        elif "reactions" in rest:
            route = "reactions"
        else:
            route = f"{method.lower()}-messages"
        bucket = f"{route}:{channel_id}"
        over_limit = self._take(bucket)
        if over_limit is not None:
            return over_limit
        if rest == ["typing"] and method == "POST":
            self.typing.append(channel_id)
            return self._limited(bucket, web.Response(status=204))
        if rest[0] != "messages":
            return self._json(404, {"message": "404: Not Found", "code": 0})
        fault = None
        if method == "GET":
            fault = _next_fault(self._read_faults)
        elif method in ("POST", "PATCH", "PUT"):
            fault = _next_fault(self._faults)
        if fault is not None:
            return await self._fault(fault, bucket, request)
        if rest == ["messages"] and method == "GET":
            return self._limited(bucket, self._json(200, self._history(channel_id, request)))
        invalid = _invalid_content(method, rest, body)
        if invalid is not None:
            return self._limited(bucket, self._json(400, invalid))
        if rest == ["messages"] and method == "POST":
            return self._limited(bucket, self._json(200, await self._bot_posts(channel_id, body)))
        if len(rest) < 2 or rest[1] not in self.messages:
            return self._json(404, {"message": "Unknown Message", "code": 10008})
        message = self.messages[rest[1]]
        if len(rest) == 2 and method == "PATCH":
            if message["author"]["id"] != self.bot_id:
                return self._json(
                    403,
                    {"message": "Cannot edit a message authored by another user", "code": 50005},
                )
            message["content"] = (body or {}).get("content", message["content"])
            message["edited_timestamp"] = timestamp()
            await self.dispatch("MESSAGE_UPDATE", message)
            return self._limited(bucket, self._json(200, message))
        if len(rest) == 2 and method == "DELETE":
            await self.dispatch("MESSAGE_DELETE", self.remove_message(rest[1]))
            return self._limited(bucket, web.Response(status=204))
        if len(rest) == 5 and rest[2] == "reactions" and rest[4] == "@me" and method == "PUT":
            self.reactions.append((channel_id, rest[1], rest[3]))
            return self._limited(bucket, web.Response(status=204))
        return self._json(405, {"message": "405: Method Not Allowed", "code": 0})

    def _history(self, channel_id: str, request: web.Request) -> list[dict[str, Any]]:
        """GET /channels/{id}/messages: newest first, as REST returns them (no guild_id, no member)."""
        limit = max(1, min(100, int(request.query.get("limit", "50"))))
        in_channel = sorted(
            (m for m in self.messages.values() if m["channel_id"] == channel_id),
            key=lambda m: int(m["id"]),
        )
        if "after" in request.query:
            after = int(request.query["after"])
            page = [m for m in in_channel if int(m["id"]) > after][:limit]
        else:
            before = int(request.query.get("before", str(1 << 63)))
            page = [m for m in in_channel if int(m["id"]) < before][-limit:]
        return [
            {k: v for k, v in m.items() if k not in {"guild_id", "member"}} for m in reversed(page)
        ]

    async def _bot_posts(self, channel_id: str, body: Any) -> dict[str, Any]:
        body = body or {}
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            # Discord: a repeated nonce from the same author within minutes returns the first message
            earlier = self._nonces.get(str(nonce))
            if earlier is not None and time.time() - earlier[1] < 300:
                return self.messages.get(earlier[0]) or {"id": earlier[0], "channel_id": channel_id}
        reference = body.get("message_reference") or {}
        reply_to = reference.get("message_id")
        if reply_to is not None and str(reply_to) not in self.messages:
            reply_to = None  # fail_if_not_exists: false posts it as a plain message
        message = self.message_payload(
            channel_id,
            self.bot_id,
            body.get("content", ""),
            reply_to=str(reply_to) if reply_to is not None else None,
        )
        message["nonce"] = nonce
        message["flags"] = int(body.get("flags") or 0)
        self.messages[message["id"]] = message
        self.sent.append({**message, "allowed_mentions": body.get("allowed_mentions")})
        if nonce is not None:
            self._nonces[str(nonce)] = (message["id"], time.time())
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def _fault(self, fault: _Fault, bucket: str, request: web.Request) -> web.StreamResponse:
        if fault.kind == "rate_limited":
            scope = "global" if fault.is_global else "user"
            headers = {
                "Retry-After": str(max(1, round(fault.retry_after))),
                "Via": "1.1 google",
                "X-RateLimit-Scope": scope,
            }
            if fault.is_global:
                headers["X-RateLimit-Global"] = "true"
            body = {
                "message": "You are being rate limited.",
                "retry_after": fault.retry_after,
                "global": fault.is_global,
            }
            return self._json(429, body, headers)
        if fault.kind == "cloudflare":
            headers = {"Retry-After": str(max(1, round(fault.retry_after)))}
            return web.Response(status=429, text="error code: 1015", headers=headers)
        if fault.kind == "hang":
            self._hang.clear()
            await self._hang.wait()
            return self._json(503, {"message": "503: Service Unavailable", "code": 0})
        if fault.kind == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError("fake reset")
        status, body = _ERRORS[fault.kind]
        return self._limited(bucket, self._json(status, body))

    def _take(self, bucket: str) -> web.Response | None:
        """Count one request against `bucket`; return Discord's 429 when it is exhausted."""
        now = time.time()
        used, reset_at = self._buckets.get(bucket, (0, now + self.bucket_window))
        if now >= reset_at:
            used, reset_at = 0, now + self.bucket_window
        if used >= self.bucket_limit:
            self.over_limit += 1
            wait = reset_at - now
            body = {
                "message": "You are being rate limited.",
                "retry_after": round(wait, 3),
                "global": False,
            }
            headers = {
                "Retry-After": str(math.ceil(wait)),
                "Via": "1.1 google",
                "X-RateLimit-Scope": "user",
            }
            return self._limited(bucket, self._json(429, body, headers))
        self._buckets[bucket] = (used + 1, reset_at)
        return None

    def _limited(self, bucket: str, response: web.Response) -> web.Response:
        """Add Discord's rate-limit headers for `bucket` to `response`."""
        now = time.time()
        used, reset_at = self._buckets.get(bucket, (0, now + self.bucket_window))
        route = bucket.split(":", 1)[0]
        response.headers.update(
            {
                "X-RateLimit-Limit": str(self.bucket_limit),
                "X-RateLimit-Remaining": str(max(0, self.bucket_limit - used)),
                "X-RateLimit-Reset": f"{reset_at:.3f}",
                "X-RateLimit-Reset-After": f"{max(0.0, reset_at - now):.3f}",
                "X-RateLimit-Bucket": f"{zlib.crc32(route.encode()):08x}{len(route):02d}",
            }
        )
        return response

    def _json(
        self, status: int, body: Any, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        response = web.Response(status=status, text=json.dumps(body), headers=dict(headers or {}))
        response.content_type = _JSON  # exactly application/json: discord.py checks it
        response.charset = None
        return response


def _invalid_content(method: str, rest: list[str], body: Any) -> dict[str, Any] | None:
    """Discord's 400 body for a message POST / PATCH whose content it would refuse, else None.

    Content is measured in code points (Discord's API counts them as Python does).
    """
    writes_message = (method == "POST" and rest == ["messages"]) or (
        method == "PATCH" and len(rest) == 2
    )
    if not writes_message:
        return None
    body = body if isinstance(body, dict) else {}
    content = body.get("content")
    if isinstance(content, str) and len(content) > MAX_CONTENT:
        return _ERRORS["bad_request"][1]
    if method == "POST" and not content and not body.get("embeds") and not body.get("sticker_ids"):
        return {"message": "Cannot send an empty message", "code": 50006}
    return None

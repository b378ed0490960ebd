"""The Events API side of the fake: signed POSTs to the app, retried like Slack does."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from typing import Any

import aiohttp

from ._shared import Delivery, FakeBase

__all__ = ["EventsApiDriver"]


class EventsApiDriver(FakeBase):
    """Plays Slack's side of the Events API against the app's Request URL."""

    # Events API ------------------------------------------------------------------------
    def sign(
        self, body: bytes, timestamp: int | None = None, *, signature: str = "valid"
    ) -> dict[str, str]:
        """Slack's signature headers for `body` (``bad``: wrong secret; ``stale``: 10 min old)."""
        stamp = timestamp if timestamp is not None else int(time.time())
        secret = self.signing_secret
        if signature == "stale":
            stamp -= 600
        elif signature == "bad":
            secret = secrets.token_hex(16)
        base = f"v0:{stamp}:".encode() + body
        digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
        return {"X-Slack-Request-Timestamp": str(stamp), "X-Slack-Signature": f"v0={digest}"}

    async def verify_url(self, url: str | None = None) -> tuple[int, Any]:
        """POST a signed ``url_verification``; return (status, parsed answer)."""
        challenge = secrets.token_urlsafe(24)
        body = json.dumps(
            {"token": self.verification_token, "challenge": challenge, "type": "url_verification"}
        ).encode()
        status, text = await self._post(url or self.events_url or "", body, self.sign(body), 0, "")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    async def _post_with_retries(self, delivery: Delivery) -> None:
        reason = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                delay = self.retry_delays[min(attempt - 1, len(self.retry_delays) - 1)]
                await asyncio.sleep(delay)
            outcome = await self._post_once(delivery, attempt, reason)
            if outcome.startswith("2"):
                return
            reason = (
                "http_timeout"
                if outcome == "timeout"
                else ("connection_failed" if outcome == "connection_failed" else "http_error")
            )
        delivery.gave_up.set()
        self._notify()

    async def _post_once(self, delivery: Delivery, attempt: int, reason: str) -> str:
        body = json.dumps(delivery.payload).encode()
        headers = self.sign(body, signature=delivery.signature)
        status, _text = await self._post(self.events_url or "", body, headers, attempt, reason)
        outcome = str(status) if isinstance(status, int) else status
        delivery.attempts.append((attempt, outcome))
        if outcome.startswith("2"):
            delivery.acks += 1
            delivery.acked.set()
        self._notify()
        return outcome

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], attempt: int, reason: str
    ) -> tuple[Any, str]:
        assert self._session is not None
        headers = {**headers, "Content-Type": "application/json", "User-Agent": "Slackbot 1.0"}
        if attempt:
            headers["X-Slack-Retry-Num"] = str(attempt)
            headers["X-Slack-Retry-Reason"] = reason
        try:
            async with self._session.post(
                url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.http_timeout),
            ) as response:
                return response.status, await response.text()
        except TimeoutError:
            return "timeout", ""
        except aiohttp.ClientError:
            return "connection_failed", ""

"""A small Bot API client over aiohttp that never lets the token out.

Every method is ``POST {api_base}/bot{token}/{method}`` with a JSON body; the
answer is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code": N,
"description": "...", "parameters": {"retry_after": N, "migrate_to_chat_id": N}}``.

aiohttp puts the request URL (and so the token) into its exception text, so
every aiohttp error is caught here and replaced by a `TelegramError` that names
only the method. Nothing raised from this module is chained to an aiohttp error.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

import aiohttp
from backchannel.wire import BadPayload, parse_json

__all__ = ["BotApi", "TelegramError", "Token"]


#: the largest Bot API answer read. Far above an inbound request's limit: one getUpdates
#: answer holds up to 100 updates, each up to 4096 characters of text with its entities
#: plus the message it replies to, which passes 4 MiB in a busy chat; an answer refused
#: for its size would be asked for again, and refused again, forever.
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class Token:
    """The bot token, kept out of repr, str and logs."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        if not isinstance(value, str) or ":" not in value:
            raise ValueError(
                "a Telegram bot token looks like '123456:ABC-DEF...' (from @BotFather)"
            )
        self._value = value

    def reveal(self) -> str:
        return self._value

    @property
    def bot_id(self) -> str:
        """The bot's user id: the digits before the colon."""
        return self._value.split(":", 1)[0]

    def __repr__(self) -> str:
        return "Token('***')"

    __str__ = __repr__


class TelegramError(Exception):
    """A Bot API call that did not succeed.

    outcome: "error" (Telegram answered ok=false: `code`, `description`,
    `retry_after`, `migrate_to_chat_id` tell why), "timeout" (no answer in
    time: the request may have been processed), "disconnected" (the connection
    broke mid-request: may have been processed), "unreachable" (could not
    connect: definitely not processed), "bad_answer" (a non-JSON answer such as
    a proxy's 502 page: may have been processed).
    """

    def __init__(
        self,
        method: str,
        outcome: str,
        description: str,
        *,
        code: int | None = None,
        retry_after: float | None = None,
        migrate_to_chat_id: int | None = None,
    ):
        label = f"{code} " if code is not None else ""
        super().__init__(f"Telegram {method}: {label}{description}")
        self.method = method
        self.outcome = outcome
        self.description = description
        self.code = code
        self.retry_after = retry_after
        self.migrate_to_chat_id = migrate_to_chat_id


class BotApi:
    """Calls Bot API methods; one aiohttp session per instance."""

    def __init__(self, token: Token, api_base: str, request_timeout: float):
        self._token = token
        self._base = api_base.rstrip("/")
        self._timeout = request_timeout
        self._session: aiohttp.ClientSession | None = None
        #: closed by the adapter's stop, until its next start (open): a call meanwhile (a
        #: run's send still finishing after a worker lost the account's lease) gets a
        #: session of its own, closed after it; one kept would be left unclosed
        self._closed = False

    @property
    def host(self) -> str:
        """The API host, safe to show (no token)."""
        return self._base

    def derive_secret(self, label: str) -> str:
        """Return a secret derived from the bot token for `label` (64 hex characters).

        The same token and label always give the same value, so it survives
        restarts without being stored anywhere; it reveals nothing of the token.
        """
        key = self._token.reveal().encode()
        return hmac.new(key, f"backchannel:{label}".encode(), hashlib.sha256).hexdigest()

    async def call(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """Call `method` with JSON `params`; return its `result` or raise TelegramError."""
        if not self._closed:
            return await self._call(self._ensure_session(), method, params, timeout)
        async with aiohttp.ClientSession(raise_for_status=False) as session:
            return await self._call(session, method, params, timeout)

    async def _call(
        self,
        session: aiohttp.ClientSession,
        method: str,
        params: Mapping[str, Any] | None,
        timeout: float | None,
    ) -> Any:
        url = f"{self._base}/bot{self._token.reveal()}/{method}"
        limit = aiohttp.ClientTimeout(total=timeout if timeout is not None else self._timeout)
        failure: TelegramError | None = None
        try:
            async with session.post(url, json=dict(params or {}), timeout=limit) as response:
                try:  # bounded, and UTF-8 whatever charset the answer claims
                    body = parse_json(await response.read(), max_bytes=MAX_ANSWER_BYTES)
                except BadPayload:
                    body = None
                status = response.status
        except TimeoutError:
            failure = TelegramError(method, "timeout", f"no answer within {limit.total:g}s")
        except aiohttp.ClientConnectorError:
            failure = TelegramError(method, "unreachable", f"could not connect to {self._base}")
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError):
            failure = TelegramError(method, "disconnected", "the connection broke mid-request")
        except aiohttp.ClientError as error:
            failure = TelegramError(method, "disconnected", type(error).__name__)
        if failure is not None:
            raise failure
        return _result(method, status, body)

    def open(self) -> None:
        """Keep one session for the calls again (an adapter starting)."""
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(raise_for_status=False)
        return self._session


#: the longest wait a `retry_after` is taken at (a day); a bigger one is capped to it
MAX_RETRY_AFTER = 86_400.0


def _result(method: str, status: int, body: Any) -> Any:
    if not isinstance(body, Mapping):
        raise TelegramError(
            method, "bad_answer", f"HTTP {status} without a Bot API answer", code=status
        )
    if body.get("ok") is True:
        return body.get("result")
    parameters = body.get("parameters")
    if not isinstance(parameters, Mapping):
        parameters = {}
    code = body.get("error_code")
    description = body.get("description")
    raise TelegramError(
        method,
        "error",
        description[:500] if isinstance(description, str) and description else f"HTTP {status}",
        code=code if _is_int(code) and 100 <= code <= 999 else status,
        retry_after=_seconds(parameters.get("retry_after")),
        migrate_to_chat_id=_chat_id(parameters.get("migrate_to_chat_id")),
    )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(value: Any) -> float | None:
    """`parameters.retry_after` as a wait in seconds: finite, >= 0, at most a day; else None.

    An answer from a proxy or a broken relay may hold anything there (a string, a
    negative, NaN, an integer too big for a float); none of it may stall or crash a caller.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return MAX_RETRY_AFTER if value > 0 else None
    if not math.isfinite(seconds):
        return MAX_RETRY_AFTER if seconds > 0 else None
    return min(seconds, MAX_RETRY_AFTER) if seconds >= 0 else None


def _chat_id(value: Any) -> int | None:
    """`parameters.migrate_to_chat_id`: a chat id (a 64-bit integer, not a bool), else None."""
    return value if _is_int(value) and -(2**63) <= value < 2**63 else None


async def sleep_or_stop(stopping: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`; return True when `stopping` was set meanwhile."""
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        return False
    return True

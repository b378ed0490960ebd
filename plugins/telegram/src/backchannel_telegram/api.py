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
from collections.abc import Mapping
from typing import Any

import aiohttp
from backchannel.wire import BadPayload, parse_json

__all__ = ["BotApi", "TelegramError", "Token"]


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
        session = self._ensure_session()
        url = f"{self._base}/bot{self._token.reveal()}/{method}"
        limit = aiohttp.ClientTimeout(total=timeout if timeout is not None else self._timeout)
        failure: TelegramError | None = None
        try:
            async with session.post(url, json=dict(params or {}), timeout=limit) as response:
                try:  # bounded, and UTF-8 whatever charset the answer claims
                    body = parse_json(await response.read())
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

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(raise_for_status=False)
        return self._session


def _result(method: str, status: int, body: Any) -> Any:
    if not isinstance(body, Mapping):
        raise TelegramError(
            method, "bad_answer", f"HTTP {status} without a Bot API answer", code=status
        )
    if body.get("ok") is True:
        return body.get("result")
    parameters = body.get("parameters") or {}
    retry_after = parameters.get("retry_after") if isinstance(parameters, Mapping) else None
    migrate = parameters.get("migrate_to_chat_id") if isinstance(parameters, Mapping) else None
    code = body.get("error_code", status)
    raise TelegramError(
        method,
        "error",
        str(body.get("description") or f"HTTP {status}"),
        code=code if isinstance(code, int) else status,
        retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
        migrate_to_chat_id=migrate if isinstance(migrate, int) else None,
    )


async def sleep_or_stop(stopping: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`; return True when `stopping` was set meanwhile."""
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        return False
    return True

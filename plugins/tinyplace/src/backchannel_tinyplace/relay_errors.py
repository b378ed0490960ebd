"""Map the SDK's `TinyPlaceError` onto backchannel's three delivery outcomes.

- 429: `RateLimited` (the relay refused for now; nothing was stored).
- A refused connection: `RateLimited` too (nothing reached the relay).
- 403 ``not_a_contact``: `Rejected`, saying how to pair.
- Other 4xx: `Rejected`.
- Timeouts, resets, 5xx: `Uncertain` (the envelope may be in the mailbox).

The SDK retries only idempotent methods (GET/HEAD/OPTIONS), so a PUT that
fails reaches this mapping exactly once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from backchannel.errors import DeliveryError, RateLimited, Rejected, Uncertain
from tinyplace import TinyPlaceError

from .transport import ConnectionLost

__all__ = ["error_code", "not_a_contact", "retry_after_of", "send_error"]

#: seconds to wait before retrying after a refused connection
CONNECT_RETRY_AFTER = 5.0


def send_error(error: TinyPlaceError, peer: str) -> DeliveryError:
    """Return the delivery error for a failed `PUT /messages` to `peer`."""
    status = error.status
    if status == 0:
        return _network_error(error)
    code = error_code(error.body)
    if status == 429:
        return RateLimited(retry_after_of(error), "the relay is rate limiting this agent")
    if status == 403 and (code or "").lower() == "not_a_contact":
        return not_a_contact(peer, refused=True)
    if status == 401:
        return Rejected(
            f"the relay refused this agent's request signature (HTTP 401{f' {code}' if code else ''}):"
            " check the identity setting and that this machine's clock is right"
        )
    if 400 <= status < 500:
        return Rejected(
            f"the relay refused the message (HTTP {status}{f' {code}' if code else ''})"
        )
    return Uncertain(f"the relay answered HTTP {status}; the message may have arrived")


def not_a_contact(peer: str, *, refused: bool = False) -> Rejected:
    """The refusal for `peer`, no accepted contact, saying how to pair.

    `refused`: the relay refused a message to it (else the contact list said so).
    """
    why = " of this agent, so the relay refused the message;" if refused else ":"
    return Rejected(
        f"{peer} is not an accepted contact{why} pair first: backchannel tinyplace pair {peer}"
    )


def _network_error(error: TinyPlaceError) -> DeliveryError:
    cause = error.__cause__
    if isinstance(cause, aiohttp.ClientConnectorError):
        return RateLimited(CONNECT_RETRY_AFTER, "the relay refused the connection")
    if isinstance(cause, ConnectionLost):
        return Uncertain(
            "the connection to the relay dropped mid-send; the message may have arrived"
        )
    if isinstance(cause, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return Uncertain("the relay did not answer in time; the message may have arrived")
    return Uncertain(
        f"the connection to the relay was lost ({type(cause).__name__ if cause else 'unknown'});"
        " the message may have arrived"
    )


def retry_after_of(error: TinyPlaceError, default: float = 1.0) -> float:
    """Return the relay's requested wait: the Retry-After header, else `retry_after` in the body."""
    for name in ("Retry-After", "retry-after"):
        value = error.headers.get(name)
        if value:
            try:
                return max(0.0, float(value))
            except ValueError:
                break
    body = error.body
    if isinstance(body, dict):
        for key in ("retry_after", "retryAfter"):
            value = body.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return max(0.0, float(value))
    return default


def error_code(body: Any) -> str | None:
    """Return the machine code in a relay error body.

    Relays answer ``{"error": "<message>", "code": "<code>"}``; older shapes put
    the code in ``error`` itself or in ``errors.code``. A message with spaces is
    not a code.
    """
    if not isinstance(body, dict):
        return None
    code = body.get("code")
    if isinstance(code, str) and code:
        return code
    for key in ("errors", "error"):
        value = body.get(key)
        if isinstance(value, dict) and isinstance(value.get("code"), str):
            return str(value["code"])
    value = body.get("error")
    if isinstance(value, str) and value and " " not in value:
        return value
    return None

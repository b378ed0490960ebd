"""How a failed Web API call maps onto RateLimited / Rejected / Uncertain.

slack-sdk raises `SlackApiError` for an HTTP error or an ``ok: false`` body,
`TimeoutError` when the client timeout passes, and aiohttp's errors when the
connection fails. Messages here are built from status codes and Slack's error
code only, never from the SDK's exception text (which quotes the response).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
from backchannel.errors import DeliveryError, RateLimited, Rejected, Uncertain
from slack_sdk.errors import SlackApiError, SlackClientError

__all__ = ["UNCERTAIN_CODES", "call_slack", "delivery_error", "http_status"]

T = TypeVar("T")

#: ``ok: false`` codes after which Slack says the operation may have partly happened
UNCERTAIN_CODES = frozenset({"internal_error", "fatal_error", "service_unavailable"})

#: seconds to wait after a refused connection (nothing was sent, so a retry is safe)
CONNECT_RETRY_AFTER = 5.0


async def call_slack(method: str, call: Callable[[], Awaitable[T]], timeout: float) -> T:
    """Await one Web API call; raise only the three DeliveryError leaves."""
    try:
        return await call()
    except DeliveryError:
        raise
    except Exception as error:
        raise delivery_error(method, error, timeout) from None


def delivery_error(method: str, error: BaseException, timeout: float) -> DeliveryError:
    """Return the DeliveryError that says what `error` means for a send."""
    if isinstance(error, SlackApiError):
        return _api_error(method, error.response)
    if isinstance(error, TimeoutError):
        return Uncertain(f"{method}: no answer from Slack within {timeout:g}s")
    if isinstance(error, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        # nothing was sent, but retrying will not fix a TLS problem (a proxy or a CA bundle)
        return Rejected(f"{method}: TLS handshake with Slack failed ({type(error).__name__})")
    if isinstance(error, aiohttp.ClientConnectorError):
        return RateLimited(CONNECT_RETRY_AFTER, f"{method}: could not connect to Slack")
    if isinstance(error, aiohttp.ClientError | ConnectionError):
        return Uncertain(f"{method}: connection to Slack lost ({type(error).__name__})")
    if isinstance(error, SlackClientError):
        return Rejected(f"{method}: {type(error).__name__}")
    return Uncertain(f"{method}: unexpected {type(error).__name__}")


def http_status(response: Any) -> int | None:
    """The HTTP status of the answer a `SlackApiError` carries.

    Usually a `SlackResponse` (``status_code``); but when a body labelled JSON is
    not JSON, slack-sdk raises with aiohttp's raw `ClientResponse` (``status``, no
    ``data``).
    """
    for name in ("status_code", "status"):
        status = getattr(response, name, None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _api_error(method: str, response: Any) -> DeliveryError:
    status = http_status(response)
    data = getattr(response, "data", None)
    code = data.get("error") if isinstance(data, Mapping) else None
    headers = getattr(response, "headers", None) or {}
    if status == 429 or code == "ratelimited":
        return RateLimited(_retry_after(headers), f"{method}: rate limited by Slack")
    if status is not None and status >= 500:
        return Uncertain(f"{method}: Slack answered HTTP {status}")
    if code in UNCERTAIN_CODES:
        return Uncertain(f"{method}: Slack answered {code}")
    if code:
        return Rejected(str(code))
    if status is None or 200 <= status < 300:
        # an answer that could not be read (cut short, not JSON): the call may have happened
        return Uncertain(f"{method}: Slack's answer (HTTP {status}) could not be read")
    return Rejected(f"{method}: Slack answered HTTP {status}")


def _retry_after(headers: Mapping[str, Any]) -> float:
    for key, value in headers.items():
        if str(key).lower() == "retry-after":
            try:
                seconds = float(value)
            except (TypeError, ValueError):
                break
            if seconds != seconds:  # NaN: no wait at all would retry at once
                break
            return max(seconds, 0.0)
    return 1.0

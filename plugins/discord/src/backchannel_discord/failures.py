"""What went wrong, for people: discord.py's exceptions -> backchannel's errors.

- `explain_connection_failure`: why the bot could not connect (or stopped
  listening): a refused token, the Message Content intent not enabled, Discord
  unreachable. Never shows the token.
- `delivery_error`: a failed send -> RateLimited / Rejected / Uncertain.
"""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import discord
from backchannel.errors import ConfigError, DeliveryError, RateLimited, Rejected, Uncertain

__all__ = [
    "DiscordStartError",
    "delivery_error",
    "explain_connection_failure",
    "fatal_failure",
    "one_line",
]

PORTAL = "https://discord.com/developers/applications"
#: the longest reason a failure carries: Discord's bodies (an HTML error page) can be long
MAX_REASON = 300
#: Gateway close codes discord.py does not reconnect after, and what each means
_FATAL_CLOSES = {
    4010: "invalid shard",
    4011: "sharding required: the bot is in too many servers for one connection",
    4012: "invalid API version",
    4013: "invalid intents",
}


class DiscordStartError(ConfigError):
    """The bot could not connect: bad token, an intent not granted, Discord unreachable."""


def explain_connection_failure(error: BaseException, account: str) -> DiscordStartError | None:
    """Explain `error`, or the first explainable error it was raised while handling.

    (discord.py 2.x fails with an AttributeError when the very first Gateway
    connection fails; the network error is its __context__.)
    """
    for seen in _chain(error):
        explained = _explain(seen, repr(account))
        if explained is not None:
            return explained
    return None


def fatal_failure(error: BaseException | None, account: str) -> DiscordStartError | None:
    """Explain `error` if no reconnect can fix it, else None.

    Fatal: Discord refused the token (401 on login, close 4004), or closed the
    Gateway with a code discord.py does not reconnect after (4010-4014: only
    those reach the end of its loop as ConnectionClosed). Anything else that
    ends discord.py's loop (a frame it cannot read, the network) is worth a
    restart.
    """
    for seen in _chain(error):
        if isinstance(
            seen,
            discord.LoginFailure | discord.PrivilegedIntentsRequired | discord.ConnectionClosed,
        ):
            return _explain(seen, repr(account))
    return None


def _chain(error: BaseException | None) -> Iterator[BaseException]:
    """`error` and the errors it was raised while handling (`__context__`), five at most."""
    for _ in range(5):
        if error is None:
            return
        yield error
        error = error.__context__


def delivery_error(error: BaseException, request_timeout: float) -> DeliveryError | None:
    """Return the DeliveryError a failed discord.py HTTP call means, or None if it is not one."""
    if isinstance(error, TimeoutError):
        return Uncertain(
            f"Discord did not answer within {request_timeout:g}s; the request may have gone through"
        )
    if isinstance(error, discord.RateLimited):
        return RateLimited(error.retry_after, "Discord rate limit")
    if isinstance(error, discord.HTTPException):
        return _http_error(error)
    if isinstance(error, aiohttp.ClientConnectorError):
        # nothing left this machine: as safe to retry as a rate limit
        return RateLimited(5.0, f"could not connect to Discord ({type(error).__name__})")
    if isinstance(error, aiohttp.ClientError | OSError):
        return Uncertain(
            f"the connection to Discord failed mid-request ({type(error).__name__}); "
            "the request may have gone through"
        )
    return None


def _explain(error: BaseException, account: str) -> DiscordStartError | None:
    if isinstance(error, discord.PrivilegedIntentsRequired):
        return DiscordStartError(
            f"Discord closed the Gateway with 4014 (disallowed intents) for account {account}: "
            f"enable the Message Content intent for this bot at {PORTAL} -> your application "
            "-> Bot -> Privileged Gateway Intents -> MESSAGE CONTENT INTENT, then restart"
        )
    if isinstance(error, discord.LoginFailure):
        return DiscordStartError(
            f"Discord refused the bot token of account {account} (401 Unauthorized): "
            f"copy a fresh token from {PORTAL} -> your application -> Bot -> Reset Token"
        )
    if isinstance(error, discord.ConnectionClosed):
        if error.code == 4004:
            return DiscordStartError(
                f"Discord closed the Gateway with 4004 (authentication failed) for account "
                f"{account}: the bot token is wrong or was reset; copy a fresh one from {PORTAL}"
            )
        meaning = _FATAL_CLOSES.get(error.code) if isinstance(error.code, int) else None
        return DiscordStartError(
            f"Discord closed the Gateway with code {error.code}"
            + (f" ({meaning})" if meaning else "")
            + f" for account {account}"
        )
    if isinstance(error, aiohttp.ClientError | OSError | discord.HTTPException):
        return DiscordStartError(
            f"could not reach Discord for account {account}: "
            f"{type(error).__name__}: {one_line(str(error))}"
        )
    return None


def _http_error(error: discord.HTTPException) -> DeliveryError:
    status = error.status
    what = f"Discord answered {status}" + (f" (code {error.code})" if error.code else "")
    # discord.py puts each field error of a 400 (code 50035) on a line of its own
    text = one_line("; ".join(line.strip() for line in str(error.text or "").splitlines()))
    detail = f"{what}: {text}" if text else what
    if status == 429:
        # a 429 discord.py did not absorb: Cloudflare's (no Via header) or retries exhausted
        headers = getattr(error.response, "headers", None) or {}
        return RateLimited(_float(headers.get("Retry-After")) or 5.0, detail)
    if status >= 500:
        return Uncertain(f"{detail}; the request may have gone through")
    return Rejected(detail)


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """`text` on one line (runs of whitespace made one space), cut to `limit` characters."""
    flat = " ".join(text.split()).strip("; ")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _float(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None

"""The aiohttp session the SDK sends through: no silent resends of signed requests.

aiohttp resends a request once when a connection drops mid-request and the
method is idempotent in the HTTP sense, which includes PUT and DELETE. For the
relay that is wrong twice over: the resend carries the same signature nonce
(the relay refuses it as a replay, 401), and a dropped `PUT /messages` may
already be stored, so its outcome is unknown, not refused. This client
middleware (a public aiohttp hook) turns a dropped connection into
`ConnectionLost`, which aiohttp does not resend; the SDK then retries only
what it may (reads, re-signed with a fresh nonce) and reports the rest.
"""

from __future__ import annotations

import aiohttp

__all__ = ["ConnectionLost", "relay_session"]


class ConnectionLost(aiohttp.ClientConnectionError):
    """The connection dropped after the request was sent: it may have been processed."""


async def _no_resend(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    try:
        return await handler(request)
    except aiohttp.ClientConnectorError:
        raise  # never connected: nothing was sent
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as error:
        raise ConnectionLost(
            f"connection lost during {request.method} {request.url.path}"
        ) from error


def relay_session() -> aiohttp.ClientSession:
    """Return a new session for a `TinyPlaceClient` (the caller closes it)."""
    return aiohttp.ClientSession(middlewares=(_no_resend,))

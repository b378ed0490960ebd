"""The adapter contract: what a channel plugin implements, and what it is given.

An adapter speaks one channel for one account. The switchboard calls
`start(ctx)` with an `AdapterContext`; the adapter connects and hands every raw
platform payload to `await ctx.ingest(raw)`, which returns only after the event
is committed to the store. So an adapter that acks (advances a poll offset,
answers a webhook, acknowledges an envelope, deletes a mailbox message) only
after `ingest` returns gets "ack after durable write" for free.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from attrs import define, field, frozen

from .model import Address, Event, Message, Outbound, Receipt, Sender

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "Adapter",
    "AdapterContext",
    "Capabilities",
    "IngestResult",
    "RouteTable",
    "split_text",
    "utf16_len",
]


@frozen
class Capabilities:
    """What a channel can do. The run builder offers only the tools that apply."""

    threads: bool = False
    edits: bool = False
    reactions: bool = False
    typing: bool = False
    replies: bool = True
    #: longest text one platform message may carry, in the platform's own units
    max_text_len: int = 4000
    #: a word for the framing: "Telegram", "Slack", ...
    display_name: str = ""
    #: the other party of a direct conversation is an agent, and a conversation's
    #: thread is a session id the peer threads its replies under (tiny.place):
    #: `ask_agent` may ask it questions. Such an adapter may offer
    #: ``async def is_contact(peer: str) -> bool`` (may `peer` be written to cold?)
    agent_peers: bool = False


@runtime_checkable
class Adapter(Protocol):
    """One account on one channel."""

    channel: str

    @property
    def capabilities(self) -> Capabilities:
        """What this channel can do (an attribute in implementations)."""

    @property
    def me(self) -> Sender | None:
        """Who the agent is on this platform, known after `start` (may stay None)."""

    async def start(self, ctx: AdapterContext) -> None:
        """Connect and begin delivering raw payloads with `await ctx.ingest(raw)`."""

    async def stop(self) -> None:
        """Stop receiving; finish or abandon in-flight work cleanly. Idempotent."""

    async def send(self, outbound: Outbound) -> Receipt:
        """Deliver one outbound request. Raise RateLimited / Rejected / Uncertain, nothing else."""

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        """Turn a platform payload into an Event, or None when it is not for us.

        Pure. Raise NormalizeError on malformed input.
        """


@frozen
class IngestResult:
    """What happened to one raw payload handed to `ctx.ingest`.

    status: "stored" (new row committed), "duplicate" (already stored: safe to
    ack), "ignored" (normalize returned None: safe to ack), "held" (stored but
    kept from the agent by policy), "malformed" (NormalizeError: logged, counted,
    safe to ack since a retry cannot fix it).
    """

    status: str
    event: Event | None = None
    conversation_id: int | None = None
    seq: int | None = None
    reason: str | None = None

    @property
    def committed(self) -> bool:
        """True when the payload needs no redelivery (anything but a failure to store)."""
        return self.status in {"stored", "duplicate", "ignored", "held", "malformed"}


Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]
#: looks at a request's headers before its body is read: a response refuses it there
#: (an unauthenticated sender is not let to make the server buffer a body), None lets it in
HeaderCheck = Callable[["web.Request"], "web.StreamResponse | None"]


@define
class RouteTable:
    """Routes adapters add to the switchboard's HTTP server, at any time.

    aiohttp freezes its router when the app starts; this table sits behind one
    catch-all route, so adapters can add routes from `start`.
    """

    public_url: str = "http://127.0.0.1:8765"
    _routes: dict[tuple[str, str], Handler] = field(factory=dict)
    _checks: dict[tuple[str, str], HeaderCheck] = field(factory=dict)

    def add(
        self, method: str, path: str, handler: Handler, *, check: HeaderCheck | None = None
    ) -> str:
        """Serve `handler` at `path`; return the public URL of the route.

        `check` sees the request's headers before the server reads its body: a
        webhook that authenticates by a header (Telegram's secret token) or
        whose signature headers must be there and fresh (Slack) refuses a
        stranger before the stranger's body costs any memory.
        """
        if not path.startswith("/"):
            raise ValueError(f"route path must start with '/': {path!r}")
        key = (method.upper(), path)
        if key in self._routes:
            raise ValueError(f"route {method.upper()} {path} is already registered")
        self._routes[key] = handler
        if check is not None:
            self._checks[key] = check
        return self.url(path)

    def remove(self, method: str, path: str) -> None:
        self._routes.pop((method.upper(), path), None)
        self._checks.pop((method.upper(), path), None)

    def check(self, method: str, path: str) -> HeaderCheck | None:
        """The header check of the route `find` gives for this request, if it has one
        (a HEAD answered by a GET route gets that route's check)."""
        if (method.upper(), path) not in self._routes and method.upper() == "HEAD":
            method = "GET"
        return self._checks.get((method.upper(), path))

    def url(self, path: str) -> str:
        return self.public_url.rstrip("/") + path

    def find(self, method: str, path: str) -> Handler | None:
        handler = self._routes.get((method.upper(), path))
        if handler is None and method.upper() == "HEAD":
            handler = self._routes.get(("GET", path))
        return handler

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._routes

    def serves(self, path: str) -> bool:
        """Return True when some method is routed at `path`."""
        return any(known == path for _, known in self._routes)


class AdapterContext:
    """What an adapter is given at `start`: ingest, durable state, routes, a safe logger.

    The switchboard builds one per account; tests build a `ContractContext`
    from `backchannel.testing`, which has the same surface.
    """

    account: str
    config: Mapping[str, Any]
    routes: RouteTable
    log: logging.LoggerAdapter[logging.Logger]

    async def ingest(
        self, raw: Mapping[str, Any], *, state: Mapping[str, str | None] | None = None
    ) -> IngestResult:
        """Normalize, store and schedule one payload; return after the commit.

        `state` (key -> value, None deletes) is written in the same transaction
        as the event, for adapters whose own state must move with the
        transcript (an encryption ratchet, a cursor).
        """
        raise NotImplementedError

    async def ingest_many(
        self,
        raws: Sequence[Mapping[str, Any]],
        *,
        state: Mapping[str, str | None] | None = None,
    ) -> list[IngestResult]:
        """Ingest payloads that arrived together (one poll); return after their one commit.

        Results are in the order of `raws`; `state` commits with them (a poll
        offset that covers exactly this batch).
        """
        return [
            await self.ingest(raw, state=state if i == len(raws) - 1 else None)
            for i, raw in enumerate(raws)
        ]

    async def is_known(self, event_id: str) -> bool:
        """Return True when an event with this platform id is already stored."""
        raise NotImplementedError

    async def dead_letter(self, ref: str, reason: str, payload: str) -> None:
        """Keep a payload that can never be processed (an undecryptable message) for the operator.

        `ref` is the platform's id of it; `reason` one line; `payload` what may be shown
        (never secrets or plaintext that should stay private).
        """
        raise NotImplementedError

    async def note_message_id(self, outbox_id: int | None, platform_message_id: str) -> None:
        """Record the id a send's message will have, just before sending it.

        For adapters that choose message ids themselves: when the process dies
        during the send, the stored message keeps the id, so a reply naming it
        is placed. `outbox_id` is `Outbound.outbox_id` (None: nothing to note).
        """
        raise NotImplementedError

    async def get_state(self, key: str) -> str | None:
        """Read one durable per-account value (a poll cursor, a session blob)."""
        raise NotImplementedError

    async def set_state(self, key: str, value: str | None) -> None:
        """Write (or, with None, delete) one durable per-account value."""
        raise NotImplementedError

    async def transcript(
        self, address: Address, limit: int = 200, *, held: bool = False
    ) -> list[Message]:
        """Return the stored transcript at `address` (last `limit` visible messages, oldest first).

        For channels that show the transcript themselves (the web chat). With
        `held`, messages the policy held back from the agent are included: a
        page may show a person what they wrote themselves.
        """
        raise NotImplementedError


def split_text(text: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Split `text` into ordered parts of at most `limit` units each.

    Cuts prefer a paragraph break, then a line break, then a space; a word
    longer than the limit is cut hard. `measure` counts units (UTF-16 code
    units for Telegram, characters elsewhere). The whitespace a cut falls on
    is dropped; nothing else is.
    """
    if limit <= 0:
        raise ValueError("limit must be positive")
    if measure(text) <= limit:
        return [text]
    parts: list[str] = []
    rest = text
    while measure(rest) > limit:
        head = _longest_prefix(rest, limit, measure)
        cut = -1
        for separator in ("\n\n", "\n", " "):
            found = head.rfind(separator)
            if found > 0:
                cut = found
                break
        if cut <= 0:
            parts.append(head)
            rest = rest[len(head) :]
            continue
        parts.append(rest[:cut])
        rest = rest[cut:].lstrip("\n ") if rest[cut:].strip() else ""
    if rest:
        parts.append(rest)
    return [part for part in parts if part]


def _longest_prefix(text: str, limit: int, measure: Callable[[str], int]) -> str:
    if measure is len:
        return text[:limit]
    low, high = 0, min(len(text), limit)
    while low < high:
        mid = (low + high + 1) // 2
        if measure(text[:mid]) <= limit:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units (how Telegram counts)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2

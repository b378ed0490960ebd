"""`FakeChannel`: an in-memory platform and its adapter, with fault injection.

The platform works like a long-polling API: every update gets a serial
number; the adapter fetches updates after its offset and confirms them by
fetching with a higher offset, which it advances only after `ctx.ingest`
returned (and stores durably in the same transaction as the event).

Raw payload shape (what `normalize` accepts)::

    {"update": 7, "type": "message" | "edit" | "delete" | "reaction",
     "chat": {"id": "c1", "type": "direct" | "group", "title": "Ops"},
     "thread": "t1" | None,
     "from": {"id": "alice", "name": "Alice", "handle": "alice", "is_bot": false},
     "message_id": "m7", "text": "...", "reply_to": "m3" | None,
     "mentions": ["bot"], "date": 1700000000.0}
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import define, field

from ..adapter import AdapterContext, Capabilities, split_text
from ..errors import NormalizeError, RateLimited, Rejected, Uncertain
from ..model import Address, Event, Outbound, Receipt, Sender, now
from .harness import ContractHarness

__all__ = ["FakeChannel", "FakeChannelAdapter", "FakeChannelHarness", "FakePlatform"]

BOT_ID = "bot"


@define
class SentMessage:
    """What the bot sent, as the fake platform recorded it."""

    message_id: str
    chat: str
    thread: str | None
    text: str
    reply_to: str | None = None
    quiet: bool = False
    kind: str = "message"
    target: str | None = None


@define
class FakePlatform:
    """The platform side: users' updates waiting for the bot, and what the bot sent."""

    updates: list[dict[str, Any]] = field(factory=list)
    confirmed: int = 0
    sent: list[SentMessage] = field(factory=list)
    typing: list[tuple[str, str | None]] = field(factory=list)
    send_faults: deque[tuple[str, float]] = field(factory=deque)
    _serial: itertools.count[int] = field(factory=lambda: itertools.count(1))
    _message_ids: itertools.count[int] = field(factory=lambda: itertools.count(1000))
    _wakeup: asyncio.Event = field(factory=asyncio.Event)
    fetches: int = 0

    # users' side -------------------------------------------------------------
    def user_says(self, text: str, **details: Any) -> dict[str, Any]:
        """Queue a user's message for the bot; return the raw update (details: see make_message)."""
        return self.push(self.make_message(text, **details))

    def make_message(
        self,
        text: str,
        *,
        chat: str = "c1",
        chat_type: str = "direct",
        title: str | None = None,
        thread: str | None = None,
        sender: str = "alice",
        name: str | None = None,
        is_bot: bool = False,
        reply_to: str | None = None,
        mention: bool = False,
    ) -> dict[str, Any]:
        """Build (without queueing) a user's message payload."""
        message_id = f"m{next(self._message_ids)}"
        raw = {
            "type": "message",
            "chat": {"id": chat, "type": chat_type, "title": title},
            "thread": thread,
            "from": {
                "id": sender,
                "name": name or sender.title(),
                "handle": sender,
                "is_bot": is_bot,
            },
            "message_id": message_id,
            "text": text,
            "reply_to": reply_to,
            "mentions": [BOT_ID] if mention else [],
            "date": now(),
        }
        return raw

    def user_edits(
        self, message_id: str, text: str, *, chat: str = "c1", sender: str = "alice"
    ) -> dict[str, Any]:
        return self.push(
            {
                "type": "edit",
                "chat": {"id": chat, "type": "direct"},
                "from": {"id": sender, "name": sender.title()},
                "message_id": message_id,
                "text": text,
                "date": now(),
            }
        )

    def user_deletes(
        self, message_id: str, *, chat: str = "c1", sender: str = "alice"
    ) -> dict[str, Any]:
        return self.push(
            {
                "type": "delete",
                "chat": {"id": chat, "type": "direct"},
                "from": {"id": sender, "name": sender.title()},
                "message_id": message_id,
                "text": "",
                "date": now(),
            }
        )

    def bot_echo(self, text: str, *, chat: str = "c1") -> dict[str, Any]:
        """Queue an echo of the bot's own message (platforms that echo do this)."""
        return self.push(self.make_echo(text, chat=chat))

    def make_echo(self, text: str, *, chat: str = "c1") -> dict[str, Any]:
        """Build (without queueing) an echo of the bot's own message."""
        return dict(
            {
                "type": "message",
                "chat": {"id": chat, "type": "direct"},
                "from": {"id": BOT_ID, "name": "Bot", "is_bot": True},
                "message_id": f"m{next(self._message_ids)}",
                "text": text,
                "date": now(),
            }
        )

    def push(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        update = {**raw, "update": next(self._serial)}
        self.updates.append(update)
        self._wakeup.set()
        return update

    # faults ------------------------------------------------------------------
    def redeliver(self, update: Mapping[str, Any]) -> dict[str, Any]:
        """Deliver an already delivered update again (same ids, new serial)."""
        copy = {k: v for k, v in update.items() if k != "update"}
        copy["update_of"] = update["update"]
        return self.push(copy)

    def swap_last_two(self) -> None:
        """Reorder: the last two queued updates are delivered the other way round."""
        a, b = self.updates[-2], self.updates[-1]
        a_serial, b_serial = a["update"], b["update"]
        self.updates[-2], self.updates[-1] = {**b, "update": a_serial}, {**a, "update": b_serial}

    def fail_next_send(self, fault: str, retry_after: float = 1.0) -> None:
        """fault: "rate_limited", "uncertain" (also "timeout"), "rejected" or "slow"."""
        self.send_faults.append((fault, retry_after))

    # the bot's side (used by the adapter) -------------------------------------
    async def fetch(self, offset: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Confirm everything before `offset` and return updates from it on (long poll)."""
        self.fetches += 1
        self.confirmed = max(self.confirmed, offset - 1)
        self.updates = [u for u in self.updates if u["update"] >= offset]
        if not self.updates:
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except TimeoutError:
                return []
        return [dict(u) for u in self.updates]

    def acked(self, update: int) -> bool:
        return self.confirmed >= update

    async def receive(self, outbound: Outbound, limit: int) -> Receipt:
        if self.send_faults:
            fault, value = self.send_faults.popleft()
            if fault == "rate_limited":
                raise RateLimited(value, "fake platform: too many requests")
            if fault in {"uncertain", "timeout"}:
                raise Uncertain("fake platform: no answer before the timeout")
            if fault == "rejected":
                raise Rejected("fake platform: chat not found")
            if fault == "slow":
                await asyncio.sleep(value)
        address = outbound.address
        if outbound.kind != "message":
            self.sent.append(
                SentMessage(
                    "",
                    address.chat,
                    address.thread,
                    outbound.text,
                    kind=outbound.kind,
                    target=outbound.target,
                )
            )
            return Receipt(outbound.target)
        ids = []
        for part in split_text(outbound.text, limit):
            message_id = f"m{next(self._message_ids)}"
            ids.append(message_id)
            self.sent.append(
                SentMessage(
                    message_id,
                    address.chat,
                    address.thread,
                    part,
                    outbound.reply_to,
                    outbound.quiet,
                )
            )
        return Receipt(ids[0], tuple(ids))

    def texts(self, chat: str = "c1") -> list[str]:
        return [m.text for m in self.sent if m.chat == chat and m.kind == "message"]


class FakeChannelAdapter:
    """The adapter for `FakePlatform`: a long-poller that acks only after commit."""

    channel = "fake"

    def __init__(
        self,
        account: str,
        settings: Mapping[str, Any] | None = None,
        platform: FakePlatform | None = None,
    ):
        settings = settings if settings is not None else {}
        self.account = account
        self.platform = platform or settings.get("platform") or FakePlatform()
        self.capabilities = Capabilities(
            threads=True,
            edits=True,
            reactions=True,
            typing=True,
            max_text_len=int(settings.get("max_text_len", 200)),
            display_name="Fake Chat",
        )
        self.me: Sender | None = None
        self._task: asyncio.Task[None] | None = None
        self._ctx: AdapterContext | None = None

    async def start(self, ctx: AdapterContext) -> None:
        self._ctx = ctx
        self.me = Sender(BOT_ID, "Bot", "bot", is_bot=True)
        offset = int(await ctx.get_state("offset") or 0)
        self._task = asyncio.create_task(self._poll(ctx, offset))

    async def _poll(self, ctx: AdapterContext, offset: int) -> None:
        while True:
            updates = await self.platform.fetch(offset + 1 if offset else 0)
            for update in updates:
                await ctx.ingest(update, state={"offset": str(update["update"])})
                offset = update["update"]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def send(self, outbound: Outbound) -> Receipt:
        return await self.platform.receive(outbound, self.capabilities.max_text_len)

    async def typing(self, address: Address) -> None:
        self.platform.typing.append((address.chat, address.thread))

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        if type(raw) is not dict and not isinstance(raw, Mapping):
            raise NormalizeError(f"expected an object, got {type(raw).__name__}")
        chat = _object(raw, "chat")
        sender = _object(raw, "from")
        kind = raw.get("type", "message")
        if not isinstance(kind, str) or kind not in {"message", "edit", "delete", "reaction"}:
            raise NormalizeError(f"unknown update type {kind!r}", where="type")
        sender_id = _text(sender, "id", "from.id")
        if sender_id == BOT_ID:
            return None
        chat_id = _text(chat, "id", "chat.id")
        message_id = _text(raw, "message_id", "message_id")
        thread = raw.get("thread")
        if thread is not None and not isinstance(thread, str):
            raise NormalizeError("expected a string or null", where="thread")
        if kind == "message":
            event_id = f"msg:{chat_id}:{message_id}"
        else:
            event_id = f"{kind}:{_text(raw, 'update_of' if 'update_of' in raw else 'update')}"
        mentions = raw.get("mentions") or ()
        if not isinstance(mentions, list | tuple):
            raise NormalizeError("expected a list", where="mentions")
        date = raw.get("date") or now()
        if not isinstance(date, int | float) or isinstance(date, bool) or date != date:
            raise NormalizeError("expected a number of seconds", where="date")
        title = chat.get("title")
        return Event(
            address=Address(self.account, chat_id, thread),
            event_id=event_id,
            sender=Sender(
                sender_id,
                _optional_text(sender, "name", "from.name") or "",
                _optional_text(sender, "handle", "from.handle"),
                bool(sender.get("is_bot")),
            ),
            kind=kind,  # type: ignore[arg-type]  # checked against the four kinds above
            text=_optional_text(raw, "text", "text") or "",
            platform_message_id=message_id,
            reply_to=_optional_text(raw, "reply_to", "reply_to"),
            mentions_me=BOT_ID in mentions,
            sent_at=float(date),
            conversation_kind="thread"
            if thread
            else ("group" if chat.get("type") == "group" else "direct"),
            conversation_title=title if isinstance(title, str) else None,
            raw=raw,
        )


def _object(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    if key not in raw:
        raise NormalizeError("missing field", where=key)
    value = raw[key]
    # `type is dict` first: an ABC isinstance check is slow, and nearly every payload is a dict
    if type(value) is not dict and not isinstance(value, Mapping):
        raise NormalizeError(f"expected an object, got {type(value).__name__}", where=key)
    return value


def _text(raw: Mapping[str, Any], key: str, where: str | None = None) -> str:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise NormalizeError("expected a non-empty string or an integer", where=where or key)
    return str(value)


def _optional_text(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None or isinstance(value, str):
        return value
    raise NormalizeError(f"expected a string, got {type(value).__name__}", where=where)


class FakeChannel:
    """A FakePlatform plus a factory making adapters on it (register as channel "fake")."""

    def __init__(self, max_text_len: int = 200):
        self.platform = FakePlatform()
        self.max_text_len = max_text_len

    def adapter(self, account: str = "fake") -> FakeChannelAdapter:
        return FakeChannelAdapter(account, {"max_text_len": self.max_text_len}, self.platform)


class FakeChannelHarness(ContractHarness):
    """The conformance harness for FakeChannelAdapter (and an example for plugin authors)."""

    def __init__(self, adapter: FakeChannelAdapter):
        self.adapter = adapter
        self.platform = adapter.platform
        self.address = Address(adapter.account, "c1")
        self._by_event: dict[str, dict[str, Any]] = {}

    async def deliver_user_message(self, text: str) -> str:
        raw = self.platform.user_says(text)
        event_id = f"msg:c1:{raw['message_id']}"
        self._by_event[event_id] = raw
        return event_id

    async def deliver_again(self, event_id: str) -> None:
        self.platform.redeliver(self._by_event[event_id])

    def is_acked(self, event_id: str) -> bool:
        return self.platform.acked(self._by_event[event_id]["update"])

    def user_message_payload(self, text: str) -> Mapping[str, Any]:
        return {**self.platform.make_message(text), "update": 999_999}

    def own_message_payload(self, text: str) -> Mapping[str, Any]:
        return {**self.platform.make_echo(text), "update": 999_998}

    def malformed_payloads(self) -> Sequence[Mapping[str, Any]]:
        return [
            {"update": 1, "type": "message"},
            {"update": 2, "type": "message", "chat": {"id": "c1"}, "from": "alice"},
            {"update": 3, "type": "poll", "chat": {"id": "c1"}, "from": {"id": "a"}},
        ]

    def sent_texts(self) -> list[str]:
        return self.platform.texts(self.address.chat)

    def fail_next_send(self, fault: str, retry_after: float = 2.0) -> None:
        self.platform.fail_next_send(fault, retry_after)

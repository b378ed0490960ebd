"""A complete small adapter: a made-up "hookchat" platform that talks plain JSON over HTTP.

Inbound: the platform POSTs each message to our webhook route:
    {"id": "evt-1", "chat": "room-1", "from": {"id": "u1", "name": "Ann"},
     "message_id": "m1", "text": "hi", "reply_to": null, "bot": false}
and redelivers until it gets a 2xx. Outbound: we POST {"chat", "text", "reply_to"}
to `{api}/send`; it answers {"ok": true, "id": "m9"}, or 429 {"retry_after": 3},
or 4xx {"ok": false, "error": "..."}.

This file is the example in docs/writing-an-adapter.md, word for word (the adapter
module of the guide's project), and tests/test_example_adapter.py builds that
project from the guide's code blocks and runs the conformance kit in it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import web
from backchannel import (
    Address,
    Capabilities,
    Event,
    NormalizeError,
    Outbound,
    RateLimited,
    Receipt,
    Rejected,
    Sender,
    Uncertain,
    hookimpl,
    split_text,
)
from backchannel.adapter import AdapterContext
from backchannel.wire import BadPayload, parse_json


class HookchatAdapter:
    channel = "hookchat"
    capabilities = Capabilities(max_text_len=500, display_name="Hookchat")

    def __init__(self, account: str, settings: Mapping[str, Any]):
        self.account = account
        self.api = str(settings["api"]).rstrip("/")
        self.timeout = float(settings.get("timeout", 10))
        self.me = Sender(str(settings.get("bot_id", "bot")), "Bot", is_bot=True)
        self._session: aiohttp.ClientSession | None = None
        self._ctx: AdapterContext | None = None

    async def start(self, ctx: AdapterContext) -> None:
        self._ctx = ctx
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        ctx.routes.add("POST", f"/hooks/{self.account}", self._webhook)

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._ctx is not None:
            self._ctx.routes.remove("POST", f"/hooks/{self.account}")
            self._ctx = None

    async def _webhook(self, request: web.Request) -> web.Response:
        assert self._ctx is not None
        try:
            raw = parse_json(await request.read())  # bounded in size and depth
        except BadPayload as error:
            return web.json_response({"ok": False, "error": str(error)}, status=400)
        # ingest returns after the commit: answering 200 only now is "ack after durable write"
        await self._ctx.ingest(raw)
        return web.json_response({"ok": True})

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        try:
            sender = raw["from"]
            if str(sender["id"]) == self.me.id:
                return None  # our own message, echoed back
            return Event(
                address=Address(self.account, raw["chat"]),
                event_id=raw["id"],
                sender=Sender(sender["id"], sender.get("name", ""), is_bot=bool(raw.get("bot"))),
                text=str(raw.get("text", "")),
                platform_message_id=raw["message_id"],
                reply_to=raw.get("reply_to"),
            )
        except KeyError as missing:
            raise NormalizeError("missing field", where=str(missing.args[0])) from None
        except (TypeError, AttributeError):
            raise NormalizeError("expected a JSON object with a 'from' object") from None

    async def send(self, outbound: Outbound) -> Receipt:
        ids = []
        for part in split_text(outbound.text, self.capabilities.max_text_len):
            body = {"chat": outbound.address.chat, "text": part, "reply_to": outbound.reply_to}
            ids.append(await self._post(body))
        return Receipt(ids[0], tuple(ids))

    async def _post(self, body: dict[str, Any]) -> str:
        assert self._session is not None, "send before start"
        try:
            async with self._session.post(f"{self.api}/send", json=body) as response:
                data = await response.json(content_type=None)
                if response.status == 429:
                    raise RateLimited(float(data.get("retry_after", 1)))
                if response.status >= 500:
                    raise Uncertain(f"hookchat answered {response.status}")
                if not data.get("ok"):
                    raise Rejected(str(data.get("error", f"status {response.status}")))
                return str(data["id"])
        except (TimeoutError, aiohttp.ClientConnectionError) as error:
            # the request may have reached the platform: never retried automatically
            raise Uncertain(f"no answer from hookchat: {type(error).__name__}") from None
        except (json.JSONDecodeError, aiohttp.ContentTypeError):
            raise Uncertain("hookchat answered something that is not JSON") from None


@hookimpl
def register_channels(register: Any) -> None:
    register("hookchat", HookchatAdapter)

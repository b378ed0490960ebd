"""The example adapter from docs/writing-an-adapter.md passes the conformance kit."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from backchannel import Address
from backchannel.server import HttpServer
from backchannel.testing import AdapterContract, ContractContext, ContractHarness
from backchannel.testing.loopback import serve_loopback

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "webhook_channel.py"
spec = importlib.util.spec_from_file_location("webhook_channel", EXAMPLE)
assert spec is not None and spec.loader is not None
webhook_channel = importlib.util.module_from_spec(spec)
sys.modules["webhook_channel"] = webhook_channel
spec.loader.exec_module(webhook_channel)


class FakeHookchat:
    """The platform: receives sends, delivers webhooks (retrying until 2xx), injects faults."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.faults: list[tuple[str, float]] = []
        self.acked: set[str] = set()
        self.ids = itertools.count(1)
        self.url = ""
        self.hang = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/send", self._send)
        self._runner, self.url = await serve_loopback(app)

    async def stop(self) -> None:
        self.hang.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.faults:
            fault, value = self.faults.pop(0)
            if fault == "rate_limited":
                return web.json_response({"ok": False, "retry_after": value}, status=429)
            if fault == "timeout":
                await self.hang.wait()  # past the client's timeout, until the fake stops
            if fault == "rejected":
                return web.json_response({"ok": False, "error": "chat_not_found"}, status=404)
        self.sent.append(body)
        return web.json_response({"ok": True, "id": f"m{next(self.ids)}"})

    async def deliver(self, webhook_url: str, payload: Mapping[str, Any]) -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(5):
                async with session.post(webhook_url, json=payload) as response:
                    if response.status < 300:
                        self.acked.add(str(payload["id"]))
                        return


class HookchatHarness(ContractHarness):
    def __init__(self, adapter: Any, fake: FakeHookchat, webhook_url: str):
        self.adapter = adapter
        self.fake = fake
        self.address = Address(adapter.account, "room-1")
        self.webhook_url = webhook_url
        self.payloads: dict[str, dict[str, Any]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.serial = itertools.count(1)

    def user_message_payload(self, text: str) -> dict[str, Any]:
        n = next(self.serial)
        return {
            "id": f"evt-{n}",
            "chat": "room-1",
            "from": {"id": "u1", "name": "Ann"},
            "message_id": f"um{n}",
            "text": text,
        }

    def own_message_payload(self, text: str) -> Mapping[str, Any]:
        return {
            "id": "evt-own",
            "chat": "room-1",
            "from": {"id": "bot"},
            "message_id": "x",
            "text": text,
        }

    def malformed_payloads(self) -> Sequence[Mapping[str, Any]]:
        return [{"chat": "room-1"}, {"id": "e", "chat": "c", "from": "ann", "message_id": "m"}]

    async def deliver_user_message(self, text: str) -> str:
        payload = self.user_message_payload(text)
        self.payloads[payload["id"]] = payload
        self._deliver(payload)
        return str(payload["id"])

    async def deliver_again(self, event_id: str) -> None:
        self._deliver(self.payloads[event_id])

    def _deliver(self, payload: Mapping[str, Any]) -> None:
        task = asyncio.create_task(self.fake.deliver(self.webhook_url, payload))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def is_acked(self, event_id: str) -> bool:
        return event_id in self.fake.acked

    def sent_texts(self) -> list[str]:
        return [s["text"] for s in self.fake.sent if s["chat"] == "room-1"]

    def fail_next_send(self, fault: str, retry_after: float = 2.0) -> None:
        self.fake.faults.append((fault, retry_after))


class TestHookchatContract(AdapterContract):
    @pytest.fixture
    async def harness(self, contract_context: ContractContext) -> AsyncIterator[HookchatHarness]:
        fake = FakeHookchat()
        await fake.start()
        server = HttpServer(contract_context.routes, port=0)
        contract_context.routes.public_url = await server.start()
        adapter = webhook_channel.HookchatAdapter(
            contract_context.account, {"api": fake.url, "timeout": 0.5}
        )
        await adapter.start(contract_context.bind(adapter))
        harness = HookchatHarness(adapter, fake, contract_context.routes.url("/hooks/test"))
        yield harness
        contract_context.release()
        await asyncio.gather(*harness.tasks, return_exceptions=True)
        await adapter.stop()
        await server.stop()
        await fake.stop()

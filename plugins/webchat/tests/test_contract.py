"""The web chat passes backchannel's adapter conformance kit, with a fake page as the platform.

How the contract's faults map onto a web chat (there is no platform API to answer 429 or hang):

- "rate_limited": the adapter's own per-conversation limit on agent messages
  (`agent_rate_limit`) is used up, as a runaway agent would use it up.
- "timeout": the page does not confirm the pushed message (a frozen tab), so
  the adapter cannot know it was shown within `delivery_timeout`.
- "rejected": the send goes to a conversation no visitor ever opened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from backchannel.model import Address, now
from backchannel.testing import AdapterContract, ContractContext, ContractHarness
from backchannel_webchat import WebchatAdapter
from backchannel_webchat.normalize import inbound_payload, visitor_id
from backchannel_webchat.testing import FakeBrowser, RouteServer


class WebchatHarness(ContractHarness):
    adapter: WebchatAdapter

    def __init__(self, adapter: WebchatAdapter, page: FakeBrowser, account: str):
        self.adapter = adapter
        self.page = page
        self.account = account
        self.home = page.address(account)
        self._texts: dict[str, str] = {}
        self._reject_next = False

    @property
    def address(self) -> Address:  # type: ignore[override]
        if self._reject_next:
            self._reject_next = False
            return Address(self.account, "v0123456789abcdef.never-opened")
        return self.home

    async def deliver_user_message(self, text: str) -> str:
        client_id = await self.page.say(text)
        self._texts[client_id] = text
        return f"{self.page.chat}:{client_id}"

    async def deliver_again(self, event_id: str) -> None:
        client_id = event_id.split(":", 1)[1]
        await self.page.say(self._texts[client_id], client_id=client_id)

    def is_acked(self, event_id: str) -> bool:
        return event_id.split(":", 1)[1] in self.page.acked

    async def wait_acked(self, event_id: str, timeout: float = 10.0) -> None:
        await self.page.wait_ack(event_id.split(":", 1)[1], timeout)

    def _payload(self, text: str) -> dict[str, Any]:
        return inbound_payload(
            chat=self.page.chat,
            visitor=visitor_id(self.page.visitor),
            name="Ada",
            client_id="c0ffee01",
            text=text,
            sent_at=now(),
        )

    def user_message_payload(self, text: str) -> Mapping[str, Any]:
        return self._payload(text)

    def own_message_payload(self, text: str) -> Mapping[str, Any]:
        return {**self._payload(text), "role": "agent"}

    def malformed_payloads(self) -> Sequence[Mapping[str, Any]]:
        good = self._payload("hi")
        without_text = dict(good)
        del without_text["text"]
        return [
            without_text,
            {**good, "text": 42},
            {**good, "client_id": "has spaces and <tags>"},
            {**good, "client_id": ""},
            {**good, "sent_at": "yesterday"},
            {**good, "role": "admin"},
            {**good, "kind": "telegram.update"},
            {**good, "sender": "Ada"},
            {**good, "chat": None},
        ]

    def sent_texts(self) -> list[str]:
        return self.page.agent_texts()

    def fail_next_send(self, fault: str, retry_after: float = 2.0) -> None:
        if fault == "rate_limited":
            # use up the conversation's agent budget, as a burst of agent messages would
            limits = self.adapter.agent_limits
            assert limits.per_minute == pytest.approx(60 / retry_after)
            while not limits.take(self.home.chat):
                pass
        elif fault == "timeout":
            self.page.ignore_next_delivery()
        elif fault == "rejected":
            self._reject_next = True
        else:
            raise ValueError(f"unknown fault {fault!r}")


class TestWebchatContract(AdapterContract):
    @pytest.fixture
    async def harness(self, contract_context: ContractContext) -> AsyncIterator[WebchatHarness]:
        async with RouteServer(contract_context.routes):
            adapter = WebchatAdapter(
                contract_context.account,
                {"delivery_timeout": 0.5, "agent_rate_limit": 20, "agent_burst": 5},
            )
            await adapter.start(contract_context.bind(adapter))
            assert adapter.url is not None
            async with FakeBrowser(adapter.url) as page:
                yield WebchatHarness(adapter, page, contract_context.account)
            await adapter.stop()

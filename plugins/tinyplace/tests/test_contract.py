"""The adapter conformance suite, against FakeRelay with real Signal encryption."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from backchannel.model import Address
from backchannel.testing import AdapterContract, ContractContext, ContractHarness
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.normalize import event_id_of
from backchannel_tinyplace.testing import FakeRelay, RelayPeer


class TinyplaceHarness(ContractHarness):
    """The adapter's account, and a peer agent that talks to it through the relay."""

    adapter: TinyplaceAdapter

    def __init__(self, adapter: TinyplaceAdapter, relay: FakeRelay, peer: RelayPeer) -> None:
        self.adapter = adapter
        self.relay = relay
        self.peer = peer
        self.address = Address("test", peer.agent_id, "master")
        self.received: list[str] = []
        relay.tap(peer.agent_id, self._on_sent)

    async def _on_sent(self, envelope: dict[str, Any]) -> None:
        self.received.append(RelayPeer.text_of(await self.peer.decrypt(envelope)))

    async def deliver_user_message(self, text: str) -> str:
        relay_id = await self.peer.send_text(self.adapter.agent_id, text)
        return event_id_of(self.peer.agent_id, relay_id)

    async def deliver_again(self, event_id: str) -> None:
        self.relay.redeliver(self.adapter.agent_id, event_id.rsplit(":", 1)[1])

    def is_acked(self, event_id: str) -> bool:
        return self.relay.is_acked(self.adapter.agent_id, event_id.rsplit(":", 1)[1])

    async def wait_acked(self, event_id: str, timeout: float = 10.0) -> None:
        await self.relay.wait_acked(self.adapter.agent_id, event_id.rsplit(":", 1)[1], timeout)

    def _raw(self, sender: str, text: str) -> dict[str, Any]:
        return {
            "envelope": {
                "id": "msg_1_abc",
                "from": sender,
                "to": self.adapter.agent_id,
                "timestamp": "2026-11-30T09:00:00.000Z",
                "deviceId": 1,
                "type": "CIPHERTEXT",
            },
            "plaintext": text,
        }

    def user_message_payload(self, text: str) -> Mapping[str, Any]:
        return self._raw(self.peer.agent_id, text)

    def own_message_payload(self, text: str) -> Mapping[str, Any]:
        return self._raw(self.adapter.agent_id, text)

    def malformed_payloads(self) -> Sequence[Mapping[str, Any]]:
        good = self._raw(self.peer.agent_id, "x")
        session_with_newline = (
            '{"envelope_version":"tinyplace.harness.session.v1",'
            '"scope":{"wrapper_session_id":"a\\nb"},"message":{"text":"x"}}'
        )
        return [
            {"plaintext": "no envelope"},
            {"envelope": {**good["envelope"], "id": ""}, "plaintext": "x"},
            {
                "envelope": {k: v for k, v in good["envelope"].items() if k != "from"},
                "plaintext": "x",
            },
            {"envelope": good["envelope"], "plaintext": None},
            {"envelope": good["envelope"], "plaintext": session_with_newline},
        ]

    def sent_texts(self) -> list[str]:
        return list(self.received)

    def fail_next_send(self, fault: str, retry_after: float = 2.0) -> None:
        kind = {"rate_limited": "rate_limited", "timeout": "hang", "rejected": "rejected"}[fault]
        self.relay.fail_next(kind, method="PUT", path="/messages", retry_after=retry_after)


class TestTinyplaceContract(AdapterContract):
    @pytest.fixture
    async def harness(
        self,
        contract_context: ContractContext,
        relay: FakeRelay,
        peer: RelayPeer,
        settings_for: Any,
    ) -> AsyncIterator[TinyplaceHarness]:
        # the peer decrypts inside the relay's PUT handler with the SDK's pure-Python AES:
        # leave room for that on a loaded machine
        adapter = TinyplaceAdapter(contract_context.account, settings_for(request_timeout=4.0))
        relay.make_contacts(peer.agent_id, adapter.agent_id)
        await adapter.start(contract_context.bind(adapter))
        yield TinyplaceHarness(adapter, relay, peer)
        await adapter.stop()

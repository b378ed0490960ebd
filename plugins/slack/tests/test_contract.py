"""The adapter contract, in Socket Mode and over the Events API, against FakeSlack."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from backchannel.testing import AdapterContract, ContractContext
from backchannel_slack import SlackAdapter
from backchannel_slack.testing import FakeSlack

from .harness import SlackHarness


class TestSocketModeContract(AdapterContract):
    @pytest.fixture
    async def harness(
        self, slack: FakeSlack, contract_context: ContractContext
    ) -> AsyncIterator[SlackHarness]:
        adapter = SlackAdapter(contract_context.account, slack.settings(mode="socket", timeout=1.0))
        await adapter.start(contract_context.bind(adapter))
        yield SlackHarness(adapter, slack, contract_context.account)
        await adapter.stop()


class TestEventsApiContract(AdapterContract):
    @pytest.fixture
    async def harness(
        self, slack: FakeSlack, contract_context: ContractContext, route_server: object
    ) -> AsyncIterator[SlackHarness]:
        adapter = SlackAdapter(contract_context.account, slack.settings(mode="events", timeout=1.0))
        await adapter.start(contract_context.bind(adapter))
        assert adapter.events_url is not None
        slack.use_events_api(adapter.events_url)
        yield SlackHarness(adapter, slack, contract_context.account)
        await adapter.stop()

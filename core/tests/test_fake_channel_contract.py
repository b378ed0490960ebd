"""FakeChannel passes the adapter contract (and shows plugin authors how to wire a harness)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from backchannel.testing import AdapterContract, ContractContext, FakeChannel, FakeChannelHarness


class TestFakeChannelContract(AdapterContract):
    @pytest.fixture
    async def harness(self, contract_context: ContractContext) -> AsyncIterator[FakeChannelHarness]:
        adapter = FakeChannel().adapter(contract_context.account)
        await adapter.start(contract_context.bind(adapter))
        yield FakeChannelHarness(adapter)
        await adapter.stop()

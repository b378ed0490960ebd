"""Testing helpers for adapters, agents and store backends.

- `AdapterContract` / `ContractHarness` — the adapter conformance kit.
- `ContractContext` — an AdapterContext over a real store that tests can hold and watch.
- `StoreContract` — the store backend suite.
- `FakeChannel` — an in-memory platform and adapter with fault injection.

Fixtures (`store`, `contract_context`, `switchboard`, ...) come from the pytest
plugin `backchannel.testing.pytest_plugin`, loaded automatically.
"""

from __future__ import annotations

from .context import ContractContext
from .contract import AdapterContract, ContractHarness
from .fake_channel import FakeChannel, FakeChannelAdapter, FakeChannelHarness, FakePlatform
from .recording import RecordingAgent
from .store_contract import StoreContract
from .watch import Watch

__all__ = [
    "AdapterContract",
    "ContractContext",
    "ContractHarness",
    "FakeChannel",
    "FakeChannelAdapter",
    "FakeChannelHarness",
    "FakePlatform",
    "RecordingAgent",
    "StoreContract",
    "Watch",
]

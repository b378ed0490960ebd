"""Testing helpers for adapters, agents and store backends.

- `AdapterContract` / `ContractHarness` — the adapter conformance kit.
- `ContractContext` — an AdapterContext over a real store that tests can hold and watch.
- `StoreContract` — the store backend suite.
- `FakeChannel` — an in-memory platform and adapter with fault injection.

Fixtures (`store`, `contract_context`, `switchboard`, ...) come from the pytest
plugin `backchannel.testing.pytest_plugin`, loaded automatically.
"""

from __future__ import annotations

from typing import Any

from .context import ContractContext
from .fake_channel import FakeChannel, FakeChannelAdapter, FakeChannelHarness, FakePlatform
from .harness import ContractHarness
from .loopback import serve_loopback
from .mutation import ODD_VALUES, mutate_payload
from .recording import RecordingAgent
from .watch import Watch

__all__ = [
    "ODD_VALUES",
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
    "mutate_payload",
    "serve_loopback",
]


def __getattr__(name: str) -> Any:
    # the test suites need pytest; fakes and helpers must import without it
    if name == "AdapterContract":
        from .contract import AdapterContract

        return AdapterContract
    if name == "StoreContract":
        from .store_contract import StoreContract

        return StoreContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

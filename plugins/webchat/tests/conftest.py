"""Fixtures: a web chat adapter started on a real aiohttp server, and fake pages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from backchannel.testing import ContractContext
from backchannel_webchat import WebchatAdapter
from backchannel_webchat.testing import FakeBrowser, RouteServer

Started = tuple[WebchatAdapter, ContractContext]
_Adapter = TypeVar("_Adapter", bound=WebchatAdapter)


async def serving(
    contract_context: ContractContext, kind: type[_Adapter]
) -> AsyncIterator[Callable[..., Awaitable[_Adapter]]]:
    """Yield a function that starts a `kind` adapter with settings, served on 127.0.0.1;
    every one it started is stopped after."""
    adapters: list[_Adapter] = []
    async with RouteServer(contract_context.routes):

        async def start(**settings: Any) -> _Adapter:
            adapter = kind(contract_context.account, settings)
            await adapter.start(contract_context.bind(adapter))
            adapters.append(adapter)
            return adapter

        yield start
        for adapter in adapters:
            await adapter.stop()


@pytest.fixture
async def start_webchat(
    contract_context: ContractContext,
) -> AsyncIterator[Callable[..., Awaitable[WebchatAdapter]]]:
    """Return a function that starts a web chat adapter with settings, served on 127.0.0.1."""
    async for start in serving(contract_context, WebchatAdapter):
        yield start


@pytest.fixture
async def open_page() -> AsyncIterator[Callable[..., Awaitable[FakeBrowser]]]:
    """Return a function that opens fake pages; all are closed after the test."""
    pages: list[FakeBrowser] = []

    async def open_(url: str, **options: Any) -> FakeBrowser:
        page = FakeBrowser(url, **options)
        pages.append(page)
        await page.open()
        return page

    yield open_
    for page in pages:
        await page.close()

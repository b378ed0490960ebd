"""`serve_loopback`: run an aiohttp app on 127.0.0.1 at a free port, for fakes and tests."""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["serve_loopback"]


async def serve_loopback(
    app: web.Application, *, port: int = 0, **runner_options: Any
) -> tuple[web.AppRunner, str]:
    """Start `app` on 127.0.0.1 at `port` (0: an ephemeral one); return its runner and base URL.

    Stop it with ``await runner.cleanup()``. Signals are never handled by the
    runner (tests own the process); other AppRunner options pass through.
    """
    runner = web.AppRunner(app, handle_signals=False, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"

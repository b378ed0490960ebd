"""`serve` tunes the garbage collector while it serves, and puts it back after."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

from backchannel.app import serve
from backchannel.config import load_config
from backchannel.runtime import GC_THRESHOLDS


async def serve_once(tmp_path: Path, store: Path, on_ready: Any = None) -> None:
    """Start `serve` on a web chat config with `store`, stop it once ready (after `on_ready`)."""
    path = tmp_path / "bot.toml"
    path.write_text(
        f'[store]\npath = "{store}"\n[server]\nport = 0\n'
        '[accounts.web]\nchannel = "webchat"\n[agents.demo]\nkind = "demo"\n',
        encoding="utf-8",
    )
    stop = asyncio.Event()

    def ready(board: Any) -> None:
        if on_ready is not None:
            on_ready(board)
        stop.set()

    await asyncio.wait_for(serve(load_config(path), on_ready=ready, stop=stop), 15)


async def test_serve_tunes_the_collector_while_serving_and_restores_it(tmp_path: Path) -> None:
    before = gc.get_threshold()
    seen: list[tuple[tuple[int, int, int], int]] = []
    await serve_once(
        tmp_path,
        tmp_path / "bc.db",
        lambda board: seen.append((gc.get_threshold(), gc.get_freeze_count())),
    )
    ((thresholds, frozen),) = seen
    assert thresholds == GC_THRESHOLDS
    assert frozen > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_serve_warns_once_when_the_stores_folder_is_writable_by_others(
    tmp_path: Path, caplog: Any
) -> None:
    import logging

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: anyone may plant the store's -wal or -shm there
    caplog.set_level(logging.WARNING, "backchannel.app")
    await serve_once(tmp_path, shared / "bc.db")
    warned = [r.getMessage() for r in caplog.records if "writable by other users" in r.getMessage()]
    assert warned == [
        f"the store's folder {shared} is writable by other users, who could replace the store's"
        " files or plant its -wal and -shm files; keep the store in a folder only you can"
        " write to"
    ]

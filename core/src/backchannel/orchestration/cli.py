"""`backchannel messaging off|on|status`: the durable control over cross-conversation sends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from ..app import open_config_store
from ..cli import config_option, json_option, store_option
from .messaging import MessagingStatus, messaging_status, set_messaging

__all__ = ["messaging_command"]


@click.command("messaging")
@click.argument("action", type=click.Choice(["on", "off", "status"]), default="status")
@config_option
@store_option
@json_option
def messaging_command(
    action: str, config_path: Path | None, store_path: Path | None, as_json: bool
) -> None:
    """Turn cross-conversation sends off or on, durably, or say what holds them (ACTION: on, off, status).

    The switch lives in the store: it survives restarts and a running `serve`
    obeys it at its next send, without a restart. It cannot override the
    config's [orchestration] enabled = false, nor does that override it.
    """
    from ..cli import _load, _require_store

    config = _load(config_path, store_path, secrets=False)
    # also to switch it: a mistyped path must not make a new store and say "OFF" about it
    _require_store(config)

    async def go() -> MessagingStatus:
        store = open_config_store(config)
        try:
            if action != "status":
                await set_messaging(store, action == "on")
            return await messaging_status(store, config)
        finally:
            await store.close()

    status = asyncio.run(go())
    if as_json:
        click.echo(json.dumps(status.to_json(), indent=2))
        return
    click.echo(status.describe())

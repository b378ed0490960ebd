"""backchannel-tinyplace: a tiny.place agent identity as a backchannel account.

Agent-to-agent DMs over the tiny.place relay, Signal-encrypted by the
`tinyplace` SDK, threaded by harness session. Licensed GPL-3.0-or-later
(the SDK's license); backchannel core keeps its own.
"""

from __future__ import annotations

from typing import Any

from backchannel.hookspecs import hookimpl

from .adapter import TinyplaceAdapter

__all__ = ["TinyplaceAdapter"]


@hookimpl
def register_channels(register: Any) -> None:
    register("tinyplace", TinyplaceAdapter)


@hookimpl
def register_commands(cli: Any) -> None:
    from .cli import tinyplace_group

    cli.add_command(tinyplace_group)

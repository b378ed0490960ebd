"""backchannel-tinyplace: a tiny.place agent identity as a backchannel account.

Agent-to-agent DMs over the tiny.place relay, Signal-encrypted by the
`tinyplace` SDK, threaded by harness session. Licensed GPL-3.0-or-later
(the SDK's license); backchannel core keeps its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backchannel.hookspecs import hookimpl
from backchannel.lazy import LazyCommand, lazy_exports

if TYPE_CHECKING:
    from .adapter import TinyplaceAdapter

__all__ = ["TinyplaceAdapter"]

# the tinyplace SDK and its crypto load only when an account or a command uses them
__getattr__ = lazy_exports(__name__, {"TinyplaceAdapter": ".adapter"})


@hookimpl
def register_channels(register: Any) -> None:
    register("tinyplace", "backchannel_tinyplace.adapter:TinyplaceAdapter")


@hookimpl
def register_commands(cli: Any) -> None:
    cli.add_command(
        LazyCommand(
            "tinyplace",
            "backchannel_tinyplace.cli:tinyplace_group",
            "tiny.place contacts: keygen, whoami, pair, requests, accept, block.",
        )
    )

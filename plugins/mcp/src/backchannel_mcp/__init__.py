"""backchannel-mcp: backchannel's conversations as MCP tools, and a Claude Code channel.

Adds ``backchannel mcp serve``. This module stays light (no ``mcp`` import):
it is loaded with every ``backchannel`` command.
"""

from __future__ import annotations

from typing import Any

from backchannel.hookspecs import hookimpl
from backchannel.lazy import LazyCommand

__all__ = ["register_commands"]


@hookimpl
def register_commands(cli: Any) -> None:
    """Add the `backchannel mcp` command group (imported when it runs)."""
    cli.add_command(
        LazyCommand(
            "mcp",
            "backchannel_mcp.cli:mcp_group",
            "Serve backchannel to MCP clients (Claude Code, Codex, Cursor, Claude Desktop, ...).",
        )
    )

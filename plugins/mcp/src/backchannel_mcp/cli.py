"""`backchannel mcp serve`: the MCP server over stdio (a client spawns it) or streamable HTTP.

Only click is imported at module level: the `mcp` SDK loads when the command runs.
In stdio mode stdout is the protocol, so everything for people goes to stderr.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import click
from backchannel.cli import config_option
from backchannel.terminal import log_to_stderr

__all__ = ["mcp_group"]


@click.group("mcp")
def mcp_group() -> None:
    """Serve backchannel to MCP clients (Claude Code, Codex, Cursor, Claude Desktop, ...)."""


@mcp_group.command("serve")
@config_option
@click.option("--stdio", "use_stdio", is_flag=True, help="Speak MCP on stdin/stdout (the default).")
@click.option(
    "--http",
    "http_address",
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp (needs [mcp] token or $BACKCHANNEL_MCP_TOKEN).",
)
@click.option(
    "--channel",
    "as_channel",
    is_flag=True,
    help="Be a Claude Code channel: push the owner's messages, relay permission prompts.",
)
@click.option(
    "--watch",
    "watch",
    multiple=True,
    metavar="KEY",
    help="With --channel: also push the owner's new messages in this conversation (repeatable).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log debug details to stderr.")
def serve_command(
    config_path: Path | None,
    use_stdio: bool,
    http_address: str | None,
    as_channel: bool,
    watch: tuple[str, ...],
    verbose: bool,
) -> None:
    """Serve the tools, a resource per conversation and (with --channel) a Claude Code channel."""
    from backchannel.config import load_config
    from backchannel.errors import ConfigError

    if use_stdio and http_address:
        raise click.UsageError("choose one of --stdio and --http")
    if watch and not as_channel:
        raise click.UsageError("--watch only means something with --channel")
    if as_channel and http_address:
        raise click.UsageError(
            "--channel needs --stdio: Claude Code spawns channel servers and talks to them over stdio"
        )
    host = port = None
    if http_address:
        host, port = _host_port(http_address)
    log_to_stderr(verbose)  # log lines quote platform text: escaped, never acted on
    config = load_config(config_path)
    token = None
    if http_address:
        from .http import TOKEN_ENV, check_http_listen

        assert host is not None
        # [mcp] token, else the variable itself (the config may have no [mcp] table, or
        # there may be no config): never an argument, where any local user could read it
        token = check_http_listen(host, config.mcp.token or os.environ.get(TOKEN_ENV) or None)
    try:
        asyncio.run(_serve(config, host, port, token, as_channel, list(watch)))
    except ConfigError:
        raise
    except KeyboardInterrupt:
        pass


async def _serve(
    config: Any,
    host: str | None,
    port: int | None,
    token: str | None,
    as_channel: bool,
    watch: list[str],
) -> None:
    from backchannel.app import open_config_store
    from backchannel.errors import ConfigError, StoreError

    from .channel import Channel
    from .owner import load_owner_api, owner_gate
    from .reading import find_conversation
    from .server import BackchannelMcp
    from .tools import ToolBox

    store = open_config_store(config)
    try:
        owner_api = load_owner_api(config)
        box = ToolBox(config, store, owner=owner_api)
        channel = None
        if as_channel:
            gate = owner_gate(config)
            if gate is None or owner_api is None:
                raise ConfigError(
                    "--channel needs the owner plugin configured with the owner's user id:"
                    " add [owner] account, chat and user (see docs/owner.md); only the owner's"
                    " messages are ever pushed into a session",
                    path=config.source,
                )
            for key in watch:
                try:
                    await find_conversation(store, key, config)
                except StoreError as error:
                    raise ConfigError(f"--watch {key}: {error}", path=config.source) from None
            channel = Channel(config, store, gate, owner_api, watch=watch)
            click.echo(
                f"channel on for session {owner_api.session_name!r}: pushing the owner's replies"
                " and permission answers" + (f", and {', '.join(watch)}" if watch else ""),
                err=True,
            )
        app = BackchannelMcp(box, channel=channel)
        if host is not None and port is not None and token is not None:
            from .http import serve_http

            await serve_http(
                app,
                host,
                port,
                token,
                on_ready=lambda url: click.echo(f"serving MCP on {url}", err=True),
            )
        else:
            from mcp.server.stdio import stdio_server

            async with stdio_server() as (read_stream, write_stream):
                await app.serve_streams(read_stream, write_stream)
    finally:
        await store.close()


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(
            f"{text!r} is not HOST:PORT (like 127.0.0.1:8766; port 0 picks a free one)",
            param_hint="--http",
        )
    return host.strip("[]"), int(port)

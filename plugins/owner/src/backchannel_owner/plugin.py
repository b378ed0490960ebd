"""The owner plugin's hook implementations (entry point ``owner`` in group "backchannel")."""

from __future__ import annotations

from typing import Any

from backchannel import hookimpl

from .schema import MIGRATIONS

__all__ = ["configure_switchboard", "register_commands", "register_migrations"]


@hookimpl
def register_migrations(register: Any) -> None:
    for migration in MIGRATIONS:
        register(migration)


@hookimpl
def register_commands(cli: Any) -> None:
    from .cli import notify_command, owner_group

    cli.add_command(notify_command)
    cli.add_command(owner_group)


@hookimpl
def configure_switchboard(board: Any, config: Any) -> None:
    """With an ``[owner]`` table: route the owner account's replies and run the duplex service."""
    if "owner" not in config.sections:
        return
    from .router import OwnerDuplex
    from .settings import OwnerSettings

    settings = OwnerSettings.from_config(config)
    if settings.account not in board.accounts:
        return  # a board for other accounts only (`backchannel send` through another account)
    duplex = OwnerDuplex(settings, config, board)
    board.add_inbound_router(settings.account, duplex.route)
    board.add_service(duplex)

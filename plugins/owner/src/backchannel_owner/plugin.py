"""The owner plugin's hook implementations (entry point ``owner`` in group "backchannel")."""

from __future__ import annotations

import logging
from typing import Any

from backchannel import hookimpl
from backchannel.lazy import LazyCommand

from .schema import MIGRATIONS

__all__ = [
    "configure_switchboard",
    "register_commands",
    "register_control_ops",
    "register_migrations",
]


@hookimpl
def register_migrations(register: Any) -> None:
    for migration in MIGRATIONS:
        register(migration)


@hookimpl
def register_commands(cli: Any) -> None:
    # imported when run: every `backchannel` call lists these, few run them
    cli.add_command(
        LazyCommand(
            "notify",
            "backchannel_owner.cli:notify_command",
            "Send your owner TEXT from this session; print the id they can answer.",
        )
    )
    cli.add_command(
        LazyCommand(
            "owner",
            "backchannel_owner.cli:owner_group",
            "The owner duplex: hooks that hand a session its owner's replies mid-turn.",
        )
    )


@hookimpl
def register_control_ops(register: Any) -> None:
    from .api import DELIVER_OP, deliver_in_serve

    register(DELIVER_OP, deliver_in_serve)


@hookimpl
def check_config(config: Any) -> None:
    """`backchannel check` reads ``[owner]`` as serve does (one line per mistake)."""
    if "owner" in config.sections:
        from .settings import OwnerSettings

        OwnerSettings.from_config(config)


@hookimpl
def configure_switchboard(board: Any, config: Any) -> None:
    """With an ``[owner]`` table: route the owner account's replies and run the duplex service."""
    if "owner" not in config.sections:
        return
    from .router import OwnerDuplex
    from .settings import OwnerSettings

    settings = OwnerSettings.from_config(config)
    if settings.account not in board.accounts:
        return  # another board (`backchannel send` through another account)
    if config.store.url:
        # the owner tables are SQLite tables; notify refuses there with one line too
        logging.getLogger("backchannel.owner").warning(
            "owner duplex is off: its tables live in the SQLite store, and this deployment"
            " uses PostgreSQL ([store] url); the owner's replies reach the agent as plain"
            " messages"
        )
        return
    duplex = OwnerDuplex(settings, config, board)
    board.add_inbound_router(settings.account, duplex.route)
    board.add_service(duplex)

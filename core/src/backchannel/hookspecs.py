"""Every hook backchannel calls. Project name "backchannel"; entry point group "backchannel"."""

from __future__ import annotations

from typing import Any

from pluggy import HookimplMarker, HookspecMarker

hookspec = HookspecMarker("backchannel")
hookimpl = HookimplMarker("backchannel")


@hookspec
def register_channels(register: Any) -> None:
    """Register adapter factories: ``register("telegram", TelegramAdapter)``.

    Called once when plugins load. The factory is called as
    ``factory(account_name, settings)`` with the account's config table
    (secrets already resolved) and returns an Adapter.
    """


@hookspec
def register_agents(register: Any) -> None:
    """Register agent kinds usable from config: ``register("demo", make_demo_agent)``.

    The factory is called as ``factory(settings)`` with the agent's config
    table and returns an async callable taking a Run.
    """


@hookspec
def register_tools(register: Any, conversation: Any) -> None:
    """Offer extra tools in runs for `conversation`: ``register(Tool | function)``.

    Called each time a Run is built. `conversation` is the store's
    Conversation. Register nothing to offer nothing.
    """


@hookspec(firstresult=True)
def framing(conversation: Any, channel: str, default: str) -> str | None:
    """Return the framing instruction for a run, replacing `default`.

    Stops at the first non-None result; return None to keep the default.
    """


@hookspec
def register_commands(cli: Any) -> None:
    """Add click commands or groups to the ``backchannel`` command: ``cli.add_command(group)``."""


@hookspec
def register_control_ops(register: Any) -> None:
    """Add operations to the control socket of a running ``serve``.

    Called once when ``serve`` starts listening on the control socket.
    ``register(name, handler)`` adds one; ``handler`` is
    ``async def handler(board, args) -> dict`` and runs inside ``serve`` with
    its `Switchboard`. Clients call it with ``backchannel.control.call``.
    """


@hookspec
def register_migrations(register: Any) -> None:
    """Add a plugin's own SQLite migrations: ``register(owner_m001_tables)``.

    Called when a SQLite store opens, after the core migrations. Each
    migration is a function ``fn(db: apsw.Connection)`` named
    ``<plugin>_mNNN_<what>``; it is applied once, in registration order, and
    recorded by name in the same ``_migrations`` table as the core's.
    """


@hookspec
def configure_switchboard(board: Any, config: Any) -> None:
    """Attach a plugin to a switchboard built from `config` (before it starts).

    Called by ``build_switchboard`` after the accounts are added. A plugin may
    call ``board.add_inbound_router(account, router)`` and
    ``board.add_service(service)``. `config` is the `Config`; a plugin's own
    settings are ``config.sections.get("<entry point name>")``.
    """


@hookspec
def check_config(config: Any) -> None:
    """Check the plugin's own top-level table (``config.sections["<entry point name>"]``).

    Called by ``backchannel check`` (with every other check, so one run lists
    every mistake). Raise ``ConfigError`` naming the key, as ``serve`` would
    when it reads the table; return None when it is fine or absent.
    """

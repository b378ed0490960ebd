"""``backchannel tinyplace ...``: the operator's view of who may talk to this agent.

Commands: ``keygen PATH``, ``whoami``, ``pair AGENT_ID`` (send a contact
request), ``requests`` (pending incoming and outgoing), ``accept AGENT_ID``,
``block AGENT_ID``. The poller decrypts only accepted contacts; everything
else waits in the mailbox until ``accept``.

Account settings come from the core CLI when it provides them: a callable
taking ``(channel, account)`` and returning that account's settings (secrets
resolved), found at ``ctx.meta["backchannel.account_settings"]``, else as
``ctx.obj.account_settings`` (or that key of a dict ``ctx.obj``). Without it,
``--identity`` and ``--relay-url`` (or ``TINYPLACE_IDENTITY`` and
``TINYPLACE_RELAY_URL``) name the account directly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
from backchannel.errors import ConfigError
from tinyplace import TinyPlaceClient, TinyPlaceError

from .adapter import DEFAULT_RELAY_URL
from .contacts import ContactsApi, agent_of
from .identity import generate_identity_file, load_identity
from .relay_errors import error_code
from .transport import relay_session

__all__ = [
    "accept_contact",
    "account_settings",
    "block_contact",
    "contact_requests",
    "pair_with",
    "tinyplace_group",
]

SETTINGS_HOOK = "backchannel.account_settings"
T = TypeVar("T")


# the operations, callable without click --------------------------------------
async def pair_with(settings: Mapping[str, Any], agent_id: str) -> dict[str, Any]:
    """Send a contact request to `agent_id`; return the relationship the relay reports."""
    return await _with_contacts(settings, lambda contacts: contacts.request(agent_id))


async def accept_contact(settings: Mapping[str, Any], agent_id: str) -> dict[str, Any]:
    """Accept `agent_id`'s pending request; its waiting messages are read on the next poll."""
    return await _with_contacts(settings, lambda contacts: contacts.accept(agent_id))


async def block_contact(settings: Mapping[str, Any], agent_id: str) -> dict[str, Any]:
    """Block `agent_id`: the relay refuses its messages and requests from now on."""
    return await _with_contacts(settings, lambda contacts: contacts.block(agent_id))


async def contact_requests(settings: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Return the pending requests: ``{"incoming": [...], "outgoing": [...]}``."""
    return await _with_contacts(settings, lambda contacts: contacts.requests())


async def _with_contacts(
    settings: Mapping[str, Any], action: Callable[[ContactsApi], Awaitable[T]]
) -> T:
    identity = load_identity(settings)
    relay_url = str(settings.get("relay_url") or DEFAULT_RELAY_URL)
    timeout = float(settings.get("request_timeout", 20.0))
    async with (
        relay_session() as session,
        TinyPlaceClient(
            base_url=relay_url, signer=identity.signer(), session=session, timeout=timeout
        ) as client,
    ):
        result = await action(ContactsApi(client.http))
    return result if result is not None else {}  # type: ignore[return-value]


def account_settings(
    ctx: click.Context, account: str | None, identity: str | None, relay_url: str | None
) -> Mapping[str, Any]:
    """Return the settings of the tinyplace account the command acts as."""
    if identity:
        return {"identity": identity, "relay_url": relay_url or DEFAULT_RELAY_URL}
    hook = _settings_hook(ctx)
    if hook is not None:
        settings = dict(hook("tinyplace", account))
        if relay_url:
            settings["relay_url"] = relay_url
        return settings
    raise ConfigError(
        "no tiny.place account to act as: run this through `backchannel` with a config that"
        " has a tinyplace account, or pass --identity (a key or key file) and --relay-url"
    )


def _settings_hook(ctx: click.Context) -> Callable[[str, str | None], Mapping[str, Any]] | None:
    hook = ctx.meta.get(SETTINGS_HOOK)
    if hook is None:
        obj = ctx.find_root().obj
        hook = (
            obj.get(SETTINGS_HOOK)
            if isinstance(obj, dict)
            else getattr(obj, "account_settings", None)
        )
    return hook if callable(hook) else None


# click -------------------------------------------------------------------------
@click.group("tinyplace")
@click.option(
    "--account", "-a", help="The tinyplace account in the config (default: the only one)."
)
@click.option(
    "--identity",
    envvar="TINYPLACE_IDENTITY",
    help="A key file path (or key) to act as, instead of a configured account.",
)
@click.option("--relay-url", envvar="TINYPLACE_RELAY_URL", help="The relay's base URL.")
@click.pass_context
def tinyplace_group(
    ctx: click.Context, account: str | None, identity: str | None, relay_url: str | None
) -> None:
    """tiny.place: identity and pairing (who may message this agent)."""
    ctx.meta["tinyplace.options"] = (account, identity, relay_url)


def _settings(ctx: click.Context) -> Mapping[str, Any]:
    account, identity, relay_url = ctx.meta.get("tinyplace.options", (None, None, None))
    try:
        return account_settings(ctx, account, identity, relay_url)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None


def _run(coro: Awaitable[T]) -> T:
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except TinyPlaceError as error:
        code = error_code(error.body)
        raise click.ClickException(
            f"the relay refused: HTTP {error.status}{f' {code}' if code else ''}"
        ) from None
    except ConfigError as error:
        raise click.ClickException(str(error)) from None


@tinyplace_group.command("keygen")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def keygen(path: Path) -> None:
    """Create a new identity key file at PATH (mode 0600) and print its agent id."""
    try:
        identity = generate_identity_file(path)
    except FileExistsError:
        raise click.ClickException(f"{path} exists; refusing to overwrite a key") from None
    click.echo(identity.agent_id)


@tinyplace_group.command("whoami")
@click.pass_context
def whoami(ctx: click.Context) -> None:
    """Print this account's agent id (what peers pair with)."""
    try:
        click.echo(load_identity(_settings(ctx)).agent_id)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None


@tinyplace_group.command("pair")
@click.argument("agent_id")
@click.pass_context
def pair(ctx: click.Context, agent_id: str) -> None:
    """Ask AGENT_ID to become a contact (messages flow once it accepts)."""
    result = _run(pair_with(_settings(ctx), agent_id))
    click.echo(f"{agent_id}: {result.get('status', 'requested')}")


@tinyplace_group.command("requests")
@click.option("--json", "as_json", is_flag=True, help="Print the relay's answer as JSON.")
@click.pass_context
def requests(ctx: click.Context, as_json: bool) -> None:
    """List pending contact requests, incoming first."""
    result = _run(contact_requests(_settings(ctx)))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    for direction in ("incoming", "outgoing"):
        for view in result[direction]:
            since = view.get("since") or view.get("createdAt") or ""
            click.echo(f"{direction}\t{agent_of(view)}\t{since}".rstrip())
    if not result["incoming"] and not result["outgoing"]:
        click.echo("no pending requests")


@tinyplace_group.command("accept")
@click.argument("agent_id")
@click.pass_context
def accept(ctx: click.Context, agent_id: str) -> None:
    """Accept AGENT_ID's request; its waiting messages are read on the next poll."""
    result = _run(accept_contact(_settings(ctx), agent_id))
    click.echo(f"{agent_id}: {result.get('status', 'accepted')}")


@tinyplace_group.command("block")
@click.argument("agent_id")
@click.pass_context
def block(ctx: click.Context, agent_id: str) -> None:
    """Block AGENT_ID: no more messages or requests from it."""
    result = _run(block_contact(_settings(ctx), agent_id))
    click.echo(f"{agent_id}: {result.get('status', 'blocked')}")

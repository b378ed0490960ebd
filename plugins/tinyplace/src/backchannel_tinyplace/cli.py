"""``backchannel tinyplace ...``: the operator's view of who may talk to this agent.

Commands: ``keygen PATH``, ``whoami``, ``pair AGENT_ID`` (send a contact
request), ``requests`` (pending incoming and outgoing), ``accept AGENT_ID``,
``block AGENT_ID``. The poller decrypts only accepted contacts; everything
else waits in the mailbox until ``accept``.

The account acted as comes from, in order: ``--identity-file PATH`` (or the
key itself in ``TINYPLACE_IDENTITY``, never in argv) with ``--relay-url``; a
settings callable the core CLI may provide, ``(channel, account) ->
settings``, at ``ctx.meta["backchannel.account_settings"]`` (else
``ctx.obj.account_settings``); the tinyplace account of the config file given
with ``-c`` or ``BACKCHANNEL_CONFIG`` (``--account NAME`` when it has several).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
from backchannel.errors import ConfigError
from backchannel.terminal import terminal_safe
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
    "settings_from_config",
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
    ctx: click.Context,
    account: str | None,
    identity: str | None,
    relay_url: str | None,
    config_path: Path | None = None,
) -> Mapping[str, Any]:
    """Return the settings of the tinyplace account the command acts as.

    In order: an identity given directly (a key file or key, with `--relay-url`);
    the core CLI's settings hook; the tinyplace account of the config file
    (`-c` / `BACKCHANNEL_CONFIG`).
    """
    if identity:
        return {"identity": identity, "relay_url": relay_url or DEFAULT_RELAY_URL}
    hook = _settings_hook(ctx)
    if hook is not None:
        settings = dict(hook("tinyplace", account))
    elif config_path is not None:
        settings = settings_from_config(config_path, account)
    else:
        raise ConfigError(
            "no tiny.place account to act as: pass -c CONFIG (or set BACKCHANNEL_CONFIG) for a"
            " config with a tinyplace account, or pass --identity-file (or set"
            " TINYPLACE_IDENTITY) and --relay-url"
        )
    if relay_url:
        settings["relay_url"] = relay_url
    return settings


def settings_from_config(path: Path, account: str | None) -> dict[str, Any]:
    """Return the settings of tinyplace account `account` (or the only one) in a config file."""
    from backchannel.config import load_config

    config = load_config(path, check_plugins=False)
    ours = {name: a for name, a in config.accounts.items() if a.channel == "tinyplace"}
    if account is not None:
        if account not in ours:
            known = ", ".join(sorted(ours)) or "none"
            raise ConfigError(
                f"no tinyplace account {account!r} (tinyplace accounts: {known})", path=str(path)
            )
        return dict(ours[account].settings)
    if len(ours) != 1:
        known = ", ".join(sorted(ours)) or "none"
        raise ConfigError(
            f"say which tinyplace account with --account (tinyplace accounts: {known})",
            path=str(path),
        )
    return dict(next(iter(ours.values())).settings)


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
    "--identity-file",
    "identity",
    type=click.Path(dir_okay=False),
    envvar="TINYPLACE_IDENTITY_FILE",
    help="Act as the identity in this key file instead of a configured account"
    " (or put the key itself in $TINYPLACE_IDENTITY; never on the command line).",
)
@click.option("--relay-url", envvar="TINYPLACE_RELAY_URL", help="The relay's base URL.")
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="BACKCHANNEL_CONFIG",
    help="The backchannel config whose tinyplace account to act as.",
)
@click.pass_context
def tinyplace_group(
    ctx: click.Context,
    account: str | None,
    identity: str | None,
    relay_url: str | None,
    config_path: Path | None,
) -> None:
    """tiny.place: identity and pairing (who may message this agent)."""
    identity = identity or os.environ.get("TINYPLACE_IDENTITY") or None
    ctx.meta["tinyplace.options"] = (account, identity, relay_url, config_path)


def _settings(ctx: click.Context) -> Mapping[str, Any]:
    options = ctx.meta.get("tinyplace.options", (None, None, None, None))
    try:
        return account_settings(ctx, *options)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None


def _run(coro: Awaitable[T]) -> T:
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except TinyPlaceError as error:
        if not error.status:  # no answer at all: the SDK's status 0
            raise click.ClickException(
                f"cannot reach the relay: {error} (is relay_url right, and the relay up?)"
            ) from None
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
    click.echo(terminal_safe(f"{agent_id}: {result.get('status', 'requested')}"))


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
            click.echo(terminal_safe(f"{direction}\t{agent_of(view)}\t{since}".rstrip()))
    if not result["incoming"] and not result["outgoing"]:
        click.echo("no pending requests")


@tinyplace_group.command("accept")
@click.argument("agent_id")
@click.pass_context
def accept(ctx: click.Context, agent_id: str) -> None:
    """Accept AGENT_ID's request; its waiting messages are read on the next poll."""
    result = _run(accept_contact(_settings(ctx), agent_id))
    click.echo(terminal_safe(f"{agent_id}: {result.get('status', 'accepted')}"))


@tinyplace_group.command("block")
@click.argument("agent_id")
@click.pass_context
def block(ctx: click.Context, agent_id: str) -> None:
    """Block AGENT_ID: no more messages or requests from it."""
    result = _run(block_contact(_settings(ctx), agent_id))
    click.echo(terminal_safe(f"{agent_id}: {result.get('status', 'blocked')}"))

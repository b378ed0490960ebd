"""`backchannel notify` and `backchannel owner install-hooks`, added through register_commands."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click
from backchannel.config import load_config
from backchannel.errors import ConfigError
from backchannel.terminal import terminal_safe

from .api import OwnerError, inbox, mark_attempt, mark_delivered, notify, resolve_identity
from .lines import delivery_text

__all__ = ["hook_settings", "notify_command", "owner_group"]

HOOK_EVENTS = ("PostToolUse", "UserPromptSubmit", "SessionStart", "Stop")
HOOK_COMMAND = "backchannel-owner-hook"

config_option = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="BACKCHANNEL_CONFIG",
    help="TOML config file with an [owner] table (default: $BACKCHANNEL_CONFIG).",
)


@click.command("notify")
@click.argument("text", required=False)
@click.option("--fyi", "mode", flag_value="fyi", default=True, help="Silent (the default).")
@click.option("--needs-answer", "mode", flag_value="needs_answer", help="Notify the owner.")
@click.option("--reply", "reply_to", metavar="ID", help="Answer the owner's message #ID.")
@click.option("--inbox", "show_inbox", is_flag=True, help="Print (and take) waiting messages.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@config_option
def notify_command(
    text: str | None,
    mode: str,
    reply_to: str | None,
    show_inbox: bool,
    as_json: bool,
    config_path: Path | None,
) -> None:
    """Send your owner TEXT from this session; print the message id they can answer.

    A plain send is silent (fyi) and sends within 30 s of this session's last
    fyi are edited into it (same id); --needs-answer notifies; --reply ID
    answers the owner's message #ID. --inbox prints the owner's messages
    waiting for this session and marks them delivered.
    """
    if show_inbox:
        _print_inbox(as_json)
        return
    if text is None:
        raise click.UsageError("give the TEXT to send (or --inbox)")
    if config_path is None:
        raise ConfigError(
            "notify needs the config with the [owner] table: pass -c FILE or set BACKCHANNEL_CONFIG"
        )
    # the agent's shell may lack the account's ${VAR}s: a running serve sends with its own
    config = load_config(config_path, strict_env=False)
    try:
        result = asyncio.run(
            notify(config, text, needs_answer=mode == "needs_answer", reply_to=reply_to)
        )
    except OwnerError as error:
        click.echo(f"error: {terminal_safe(str(error))}", err=True)
        sys.exit(1)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "id": result.id,
                    "status": result.status,
                    "mark": result.mark,
                    "session_id": result.session_id,
                    "collapsed": result.collapsed,
                    "via": result.via,
                    "reason": result.reason,
                },
                ensure_ascii=False,
            )
        )
    else:
        click.echo(result.id)
    if result.status != "sent":
        click.echo(
            f"error: message #{result.id} is {result.status}: {terminal_safe(result.reason or '')}"
            + (
                " (it may have arrived; do not resend blindly)"
                if result.status == "uncertain"
                else ""
            ),
            err=True,
        )
        sys.exit(1)


def _print_inbox(as_json: bool) -> None:
    identity = resolve_identity()
    items = [item for item in inbox(identity.session_id) if item.kind == "message"]
    shown = []
    for item in items:
        attempts = mark_attempt(item)
        if attempts is None:
            continue
        shown.append((item, attempts))
    if as_json:
        click.echo(
            json.dumps(
                [
                    {"id": item.id, "parent_id": item.parent_id, "text": item.text}
                    for item, _ in shown
                ],
                ensure_ascii=False,
            )
        )
    elif not shown:
        click.echo(f"no messages from the owner for session {identity.name}")
    else:
        click.echo(
            "\n\n".join(
                delivery_text(item.id, item.text, parent_id=item.parent_id, attempts=attempts)
                for item, attempts in shown
            )
        )
    for item, _ in shown:
        mark_delivered(item)


@click.group("owner")
def owner_group() -> None:
    """The owner duplex: hooks that hand a session its owner's replies mid-turn."""


@owner_group.command("install-hooks")
@click.option(
    "--write",
    "settings_path",
    is_flag=False,
    flag_value=".claude/settings.json",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Merge into this settings file (default .claude/settings.json) instead of printing.",
)
def install_hooks_command(settings_path: Path | None) -> None:
    """Print (or with --write merge into .claude/settings.json) the Claude Code hook config."""
    if settings_path is None:
        click.echo(json.dumps(hook_settings(), indent=2))
        return
    current: dict[str, Any] = {}
    if settings_path.exists():
        try:
            current = json.loads(settings_path.read_text(encoding="utf-8") or "{}")
        except ValueError as error:
            raise ConfigError(
                f"{settings_path} is not valid JSON ({error}); fix it or move it away first"
            ) from None
        if not isinstance(current, dict):
            raise ConfigError(f"{settings_path} does not hold a JSON object")
    try:
        merged = merge_hooks(current, hook_settings())
    except ValueError as error:
        raise ConfigError(f"{settings_path}: {error}; fix it or move it away first") from None
    settings_path.parent.mkdir(parents=True, exist_ok=True)
    settings_path.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    click.echo(f"{settings_path}: the owner inbox hook runs on {', '.join(HOOK_EVENTS)}")


def hook_settings() -> dict[str, Any]:
    """The hooks table for the four events, each running the inbox hook."""
    entry = {"type": "command", "command": HOOK_COMMAND, "timeout": 30}
    hooks: dict[str, Any] = {}
    for event in HOOK_EVENTS:
        group: dict[str, Any] = {"hooks": [dict(entry)]}
        if event == "PostToolUse":
            group = {"matcher": "*", **group}
        hooks[event] = [group]
    return {"hooks": hooks}


def merge_hooks(current: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """Add our hook to each event, keeping every other hook; installing twice changes nothing.

    Raises ValueError, naming the key, when `current` holds something else than Claude
    Code's shape there (it is never rewritten into another shape)."""
    merged = dict(current)
    found = merged.get("hooks") or {}
    if not isinstance(found, dict):
        raise ValueError(f'"hooks" is a {type(found).__name__}, not an object of events')
    hooks = dict(found)
    for event, groups in wanted["hooks"].items():
        listed = hooks.get(event) or []
        if not isinstance(listed, list):
            raise ValueError(
                f'"hooks.{event}" is a {type(listed).__name__}, not a list of matcher groups'
            )
        existing = list(listed)
        present = any(
            hook.get("command") == HOOK_COMMAND
            for group in existing
            if isinstance(group, dict)
            for hook in group.get("hooks") or []
            if isinstance(hook, dict)
        )
        if not present:
            existing.extend(groups)
        hooks[event] = existing
    merged["hooks"] = hooks
    return merged

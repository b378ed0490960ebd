"""`backchannel tinyplace pair|requests|accept|block|keygen|whoami` against FakeRelay."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import click
from backchannel_tinyplace import register_commands
from backchannel_tinyplace.cli import account_settings, tinyplace_group
from backchannel_tinyplace.identity import load_identity
from backchannel_tinyplace.testing import FakeRelay, RelayPeer
from click.testing import CliRunner, Result


def core_cli(meta: dict[str, Any]) -> click.Group:
    """A stand-in for the `backchannel` command: a root group that registers the plugin's group."""

    @click.group()
    @click.pass_context
    def backchannel(ctx: click.Context) -> None:
        ctx.meta.update(meta)

    register_commands(backchannel)
    return backchannel


async def invoke(
    *args: str, meta: dict[str, Any] | None = None, identity: str | None = None
) -> Result:
    """Run `backchannel tinyplace ARGS` in a thread: it runs its own event loop, the relay ours."""
    env = {
        "TINYPLACE_IDENTITY": identity,
        "TINYPLACE_IDENTITY_FILE": None,
        "BACKCHANNEL_CONFIG": None,
    }
    runner = CliRunner(env=env)
    return await asyncio.to_thread(runner.invoke, core_cli(meta or {}), ["tinyplace", *args])


async def test_pair_requests_accept_block_round_trip(relay: FakeRelay, peer: RelayPeer) -> None:
    seed = os.urandom(32).hex()
    me = load_identity({"identity": seed}).agent_id
    base = ["--relay-url", relay.url]

    result = await invoke(*base, "pair", peer.agent_id, identity=seed)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{peer.agent_id}: pending"
    incoming = await peer.contacts.requests()
    assert [v["cryptoId"] for v in incoming["incoming"]] == [me]

    await peer.contacts.request(me)  # a reverse request accepts
    async with RelayPeer(relay.url) as stranger:
        await stranger.contacts.request(me)
        listed = await invoke(*base, "requests", identity=seed)
        assert listed.exit_code == 0, listed.output
        assert listed.output.split("\t")[:2] == ["incoming", stranger.agent_id]
        as_json = json.loads((await invoke(*base, "requests", "--json", identity=seed)).output)
        assert [v["cryptoId"] for v in as_json["incoming"]] == [stranger.agent_id]

        accepted = await invoke(*base, "accept", stranger.agent_id, identity=seed)
        assert accepted.output.strip() == f"{stranger.agent_id}: accepted"
        blocked = await invoke(*base, "block", stranger.agent_id, identity=seed)
        assert blocked.output.strip() == f"{stranger.agent_id}: blocked"
        refused = await stranger.contacts.status(me)
        assert refused["status"] == "blocked"
    assert (await invoke(*base, "requests", identity=seed)).output.strip() == "no pending requests"


async def test_accept_without_a_request_says_what_the_relay_said(relay: FakeRelay) -> None:
    seed = os.urandom(32).hex()
    result = await invoke("--relay-url", relay.url, "accept", "nobody", identity=seed)
    assert result.exit_code == 1
    assert "HTTP 404 no_pending_request" in result.output
    assert seed not in result.output


async def test_a_relay_that_does_not_answer_is_said_so_not_http_0() -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    seed = os.urandom(32).hex()
    result = await invoke("--relay-url", url, "requests", identity=seed)
    assert result.exit_code == 1
    assert "cannot reach the relay:" in result.output and "HTTP 0" not in result.output
    assert seed not in result.output


async def test_settings_come_from_the_core_cli_hook(relay: FakeRelay) -> None:
    seed = os.urandom(32).hex()
    asked: list[tuple[str, str | None]] = []

    def settings_of(channel: str, account: str | None) -> dict[str, Any]:
        asked.append((channel, account))
        return {"identity": seed, "relay_url": relay.url}

    result = await invoke(
        "--account", "ops", "whoami", meta={"backchannel.account_settings": settings_of}
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == load_identity({"identity": seed}).agent_id
    assert asked == [("tinyplace", "ops")]
    with click.Context(tinyplace_group) as ctx:
        assert account_settings(ctx, None, seed, relay.url)["relay_url"] == relay.url
        assert account_settings(ctx, None, seed, None)["identity"] == seed


async def test_without_an_account_the_command_explains_what_to_pass() -> None:
    result = await invoke("whoami")
    assert result.exit_code == 1
    assert "pass -c CONFIG" in result.output


async def test_keygen_writes_a_private_key_file_and_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "agent.json"
    made = await invoke("keygen", str(path))
    assert made.exit_code == 0, made.output
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_identity({"identity": str(path)}).agent_id == made.output.strip()
    again = await invoke("keygen", str(path))
    assert again.exit_code == 1 and "refusing to overwrite" in again.output


async def test_account_comes_from_the_config_file(tmp_path: Path, relay: FakeRelay) -> None:
    seed = os.urandom(32).hex()
    config = tmp_path / "bot.toml"
    config.write_text(
        f"""
[accounts.agents]
channel = "tinyplace"
identity = "${{TP_IDENTITY}}"
relay_url = "{relay.url}"

[agents.demo]
kind = "demo"

[[bindings]]
agent = "demo"
"""
    )
    runner = CliRunner(env={"TP_IDENTITY": seed, "BACKCHANNEL_CONFIG": str(config)})
    result = await asyncio.to_thread(runner.invoke, core_cli({}), ["tinyplace", "whoami"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == load_identity({"identity": seed}).agent_id
    wrong = await asyncio.to_thread(
        runner.invoke, core_cli({}), ["tinyplace", "--account", "nope", "requests"]
    )
    assert wrong.exit_code == 1
    assert "no tinyplace account 'nope' (tinyplace accounts: agents)" in wrong.output
    assert seed not in wrong.output


def test_the_backchannel_command_offers_the_tinyplace_group(tmp_path: Path) -> None:
    from backchannel.cli import main

    seed = os.urandom(32).hex()
    key_file = tmp_path / "agent.json"
    key_file.write_text(seed)
    result = CliRunner().invoke(main, ["tinyplace", "--identity-file", str(key_file), "whoami"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == load_identity({"identity": seed}).agent_id


def test_requests_print_what_the_relay_says_with_control_characters_escaped(
    monkeypatch: Any,
) -> None:
    # the relay is a remote service: an agent id or a date it returns is data, never a
    # command to the operator's terminal
    from backchannel_tinyplace import cli

    async def hostile(settings: Any) -> dict[str, list[dict[str, Any]]]:
        return {
            "incoming": [{"cryptoId": "agent\x1b]0;pwned\x07", "since": "2026\x1b[2J"}],
            "outgoing": [],
        }

    monkeypatch.setattr(cli, "contact_requests", hostile)
    env = {"TINYPLACE_IDENTITY": os.urandom(32).hex(), "BACKCHANNEL_CONFIG": None}
    result = CliRunner(env=env).invoke(core_cli({}), ["tinyplace", "requests"], color=True)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert result.output.split("\t")[1] == "agent\\x1b]0;pwned\\x07"

"""Start-up stays cheap: `import backchannel` and `backchannel --help` import no plugin's client
library and not the serving machinery; plugins' heavy modules load only when used.

Timings are printed by bench/startup.py; these tests check what is imported, which does not
depend on how loaded the machine is."""

from __future__ import annotations

import os
import subprocess
import sys

from backchannel.lazy import LazyCommand, load
from backchannel.plugins import channels
from click.testing import CliRunner

#: modules a plain CLI call must not pay for: client libraries, the HTTP stack, the engine
HEAVY = (
    "aiohttp",
    "asyncio",
    "cattrs",
    "discord",
    "slack_sdk",
    "tinyplace",
    "nacl",
    "psycopg",
    "mcp",
    "uvicorn",
    "starlette",
    "httpx",
    "backchannel.app",
    "backchannel.switchboard",
    "backchannel.store",
)


PROBE = """
import sys
{code}
sys.stderr.write("\\n".join(sorted(sys.modules)))
"""


def imported_by(code: str) -> set[str]:
    """Return the modules a fresh interpreter holds after running `code`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKCHANNEL_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )
    return set(done.stderr.split())


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m in HEAVY or m.split(".")[0] in HEAVY)


def test_import_backchannel_imports_only_the_package() -> None:
    modules = imported_by("import backchannel")

    assert sorted(m for m in modules if m.startswith("backchannel")) == ["backchannel"]
    assert heavy(modules) == []


def test_help_loads_every_plugin_but_none_of_their_heavy_modules() -> None:
    modules = imported_by(
        "from backchannel.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )

    assert heavy(modules) == []
    # the entry points were loaded (their commands are listed), only cheaply
    assert {"backchannel_discord", "backchannel_slack", "backchannel_tinyplace"} <= modules


def test_a_channel_registered_by_reference_loads_when_it_is_asked_for() -> None:
    assert channels().items["discord"] == "backchannel_discord.adapter:DiscordAdapter"
    factory = channels().get("discord")

    from backchannel_discord.adapter import DiscordAdapter

    assert factory is DiscordAdapter


def test_a_lazy_command_runs_the_real_one() -> None:
    from backchannel.cli import main

    result = CliRunner().invoke(main, ["tinyplace", "--help"])

    assert result.exit_code == 0, result.output
    assert "keygen" in result.stdout and "whoami" in result.stdout
    command = main.commands["tinyplace"]
    assert isinstance(command, LazyCommand)
    assert command.load() is load("backchannel_tinyplace.cli:tinyplace_group")

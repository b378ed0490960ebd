"""Fakes and helpers that users import in their own code load without pytest installed."""

from __future__ import annotations

import subprocess
import sys

GUARD = """
import builtins
real = builtins.__import__
def guard(name, *args, **kwargs):
    if name == "pytest" or name.startswith("_pytest"):
        raise ImportError("pytest is not installed here")
    return real(name, *args, **kwargs)
builtins.__import__ = guard
from backchannel.testing import ContractHarness, FakeChannel, RecordingAgent, Watch
import backchannel.cli
import backchannel_discord.testing
import backchannel_slack.testing
import backchannel_telegram.testing
import backchannel_tinyplace.testing
import backchannel_webchat.testing
print("ok")
"""


def test_fakes_and_the_cli_import_without_pytest() -> None:
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", GUARD], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"

"""Plugins: hooks are documented, registries resolve clashes, loading can be restricted."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from backchannel import hookspecs
from backchannel.errors import PluginError
from backchannel.plugins import Registry, agents, channels, get_plugin_manager

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugin-hooks.md"


def test_every_hook_has_a_docstring_and_a_documented_section() -> None:
    text = DOCS.read_text()
    for name, function in inspect.getmembers(hookspecs, inspect.isfunction):
        if not hasattr(function, "backchannel_spec"):
            continue
        assert function.__doc__, f"hook {name} has no docstring"
        assert f"## {name}(" in text, f"hook {name} is not documented in {DOCS.name}"


def test_installed_channels_and_builtin_agents_are_registered() -> None:
    assert {"demo", "openai", "python"} <= set(agents().items)
    assert {"telegram", "slack", "discord", "tinyplace", "webchat"} <= set(channels().items)


def test_a_name_registered_by_two_plugins_is_a_clear_error() -> None:
    registry = Registry("channel")
    registry.register_from("plugin-a")("chat", object)
    with pytest.raises(PluginError, match="'chat' is registered by both plugin-a and plugin-b"):
        registry.register_from("plugin-b")("chat", object)


def test_unknown_name_lists_what_is_installed() -> None:
    with pytest.raises(PluginError, match=r"no agent kind called 'gpt9' \(installed: demo"):
        agents().get("gpt9")


def test_misspelled_hook_implementation_is_caught() -> None:
    from backchannel.hookspecs import hookimpl
    from pluggy import PluginValidationError

    class Broken:
        @hookimpl
        def register_channel(self, register):
            pass

    pm = get_plugin_manager()
    pm.register(Broken(), name="broken")
    try:
        with pytest.raises(PluginValidationError):
            pm.check_pending()
    finally:
        pm.unregister(name="broken")


def test_load_plugins_env_restricts_loading() -> None:
    code = (
        "from backchannel.plugins import channels, agents;"
        "print(sorted(channels().items), sorted(agents().items))"
    )
    env = {"BACKCHANNEL_LOAD_PLUGINS": "backchannel-webchat", "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['webchat'] ['demo', 'openai', 'python']"
    env["BACKCHANNEL_LOAD_PLUGINS"] = ""
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[] ['demo', 'openai', 'python']"

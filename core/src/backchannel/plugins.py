"""The plugin manager: built-in plugins and those found under entry point group "backchannel".

Set ``BACKCHANNEL_LOAD_PLUGINS`` to a comma-separated list of distribution
names (``backchannel-telegram,backchannel-slack``) to load only those; set it
to the empty string to load none but the built-ins.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from typing import Any

import pluggy
from attrs import define, field

from . import hookspecs
from .errors import PluginError

__all__ = ["Registry", "agents", "channels", "get_plugin_manager", "plugin_summary"]

DEFAULT_PLUGINS = ("backchannel.agents.builtin",)

_pm: pluggy.PluginManager | None = None
_versions: dict[str, str] = {}


def get_plugin_manager(*, reload: bool = False) -> pluggy.PluginManager:
    """Return the process-wide plugin manager, loading plugins on first use."""
    global _pm
    if _pm is None or reload:
        _pm = _load()
    return _pm


def _load() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("backchannel")
    pm.add_hookspecs(hookspecs)
    for module_name in DEFAULT_PLUGINS:
        module = importlib.import_module(module_name)
        pm.register(module, name=module_name)
    allowed = os.environ.get("BACKCHANNEL_LOAD_PLUGINS")
    wanted = None if allowed is None else {n.strip() for n in allowed.split(",") if n.strip()}
    for entry_point in importlib.metadata.entry_points(group="backchannel"):
        dist = entry_point.dist.name if entry_point.dist else entry_point.name
        if wanted is not None and dist not in wanted and entry_point.name not in wanted:
            continue
        if pm.get_plugin(entry_point.name) is not None:
            continue
        try:
            module = entry_point.load()
        except Exception as error:  # a broken plugin must not take the others down silently
            raise PluginError(
                f"plugin {entry_point.name!r} from {dist} failed to import: {error}",
                plugin=entry_point.name,
            ) from error
        pm.register(module, name=entry_point.name)
        if entry_point.dist is not None:
            _versions[entry_point.name] = f"{entry_point.dist.name} {entry_point.dist.version}"
    pm.check_pending()
    return pm


@define
class Registry:
    """Names registered through a registry hook, with the plugin that registered each."""

    kind: str
    items: dict[str, Any] = field(factory=dict)
    owners: dict[str, str] = field(factory=dict)

    def register_from(self, owner: str) -> Callable[..., None]:
        def register(name: str, factory: Any) -> None:
            if name in self.items and self.owners[name] != owner:
                raise PluginError(
                    f"{self.kind} {name!r} is registered by both {self.owners[name]} and {owner}",
                    plugin=owner,
                )
            self.items[name] = factory
            self.owners[name] = owner

        return register

    def get(self, name: str) -> Any:
        """Return the factory; one registered as "module:Name" is imported now (see lazy.py)."""
        try:
            factory = self.items[name]
        except KeyError:
            known = ", ".join(sorted(self.items)) or "none"
            raise PluginError(f"no {self.kind} called {name!r} (installed: {known})") from None
        if isinstance(factory, str):
            from .lazy import load

            factory = self.items[name] = load(factory)
        return factory


def _collect(hook_name: str, kind: str, pm: pluggy.PluginManager | None = None) -> Registry:
    pm = pm or get_plugin_manager()
    registry = Registry(kind)
    hook = getattr(pm.hook, hook_name)
    for impl in hook.get_hookimpls():
        owner = pm.get_name(impl.plugin) or repr(impl.plugin)
        impl.function(register=registry.register_from(owner))
    return registry


def channels(pm: pluggy.PluginManager | None = None) -> Registry:
    """Return the adapter factories by channel name."""
    return _collect("register_channels", "channel", pm)


def agents(pm: pluggy.PluginManager | None = None) -> Registry:
    """Return the agent factories by agent kind."""
    return _collect("register_agents", "agent kind", pm)


def plugin_summary(pm: pluggy.PluginManager | None = None) -> list[dict[str, Any]]:
    """Describe each loaded plugin: name, version, channels and agents it registers."""
    pm = pm or get_plugin_manager()
    channel_registry = channels(pm)
    agent_registry = agents(pm)
    rows = []
    for name, _plugin in pm.list_name_plugin():
        rows.append(
            {
                "name": name,
                "distribution": _versions.get(name, "backchannel (built-in)"),
                "channels": sorted(k for k, v in channel_registry.owners.items() if v == name),
                "agents": sorted(k for k, v in agent_registry.owners.items() if v == name),
            }
        )
    return rows

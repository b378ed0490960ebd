"""Keep plugin imports cheap: register names now, import the heavy code when it is used.

Every CLI call loads every installed plugin's entry point module, so that
module must import nothing heavy (no client library, no aiohttp). The rule for
plugin authors (docs/plugin-hooks.md):

- register a channel or agent factory as a ``"package.module:Name"`` string;
  the core imports it when an account of that channel (or an agent of that
  kind) is built: ``register("discord", "backchannel_discord.adapter:DiscordAdapter")``;
- add a command as `LazyCommand`, which imports the real click command only
  when it runs or prints its own help;
- re-export public names with `lazy_exports` instead of importing them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import click

from .errors import PluginError

__all__ = ["LazyCommand", "LazyModule", "deferred", "lazy_exports", "load"]


def load(reference: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute (PluginError if it fails)."""
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split(".") if attribute else ():
            target = getattr(target, part)
    except Exception as error:  # a broken plugin must say which one
        raise PluginError(
            f"cannot load {reference!r}: {type(error).__name__}: {error}",
            plugin=module_name.split(".")[0],
        ) from error
    return target


def deferred(reference: str) -> Callable[..., Any]:
    """Return a function that imports ``"module:function"`` on its first call and calls it."""
    target: Callable[..., Any] | None = None

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal target
        if target is None:
            target = load(reference)
        return target(*args, **kwargs)

    call.__name__ = call.__qualname__ = reference.rpartition(":")[2]
    return call


class LazyModule:
    """A module imported on first attribute access (``control.call``, ``control.Error``)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)


class LazyCommand(click.Command):
    """A click command whose real implementation ("module:command") is imported on first use.

    The top-level ``--help`` lists it by `name` and `short_help` without importing anything.
    """

    def __init__(self, name: str, reference: str, short_help: str):
        super().__init__(name=name, short_help=short_help, help=short_help)
        self.reference = reference
        self._loaded: click.Command | None = None

    def load(self) -> click.Command:
        if self._loaded is None:
            loaded = load(self.reference)
            if not isinstance(loaded, click.Command):
                raise PluginError(f"{self.reference!r} is not a click command")
            self._loaded = loaded
        return self._loaded

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        # click invokes `context.command`, so the real command parses and runs from here on
        return self.load().make_context(info_name, args, parent, **extra)


def lazy_exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """Return a module ``__getattr__`` that imports each public name from its module on use.

    ``__getattr__ = lazy_exports(__name__, {"DiscordAdapter": ".adapter"})``
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__

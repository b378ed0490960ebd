"""The `python` agent kind: any async callable taking a Run, named as "package.module:function"."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError

__all__ = ["load_callable", "make_python_agent"]


def load_callable(reference: str, *, key: str = "agent") -> Any:
    """Import "package.module:attribute" and return the attribute."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected 'package.module:function', got {reference!r}", key=key)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"cannot import {module_name!r}: {error}", key=key) from error
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"{module_name!r} has no attribute {attribute!r}", key=key) from None
    return target


def make_python_agent(settings: Mapping[str, Any]) -> Any:
    """Agent factory for kind "python": settings["agent"] = "package.module:function".

    If the target is a class or a factory marked by taking a `settings` argument, it is
    called with the agent's settings to make the agent.
    """
    reference = settings.get("agent")
    if not isinstance(reference, str):
        raise ConfigError("kind 'python' needs agent = \"package.module:function\"", key="agent")
    target = load_callable(reference)
    if inspect.isclass(target) or "settings" in _parameters(target):
        target = target(settings=dict(settings))
    if not callable(target):
        raise ConfigError(f"{reference!r} is not callable", key="agent")
    return target


def _parameters(target: Any) -> list[str]:
    try:
        return list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return []

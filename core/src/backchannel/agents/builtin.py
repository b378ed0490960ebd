"""The built-in plugin: registers the built-in agent kinds, exactly as a third-party plugin would."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..hookspecs import hookimpl


def _openai(settings: Mapping[str, Any]) -> Any:
    from .openai import make_openai_agent

    return make_openai_agent(settings)


def _demo(settings: Mapping[str, Any]) -> Any:
    from .demo import make_demo_agent

    return make_demo_agent(settings)


def _python(settings: Mapping[str, Any]) -> Any:
    from .python import make_python_agent

    return make_python_agent(settings)


@hookimpl
def register_agents(register: Any) -> None:
    register("demo", _demo)
    register("openai", _openai)
    register("python", _python)

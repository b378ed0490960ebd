"""Commands the product suggests, spelled so they work when pasted as printed.

`serve` and `demo` record how they were started (through ``uv run`` or not,
with which config file and store); `command("preview", key)` then returns
``uv run backchannel preview web/v1.tab -c bot.toml`` or just
``backchannel preview web/v1.tab``, whichever reaches the same store.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from attrs import frozen

__all__ = ["Invocation", "command", "current", "program", "use"]


@frozen
class Invocation:
    """How this process was started: the program words and the options naming its store."""

    program: tuple[str, ...] = ("backchannel",)
    config_path: str | None = None
    store_path: str | None = None


_current = Invocation()


def use(
    config_path: str | os.PathLike[str] | None,
    store_path: str | os.PathLike[str] | None = None,
    *,
    started_as: tuple[str, ...] | None = None,
) -> None:
    """Record this process's config file and explicit store (and how it was started)."""
    global _current
    _current = Invocation(
        program=started_as or program(),
        config_path=None if config_path is None else str(config_path),
        store_path=None if store_path is None else str(store_path),
    )


def current() -> Invocation:
    return _current


def command(*args: str) -> str:
    """Return `backchannel ARGS` as it must be typed to reach this process's config and store."""
    words = [*_current.program, *args]
    if _current.config_path is not None:
        words += ["-c", _current.config_path]
    if _current.store_path is not None:
        words += ["--store", _current.store_path]
    return shlex.join(words)


def program(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """Return the words that start the CLI from the current shell.

    Under ``uv run`` the virtualenv's `backchannel` is on PATH only inside uv,
    so people must type ``uv run backchannel`` (``python3 -m uv run ...`` when
    uv itself is not on PATH). Otherwise plain `backchannel` when PATH finds
    this same script, else its full path (or ``python -m backchannel``).
    """
    env = os.environ if environ is None else environ
    if env.get("UV_RUN_RECURSION_DEPTH"):
        uv = ("uv",) if shutil.which("uv", path=env.get("PATH")) else ("python3", "-m", "uv")
        return (*uv, "run", "backchannel")
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "__main__.py":  # python -m backchannel
        return (sys.executable, "-m", "backchannel")
    if script is None or script.name != "backchannel":
        return ("backchannel",)
    found = shutil.which("backchannel", path=env.get("PATH"))
    if found and Path(found).resolve() == script.resolve():
        return ("backchannel",)
    return (str(script),)

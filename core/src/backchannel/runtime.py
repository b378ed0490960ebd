"""Process tuning for a long-running `serve`: the cyclic garbage collector, open files.

Ingest allocates many short-lived containers (payload dicts, events, rows);
with Python's default gen-0 threshold of 700, a collection runs every few
events and the full ones walk every object the process holds (imported
modules, plugin registries, caches). After start-up those objects live as
long as the process: `gc.freeze()` moves them out of the collector's sight,
and a higher gen-0 threshold lets one young collection cover a whole batch.
Reference counting still frees everything acyclic at once; only cycles wait
a little longer.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

__all__ = ["GC_THRESHOLDS", "raise_open_file_limit", "tune_gc"]

#: gen-0 allocations between young collections; every 20 of those a gen-1, every
#: 20 of those a full one (the defaults are 700, 10, 10)
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc() -> Callable[[], None]:
    """Freeze what start-up allocated and raise the collector's thresholds (call after start).

    Returns a function that puts the collector back as it was (for `serve`
    run inside a longer-lived process, such as a test session).
    """
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)

    def restore() -> None:
        gc.unfreeze()
        gc.set_threshold(*previous)

    return restore


def raise_open_file_limit() -> int | None:
    """Raise this process's soft limit of open files to its hard limit; return the new
    soft limit (None where there are no such limits).

    Every connection is a file: with the common soft limit of 1,024, a thousand idle
    connections (or the web chat's sockets) leave no file for the next accept, and
    `serve` stops answering anyone, its health check included. The hard limit is what
    the administrator allows; the soft one is only a default.
    """
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or (wanted != resource.RLIM_INFINITY and soft >= wanted):
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        return soft
    return wanted

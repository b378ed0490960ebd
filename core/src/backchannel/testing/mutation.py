"""Mangle real payloads to check that a normalizer fails only with NormalizeError.

Real platforms send payloads with fields missing, of another type, or null.
`mutate_payload` returns a copy of a payload with a few such changes; feed the
results to `normalize` and accept only an Event, None or a one-line
NormalizeError::

    rng = random.Random(seed)
    for _ in range(1000):
        raw = mutate_payload(rng.choice(REAL_PAYLOADS), rng)
        try:
            adapter.normalize(raw)
        except NormalizeError:
            pass
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["ODD_VALUES", "json_paths", "mutate_payload"]

#: values of the wrong type, empty, null, or nested nulls, as mangled payloads carry them
ODD_VALUES: tuple[Any, ...] = (
    None,
    0,
    -1,
    7,
    1.5,
    float("nan"),
    2**70,
    True,
    "",
    "x",
    "\ud800",
    "🙂",
    [],
    [None],
    {},
    {"a": None},
    {"x": None, "y": [None, {"z": None}]},
)


def json_paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Yield the path (keys and indexes) of every value nested in `node`."""
    if prefix:
        yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from json_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from json_paths(value, (*prefix, index))


def mutate_payload(
    payload: Any,
    rng: random.Random,
    *,
    changes: tuple[int, int] = (1, 3),
    odd_values: Sequence[Any] = ODD_VALUES,
    drop_chance: float = 0.35,
) -> Any:
    """Return a copy of `payload` with a few keys dropped or values replaced by odd ones."""
    mangled = copy.deepcopy(payload)
    for _ in range(rng.randint(*changes)):
        paths = list(json_paths(mangled))
        if not paths:
            break  # nothing left inside to change; the payload itself keeps its type
        *parents, last = rng.choice(paths)
        holder: Any = mangled
        for step in parents:
            holder = holder[step]
        if isinstance(holder, dict) and rng.random() < drop_chance:
            del holder[last]
        else:
            holder[last] = copy.deepcopy(rng.choice(odd_values))
    return mangled

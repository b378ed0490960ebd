"""What comes off the wire: bounded JSON parsing and secret-free copies of payloads.

Every ingress parses JSON with `parse_json` (a size and a nesting bound, any
charset label ignored: JSON is UTF-8, or UTF-16/32 with its own BOM) and answers
a `BadPayload` with a 400-class reply or a `bad_frame` error, never a 500.

`safe_copy` makes the copy of a payload that may be kept (a dead letter): the
fields a channel names as secret-bearing are replaced by ``***``, text the store
cannot encode is repaired, and nesting beyond the bound is cut off.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from typing import Any

from .errors import BackchannelError
from .secrets import redact

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "BadPayload",
    "dump_for_dead_letter",
    "encodable",
    "nesting_exceeds",
    "parse_json",
    "repair_text",
    "safe_copy",
    "shown",
]

#: the largest body any ingress parses (the HTTP server refuses larger ones first)
MAX_BYTES = 4 * 1024 * 1024
#: the deepest nesting any ingress accepts; real payloads stay under 20
MAX_DEPTH = 64
#: how much of a payload a dead letter keeps
DEAD_LETTER_CHARS = 65536


class BadPayload(BackchannelError, ValueError):
    """A body could not be read as one JSON value within the bounds; says why."""


def parse_json(
    body: bytes | str,
    *,
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Return the JSON value in `body`, or raise BadPayload (one line: what is wrong)."""
    if len(body) > max_bytes:
        raise BadPayload(f"body of {len(body)} bytes is larger than the limit of {max_bytes}")
    try:
        value = json.loads(body)
    except RecursionError:
        raise BadPayload(f"JSON is nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError as error:
        raise BadPayload(f"body is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except ValueError as error:
        raise BadPayload(f"body is not JSON ({error})") from None
    if nesting_exceeds(value, max_depth, body):
        raise BadPayload(f"JSON is nested deeper than {max_depth} levels")
    return value


def nesting_exceeds(
    value: Any, max_depth: int = MAX_DEPTH, source: bytes | str | None = None
) -> bool:
    """Say whether lists and objects in `value` nest deeper than `max_depth`.

    With the `source` text it was parsed from, a body holding fewer brackets
    than `max_depth` is answered without walking the value.
    """
    if source is not None:
        opening = (b"[", b"{") if isinstance(source, bytes) else ("[", "{")
        if source.count(opening[0]) + source.count(opening[1]) <= max_depth:  # type: ignore[arg-type]
            return False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth >= max_depth:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def encodable(text: str) -> bool:
    """Say whether both stores can hold `text` as it is (no lone surrogates, no NUL:
    PostgreSQL's text cannot hold U+0000)."""
    return repair_text(text) is text


def repair_text(text: str) -> str:
    """Return `text` with lone UTF-16 surrogates (JSON ``"\\ud800"``) and NUL (``"\\u0000"``)
    replaced by U+FFFD; `text` itself when there is nothing to replace."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # through UTF-16: a split but complete pair joins up, a lone half becomes U+FFFD
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def safe_copy(value: Any, secret_fields: Collection[str] = (), max_depth: int = MAX_DEPTH) -> Any:
    """Return a JSON-ready copy of `value` fit to keep: secrets out, text storable, depth cut."""
    return _copy(value, frozenset(secret_fields), max_depth)


def dump_for_dead_letter(value: Any, secret_fields: Collection[str] = ()) -> str:
    """Return the text a dead letter keeps of a payload (see `safe_copy`), capped in size."""
    try:
        text = json.dumps(safe_copy(value, secret_fields), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repair_text(repr(value)[:DEAD_LETTER_CHARS])
    return redact(text)[:DEAD_LETTER_CHARS]


def _copy(value: Any, secret_fields: frozenset[str], depth: int) -> Any:
    if isinstance(value, str):
        return repair_text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # NaN, infinities: JSON has no words
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping | list | tuple) and depth <= 0:
        return "<nested too deep>"
    if isinstance(value, Mapping):
        return {
            repair_text(str(key)): (
                "***"
                if key in secret_fields and item not in (None, "", [], {})
                else _copy(item, secret_fields, depth - 1)
            )
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_copy(item, secret_fields, depth - 1) for item in value]
    return repair_text(repr(value)[:200])


def shown(value: object, limit: int = 60) -> str:
    """`value` as an error message quotes it: its repr, cut to `limit` characters, and
    never an error of its own (an int of more digits than Python writes out, a repr
    that raises)."""
    try:
        text = repr(value)
    except Exception:  # ValueError for a huge int; anything from a hostile __repr__
        return f"a {type(value).__name__} that cannot be shown"
    return text if len(text) <= limit else text[: limit - 1] + "…"

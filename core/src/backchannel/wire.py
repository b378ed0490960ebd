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
import operator
import re
from collections.abc import Collection, Mapping
from itertools import accumulate, repeat
from typing import Any

from . import secrets
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
    "skim_field",
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

    With the `source` text it was parsed from (or that `json.dumps` wrote of it), the
    answer is read off the text at C speed, whatever the width of the value: a body
    holding fewer brackets than `max_depth` at once, any other by its brackets outside
    strings. Without it (or with a text that is not JSON), the value is walked.
    """
    if source is not None:
        opening = (b"[", b"{") if isinstance(source, bytes) else ("[", "{")
        if source.count(opening[0]) + source.count(opening[1]) <= max_depth:  # type: ignore[arg-type]
            return False
        levels = _levels(source)
        if levels is not None:
            # the walk below: a list or object at depth `max_depth` or more (the outermost at 0)
            return levels > max(max_depth, 0)
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


# a backslash and what it escapes (in JSON, there are backslashes in strings only)
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')  # once escapes are gone, every quote opens or closes a string
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in b'"[]{}')
_ONE_KIND = bytes.maketrans(b"{}", b"[]")


def _levels(source: bytes | str) -> int | None:
    """Return how many levels of lists and objects the JSON text `source` nests (0 for a
    scalar), or None when it is not JSON text after all (then the value is walked).

    C-speed steps: the text as UTF-8 (brackets, quotes and backslashes are single bytes
    that no other character's encoding holds), escapes dropped, then all but quotes and
    brackets, then strings; then leaves (``[]``) are dropped a level at a time while that
    halves the text, and the rest, where leaves are few, is measured run by run.
    """
    try:
        if isinstance(source, str):
            data = source.encode("utf-8", "surrogatepass")
        else:
            encoding = json.detect_encoding(source)  # what json.loads reads bytes as
            data = source
            if encoding not in ("utf-8", "utf-8-sig"):
                data = source.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    except UnicodeError:
        return None
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)
    data = data.translate(None, _NOT_STRUCTURE)
    if b'"' in data:
        if data.count(b'"') % 2:
            return None
        data = _STRING.sub(b"", data)
    data = data.translate(_ONE_KIND)  # the text parsed: every bracket closes its own kind
    if data.count(b"[") != data.count(b"]"):
        return None
    levels = 0
    while data:
        shorter = data.replace(b"[]", b"")  # every leaf goes: one level less
        levels += 1
        if len(shorter) * 4 > len(data) * 3:
            return levels + _levels_by_runs(shorter)
        data = shorter
    return levels


def _levels_by_runs(data: bytes) -> int:
    """Return the deepest nesting in `data`, balanced brackets all of one kind.

    Cut at each ``][``, every piece is a run of ``[`` then a run of ``]``; it peaks at
    the level before it plus its opening run. The pieces are fewer than the leaves."""
    pieces = data.split(b"][")
    opens = list(map(bytes.count, pieces, repeat(b"[")))
    closes = list(map(operator.sub, map(len, pieces), opens))
    after = accumulate(map(operator.sub, opens, closes))
    return max(map(operator.add, after, closes), default=0)


def encodable(text: str) -> bool:
    """Say whether both stores can hold `text` as it is (no lone surrogates, no NUL:
    PostgreSQL's text cannot hold U+0000)."""
    return repair_text(text) is text


#: a JSON string (escapes and all), or what gives an object its shape
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:]')
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)(?![0-9.eE])")
#: digits Python's int() and str() take (sys.get_int_max_str_digits' default)
_MAX_DIGITS = 4300


def skim_field(text: str | bytes, name: str) -> str | int | None:
    """The string or integer value of key `name` in the outermost object of the JSON text
    `text`, read without parsing the rest: for a text json cannot parse (nested too
    deep, cut off) that must still be named by its id.

    Only the outermost object's keys are looked at, nested values skipped by counting
    brackets (no recursion, so no depth is too deep); the last of a repeated key wins,
    as in json.loads. A value cut off, or not a string or an integer, is None.
    """
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    start = len(text) - len(text.lstrip())
    if not text.startswith("{", start):
        return None
    depth = 0
    key: str | None = None
    found: str | int | None = None
    for token in _STRUCTURE.finditer(text, start):
        mark = token.group()
        if mark in "{[":
            depth += 1
        elif mark in "}]":
            depth -= 1
            if depth <= 0:
                break
        elif mark == ":" and depth == 1 and key == name:
            found = _scalar_at(text, token.end())
        if depth == 1 and mark.startswith('"'):
            try:
                key = json.loads(mark)
            except ValueError:
                key = None
        else:
            key = None
    return found


def _scalar_at(text: str, at: int) -> str | int | None:
    """The string or integer that starts at `at` (after blanks) in `text`, or None."""
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    if text.startswith('"', at):
        token = _STRUCTURE.match(text, at)
        if token is None:
            return None
        try:
            value = json.loads(token.group())
        except ValueError:
            return None
        return repair_text(value) if isinstance(value, str) else None
    number = _INTEGER.match(text, at)
    if number is None or len(number.group()) > _MAX_DIGITS:
        return None
    return int(number.group())


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
    """Return the text a dead letter keeps of a payload (see `safe_copy`), capped in size.

    The text is ``json.dumps(safe_copy(value, secret_fields))`` with registered secrets
    redacted, cut to `DEAD_LETTER_CHARS`; the copy stops once the text is sure to reach
    the cut (a wide payload is not copied whole to keep its first 64 KiB)."""
    fields = frozenset(secret_fields)
    try:
        text = _dead_letter_text(value, fields)
    except (TypeError, ValueError, RecursionError):
        text = repair_text(repr(value)[:DEAD_LETTER_CHARS])
    return redact(text)[:DEAD_LETTER_CHARS]


class _Budget:
    """How far a copy for a dead letter has come: `chars`, never more than its JSON text
    holds so far; it stops at `limit`, and `cut` counts the lists and objects left open."""

    __slots__ = ("chars", "cut", "limit")

    def __init__(self, limit: int) -> None:
        self.chars = 0
        self.limit = limit
        self.cut = 0


def _dead_letter_text(value: Any, secret_fields: frozenset[str]) -> str:
    """Return the JSON text of `safe_copy(value)`, or a start of it that redacts to the
    same first `DEAD_LETTER_CHARS` characters as the whole text would."""
    limit = DEAD_LETTER_CHARS
    while True:
        # redaction may still find a secret that starts before the end and runs past it
        margin = secrets.longest_secret()
        budget = _Budget(limit + margin)
        copied = _copy_upto(value, secret_fields, MAX_DEPTH, budget)
        text = json.dumps(copied, ensure_ascii=False, default=str)
        if not budget.cut:
            return text  # all of it
        text = text[: len(text) - budget.cut]  # the brackets that close what was cut short
        if not margin or len(redact(text)) >= DEAD_LETTER_CHARS + margin:
            return text
        limit *= 4  # redaction took so much out that the start falls short: copy more


def _copy_upto(value: Any, secret_fields: frozenset[str], depth: int, budget: _Budget) -> Any:
    """`_copy`, but lists and objects stop taking items once `budget` is reached."""
    if depth <= 0 or not isinstance(value, Mapping | list | tuple):
        copied = _copy(value, secret_fields, depth)
        budget.chars += len(copied) + 2 if isinstance(copied, str) else 1
        return copied
    budget.chars += 1  # [ or {
    if isinstance(value, Mapping):
        return _copy_mapping_upto(value, secret_fields, depth, budget)
    items: list[Any] = []
    for item in value:
        if items:
            budget.chars += 2  # ", "
        items.append(_copy_upto(item, secret_fields, depth - 1, budget))
        if budget.chars >= budget.limit:
            budget.cut += 1
            return items
    budget.chars += 1
    return items


def _copy_mapping_upto(
    value: Mapping[Any, Any], secret_fields: frozenset[str], depth: int, budget: _Budget
) -> dict[str, Any]:
    pairs: Any
    if type(value) is dict and _plain_keys(value):
        pairs = value.items()  # the keys as they are, no two alike: the copy's own order
        last: dict[str, int] | None = None
    else:
        # as `_copy`'s dict display: keys that repair alike share the first one's place
        # and the last one's value
        pairs = list(value.items())
        keys = [repair_text(str(key)) for key, _ in pairs]
        last = {key: index for index, key in enumerate(keys)}
    copied: dict[str, Any] = {}
    for index, (key, item) in enumerate(pairs):
        if last is None:
            name = key
        else:
            name = keys[index]
            if name in copied:
                continue
            key, item = pairs[last[name]]
        if copied:
            budget.chars += 2  # ", "
        budget.chars += len(name) + 4  # "name": (at the least)
        if key in secret_fields and item not in (None, "", [], {}):
            copied[name] = "***"
            budget.chars += 5
        else:
            copied[name] = _copy_upto(item, secret_fields, depth - 1, budget)
        if budget.chars >= budget.limit:
            budget.cut += 1
            return copied
    budget.chars += 1
    return copied


def _plain_keys(value: dict[Any, Any]) -> bool:
    """Say whether every key of `value` is a str that `repair_text` keeps as it is."""
    if not value:
        return True
    if set(map(type, value)) != {str}:
        return False
    joined = "".join(value)
    return "\x00" not in joined and (joined.isascii() or encodable(joined))


_AS_THEY_ARE = frozenset({int, bool, type(None)})  # what `_copy` keeps, by exact type
_TOO_DEEP = "<nested too deep>"


def _copy(value: Any, secret_fields: frozenset[str], depth: int) -> Any:
    # exact types first (what json.loads makes), in the order of the general case below
    kind = type(value)
    if kind is str:
        return repair_text(value)
    if kind is list:
        if depth <= 0:
            return _TOO_DEEP
        depth -= 1
        return [
            item if type(item) in _AS_THEY_ARE else _copy(item, secret_fields, depth)
            for item in value
        ]
    if kind is dict:
        if depth <= 0:
            return _TOO_DEEP
        return {
            repair_text(str(key)): (
                "***"
                if key in secret_fields and item not in (None, "", [], {})
                else item
                if type(item) in _AS_THEY_ARE
                else _copy(item, secret_fields, depth - 1)
            )
            for key, item in value.items()
        }
    if kind in _AS_THEY_ARE:
        return value
    if isinstance(value, str):
        return repair_text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # NaN, infinities: JSON has no words
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping | list | tuple) and depth <= 0:
        return _TOO_DEEP
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

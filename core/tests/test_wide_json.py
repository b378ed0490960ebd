"""Wide JSON (a 4 MiB body of a million empty lists, 300,000 keys) must not stall the event
loop in `wire`'s helpers, and the faster helpers must answer exactly as the old ones did.

The old helpers are kept below, verbatim, as the reference: `nesting_exceeds` walked every
node, `dump_for_dead_letter` copied the whole payload before cutting its text to 64 KiB.
No test here is timed; the ones that show the new helpers do not walk a wide value use
values that raise when walked past the point where the answer is known.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

import backchannel.secrets
import pytest
from backchannel.secrets import redact
from backchannel.wire import (
    DEAD_LETTER_CHARS,
    MAX_DEPTH,
    BadPayload,
    dump_for_dead_letter,
    nesting_exceeds,
    parse_json,
    repair_text,
    safe_copy,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# --- the helpers as they were (the reference) --------------------------------------------


def old_nesting_exceeds(
    value: Any, max_depth: int = MAX_DEPTH, source: bytes | str | None = None
) -> bool:
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


def old_copy(value: Any, secret_fields: frozenset[str], depth: int) -> Any:
    if isinstance(value, str):
        return repair_text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping | list | tuple) and depth <= 0:
        return "<nested too deep>"
    if isinstance(value, Mapping):
        return {
            repair_text(str(key)): (
                "***"
                if key in secret_fields and item not in (None, "", [], {})
                else old_copy(item, secret_fields, depth - 1)
            )
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [old_copy(item, secret_fields, depth - 1) for item in value]
    return repair_text(repr(value)[:200])


def old_safe_copy(
    value: Any, secret_fields: Collection[str] = (), max_depth: int = MAX_DEPTH
) -> Any:
    return old_copy(value, frozenset(secret_fields), max_depth)


def old_dump_for_dead_letter(value: Any, secret_fields: Collection[str] = ()) -> str:
    try:
        text = json.dumps(old_safe_copy(value, secret_fields), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repair_text(repr(value)[:DEAD_LETTER_CHARS])
    return redact(text)[:DEAD_LETTER_CHARS]


# --- values -------------------------------------------------------------------------------

# text that trips a scan of JSON text: brackets, quotes, backslashes, escapes of each
_TRICKY = st.text(
    alphabet=st.sampled_from(
        ["[", "]", "{", "}", '"', "\\", "/", "u", "0", "a", " ", "é", "😀", "\n"]
    ),
    max_size=12,
)
_JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TRICKY


def _json_values(max_leaves: int = 40) -> st.SearchStrategy[Any]:
    return st.recursive(
        _JSON_SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY, inner, max_size=4),
        max_leaves=max_leaves,
    )


def _nest(value: Any, levels: int, kinds: str) -> Any:
    """`value` inside `levels` lists or objects, taking turns as `kinds` says (l, d)."""
    for index in range(levels):
        value = [value] if kinds[index % len(kinds)] == "l" else {'[\\"{': value}
    return value


@st.composite
def _deep_json(draw: st.DrawFn) -> Any:
    """A JSON value nested around the bound: a chain near 64 levels with wide, tricky
    siblings at every level."""
    levels = draw(st.integers(min_value=0, max_value=MAX_DEPTH + 3))
    kinds = draw(st.sampled_from(["l", "d", "ld", "dl", "lld"]))
    value = _nest(draw(_json_values(8)), levels, kinds)
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        value = [draw(_json_values(6)), value, draw(_TRICKY)]
    return value


def _texts(value: Any) -> Iterator[bytes | str]:
    """The ways a JSON value reaches `nesting_exceeds`: as a webhook body, a form field, a
    dumped meta."""
    for ensure_ascii in (True, False):
        for separators in ((", ", ": "), (",", ":")):
            text = json.dumps(value, ensure_ascii=ensure_ascii, separators=separators)
            yield text
            yield text.encode()
    yield json.dumps(value, indent=1)
    yield json.dumps(value).encode("utf-16")
    yield json.dumps(value).encode("utf-32-le")
    yield b"\xef\xbb\xbf" + json.dumps(value, ensure_ascii=False).encode()


# --- nesting_exceeds ----------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json_values() | _deep_json())
def test_nesting_exceeds_answers_as_the_walk_did_on_every_text_of_a_value(value: Any) -> None:
    for max_depth in (0, 1, 2, 3, 63, MAX_DEPTH, 65):
        expected = old_nesting_exceeds(value, max_depth)
        for text in _texts(value):
            assert json.loads(text) == value  # the text is the value's
            assert nesting_exceeds(value, max_depth, text) is expected, (max_depth, text[:200])
            assert old_nesting_exceeds(value, max_depth, text) is expected


@pytest.mark.parametrize("kinds", ["l", "d", "ld"])
@pytest.mark.parametrize("levels", [63, 64, 65, 66])
def test_the_bound_is_exact_at_64_levels_even_among_many_siblings(kinds: str, levels: int) -> None:
    deep = _nest(']]]\\"}}', levels, kinds)
    wide = [[] for _ in range(50_000)] + [deep] + [{} for _ in range(50_000)]
    text = json.dumps(wide)
    assert old_nesting_exceeds(deep, MAX_DEPTH) is (levels > MAX_DEPTH)
    # the wide list adds one level around the chain
    assert nesting_exceeds(wide, MAX_DEPTH, text) is (levels + 1 > MAX_DEPTH)
    assert nesting_exceeds(wide, MAX_DEPTH, text.encode()) is (levels + 1 > MAX_DEPTH)
    if levels + 1 > MAX_DEPTH:
        with pytest.raises(BadPayload, match="nested deeper than 64 levels"):
            parse_json(text)
    else:
        assert parse_json(text.encode()) == wide


def test_a_comb_of_64_level_teeth_is_legal_and_one_more_level_is_not() -> None:
    tooth = "[" * 63 + "]" * 63
    legal = "[" + ",".join([tooth] * 3_000) + "]"
    assert parse_json(legal.encode()) == json.loads(legal)
    deeper = "[" + ",".join([tooth] * 1_500 + ["[" + tooth + "]"] + [tooth] * 1_500) + "]"
    with pytest.raises(BadPayload, match="nested deeper than 64 levels"):
        parse_json(deeper.encode())


class _Untouchable(list[Any]):
    """A list that fails the test when anything walks it."""

    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("the value was walked")


def test_with_its_text_a_wide_value_is_not_walked() -> None:
    # fails on the old helper: more than 64 brackets made it walk all 1.3 million nodes
    body = "[" + ",".join(["[]"] * 100_000) + "]"
    value = _Untouchable(json.loads(body))
    assert nesting_exceeds(value, MAX_DEPTH, body) is False
    assert nesting_exceeds(value, MAX_DEPTH, body.encode()) is False
    too_deep = "[" + ",".join(["[]"] * 100_000 + ["[" * 70 + "]" * 70]) + "]"
    assert nesting_exceeds(_Untouchable(json.loads(too_deep)), MAX_DEPTH, too_deep) is True


@pytest.mark.parametrize(
    "source",
    ["[" * 70, '"' + "[" * 70, "[" * 70 + '"', b"\xff\xfe[" + b"[" * 70, "x" + "]" * 70],
)
def test_a_source_that_is_not_json_text_falls_back_to_the_walk(source: bytes | str) -> None:
    values: list[Any] = [[], _nest(1, 70, "l"), _nest(1, 10, "d")]
    for value in values:
        expected = old_nesting_exceeds(value, MAX_DEPTH, source)
        assert nesting_exceeds(value, MAX_DEPTH, source) is expected


# --- safe_copy ----------------------------------------------------------------------------


class _Odd:
    def __repr__(self) -> str:
        return "<odd \ud800 thing>" + "x" * 300


_ANY_SCALARS = (
    _JSON_SCALARS
    | st.floats()
    | st.binary(max_size=4)
    | st.sampled_from(["\ud800", "a\x00b", "\ud83d\ude00", "\ufffd", "***", _Odd()])
)
_ANY_KEYS = st.sampled_from(["k", "token", "\ud800", "\ufffd", "\x00", "1", 1, 1.5, True, None])


def _any_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    return st.recursive(
        _ANY_SCALARS,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=3).map(tuple)
            | st.dictionaries(_ANY_KEYS, inner, max_size=5)
        ),
        max_leaves=max_leaves,
    )


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN aside, and of the same JSON text."""
    return json.dumps(a, default=str) == json.dumps(b, default=str)


@settings(max_examples=100, deadline=None)
@given(value=_any_values() | _deep_json(), fields=st.sampled_from([(), ("token",), ("k", "1")]))
def test_safe_copy_is_the_copy_it_was(value: Any, fields: tuple[str, ...]) -> None:
    for max_depth in (0, 2, MAX_DEPTH):
        assert _same(safe_copy(value, fields, max_depth), old_safe_copy(value, fields, max_depth))


# --- dump_for_dead_letter -----------------------------------------------------------------


@pytest.fixture
def own_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets registered in a test are gone after it."""
    monkeypatch.setattr(backchannel.secrets, "_secrets", set())
    monkeypatch.setattr(backchannel.secrets, "_pattern", None)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=_any_values(),
    fields=st.sampled_from([(), ("token",), ("k", "1")]),
    repeat=st.integers(min_value=1, max_value=4000),
    secret=st.sampled_from([None, "s3cr3t", "tokentokentoken", "x" * 200]),
)
def test_a_dead_letter_is_the_one_it_was_under_the_cut_and_over_it(
    own_secrets: None, value: Any, fields: tuple[str, ...], repeat: int, secret: str | None
) -> None:
    backchannel.secrets._secrets = set()
    backchannel.secrets._pattern = None
    if secret is not None:
        backchannel.secrets.register_secret(secret)
    for payload in (value, [value] * repeat, {"a": [value] * repeat, "token": value}):
        assert dump_for_dead_letter(payload, fields) == old_dump_for_dead_letter(payload, fields)


def _list_of_text(total: int) -> list[str]:
    """A list whose JSON text is `total` characters long."""
    items = ["y" * 100] * ((total - 200) // 104)  # 104 characters each, with ", " or "[]"
    items.append("z" * (total - len(json.dumps(items)) - 4))  # and ", " and its quotes
    assert len(json.dumps(items)) == total
    return items


@pytest.mark.parametrize(
    "total",
    [DEAD_LETTER_CHARS - 1, DEAD_LETTER_CHARS, DEAD_LETTER_CHARS + 1, DEAD_LETTER_CHARS + 50],
)
def test_the_text_at_the_cut_is_exact(total: int) -> None:
    value = _list_of_text(total)
    kept = dump_for_dead_letter(value)
    assert kept == old_dump_for_dead_letter(value)
    assert kept == json.dumps(value)[:DEAD_LETTER_CHARS]
    assert len(kept) == min(total, DEAD_LETTER_CHARS)


@pytest.mark.parametrize("shift", range(-12, 13))
def test_a_secret_across_the_cut_is_redacted_as_it_was(own_secrets: None, shift: int) -> None:
    secret = "a-wide-json-secret-" + "q" * 40
    backchannel.secrets.register_secret(secret)
    filler = "w" * (DEAD_LETTER_CHARS - 40 + shift)
    for value in (
        [filler, secret, "after"],
        {"f": filler, "s": secret + "tail"},
        [secret] * 5000,  # redaction takes most of the text out: the copy goes further
        [[secret + "-" + secret] * 3] * 4000,
    ):
        kept = dump_for_dead_letter(value)
        assert kept == old_dump_for_dead_letter(value)
        assert secret not in kept and len(kept) <= DEAD_LETTER_CHARS


def test_keys_that_repair_alike_keep_the_first_place_and_the_last_value() -> None:
    pairs = [("\ud800", "a"), ("k", ["x" * 70_000]), ("\ufffd", "b"), (1, "c"), ("1", ["d"])]
    value: dict[Any, Any] = dict(pairs)
    kept = dump_for_dead_letter(value)
    assert kept == old_dump_for_dead_letter(value)
    assert kept.startswith('{"\ufffd": "b", "k": ["xxx')
    small = {"\x00": "a", "\ufffd": "b", 2: 1, "2": 3}
    assert dump_for_dead_letter(small) == old_dump_for_dead_letter(small)
    assert json.loads(dump_for_dead_letter(small)) == {"\ufffd": "b", "2": 3}


class _Tripwire:
    """A value that fails the test when a copy reaches it."""

    def __repr__(self) -> str:
        raise AssertionError("the copy went past the cut")


#: the bodies compared with the old helpers (slow on them): a part of the 4 MiB at the
#: limit, which the same shapes fill; what the copy stops at is checked below
LIMIT = 512 * 1024 - 64


def _wide_bodies() -> Iterator[tuple[str, bytes]]:
    n = (LIMIT - 40) // 3
    yield (
        "lists",
        (('{"update_id": 5, "x": [' + "[]," * n)[: LIMIT - 3].rstrip(",") + "]}").encode(),
    )
    n = (LIMIT - 40) // 2
    yield "ints", (('{"update_id": 6, "x": [' + "0," * n)[: LIMIT - 3].rstrip(",") + "]}").encode()
    keys = ",".join(f'"{i:x}":0' for i in range(40_000))
    yield "keys", ('{"update_id": 7,' + keys + "}").encode()
    yield "comb", ("[" + ",".join(["[" * 63 + "]" * 63] * (LIMIT // 127)) + "]").encode()


@pytest.mark.parametrize(("label", "body"), list(_wide_bodies()))
def test_a_wide_body_is_parsed_and_its_letter_is_the_same(label: str, body: bytes) -> None:
    value = parse_json(body)
    assert value == json.loads(body)
    kept = dump_for_dead_letter(value, ("token",))
    assert kept == old_dump_for_dead_letter(value, ("token",))
    assert len(kept) == DEAD_LETTER_CHARS


def test_a_copy_for_a_dead_letter_stops_at_the_cut() -> None:
    # fails on the old helper: it copied all of a payload before cutting its text
    lists: list[Any] = [[] for _ in range(1_000_000)]
    lists.append(_Tripwire())
    kept = dump_for_dead_letter({"update_id": 5, "x": lists})
    assert kept == ('{"update_id": 5, "x": [' + "[], " * 20_000)[:DEAD_LETTER_CHARS]
    many_keys: dict[str, Any] = {f"{i:x}": 0 for i in range(300_000)}
    many_keys["last"] = _Tripwire()
    kept = dump_for_dead_letter(many_keys)
    assert kept == json.dumps(dict(list(many_keys.items())[:10_000]))[:DEAD_LETTER_CHARS]
    deep: Any = [["x" * 1000] * 70, _Tripwire()]
    assert dump_for_dead_letter(deep) == ("[" + json.dumps(deep[0]))[:DEAD_LETTER_CHARS]
    nested = _nest([["y" * 500] * 200, _Tripwire()], 30, "ld")
    text = dump_for_dead_letter(nested)
    assert len(text) == DEAD_LETTER_CHARS and re.search(r'\[\["y{500}", ', text)

"""Property-based fuzzing of an ingress (needs `hypothesis`, a development dependency).

Payloads are drawn from a channel's real shapes (`mangled(samples)`): values
replaced by ones of another type, by unicode edge cases (lone surrogates, NUL,
RTL marks, 4-byte emoji, huge strings) or by deep nesting; keys dropped and
added. `IngressCheck` feeds them to a started Switchboard over a real
SQLiteStore and asserts, for each one: the ingress never raises past its
boundary, every payload ends stored, duplicate, ignored, held or as a dead
letter with a reason, and the next legitimate event is stored exactly once.
`store_leaks` lists any configured secret or secret-bearing field in any table.

Hypothesis drives synchronous tests; the fakes live on the test's event loop.
`IngressCheck.explore(test)` runs the `@given` test in a worker thread and each
example's coroutine on the loop, so one loop serves fakes, adapters and store::

    check = IngressCheck(board, "tg")

    @given(mangled(SAMPLES))
    def example(raw):
        check.call(check.ingest(raw))

    await check.explore(example)
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
import re
import sqlite3
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import strategies as st

from ..adapter import IngestResult
from ..switchboard import Switchboard

__all__ = ["IngressCheck", "mangled", "nested", "odd_text", "odd_values", "store_leaks"]

T = TypeVar("T")
#: an adapter's own entry point for one payload (Slack's `receive`, a webhook's handler)
Receive = Callable[[Any], Awaitable[IngestResult]]

#: the statuses an ingest may end in; anything else (or an exception) is a failure
SETTLED = frozenset({"stored", "duplicate", "ignored", "held", "malformed"})

_EDGE_TEXTS = (
    "\ud800",  # a lone high surrogate (JSON "\ud800")
    "\udfff",
    "a\ud83d",  # half an emoji
    "\x00",
    "nul\x00inside",
    "\u202eevil\u202c",  # right-to-left override
    "\u200f\u200e",  # RTL and LTR marks
    "\ufeff",
    "🙂🏳️‍🌈𝕏",  # 4-byte emoji, a ZWJ sequence, a math letter
    "\n",
    "tab\n",
    "\r\n\t ",
    "",
    "x" * 70_000,
    "🙂" * 5_000,
)


def odd_text() -> st.SearchStrategy[str]:
    """Strings an attacker or a broken platform sends: surrogates, NUL, RTL, emoji, huge."""
    anything = st.text(st.characters(exclude_categories=()), max_size=12)
    return st.one_of(st.sampled_from(_EDGE_TEXTS), anything)


def nested(min_depth: int = 60, max_depth: int = 900) -> st.SearchStrategy[Any]:
    """Lists and objects nested `min_depth` to `max_depth` deep (`json.dumps` still writes them).

    For deeper bodies than Python can build, send ``b"[" * 20000`` as bytes.
    """

    def build(depth: int, use_objects: bool) -> Any:
        value: Any = "bottom"
        for _ in range(depth):
            value = {"a": value} if use_objects else [value]
        return value

    return st.builds(build, st.integers(min_depth, max_depth), st.booleans())


def odd_values() -> st.SearchStrategy[Any]:
    """A value of any JSON type, odd more often than not."""
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        odd_text(),
    )
    small = st.one_of(st.lists(leaf, max_size=3), st.dictionaries(odd_text(), leaf, max_size=3))
    return st.one_of(leaf, small, nested())


def mangled(
    samples: Sequence[Any],
    *,
    fresh: Callable[[Any], Any] | None = None,
) -> st.SearchStrategy[Any]:
    """A real payload from `samples` with one to four values replaced, keys dropped or added.

    `fresh(payload)` runs on each copy first: give it new platform ids there, or the
    store's dedupe turns most examples into duplicates that never reach the checks.
    The mutations come from a `random.Random` hypothesis draws (one draw per example
    keeps hypothesis's own cost per example near its floor; examples still replay).
    """

    def build(sample: Any, rng: random.Random) -> Any:
        payload = copy.deepcopy(sample)
        if fresh is not None:
            payload = fresh(payload)
        return mutate(payload, rng)

    return st.builds(build, st.sampled_from(list(samples)), st.randoms(use_true_random=False))


def mutate(payload: Any, rng: random.Random, changes: int | None = None) -> Any:
    """Change `payload` in place one to four times (see `mangled`); return it."""
    for _ in range(changes if changes is not None else rng.randint(1, 4)):
        paths = _paths(payload)
        if not paths:
            break
        *parents, last = rng.choice(paths)
        holder: Any = payload
        for step in parents:
            holder = holder[step]
        action = rng.choice(("replace", "replace", "text", "drop", "add"))
        target = holder[last]
        if action == "drop" and isinstance(holder, dict):
            del holder[last]
        elif action == "add" and isinstance(target, dict):
            target[random_odd_text(rng)] = random_odd_value(rng)
        elif action == "text" and isinstance(target, str):
            holder[last] = target + random_odd_text(rng)
        else:
            holder[last] = random_odd_value(rng)
    return payload


def random_odd_text(rng: random.Random) -> str:
    """An edge-case string, or a few random code points (surrogates included)."""
    if rng.random() < 0.6:
        return rng.choice(_EDGE_TEXTS)
    return "".join(chr(rng.randint(*rng.choice(_CODE_POINTS))) for _ in range(rng.randint(1, 8)))


def random_odd_value(rng: random.Random) -> Any:
    """A value of any JSON type, odd more often than not, sometimes deeply nested."""
    roll = rng.random()
    if roll < 0.4:
        return random_odd_text(rng)
    if roll < 0.7:
        return rng.choice(_ODD_SCALARS)
    if roll < 0.85:
        return rng.choice(
            ([], {}, [None], {"": None}, [random_odd_text(rng)], {random_odd_text(rng): 1})
        )
    value: Any = "bottom"
    use_objects = rng.random() < 0.5
    for _ in range(rng.randint(60, 900)):
        value = {"a": value} if use_objects else [value]
    return value


_ODD_SCALARS: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    2**63,
    -(2**70),
    1.5,
    float("nan"),
    float("inf"),
    -0.0,
    1e308,
)
#: where random code points come from: ASCII, the BMP, surrogates, the astral planes
_CODE_POINTS = ((0, 0x7F), (0x80, 0xFFFF), (0xD800, 0xDFFF), (0x10000, 0x10FFFF))


class _ErrorCatcher(logging.Handler):
    """Keeps a line for each ERROR record, or any record carrying a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "asyncio" and "Unclosed" in str(record.msg):
            return  # garbage collection of an earlier test's client session, not the ingress
        traceback = record.exc_info or "Traceback (most recent call last)" in str(record.msg)
        if record.levelno >= logging.ERROR or traceback:
            self.found.append(f"{record.name}: {record.getMessage()[:300]}")


def _paths(node: Any, max_depth: int = 12) -> list[tuple[Any, ...]]:
    """The path of every value nested in `node`, not descending below `max_depth`."""
    found: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(node, ())]
    while stack:
        value, prefix = stack.pop()
        if prefix:
            found.append(prefix)
        if len(prefix) >= max_depth:
            continue
        if isinstance(value, dict):
            stack.extend((child, (*prefix, key)) for key, child in value.items())
        elif isinstance(value, list):
            stack.extend((child, (*prefix, index)) for index, child in enumerate(value))
    return found


class IngressCheck:
    """Feeds payloads to a started Switchboard's account and checks every outcome."""

    def __init__(self, board: Switchboard, account: str, *, timeout: float = 60.0):
        self.board = board
        self.account = account
        self.timeout = timeout
        self.outcomes: dict[str, int] = dict.fromkeys(SETTLED, 0)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def explore(self, test: Callable[[], None]) -> None:
        """Run a hypothesis test (sync, `@given`) in a thread; its examples `call` this loop.

        Afterwards, assert no ERROR record (nor any traceback) was logged meanwhile:
        bad input earns one WARNING line, never an error report.
        """
        self._loop = asyncio.get_running_loop()
        catcher = _ErrorCatcher()
        root = logging.getLogger()
        root.addHandler(catcher)
        try:
            await asyncio.to_thread(test)
        finally:
            root.removeHandler(catcher)
        assert catcher.found == [], catcher.found[:5]

    async def handled(self, work: Awaitable[Any]) -> None:
        """Await an entry point that returns nothing (a gateway frame handler); it must not raise."""
        await work

    def call(self, work: Awaitable[T]) -> T:
        """Run `work` on the test's loop from the hypothesis thread; return its result."""
        assert self._loop is not None, "call() only works inside explore()"

        async def wrapped() -> T:
            return await work

        return asyncio.run_coroutine_threadsafe(wrapped(), self._loop).result(self.timeout)

    async def ingest(self, raw: Mapping[str, Any], **kwargs: Any) -> IngestResult:
        """Ingest one payload; assert it settled, a dead letter with a reason if malformed."""
        (result,) = await self._checked([raw], lambda: self._ingest_one(raw, **kwargs))
        return result

    async def ingest_many(
        self, raws: Sequence[Mapping[str, Any]], **kwargs: Any
    ) -> list[IngestResult]:
        """Ingest a batch as a poller does; assert as for `ingest`, for each payload."""
        return await self._checked(
            raws, lambda: self.board.ingest_many(self.account, raws, **kwargs)
        )

    async def received(self, raw: Any, receive: Receive) -> IngestResult:
        """Hand one payload to an adapter's own entry point (`receive(raw)`); check as `ingest`."""

        async def one() -> list[IngestResult]:
            return [await receive(raw)]

        (result,) = await self._checked([raw], one)
        return result

    async def stored_once(
        self, raw: Mapping[str, Any], receive: Receive | None = None
    ) -> IngestResult:
        """Assert a legitimate payload is stored, and its redelivery adds no row."""
        receive = receive or (lambda payload: self.board.ingest(self.account, payload))
        first = await receive(raw)
        assert first.status in {"stored", "held"}, (first.status, first.reason)
        again = await receive(raw)
        assert again.status == "duplicate", (again.status, again.reason)
        return first

    async def dead_letters(self) -> int:
        """The id of the newest dead letter (ids count up: the difference is how many came)."""
        newest = await self.board.store.dead_letters(limit=1)
        return int(newest[0]["id"]) if newest else 0

    async def _ingest_one(self, raw: Mapping[str, Any], **kwargs: Any) -> list[IngestResult]:
        return [await self.board.ingest(self.account, raw, **kwargs)]

    async def _checked(
        self,
        raws: Sequence[Any],
        ingest: Callable[[], Awaitable[list[IngestResult]]],
    ) -> list[IngestResult]:
        before = await self.dead_letters()
        results = await ingest()
        assert len(results) == len(raws)
        for result in results:
            assert result.status in SETTLED, result
            self.outcomes[result.status] += 1
            if result.status == "malformed":
                assert result.reason, "a dead letter needs a reason"
        malformed = sum(1 for r in results if r.status == "malformed")
        assert await self.dead_letters() - before == malformed
        return results


def store_leaks(
    path: str | Path, secrets: Collection[str], secret_fields: Collection[str] = ()
) -> list[str]:
    """Name every table cell holding a secret value, or a secret field with a kept value.

    Secret fields are looked for outside the `state` table (what came off the wire);
    secret values everywhere.
    """
    field_pattern = (
        re.compile(r'"(' + "|".join(re.escape(f) for f in secret_fields) + r')"\s*:\s*"(?!\*\*\*")')
        if secret_fields
        else None
    )
    found: list[str] = []
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    text = cell.decode("utf-8", "replace") if isinstance(cell, bytes) else cell
                    if not isinstance(text, str):
                        continue
                    for secret in secrets:
                        if secret and secret in text:
                            found.append(f"{table}: a configured secret")
                    # an adapter's own state may hold key material by design (tiny.place's
                    # ratchet); what came off the wire may not
                    in_payloads = table != "state"
                    if in_payloads and field_pattern is not None and field_pattern.search(text):
                        found.append(f"{table}: a secret field kept: {text[:120]!r}")
    return found

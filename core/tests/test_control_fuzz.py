"""The control socket under hostile and broken requests: any line gets one answer line.

A same-user process can still send anything: a bug in a client, a half-written
script, a fuzzer. Every request line, whatever its op and arguments, is
answered with `{"ok": true, ...}` or `{"ok": false, "error": <one line>}`, no
handler raises past the server, and the server keeps answering after.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from backchannel import Binding, Switchboard, control
from backchannel.store import SQLiteStore
from backchannel.testing import FakeChannel, RecordingAgent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

OPS = [*control.BUILTIN_OPS, "nope", ""]
ARGUMENTS = ["conversation", "address", "text", "seq", "reply_to", "quiet", "origin", "peer",
             "question", "session", "account", "accounts"]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
known_values = st.one_of(
    json_values,
    st.sampled_from(
        ["ops/c1", "ops/c2", "1", "ops", "c1", "👍", "x" * 5000, "a\nb", "\x1b[31mred"]
    ),
    st.fixed_dictionaries(
        {"account": st.sampled_from(["ops", "nope"]), "chat": st.text(max_size=6)}
    ),
)
texts = st.one_of(st.text(max_size=30), st.sampled_from(["hello", "👍", "", " ", "x" * 5000]))
seqs = st.one_of(st.integers(-2, 5), st.sampled_from(["1", "x", None, 1.5]))
targets = st.one_of(
    st.fixed_dictionaries({"conversation": known_values}),
    st.fixed_dictionaries({"address": known_values}),
)
#: each op with the arguments it takes (values broken or not), and sometimes extra ones
shaped = st.one_of(
    st.tuples(st.just("send"), targets, st.fixed_dictionaries({"text": texts})),
    st.tuples(
        st.sampled_from(["edit", "react"]),
        st.fixed_dictionaries({"conversation": known_values}),
        st.fixed_dictionaries({"seq": seqs, "text": texts}),
    ),
    st.tuples(
        st.just("ask"),
        st.fixed_dictionaries({"peer": known_values}),
        st.fixed_dictionaries(
            {"question": texts},
            optional={"session": known_values, "account": known_values, "accounts": known_values},
        ),
    ),
).map(lambda parts: {"op": parts[0], "args": {**parts[1], **parts[2]}})
requests = st.one_of(
    shaped,
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(OPS),
            "args": st.dictionaries(st.sampled_from(ARGUMENTS), known_values, max_size=5),
        }
    ),
    st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    json_values,
)
lines = st.one_of(
    requests.map(lambda request: json.dumps(request).encode()),
    st.binary(max_size=60),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(lines, min_size=1, max_size=6))
def test_every_request_line_gets_one_answer_line_and_the_server_keeps_serving(
    batch: list[bytes],
) -> None:
    async def go() -> None:
        with tempfile.TemporaryDirectory() as folder:
            channel = FakeChannel()
            board = Switchboard(SQLiteStore(Path(folder) / "bc.db"))
            board.add_account(channel.adapter("ops"), Binding(RecordingAgent(lambda run: None)))
            await board.start()
            server = control.ControlServer(board, Path(folder) / "bc.ctl")
            try:
                for line in batch:
                    answer = await server._handle(line)
                    _check(answer)
                pong = await server._handle(b'{"op": "ping"}')
                assert pong["ok"] is True and pong["result"]["accounts"] == ["ops"]
            finally:
                await board.stop()

    asyncio.run(go())


def _check(answer: Any) -> None:
    assert isinstance(answer, dict) and answer["ok"] in (True, False), answer
    json.dumps(answer, default=str)  # it can be written back as a line
    if answer["ok"]:
        assert isinstance(answer["result"], dict)
    else:
        error = answer["error"]
        assert isinstance(error, str) and error and "\n" not in error, answer

"""Fuzz suite (hypothesis): the mailbox reader's hand-over takes any decrypted message.

What the mailbox reader gives `ctx.ingest` is the relay envelope's routing fields and
the decrypted body (plain text, or a v1/v2 session envelope as JSON text). Both are
mangled here (backchannel.testing.fuzz), the body as a structure before it is turned
back into text. After every example the next legitimate message is stored exactly
once; after the run a real peer's encrypted message is stored and answered through
the relay; the identity seed is never kept.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel.testing.fuzz import IngressCheck, mangled, store_leaks
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.envelope import build_v1_envelope
from backchannel_tinyplace.testing import FakeRelay, RelayPeer
from hypothesis import given

FINAL = "final ping"
_ids = itertools.count()


def answer_final(run: Run) -> str | None:
    return "pong" if run.trigger is not None and FINAL in run.trigger.text else None


def routing(peer: str, me: str) -> dict[str, Any]:
    return {
        "id": f"msg_1764500000000_{next(_ids)}",
        "from": peer,
        "to": me,
        "timestamp": "2026-11-30T09:15:02.481Z",
        "deviceId": 1,
        "type": "CIPHERTEXT",
    }


def samples(peer: str, me: str) -> list[dict[str, Any]]:
    session = json.loads(build_v1_envelope("sess-42", "tests pass", "m-31", from_session="s1"))
    return [
        {"envelope": routing(peer, me), "plaintext": "a plain direct message"},
        {"envelope": routing(peer, me), "plaintext": session},
    ]


def as_delivered(raw: Any) -> Any:
    """The body goes to ingest as text, as the reader decrypts it."""
    if isinstance(raw, dict) and isinstance(raw.get("plaintext"), dict | list):
        raw["plaintext"] = json.dumps(raw["plaintext"], ensure_ascii=False)
    return raw


async def test_fuzzed_mailbox_messages_never_stall_the_next_message(
    tmp_path: Path, relay: FakeRelay, settings_for: Any
) -> None:
    store = SQLiteStore(tmp_path / "state" / "backchannel.db")
    settings = settings_for()
    adapter = TinyplaceAdapter("bob", settings)
    board = Switchboard(store)
    board.add_account(
        adapter,
        Binding(RecordingAgent(answer_final), debounce=0.2, max_wait=1.0),
        secrets=[settings["identity"]],
    )
    async with board, RelayPeer(relay.url) as peer:
        await peer.publish_keys()
        relay.make_contacts(peer.agent_id, adapter.agent_id)
        check = IngressCheck(board, "bob")
        shapes = samples(peer.agent_id, adapter.agent_id)

        def fresh(raw: dict[str, Any]) -> dict[str, Any]:
            raw["envelope"]["id"] = f"msg_fuzz_{next(_ids)}"
            return raw

        @given(mangled(shapes, fresh=fresh))
        def example(raw: Any) -> None:
            check.call(check.ingest(as_delivered(raw)))
            legit = {"envelope": routing(peer.agent_id, adapter.agent_id), "plaintext": "legit"}
            check.call(check.stored_once(legit))

        await check.explore(example)
        assert check.outcomes["malformed"] > 0 and check.outcomes["stored"] > 0
        # the next real message, encrypted by a real peer and read from the relay, is answered
        await peer.send_text(adapter.agent_id, FINAL)
        await relay.wait_for(lambda: bool(relay.sent_by(adapter.agent_id)), 20, "the answer")
        ((_, text),) = await peer.receive()
        assert peer.text_of(text) == "pong"
        await board.wait_idle()
    assert store_leaks(store.path, [settings["identity"]], TinyplaceAdapter.secret_fields) == []

"""A process SIGKILLed between commit and DELETE: the message is acked later, never decrypted twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from backchannel.model import Address
from backchannel.store import SQLiteStore
from backchannel_tinyplace.testing import FakeRelay, RelayPeer
from tinyplace import LocalSigner

from .conftest import spawn_ready

SCRIPT = Path(__file__).with_name("crash_receiver.py")


async def run_receiver(
    mode: str, relay: FakeRelay, db: Path, seed: bytes
) -> asyncio.subprocess.Process:
    return await spawn_ready(SCRIPT, mode, relay.url, str(db), seed.hex(), what="receiver")


async def test_sigkill_after_commit_before_delete_is_acked_on_restart_without_a_second_decrypt(
    tmp_path: Path, relay: FakeRelay, peer: RelayPeer
) -> None:
    seed = os.urandom(32)
    bob = LocalSigner.from_seed(seed, siws=False).agent_id
    db = tmp_path / "bob" / "backchannel.db"
    relay.make_contacts(peer.agent_id, bob)

    crashing = await run_receiver("crash", relay, db, seed)
    first = await peer.send_text(bob, "survives the crash")
    assert await asyncio.wait_for(crashing.wait(), 30) == -signal.SIGKILL
    assert not relay.is_acked(bob, first)
    assert [m["id"] for m in relay.mailbox(bob)] == [first]

    second = await peer.send_text(bob, "arrives after the crash")
    resuming = await run_receiver("resume", relay, db, seed)
    out, err = await asyncio.wait_for(resuming.communicate(), 30)
    assert resuming.returncode == 0, err.decode()[-2000:]
    report = json.loads(out.decode().strip().splitlines()[-1])

    # the committed message was not decrypted again (its ratchet step is spent), only acked
    assert report["decrypted"] == [second]
    assert sorted(report["results"]) == ["duplicate", "stored"]
    assert relay.is_acked(bob, first) and relay.is_acked(bob, second)
    store = SQLiteStore(db)
    try:
        conversation = await store.find_conversation(Address("bob", peer.agent_id, "master"))
        assert conversation is not None
        texts = [m.text for m in await store.window(conversation.id, 10)]
    finally:
        await store.close()
    assert texts == ["survives the crash", "arrives after the crash"]

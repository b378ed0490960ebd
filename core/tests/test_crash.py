"""SIGKILL a switchboard mid-stream, restart it on the same store: nothing lost, nothing doubled."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from backchannel.store import SQLiteStore

CHILD = Path(__file__).with_name("crash_child.py")
EVENTS = [
    {"id": f"e{n:04d}", "chat": f"c{n % 20}", "from": "alice", "text": f"message {n}"}
    for n in range(600)
]


async def spawn(store: Path, *extra: str) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        str(store),
        *extra,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    assert line == b"ready\n", line
    return process


async def feed(process: asyncio.subprocess.Process, events: list[dict[str, str]]) -> None:
    assert process.stdin is not None
    for event in events:
        process.stdin.write((json.dumps(event) + "\n").encode())
    await process.stdin.drain()


async def read_acks(process: asyncio.subprocess.Process, count: int) -> set[str]:
    assert process.stdout is not None
    acked: set[str] = set()
    while len(acked) < count:
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        if line.startswith(b"sending "):
            continue
        assert line.startswith(b"ack "), line
        acked.add(line.split()[1].decode())
    return acked


async def restart_until_idle(path: Path) -> list[bytes]:
    """Start the child again on `path` with nothing new to read; return what it printed
    once idle (it must exit cleanly)."""
    second = await spawn(path)
    assert second.stdin is not None and second.stdout is not None
    second.stdin.close()
    rest = (await asyncio.wait_for(second.stdout.read(), 60)).splitlines()
    assert rest[-1] == b"idle"
    assert await asyncio.wait_for(second.wait(), 30) == 0
    return rest


async def test_sigkill_mid_stream_loses_nothing_and_doubles_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state" / "bc.db"

    # first life: ingest part of the stream, answer nothing, die without warning
    first = await spawn(path, "--stuck")
    await feed(first, EVENTS)
    acked = await read_acks(first, 250)
    first.send_signal(signal.SIGKILL)
    await first.wait()
    assert first.returncode == -signal.SIGKILL

    store = SQLiteStore(path)
    stored_after_crash = {
        row[0] for row in store.db.execute("SELECT event_id FROM events WHERE account = 'pipe'")
    }
    unanswered = {c.id for c in await store.unhandled()}
    await store.close()
    assert acked <= stored_after_crash, "an acked event was lost"
    assert len(unanswered) == 20

    # second life: the platform redelivers everything (at least once), acked or not
    second = await spawn(path)
    await feed(second, EVENTS)
    assert second.stdin is not None
    second.stdin.close()
    assert await read_acks(second, len(EVENTS)) == {e["id"] for e in EVENTS}
    assert second.stdout is not None
    rest = (await asyncio.wait_for(second.stdout.read(), 60)).splitlines()
    assert rest[-1] == b"idle"
    assert all(line.startswith(b"sending ") for line in rest[:-1])
    assert await asyncio.wait_for(second.wait(), 30) == 0

    store = SQLiteStore(path)
    db = store.db
    inbound = db.execute(
        "SELECT event_id, COUNT(*) FROM messages WHERE direction = 'in' GROUP BY event_id"
    ).fetchall()
    assert len(inbound) == len(EVENTS)
    assert all(count == 1 for _, count in inbound)
    for conversation in await store.conversations(limit=100):
        seqs = [
            row[0]
            for row in db.execute(
                "SELECT seq FROM messages WHERE conversation_id = ? ORDER BY seq",
                (conversation.id,),
            )
        ]
        assert seqs == list(range(1, len(seqs) + 1)), "seq must be gapless and monotonic"
        assert conversation.handled_seq >= conversation.trigger_seq
    assert await store.unhandled() == []
    answered = {
        row[0]
        for row in db.execute("SELECT DISTINCT conversation_id FROM runs WHERE status = 'ok'")
    }
    assert unanswered <= answered, "a conversation left unanswered by the crash was not run again"
    sent = db.execute("SELECT COUNT(*) FROM outbox WHERE status = 'sent'").fetchone()
    assert sent is not None
    assert sent[0] >= 20
    await store.close()


async def test_runs_cut_short_by_a_crash_are_marked_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"
    first = await spawn(path, "--stuck")
    await feed(first, EVENTS[:1])
    await read_acks(first, 1)
    store = SQLiteStore(path)
    for _ in range(3000):  # the run row is written right after the ack: poll the file, bounded
        row = store.db.execute("SELECT COUNT(*) FROM runs").fetchone()
        assert row is not None
        if row[0]:
            break
        await asyncio.sleep(0.01)
    await store.close()
    first.send_signal(signal.SIGKILL)
    await first.wait()
    store = SQLiteStore(path)
    await store.recover()
    (run,) = await store.runs()
    assert run.status == "interrupted"
    await store.close()


async def test_sigkill_during_a_send_leaves_it_uncertain_and_never_resent(tmp_path: Path) -> None:
    path = tmp_path / "bc.db"
    first = await spawn(path, "--hang-send")
    await feed(first, EVENTS[:1])
    assert first.stdout is not None
    lines = [await asyncio.wait_for(first.stdout.readline(), 30) for _ in range(2)]
    sending = next(line for line in lines if line.startswith(b"sending "))
    outbox_id = int(sending.split()[1])
    first.send_signal(signal.SIGKILL)
    await first.wait()

    store = SQLiteStore(path)
    (entry,) = await store.outbox()
    assert (entry.id, entry.status) == (outbox_id, "pending")
    await store.close()

    rest = await restart_until_idle(path)  # recovers, runs the unanswered conversation
    resent = [line for line in rest if line.startswith(f"sending {outbox_id} ".encode())]
    assert resent == [], "an uncertain send was sent again automatically"

    store = SQLiteStore(path)
    entries = {e.id: e for e in await store.outbox()}
    assert entries[outbox_id].status == "uncertain"
    assert "restart" in (entries[outbox_id].reason or "")
    conversation = (await store.conversations())[0]
    window = await store.window(conversation.id, 10)
    assert window[1].status == "uncertain"  # the agent saw it marked so in its next run
    await store.close()


async def test_sigkill_while_waiting_out_a_rate_limit_leaves_it_never_sent_and_answered(
    tmp_path: Path,
) -> None:
    # a send waiting out a 429 has nothing in flight: a restart that made it "uncertain"
    # counted it as the answer, and the message was never answered at all
    path = tmp_path / "bc.db"
    first = await spawn(path, "--rate-limit")
    await feed(first, EVENTS[:1])
    assert first.stdout is not None
    while not (line := await asyncio.wait_for(first.stdout.readline(), 30)).startswith(
        b"rate limited "
    ):
        pass
    outbox_id = int(line.split()[2])
    store = SQLiteStore(path)
    for _ in range(300):  # the wait is said in the store before it starts sleeping
        (entry,) = await store.outbox()
        if entry.reason is not None:
            break
        await asyncio.sleep(0.05)
    await store.close()
    assert (entry.status, entry.reason) == ("pending", "waiting out a rate limit")
    first.send_signal(signal.SIGKILL)
    await first.wait()

    rest = await restart_until_idle(path)  # recovers, runs the unanswered conversation
    sent = [line for line in rest if line.startswith(b"sending ")]
    assert len(sent) == 1 and not sent[0].startswith(f"sending {outbox_id} ".encode())

    store = SQLiteStore(path)
    entries = {e.id: e for e in await store.outbox()}
    assert entries[outbox_id].status == "failed"
    assert "waited out a rate limit" in (entries[outbox_id].reason or "")
    assert [entries[key].status for key in sorted(entries)] == ["failed", "sent"]
    await store.close()

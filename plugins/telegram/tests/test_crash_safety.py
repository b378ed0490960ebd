"""Crash safety: SIGKILL between a commit and the next getUpdates loses and doubles nothing."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from backchannel.model import Address
from backchannel.store import SQLiteStore
from backchannel_telegram.testing import FakeTelegram, event_id_of

WORKER = Path(__file__).with_name("crash_worker.py")


async def spawn(fake: FakeTelegram, store_path: Path, log: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "CRASH_TEST_TOKEN": fake.token}
    with log.open("ab") as errors:  # the child keeps its own copy of the descriptor
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            fake.url,
            str(store_path),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 20)
    assert line.strip() == b"started", log.read_text()
    return process


def answered(fake: FakeTelegram, message: dict[str, Any]) -> bool:
    return any(
        sent.chat_id == message["chat"]["id"] and sent.reply_to == message["message_id"]
        for sent in fake.sent
    )


async def test_sigkill_between_commit_and_next_getupdates_loses_and_doubles_nothing(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    store_path = tmp_path / "state" / "backchannel.db"
    log = tmp_path / "worker.log"
    people = [fake.user(name) for name in ("Ann", "Ben", "Cat", "Dan", "Eve")]
    chats = [fake.private_chat(person) for person in people]
    before = [
        fake.inject_message(c, p, f"question from {p['first_name']}")
        for c, p in zip(chats[:3], people[:3], strict=True)
    ]
    # the worker's first getUpdates returns the three; the second (which would
    # confirm them) never answers: the worker is killed while it waits
    fake.fail_next("getUpdates", "hang", after=1)

    worker = await spawn(fake, store_path, log)
    try:
        await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= 2, 20, "second poll")
        committed_offset = fake.calls_to("getUpdates")[1]["offset"]
        assert committed_offset == before[-1]["update_id"] + 1
        assert not any(fake.is_acked(u["update_id"]) for u in before)
    finally:
        worker.kill()
        await worker.wait()

    calls_before_restart = len(fake.calls_to("getUpdates"))
    worker = await spawn(fake, store_path, log)
    try:
        after = [
            fake.inject_message(c, p, f"question from {p['first_name']}")
            for c, p in zip(chats[3:], people[3:], strict=True)
        ]
        everything = before + after
        # a reply the kill cut short mid-send is `uncertain`: it is not sent again
        # (issue 14), so a message from before the kill may have that instead (checked below)
        await fake.wait_for(
            lambda: all(answered(fake, u["message"]) for u in after),
            30,
            "an answer to every message after the restart",
        )
        await fake.wait_for(lambda: all(fake.is_acked(u["update_id"]) for u in everything), 10)
        # the restarted worker resumed at the committed offset: nothing was read twice
        assert fake.calls_to("getUpdates")[calls_before_restart]["offset"] == committed_offset
        worker.terminate()  # a clean stop lets the runs record that they finished
        assert await asyncio.wait_for(worker.wait(), 20) == 0
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()

    store = SQLiteStore(store_path)
    try:
        for update in everything:
            message = update["message"]
            conversation = await store.find_conversation(Address("tg", str(message["chat"]["id"])))
            assert conversation is not None
            rows = await store.window(conversation.id, 50)
            inbound = [m for m in rows if m.direction == "in"]
            assert [(m.text, m.event_id) for m in inbound] == [
                (message["text"], event_id_of(update))
            ]
            replies = [m for m in rows if m.direction == "out"]
            assert replies, f"no reply to {message['text']!r}"
            if not answered(fake, message):  # never arrived: the store says it may have
                assert update in before and {m.status for m in replies} == {"uncertain"}
            assert conversation.handled_seq >= inbound[0].seq
    finally:
        await store.close()
    assert "Traceback" not in log.read_text()
    assert fake.token.split(":", 1)[1] not in log.read_text()

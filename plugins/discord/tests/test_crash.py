"""Crash safety on Discord: a real process SIGKILLed mid-stream, restarted, loses and doubles
nothing. The Gateway has no acks: what was posted while the process was dead (or in flight
when it died) comes back through the catch-up after the next READY."""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path
from typing import Any

from backchannel.store import SQLiteStore
from backchannel_discord.testing import FakeDiscord

CHILD = Path(__file__).with_name("crash_child.py")


async def spawn(fake: FakeDiscord, store_path: Path, log: Path) -> asyncio.subprocess.Process:
    settings = fake.settings
    with log.open("ab") as errors:  # the child keeps its own copy of the descriptor
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            settings["api_base"],
            settings["gateway_url"],
            str(store_path),
            env={**os.environ, "CRASH_TEST_TOKEN": fake.token, "PYTHONUNBUFFERED": "1"},
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    assert line.strip() == b"started", log.read_text()
    return process


def replies(fake: FakeDiscord, channel: str) -> dict[str, int]:
    """How many replies of the bot each message id got on the platform."""
    counted: dict[str, int] = {}
    for message in fake.sent_to(channel):
        target = (message.get("message_reference") or {}).get("message_id")
        if target is not None:
            counted[target] = counted.get(target, 0) + 1
    return counted


async def test_sigkill_mid_stream_loses_and_doubles_nothing_on_discord(
    tmp_path: Path,
) -> None:
    store_path = tmp_path / "state" / "backchannel.db"
    log = tmp_path / "child.log"
    rng = random.Random(7)
    async with FakeDiscord() as fake:
        channel = fake.general
        posted: list[dict[str, Any]] = []
        # the first message makes the channel known (catch-up reads known channels only)
        child = await spawn(fake, store_path, log)
        try:
            posted.append(await fake.post_message(channel, fake.alice, "m0"))
            await fake.wait_until(lambda: bool(replies(fake, channel)), 20, "the first reply")
            for life in range(3):
                # a stream, with the bot's sends failing now and then, killed mid-way
                fake.fail_next(
                    rng.choice(["rate_limited", "server_error", "reset"]), retry_after=0.2
                )
                kill_at = rng.randint(3, 8)
                for n in range(10):
                    posted.append(await fake.post_message(channel, fake.alice, f"l{life}-{n}"))
                    if n == kill_at:
                        child.kill()
                        await child.wait()
                    await asyncio.sleep(rng.random() * 0.05)
                # posted while it was dead (and whatever was in flight when it died)
                for n in range(3):
                    posted.append(await fake.post_message(channel, fake.alice, f"dead{life}-{n}"))
                child = await spawn(fake, store_path, log)
            # the last life's catch-up comes before any live event, and a run answers what
            # no run answered before it: once the last message has its reply, every
            # earlier one has its own (or an uncertain one, a kill cut short mid-send)
            last = await fake.post_message(channel, fake.alice, "last")
            posted.append(last)
            await fake.wait_until(
                lambda: last["id"] in replies(fake, channel), 60, "the reply to the last message"
            )
            child.terminate()  # a clean stop records what the runs did
            assert await asyncio.wait_for(child.wait(), 30) == 0
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        counted = replies(fake, channel)

    assert all(n == 1 for n in counted.values()), "a message was answered twice on Discord"
    store = SQLiteStore(store_path)
    try:
        (conversation,) = await store.conversations("main", limit=10)
        rows = await store.window(conversation.id, 1000)
        assert [m.seq for m in rows] == list(range(1, len(rows) + 1)), "seqs have a gap"
        inbound = [m for m in rows if m.direction == "in"]
        assert sorted(str(m.platform_message_id) for m in inbound) == sorted(
            m["id"] for m in posted
        )
        by_seq = {m.seq: m for m in inbound}
        outbound = [m for m in rows if m.direction == "out"]
        answered: dict[int, list[str]] = {}
        for reply in outbound:
            assert reply.status in ("sent", "uncertain"), (reply.text, reply.status)
            assert reply.reply_to_seq in by_seq
            answered.setdefault(reply.reply_to_seq, []).append(reply.status)
        for message in inbound:
            statuses = answered.get(message.seq, [])
            assert len(statuses) == 1, (message.text, statuses)
            on_platform = counted.get(message.platform_message_id or "", 0)
            # sent: on the platform once; uncertain (a kill mid-send): at most once
            assert on_platform == 1 if statuses == ["sent"] else on_platform <= 1
        assert await store.outbox(status="pending") == []
        assert conversation.handled_seq == rows[-1].seq or all(
            m.direction == "out" for m in rows if m.seq > conversation.handled_seq
        )
    finally:
        await store.close()
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert fake.token not in text

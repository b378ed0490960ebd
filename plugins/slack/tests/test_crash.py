"""Crash safety on Slack (Socket Mode): a real process SIGKILLed mid-stream, restarted,
loses and doubles nothing. Slack sends an envelope again until it is acked, and the app
acks only after the event is stored."""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

from backchannel.store import SQLiteStore
from backchannel_slack.testing import FakeSlack

CHILD = Path(__file__).with_name("crash_child.py")
CHANNEL = "C0GENERAL"


async def spawn(fake: FakeSlack, store_path: Path, log: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "CRASH_TEST_BOT_TOKEN": fake.bot_token,
        "CRASH_TEST_APP_TOKEN": fake.app_token,
        "PYTHONUNBUFFERED": "1",
    }
    with log.open("ab") as errors:  # the child keeps its own copy of the descriptor
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            fake.api_base,
            str(store_path),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    assert line.strip() == b"started", log.read_text()
    return process


def posted_at_least(fake: FakeSlack, count: int) -> Callable[[], bool]:
    return lambda: len(fake.posts) >= count


def replies(fake: FakeSlack) -> dict[str, int]:
    """How many replies of the bot each message (by ts) got on the platform."""
    counted: dict[str, int] = {}
    for post in fake.posts:
        target = post.get("thread_ts")
        if target is not None:
            counted[target] = counted.get(target, 0) + 1
    return counted


async def test_sigkill_mid_stream_loses_and_doubles_nothing_on_slack(tmp_path: Path) -> None:
    store_path = tmp_path / "state" / "backchannel.db"
    log = tmp_path / "child.log"
    rng = random.Random(11)
    async with FakeSlack() as fake:
        posted: list[str] = []  # the messages' ts
        child = await spawn(fake, store_path, log)
        try:
            for life in range(3):
                fault = rng.choice(["rate_limited", "server_error", "reset_after"])
                fake.fail_next("chat.postMessage", fault, retry_after=0.2, after=rng.randint(0, 2))
                # and a later reply that Slack posts but answers only after 5 s: the kill
                # comes while it hangs, so the restart must take it as maybe sent
                before, slow_after = len(fake.posts), rng.randint(1, 4)
                fake.fail_next("chat.postMessage", "slow", delay=5.0, after=slow_after)
                for n in range(10):
                    payload = fake.message(CHANNEL, "U0ALICE", f"l{life}-{n}")
                    posted.append(payload["event"]["ts"])
                    await fake.deliver(payload)
                    await asyncio.sleep(rng.random() * 0.05)
                await fake.wait_for(posted_at_least(fake, before + slow_after + 1), 30, "the post")
                child.kill()
                await child.wait()
                # sent while it was dead: Slack keeps them until a connection acks them
                for n in range(3):
                    payload = fake.message(CHANNEL, "U0ALICE", f"dead{life}-{n}")
                    posted.append(payload["event"]["ts"])
                    await fake.deliver(payload)
                child = await spawn(fake, store_path, log)
            # runs answer what no run answered before them, in order: once the last message
            # has its reply, every earlier one has its own (or an uncertain one)
            last = fake.message(CHANNEL, "U0ALICE", "last")
            posted.append(last["event"]["ts"])
            await fake.deliver(last)
            await fake.wait_for(
                lambda: last["event"]["ts"] in replies(fake), 60, "the reply to the last message"
            )
            child.terminate()  # a clean stop records what the runs did
            assert await asyncio.wait_for(child.wait(), 30) == 0
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        counted = replies(fake)

    assert all(n == 1 for n in counted.values()), "a message was answered twice on Slack"
    store = SQLiteStore(store_path)
    try:
        (conversation,) = [
            c for c in await store.conversations("sl", limit=10) if not c.address.thread
        ]
        rows = await store.window(conversation.id, 1000)
        assert [m.seq for m in rows] == list(range(1, len(rows) + 1)), "seqs have a gap"
        inbound = [m for m in rows if m.direction == "in"]
        assert sorted(str(m.platform_message_id) for m in inbound) == sorted(posted)
        outbound = [m for m in rows if m.direction == "out"]
        answered: dict[int, list[str]] = {}
        for reply in outbound:
            assert reply.status in ("sent", "uncertain"), (reply.text, reply.status)
            assert reply.reply_to_seq is not None
            answered.setdefault(reply.reply_to_seq, []).append(reply.status)
        for message in inbound:
            statuses = answered.get(message.seq, [])
            assert len(statuses) == 1, (message.text, statuses)
            on_platform = counted.get(str(message.platform_message_id), 0)
            assert on_platform == 1 if statuses == ["sent"] else on_platform <= 1
        assert await store.outbox(status="pending") == []
    finally:
        await store.close()
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert fake.bot_token not in text and fake.app_token not in text

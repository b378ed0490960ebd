"""A switchboard process for the crash test: events arrive as JSON lines on stdin.

For each line it ingests the event and, only after the commit, prints
``ack EVENT_ID``. The agent replies to every run; with ``--stuck`` it never
finishes a run, so everything it received stays unanswered. On end of input it
waits until idle and prints ``idle``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any

from backchannel import (
    Address,
    Binding,
    Capabilities,
    Event,
    Outbound,
    Receipt,
    Run,
    Sender,
    Switchboard,
)
from backchannel.adapter import AdapterContext
from backchannel.errors import RateLimited
from backchannel.store import SQLiteStore


class PipeAdapter:
    channel = "pipe"
    capabilities = Capabilities(max_text_len=10_000)

    def __init__(self, account: str, hang_send: bool = False, rate_limit: bool = False):
        self.account = account
        self.me = Sender("agent", "Agent", is_bot=True)
        self.sent = 0
        self.hang_send = hang_send
        self.rate_limit = rate_limit

    async def start(self, ctx: AdapterContext) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, outbound: Outbound) -> Receipt:
        if self.rate_limit:
            # the platform says "not now": nothing is delivered, and the wait is long
            print(f"rate limited {outbound.outbox_id}", flush=True)
            raise RateLimited(50.0, "pipe: slow down")
        self.sent += 1
        print(f"sending {outbound.outbox_id} {outbound.text}", flush=True)
        if self.hang_send:
            await asyncio.Event().wait()  # the request is out; the answer never comes
        return Receipt(f"out-{outbound.outbox_id}")

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        return Event(
            address=Address(self.account, raw["chat"]),
            event_id=raw["id"],
            sender=Sender(raw["from"], raw["from"].title()),
            text=raw["text"],
            platform_message_id=raw["id"],
        )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--stuck", action="store_true")
    parser.add_argument("--hang-send", action="store_true")
    parser.add_argument("--rate-limit", action="store_true")
    args = parser.parse_args()

    async def agent(run: Run) -> None:
        if args.stuck:
            await asyncio.Event().wait()
        assert run.trigger is not None
        await run.call("reply", {"message_id": run.trigger.seq, "text": f"re {run.trigger.text}"})

    adapter = PipeAdapter("pipe", hang_send=args.hang_send, rate_limit=args.rate_limit)
    board = Switchboard(SQLiteStore(args.store))
    board.add_account(adapter, Binding(agent))
    await board.start()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pending: set[asyncio.Task[None]] = set()

    async def handle(line: bytes) -> None:
        raw = json.loads(line)
        await board.ingest("pipe", raw)
        sys.stdout.write(f"ack {raw['id']}\n")
        sys.stdout.flush()

    while line := await reader.readline():
        task = asyncio.create_task(handle(line))
        pending.add(task)
        task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    await board.wait_idle(timeout=60)
    print("idle", flush=True)
    await board.stop()


if __name__ == "__main__":
    asyncio.run(main())

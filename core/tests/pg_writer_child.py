"""A writer process for the PostgreSQL concurrency test.

Opens the store at URL, prints ``ready``, waits for a line on stdin, then appends
batches of events (ids overlapping other writers') and records outbound
messages into the same conversations, and prints ``done``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from backchannel.model import Address, Event, Outbound, Sender
from backchannel.store import Inbound
from backchannel.store.postgres import PostgresStore

ALICE = Sender("alice", "Alice")


def make_event(event_id: str, text: str, chat: str) -> Event:
    return Event(
        address=Address("acct", chat),
        event_id=event_id,
        sender=ALICE,
        text=text,
        platform_message_id=event_id,
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--chats", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--worker", default="w")
    options = parser.parse_args()
    store = PostgresStore(options.url, worker=options.worker)
    await store.pool()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    me = Sender("agent", "Agent", is_bot=True)
    numbers = list(range(options.first, options.first + options.count))
    for start in range(0, len(numbers), options.batch):
        chunk = numbers[start : start + options.batch]
        results = await store.append_inbound(
            [Inbound(make_event(f"e{n}", f"text {n}", chat=f"c{n % options.chats}")) for n in chunk]
        )
        conversation = await store.conversation(results[0].conversation_id)
        await store.record_outbound(
            conversation.id, Outbound(conversation.address, f"reply from {options.worker}"), me
        )
    await store.close()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main())

"""Side by side with aiogram: the same real-shaped updates, our durable path vs its in-memory one.

aiogram is not a dependency of backchannel; this bench alone needs it:

    uv run --frozen --with 'aiogram>=3,<4' python bench/peer_aiogram.py [--events N] [--json]

aiogram's side is `Dispatcher.feed_raw_update` (validate the Update into its
pydantic models, dispatch it to a no-op handler), nothing stored. Ours is the
real Telegram adapter through the switchboard into SQLite, each update
committed before its call returns (bench/ingest.py's shapes). Each shape is
fed the same way to both: polls of 100 awaited one after another, 40 requests
in flight, 1,000 in flight. Prints our speed as a multiple of aiogram's
(above 1 = faster than aiogram), min and median over rounds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Iterator
from itertools import islice
from typing import Any

from backchannel.runtime import tune_gc
from figures import bench_parser, emit
from ingest import IN_FLIGHT, POLL_LIMIT, SHAPES, WEBHOOK_CONNECTIONS, shape_seconds
from telegram_updates import TOKEN, make_adapter, message_shapes, updates

try:
    from aiogram import Bot, Dispatcher
    from aiogram.types import Update
except ImportError:
    raise SystemExit(
        "aiogram is not installed (it is not a dependency); run this bench as\n"
        "  uv run --frozen --with 'aiogram>=3,<4' python bench/peer_aiogram.py"
    ) from None


async def aiogram_seconds(shape: str, events: int, conversations: int, shapes: list[Any]) -> float:
    """Return the wall time aiogram's dispatcher takes to take in `events` updates this way."""
    bot = Bot(token=TOKEN)
    dispatcher = Dispatcher()
    handled = 0

    async def on_message(message: Any) -> None:
        nonlocal handled
        handled += 1

    dispatcher.message.register(on_message)
    dispatcher.channel_post.register(on_message)
    stream = updates(events, conversations, shapes=shapes)

    async def feed(source: Iterator[dict[str, Any]]) -> None:
        for update in source:
            await dispatcher.feed_raw_update(bot, update)

    started = time.perf_counter()
    if shape == "poller":
        while batch := list(islice(stream, POLL_LIMIT)):
            await feed(iter(batch))
    else:
        width = WEBHOOK_CONNECTIONS if shape == "webhook" else IN_FLIGHT
        await asyncio.gather(*(feed(stream) for _ in range(width)))
    elapsed = time.perf_counter() - started
    await bot.session.close()
    if handled != events:
        raise SystemExit(f"aiogram handled {handled} of {events} updates in the {shape} shape")
    return elapsed


def normalize_ratio(events: int, conversations: int, shapes: list[Any]) -> float:
    """Return how many times faster our `normalize` is than `feed_raw_update` (both alone)."""
    adapter = make_adapter()
    started = time.perf_counter()
    for update in updates(events, conversations, shapes=shapes):
        adapter.normalize(update)
    ours = time.perf_counter() - started
    theirs = asyncio.run(aiogram_seconds("poller", events, conversations, shapes))
    return theirs / ours


def shapes_both_accept() -> list[dict[str, Any]]:
    """Return the fixture shapes aiogram's models accept too (old webhook samples lack fields)."""
    accepted = []
    for shape in message_shapes():
        try:
            Update.model_validate(shape)
        except ValueError:
            continue
        accepted.append(shape)
    return accepted


def measure(events: int, conversations: int, rounds: int) -> dict[str, Any]:
    shapes = shapes_both_accept()
    figures: dict[str, Any] = {
        "events": events,
        "rounds": rounds,
        "shapes": len(shapes),
        "normalize": [],
    }
    for shape in SHAPES:
        figures[shape] = []
    for _ in range(rounds):
        figures["normalize"].append(normalize_ratio(events, conversations, shapes))
        for shape in SHAPES:
            ours, _ = asyncio.run(shape_seconds(shape, events, conversations, shapes))
            theirs = asyncio.run(aiogram_seconds(shape, events, conversations, shapes))
            figures[shape].append(theirs / ours)
    figures["load"] = os.getloadavg()[0]
    return figures


def report(figures: dict[str, Any]) -> None:
    print(
        f"peer: ours vs aiogram's in-memory feed_raw_update, {figures['events']:,} updates,"
        f" {figures['rounds']} rounds, {figures['shapes']} update shapes (1-minute load {figures['load']:.1f})"
    )
    labels = {
        "normalize": "normalize alone vs feed_raw_update",
        "poller": "poller, durable",
        "webhook": "webhook (40 in flight), durable",
        "in-flight": "1,000 in flight, durable",
    }
    print(f"  {'ours ÷ aiogram (×, >1 is faster)':<38} {'min':>6} {'median':>7}")
    for key, label in labels.items():
        print(f"  {label:<38} {min(figures[key]):>6.2f} {statistics.median(figures[key]):>7.2f}")


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tune_gc()  # as `serve` does once started
    figures = measure(args.events, args.conversations, args.rounds)
    emit(figures, args.json, report)


if __name__ == "__main__":
    main()

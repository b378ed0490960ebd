"""Fuzz suite (hypothesis): Gateway dispatches and REST catch-up take any payload.

Payloads are real Message objects from FakeDiscord, mangled (backchannel.testing.fuzz),
handed to the adapter's own entry points: the Gateway frame handler (the text of one
frame, as discord.py passes it on) and the catch-up ingest of one REST message.
Neither may raise or log an error; after every example the next legitimate message is
stored exactly once; after the run a legitimate message is stored and answered.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel.testing.fuzz import IngressCheck, mangled, store_leaks
from backchannel_discord import DiscordAdapter
from backchannel_discord.testing import FakeDiscord
from hypothesis import given

from .conftest import FAST

ACCOUNT = "main"
FINAL = "final ping"
_ids = itertools.count(1)


def answer_final(run: Run) -> str | None:
    return "pong" if run.trigger is not None and FINAL in run.trigger.text else None


def fresh(frame: dict[str, Any]) -> dict[str, Any]:
    """A new snowflake for the message, so each example is a new event."""
    data = frame.get("d")
    if isinstance(data, dict) and frame.get("t") == "MESSAGE_CREATE":
        data["id"] = str(1_300_000_000_000_000_000 + next(_ids))
    return frame


async def started(fake: FakeDiscord, store: SQLiteStore) -> tuple[Switchboard, DiscordAdapter]:
    adapter = DiscordAdapter(ACCOUNT, {**fake.settings, **FAST})
    board = Switchboard(store)
    board.add_account(
        adapter,
        Binding(RecordingAgent(answer_final), debounce=0.2, max_wait=1.0),
        secrets=[fake.token],
    )
    await board.start()
    return board, adapter


def samples(fake: FakeDiscord) -> list[dict[str, Any]]:
    dm = fake.dm_channel(fake.alice)
    mention = fake.message_payload(fake.general, fake.alice, f"<@{fake.bot_id}> hello **there**")
    fake.messages[mention["id"]] = mention
    reply = fake.message_payload(fake.general, fake.alice, "a reply", reply_to=mention["id"])
    direct = fake.message_payload(dm, fake.alice, "a direct message")
    frames = [{"op": 0, "t": "MESSAGE_CREATE", "s": 1, "d": m} for m in (mention, reply, direct)]
    edited = {**mention, "content": "edited", "edited_timestamp": "2026-12-01T10:00:00+00:00"}
    frames.append({"op": 0, "t": "MESSAGE_UPDATE", "s": 2, "d": edited})
    frames.append(
        {
            "op": 0,
            "t": "MESSAGE_DELETE",
            "s": 3,
            "d": {"id": mention["id"], "channel_id": fake.general},
        }
    )
    frames.append(
        {
            "op": 0,
            "t": "MESSAGE_DELETE_BULK",
            "s": 4,
            "d": {"ids": [reply["id"]], "channel_id": fake.general},
        }
    )
    # a moderator's clears (every reaction; everyone's one emoji)
    guild = fake.channels[fake.general]["guild_id"]
    where = {"channel_id": fake.general, "message_id": mention["id"], "guild_id": guild}
    frames.append({"op": 0, "t": "MESSAGE_REACTION_REMOVE_ALL", "s": 5, "d": where})
    frames.append(
        {
            "op": 0,
            "t": "MESSAGE_REACTION_REMOVE_EMOJI",
            "s": 6,
            "d": {**where, "emoji": {"id": "4242", "name": "shipit"}},
        }
    )
    return frames


def legit(fake: FakeDiscord) -> dict[str, Any]:
    message = fake.message_payload(fake.dm_channel(fake.alice), fake.alice, f"legit {next(_ids)}")
    return {"op": 0, "t": "MESSAGE_CREATE", "s": 9, "d": message}


async def stored_once(check: IngressCheck, adapter: DiscordAdapter, frame: dict[str, Any]) -> None:
    event = adapter.normalize(frame)
    assert event is not None
    await adapter._handle_raw(json.dumps(frame))
    assert await check.board.store.is_known(ACCOUNT, event.event_id)
    result = await check.board.ingest(ACCOUNT, frame)
    assert result.status == "duplicate"


async def answered_after_fuzz(fake: FakeDiscord, board: Switchboard) -> None:
    """The next legitimate message in the same chat is stored and answered within 20 s."""
    dm = fake.dm_channel(fake.alice)
    await fake.post_message(dm, fake.alice, FINAL)
    await fake.wait_for_sent(lambda m: m["content"] == "pong", timeout=20)
    await board.wait_idle()


async def test_fuzzed_gateway_dispatches_never_stall_the_next_message(
    fake: FakeDiscord, store: SQLiteStore
) -> None:
    board, adapter = await started(fake, store)
    check = IngressCheck(board, ACCOUNT)
    shapes = samples(fake)

    @given(mangled(shapes, fresh=fresh))
    def example(frame: Any) -> None:
        check.call(check.handled(adapter._handle_raw(json.dumps(frame))))
        check.call(stored_once(check, adapter, legit(fake)))

    await check.explore(example)
    await answered_after_fuzz(fake, board)
    await board.stop()
    assert store_leaks(store.path, [fake.token], DiscordAdapter.secret_fields) == []


async def test_fuzzed_rest_catch_up_messages_never_stall_the_next_message(
    fake: FakeDiscord, store: SQLiteStore
) -> None:
    board, adapter = await started(fake, store)
    check = IngressCheck(board, ACCOUNT)
    shapes = [frame for frame in samples(fake) if frame["t"] == "MESSAGE_CREATE"]

    @given(mangled(shapes, fresh=fresh))
    def example(frame: Any) -> None:
        # what catch-up hands over for each message GET /channels/{id}/messages returned
        check.call(
            check.handled(adapter._ingest({"op": 0, "t": "MESSAGE_CREATE", "d": frame.get("d")}))
        )
        check.call(stored_once(check, adapter, legit(fake)))

    await check.explore(example)
    await answered_after_fuzz(fake, board)
    await board.stop()
    assert store_leaks(store.path, [fake.token], DiscordAdapter.secret_fields) == []

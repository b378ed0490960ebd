"""The testing kit's own pieces: Watch, and FakeChannel's delivery faults."""

from __future__ import annotations

import asyncio

import pytest
from backchannel import Binding
from backchannel.store import SQLiteStore
from backchannel.switchboard import Switchboard
from backchannel.testing import ContractContext, FakeChannel, RecordingAgent, Watch


async def test_watch_wakes_when_the_state_changes() -> None:
    watch = Watch("box")
    box: list[int] = []

    async def fill() -> None:
        for n in range(3):
            await asyncio.sleep(0)
            box.append(n)
            watch.changed()

    task = asyncio.create_task(fill())
    await watch.wait_for(lambda: len(box) == 3, timeout=5, what="three items")
    await task


async def test_watch_times_out_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"box: timed out after 0\.05s waiting for nothing"):
        await Watch("box").wait_for(lambda: False, timeout=0.05, what="nothing")


async def test_reordered_and_duplicated_delivery_stores_each_message_once(
    store: SQLiteStore,
) -> None:
    channel = FakeChannel()
    agent = RecordingAgent()
    board = Switchboard(store)
    board.add_account(channel.adapter("fake"), Binding(agent))
    await board.start()
    first = channel.platform.user_says("first")
    channel.platform.user_says("second")
    channel.platform.swap_last_two()
    channel.platform.redeliver(first)
    await agent.wait_runs(1)
    await board.wait_idle()
    conversation = (await store.conversations())[0]
    window = await store.window(conversation.id, 10)
    assert [m.text for m in window] == ["second", "first"]  # arrival order, seq 1 and 2
    assert board.counters["duplicate"] == 1
    await board.stop()


def test_mutate_payload_changes_a_copy_and_keeps_the_payload_a_mapping() -> None:
    import random

    from backchannel.testing import mutate_payload

    original = {"message": {"chat": {"id": 1}, "text": "hi"}, "update_id": 5}
    rng = random.Random(3)
    seen = set()
    for _ in range(200):
        mangled = mutate_payload(original, rng)
        assert isinstance(mangled, dict)
        seen.add(repr(mangled))
    assert original == {"message": {"chat": {"id": 1}, "text": "hi"}, "update_id": 5}
    assert len(seen) > 50  # many different manglings, not one


async def test_fake_channel_normalize_survives_mangled_payloads() -> None:
    import random

    from backchannel.errors import NormalizeError
    from backchannel.testing import mutate_payload

    adapter = FakeChannel().adapter("fake")
    real = {**adapter.platform.make_message("hello", chat_type="group", mention=True), "update": 1}
    rng = random.Random(11)
    outcomes = {"event": 0, "none": 0, "error": 0}
    for _ in range(2000):
        try:
            event = adapter.normalize(mutate_payload(real, rng))
        except NormalizeError as error:
            assert "\n" not in str(error)
            outcomes["error"] += 1
        else:
            outcomes["none" if event is None else "event"] += 1
    assert outcomes["event"] and outcomes["error"]


async def test_the_contract_context_checks_storability_as_the_switchboard_does(
    contract_context: ContractContext,
) -> None:
    """An adapter tested in the kit meets what production does: text with half a surrogate
    pair is stored repaired, such an id is a dead letter (in a batch too), and is_known of
    an id no store can hold is False, not an error."""
    channel = FakeChannel()
    adapter = channel.adapter(contract_context.account)
    contract_context.bind(adapter)
    platform = channel.platform
    repaired = await contract_context.ingest(platform.make_message("half \ud800 pair"))
    assert repaired.status == "stored" and repaired.event is not None
    assert repaired.event.text == "half \ufffd pair"
    refused = await contract_context.ingest(platform.make_message("x", chat="c\ud800"))
    assert refused.status == "malformed" and "chat id" in (refused.reason or "")
    batch = await contract_context.ingest_many(
        [platform.make_message("y", chat="d\udc00"), platform.make_message("z")]
    )
    assert [r.status for r in batch] == ["malformed", "stored"]
    assert await contract_context.is_known("e\ud800") is False

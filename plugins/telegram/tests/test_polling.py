"""Long polling: offsets commit with updates, 409 conflicts are explained once, stop is prompt."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest
from backchannel.model import Outbound
from backchannel.testing import ContractContext
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.receive import Poller
from backchannel_telegram.testing import FakeTelegram, event_id_of


async def start_adapter(
    fake: FakeTelegram, ctx: ContractContext, **settings: Any
) -> TelegramAdapter:
    adapter = TelegramAdapter(ctx.account, fake.settings(**settings))
    await adapter.start(ctx.bind(adapter))
    return adapter


def poll_offsets(fake: FakeTelegram) -> list[Any]:
    return [params.get("offset") for params in fake.calls_to("getUpdates")]


async def test_offset_is_committed_with_each_update_and_a_restart_does_not_reread(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    alice = fake.user("Alice", username="alice")
    chat = fake.private_chat(alice)
    adapter = await start_adapter(fake, contract_context)
    first = fake.inject_message(chat, alice, "one")
    second = fake.inject_message(chat, alice, "two")
    await contract_context.wait_ingested(event_id_of(second))
    assert await contract_context.get_state("offset") == str(second["update_id"] + 1)
    await fake.wait_for(
        lambda: fake.is_acked(second["update_id"]), what="confirmation of the second update"
    )
    await adapter.stop()

    calls_before = len(fake.calls_to("getUpdates"))
    again = await start_adapter(fake, contract_context)
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) > calls_before)
    assert poll_offsets(fake)[calls_before] == second["update_id"] + 1
    third = fake.inject_message(chat, alice, "three")
    await contract_context.wait_ingested(event_id_of(third))
    await again.stop()
    assert [contract_context.calls(event_id_of(u)) for u in (first, second, third)] == [1, 1, 1]


async def test_uncommitted_updates_are_read_again_after_a_restart(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    contract_context.hold()  # the store never commits while the first adapter runs
    adapter = await start_adapter(fake, contract_context)
    update = fake.inject_message(chat, alice, "keep me")
    update_id, event_id = update["update_id"], event_id_of(update)
    await contract_context.wait_started(event_id)
    await asyncio.sleep(0)
    assert not fake.is_acked(update_id)
    # the process "dies" with the ingest unfinished: abandon the task without finishing it
    poller = adapter._receiver
    assert isinstance(poller, Poller) and poller._task is not None
    poller._task.cancel()
    await asyncio.gather(poller._task, return_exceptions=True)
    await adapter.stop()
    assert not await contract_context.is_known(event_id)
    assert not fake.is_acked(update_id)

    contract_context.release()
    again = await start_adapter(fake, contract_context)
    await contract_context.wait_ingested(event_id)
    await fake.wait_for(lambda: fake.is_acked(update_id))
    await again.stop()
    assert await contract_context.is_known(event_id)


async def test_another_poller_conflict_is_logged_once_and_retried_with_backoff(
    fake: FakeTelegram, contract_context: ContractContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake.fail_next("getUpdates", "conflict", times=5)
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    adapter = await start_adapter(fake, contract_context, retry_initial=0.05, retry_max=1.0)
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= 6, what="six polls")
    update = fake.inject_message(chat, alice, "after the conflict")
    await contract_context.wait_ingested(event_id_of(update))
    await adapter.stop()

    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "another process is polling" in errors[0] and "Stop the other bot process" in errors[0]
    assert any("polling resumed" in r.getMessage() for r in caplog.records)
    times = [
        t for (name, _), t in zip(fake.calls, fake.call_times, strict=True) if name == "getUpdates"
    ][:6]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # 0.05 + 0.1 + 0.2 + 0.4 + 0.8 s of backoff: no spinning
    assert sum(gaps) >= 1.5 * 0.95
    assert gaps[-1] >= gaps[0]


async def test_webhook_set_elsewhere_is_one_clear_error_until_it_is_removed(
    fake: FakeTelegram, contract_context: ContractContext, caplog: pytest.LogCaptureFixture
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    adapter = await start_adapter(fake, contract_context, retry_initial=0.05, retry_max=0.2)
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= 1)
    seen = len(fake.calls_to("getUpdates"))
    fake.set_webhook("https://other-deployment.example/telegram")
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= seen + 4, what="retries")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "webhook is set" in errors[0] and "deleteWebhook" in errors[0]
    fake.webhook = None  # the operator deleted it
    update = fake.inject_message(chat, alice, "back to polling")
    await contract_context.wait_ingested(event_id_of(update))
    await adapter.stop()


async def test_polling_start_deletes_an_existing_webhook(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    fake.set_webhook("http://127.0.0.1:9/old-webhook", secret_token="old")
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    adapter = await start_adapter(fake, contract_context)
    assert fake.webhook is None
    assert fake.calls_to("deleteWebhook") == [{"drop_pending_updates": False}]
    update = fake.inject_message(chat, alice, "hello")
    await contract_context.wait_ingested(event_id_of(update))
    await adapter.stop()


async def test_getupdates_asks_for_reactions_and_long_polls(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    adapter = await start_adapter(fake, contract_context, poll_timeout=7)
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= 1)
    params = fake.calls_to("getUpdates")[0]
    assert params["timeout"] == 7 and params["limit"] == 100
    assert "message_reaction" in params["allowed_updates"]
    await adapter.stop()


async def test_stop_during_a_long_poll_returns_promptly(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    adapter = await start_adapter(fake, contract_context, poll_timeout=30)
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= 1)
    await asyncio.wait_for(adapter.stop(), 3)


async def test_reaction_and_edit_updates_reach_the_store(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    alice = fake.user("Alice", username="alice")
    group = fake.group("Ops")
    adapter = await start_adapter(fake, contract_context)
    message = fake.inject_message(group, alice, "typo hree")["message"]
    edit = fake.inject_edit(group, message["message_id"], "typo here")
    reaction = fake.inject_reaction(group, alice, message["message_id"], ["🔥"])
    await contract_context.wait_ingested(event_id_of(reaction))
    await adapter.stop()
    kinds = [(e.kind, e.event_id) for e in contract_context.events]
    assert kinds[-2:] == [("edit", event_id_of(edit)), ("reaction", event_id_of(reaction))]
    (row,) = await contract_context.transcript(contract_context.events[0].address)
    assert row.text == "typo here"


async def test_identity_is_learnt_later_when_getme_fails_at_start(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    fake.fail_next("getMe", "500")
    alice = fake.user("Alice")
    group = fake.group("Ops")
    learnt = asyncio.Event()

    class OnIdentity(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("getMe works now"):
                learnt.set()

    handler = OnIdentity(logging.INFO)
    logger = contract_context.log.logger
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    adapter = await start_adapter(fake, contract_context, retry_initial=0.05)
    try:
        assert adapter.me is not None and adapter.me.handle is None
        await asyncio.wait_for(learnt.wait(), 10)  # the adapter says when getMe worked
        assert len(fake.calls_to("getMe")) >= 2
        assert adapter.me is not None and adapter.me.handle == fake.bot["username"]
        update = fake.inject_message(group, alice, "@backchannel_test_bot hi")
        await contract_context.wait_ingested(event_id_of(update))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        await adapter.stop()
    assert contract_context.events[-1].mentions_me


async def test_a_429_on_getupdates_waits_the_retry_after_telegram_asks(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    fake.fail_next("getUpdates", "429", retry_after=1)
    adapter = await start_adapter(fake, contract_context, retry_initial=0.01)
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= 2, what="a second poll")
    await adapter.stop()
    times = [
        t for (name, _), t in zip(fake.calls, fake.call_times, strict=True) if name == "getUpdates"
    ]
    assert times[1] - times[0] >= 0.95


async def test_a_reaction_in_a_forum_topic_lands_on_the_topic_message(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    alice = fake.user("Alice")
    forum = fake.supergroup("Eng", forum=True)
    topic = fake.create_topic(forum, "Deploys", alice)
    adapter = await start_adapter(fake, contract_context)
    update = fake.inject_message(forum, alice, "ship it", topic=topic)
    await contract_context.wait_ingested(event_id_of(update))
    address = contract_context.events[-1].address
    receipt = await adapter.send(Outbound(address, "shipped"))
    own = int(receipt.platform_message_id or 0)
    first = fake.inject_reaction(forum, alice, update["message"]["message_id"], ["👍"])
    second = fake.inject_reaction(forum, alice, own, ["🎉"])
    await contract_context.wait_ingested(event_id_of(second))
    await adapter.stop()
    reactions = [e for e in contract_context.events if e.kind == "reaction"]
    assert [e.event_id for e in reactions] == [event_id_of(first), event_id_of(second)]
    assert all(e.address == address for e in reactions)
    # (the bot's own message is stored by the switchboard's outbox, not by this context)
    rows = await contract_context.transcript(address)
    assert [(m.text, m.reactions) for m in rows] == [("ship it", (("Alice", "👍"),))]


async def test_a_reaction_in_a_private_chats_topic_keeps_the_chat_direct(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    # a bot's threaded mode: topics in a private chat; the chat is still one person's, and
    # its kind decides the run's framing and who may steer the agent
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    adapter = await start_adapter(fake, contract_context)
    threaded = {"message_thread_id": 9, "is_topic_message": True}
    update = fake.inject_message(chat, alice, "in a topic", extra=threaded)
    await contract_context.wait_ingested(event_id_of(update))
    reaction = fake.inject_reaction(chat, alice, update["message"]["message_id"], ["👍"])
    await contract_context.wait_ingested(event_id_of(reaction))
    await adapter.stop()
    message, reacted = contract_context.events[-2:]
    assert reacted.kind == "reaction" and reacted.address == message.address
    assert message.address.thread == "9"
    assert (message.conversation_kind, reacted.conversation_kind) == ("direct", "direct")


async def test_a_forum_topics_messages_are_titled_with_its_name_replies_and_renames_too(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    alice = fake.user("Alice")
    forum = fake.supergroup("Eng", forum=True)
    topic = fake.create_topic(forum, "Deploys", alice)
    adapter = await start_adapter(fake, contract_context)
    first = fake.inject_message(forum, alice, "ship it", topic=topic)
    # a reply carries its target, not the topic's creation: the name seen before is used
    reply = fake.inject_message(
        forum, alice, "shipped", topic=topic, reply_to=first["message"]["message_id"]
    )
    renamed = fake.inject(
        {
            "message": {
                "message_id": 900,
                "from": alice,
                "chat": forum,
                "date": 1760000000,
                "message_thread_id": topic,
                "is_topic_message": True,
                "forum_topic_edited": {"name": "Releases"},
            }
        }
    )
    after = fake.inject_message(
        forum, alice, "and now?", topic=topic, reply_to=reply["message"]["message_id"]
    )
    await contract_context.wait_ingested(event_id_of(after))
    await adapter.stop()
    assert fake.is_acked(renamed["update_id"])
    titles = {e.event_id: e.conversation_title for e in contract_context.events}
    assert [titles[event_id_of(u)] for u in (first, reply, after)] == [
        "Eng / Deploys",
        "Eng / Deploys",
        "Eng / Releases",
    ]
    # a restarted adapter has not seen the name: a reply leaves the stored title as it is
    again = await start_adapter(fake, contract_context)
    late = fake.inject_message(
        forum, alice, "late", topic=topic, reply_to=after["message"]["message_id"]
    )
    await contract_context.wait_ingested(event_id_of(late))
    await again.stop()
    assert contract_context.events[-1].conversation_title is None
    conversation = await contract_context.store.find_conversation(
        contract_context.events[-1].address
    )
    assert conversation is not None and conversation.title == "Eng / Releases"


async def test_a_getupdates_answer_larger_than_an_inbound_body_is_read_whole(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    """100 long messages (replies quoting long messages, custom emoji entities) make an
    answer of several MiB; refusing it would re-read the same answer forever."""
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    text = "🙂" * 2000  # 4000 UTF-16 units, within one message's limit
    entities = [
        {"type": "custom_emoji", "offset": 2 * i, "length": 2, "custom_emoji_id": str(10**18 + i)}
        for i in range(2000)
    ]
    ids = [
        event_id_of(fake.inject_message(chat, alice, text, extra={"entities": entities}))
        for _ in range(24)  # about 5 MiB in one answer
    ]
    adapter = await start_adapter(fake, contract_context)
    await contract_context.wait_ingested(ids[-1])
    await adapter.stop()
    assert [contract_context.calls(i) for i in ids] == [1] * len(ids)


async def test_update_ids_numbered_anew_below_the_offset_are_read_and_confirmed(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    # after a quiet week (or a switch to a local Bot API server) ids start again lower;
    # the server answers the old, higher offset from its queue's head, so the poller must
    # move its offset past what it got, not keep the highest it ever sent (a hot loop
    # re-reading one batch, nothing ever confirmed, whatever lies past it unreachable)
    alice = fake.user("Alice", username="alice")
    chat = fake.private_chat(alice)
    adapter = await start_adapter(fake, contract_context)
    old = fake.inject_message(chat, alice, "before the quiet week")
    await fake.wait_for(lambda: fake.is_acked(old["update_id"]), what="the old id confirmed")
    fake.restart_update_ids(old["update_id"] - 5_000)  # a week later, nothing pending
    new = [fake.inject_message(chat, alice, f"after {n}") for n in range(3)]
    await fake.wait_for(
        lambda: all(fake.is_acked(u["update_id"]) for u in new), what="the new ids confirmed"
    )
    polls = len(fake.calls_to("getUpdates"))
    later = fake.inject_message(chat, alice, "later")
    await contract_context.wait_ingested(event_id_of(later))
    assert await contract_context.get_state("offset") == str(later["update_id"] + 1)
    assert len(fake.calls_to("getUpdates")) - polls <= 3  # no hot loop
    await adapter.stop()
    assert [contract_context.calls(event_id_of(u)) for u in (old, *new, later)] == [1] * 5


async def test_a_batch_whose_update_ids_cannot_move_the_offset_is_asked_for_with_backoff(
    fake: FakeTelegram, contract_context: ContractContext, caplog: pytest.LogCaptureFixture
) -> None:
    # only a broken relay sends it: an update whose id is no 64-bit number is dead-lettered,
    # but nothing confirms it, so the same batch comes back; asking at once would spin
    caplog.set_level(logging.WARNING)
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    fake.inject({"update_id": 2**63, "message": {"message_id": 1, "chat": chat}})
    adapter = await start_adapter(fake, contract_context, retry_initial=0.05, retry_max=0.4)
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) >= 6, what="six polls")
    times = [
        t for (name, _), t in zip(fake.calls, fake.call_times, strict=True) if name == "getUpdates"
    ][:6]
    # 0.05 + 0.1 + 0.2 + 0.4 + 0.4 s of backoff, where there were thousands of polls a second
    assert times[-1] - times[0] >= 1.15 * 0.95
    stuck = [r for r in caplog.records if "does not move the offset" in r.getMessage()]
    assert len(stuck) == 1
    # what comes after it is still read, once the relay sends it
    later = fake.inject_message(chat, alice, "after the broken update")
    await contract_context.wait_ingested(event_id_of(later))
    await adapter.stop()
    assert contract_context.calls(event_id_of(later)) == 1

"""End to end: FakeTelegram <-> aiohttp <-> TelegramAdapter <-> Switchboard <-> an agent."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from backchannel.agents.demo import demo_agent
from backchannel.errors import Rejected
from backchannel.model import Address
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.adapter import SECRET_HEADER
from backchannel_telegram.testing import FakeTelegram

from .conftest import answer_trigger

LONG_ANSWER = "\n\n".join(
    f"Section {n}. " + " ".join(f"detail{n}-{k}" for k in range(180)) for n in range(8)
)


@pytest.mark.parametrize("mode", ["polling", "webhook"])
async def test_topic_mention_gets_the_demo_reply_in_that_topic_as_a_reply(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any, mode: str
) -> None:
    alice = fake.user("Alice", "Liddell", username="alice")
    bob = fake.user("Bob", username="bob")
    forum = fake.supergroup("Engineering", forum=True)
    deploys = fake.create_topic(forum, "Deploys", alice)
    other = fake.create_topic(forum, "Random", bob)

    async def typing_seen_then_demo(run: Run) -> None:
        # the typing indicator is sent while the agent runs: this agent waits for it in the
        # topic, so the check below does not depend on how many loop turns a run takes
        await fake.wait_for(
            lambda: (forum["id"], "typing", deploys) in fake.chat_actions,
            what="the typing action in the topic",
        )
        await demo_agent(run)

    board = await board_for(fake, typing_seen_then_demo, mode)
    fake.inject_message(forum, bob, "lunch?", topic=other)
    fake.inject_message(forum, bob, "deploy 41 went out", topic=deploys)
    asked = fake.inject_message(forum, alice, "@backchannel_test_bot is it green?", topic=deploys)
    asked_id = asked["message"]["message_id"]
    await fake.wait_for(lambda: len(fake.sent) >= 1, what="the demo reply")
    await board.wait_idle()

    (reply,) = fake.sent
    assert (reply.chat_id, reply.thread_id, reply.reply_to) == (forum["id"], deploys, asked_id)
    assert "demo agent" in reply.text and "Alice Liddell" in reply.text
    assert (forum["id"], "typing", deploys) in fake.chat_actions
    topic = await store.find_conversation(Address("tg", str(forum["id"]), str(deploys)))
    assert topic is not None and topic.kind == "thread" and topic.title == "Engineering / Deploys"
    rows = await store.window(topic.id, 10)
    assert [(m.direction, m.text) for m in rows] == [
        ("in", "deploy 41 went out"),
        ("in", "@backchannel_test_bot is it green?"),
        ("out", reply.text),
    ]
    assert rows[2].platform_message_id == str(reply.message_id)
    assert rows[2].reply_to == str(asked_id)
    lunch = await store.find_conversation(Address("tg", str(forum["id"]), str(other)))
    assert lunch is not None and lunch.handled_seq == 0  # no mention there: stored, unanswered


async def test_long_answer_arrives_as_ordered_parts_in_the_topic(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    alice = fake.user("Alice")
    forum = fake.supergroup("Engineering", forum=True)
    topic = fake.create_topic(forum, "Design", alice)
    agent = RecordingAgent(lambda run: LONG_ANSWER)
    board = await board_for(fake, agent)
    asked = fake.inject_message(forum, alice, "@backchannel_test_bot write it all up", topic=topic)
    await agent.wait_runs(1)
    await board.wait_idle()

    parts = fake.sent_texts(forum, topic)
    assert len(parts) >= 3
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in parts)
    assert " ".join(parts).split() == LONG_ANSWER.split()
    assert fake.sent[0].reply_to == asked["message"]["message_id"]
    assert [m.reply_to for m in fake.sent[1:]] == [None] * (len(parts) - 1)
    (entry,) = await store.outbox(status="sent")
    assert entry.platform_ids == tuple(str(m.message_id) for m in fake.sent)
    assert agent.results == [f"sent as #{entry.message_seq} (split into {len(parts)} parts)"]


async def test_a_burst_of_429s_is_absorbed_honouring_retry_after(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    fake.fail_next("sendMessage", "429", retry_after=1, times=2)
    agent = RecordingAgent(lambda run: "made it")
    board = await board_for(fake, agent)
    fake.inject_message(chat, alice, "hello?")
    await agent.wait_runs(1)
    await board.wait_idle()

    assert fake.sent_texts(chat) == ["made it"]
    times = [
        t for (name, _), t in zip(fake.calls, fake.call_times, strict=True) if name == "sendMessage"
    ]
    assert len(times) == 3
    assert times[1] - times[0] >= 0.95 and times[2] - times[1] >= 0.95
    (entry,) = await store.outbox()
    assert entry.status == "sent"


async def test_a_hung_send_becomes_uncertain_and_is_not_resent(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    fake.fail_next("sendMessage", "hang_after")
    agent = RecordingAgent(answer_trigger)
    board = await board_for(fake, agent, request_timeout=1.0)
    fake.inject_message(chat, alice, "first")
    await agent.wait_runs(1)
    await board.wait_idle()
    (entry,) = await store.outbox()
    assert entry.status == "uncertain" and "no answer within" in (entry.reason or "")
    assert "uncertain" in agent.results[0]

    fake.inject_message(chat, alice, "second")
    await agent.wait_runs(2)
    await board.wait_idle()
    # the hung message did arrive (the answer was lost); it was never sent a second time
    assert fake.sent_texts(chat) == ["answer to first", "answer to second"]
    assert len(fake.calls_to("sendMessage")) == 2


async def test_webhook_request_with_a_wrong_secret_is_refused_and_stores_nothing(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    agent = RecordingAgent(lambda run: "hi")
    board = await board_for(fake, agent, mode="webhook")
    assert fake.webhook is not None and fake.webhook["url"] == f"{board.url}/telegram/tg"
    forged = fake.inject_message(chat, alice, "forged", deliver=False)
    async with aiohttp.ClientSession() as session:
        for headers in ({}, {SECRET_HEADER: "guess"}):
            async with session.post(fake.webhook["url"], json=forged, headers=headers) as answer:
                assert answer.status == 401
    assert await store.conversations("tg") == []
    assert agent.runs == []

    real = fake.inject_message(chat, alice, "real")
    await agent.wait_runs(1)
    await board.wait_idle()
    assert fake.is_acked(real["update_id"])
    (conversation,) = await store.conversations("tg")
    assert [m.text for m in await store.window(conversation.id, 10)] == ["real", "hi"]


async def test_a_message_whose_edit_is_delivered_first_is_still_answered_once(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    # Telegram delivers to a webhook over up to 40 connections at once: a message edited
    # right away can have its edit stored first, and an edit starts no run of its own
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    agent = RecordingAgent(answer_trigger)
    board = await board_for(fake, agent, mode="webhook")
    assert fake.webhook is not None
    original = fake.inject_message(chat, alice, "do you ship to Porto?", deliver=False)
    sent = original["message"]
    edit = {
        "update_id": original["update_id"] + 1,
        "edited_message": {**sent, "text": "do you ship to Lisbon?", "edit_date": sent["date"] + 5},
    }
    headers = {SECRET_HEADER: fake.webhook["secret_token"]}
    async with aiohttp.ClientSession() as session:
        for update in (edit, original, original):  # the last: Telegram's retry of it
            async with session.post(fake.webhook["url"], json=update, headers=headers) as answer:
                assert answer.status == 200
    await agent.wait_runs(1)
    await board.wait_idle()
    assert [m.text for m in fake.sent] == ["answer to do you ship to Lisbon?"]
    (conversation,) = await store.conversations("tg")
    assert [m.text for m in await store.window(conversation.id, 10)] == [
        "do you ship to Lisbon?",
        "answer to do you ship to Lisbon?",
    ]


async def test_the_docs_example_works(store: SQLiteStore) -> None:
    """The example in docs/channels/telegram.md, verbatim."""
    async with FakeTelegram() as fake:
        alice = fake.user("Alice", username="alice")
        forum = fake.supergroup("Engineering", forum=True)
        topic = fake.create_topic(forum, "Deploys", creator=alice)

        board = Switchboard(store)
        board.add_account(TelegramAdapter("tg", fake.settings()), Binding(demo_agent))
        await board.start()
        asked = fake.inject_message(forum, alice, "@backchannel_test_bot green?", topic=topic)
        await fake.wait_for(lambda: len(fake.sent) == 1)
        await board.stop()

    reply = fake.sent[0]
    assert reply.thread_id == topic
    assert reply.reply_to == asked["message"]["message_id"]


async def answered_in_a_topic(fake: FakeTelegram, board_for: Any) -> tuple[Any, ...]:
    """Alice asks the bot in a forum topic and gets its answer: (alice, forum, topic, agent,
    board, the asking update)."""
    alice = fake.user("Alice")
    forum = fake.supergroup("Engineering", forum=True)
    topic = fake.create_topic(forum, "Deploys", alice)
    agent = RecordingAgent(lambda run: "on it")
    board = await board_for(fake, agent)
    asked = fake.inject_message(forum, alice, "@backchannel_test_bot deploy?", topic=topic)
    await agent.wait_runs(1)
    await board.wait_idle()
    return alice, forum, topic, agent, board, asked


async def test_a_reaction_to_the_bots_answer_in_a_topic_is_recorded_on_it(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    alice, forum, topic, agent, board, _ = await answered_in_a_topic(fake, board_for)
    (answer,) = fake.sent
    reaction = fake.inject_reaction(forum, alice, answer.message_id, ["👍"])
    await fake.wait_for(lambda: fake.is_acked(reaction["update_id"]), what="the reaction")
    await board.wait_idle()
    conversation = await store.find_conversation(Address("tg", str(forum["id"]), str(topic)))
    assert conversation is not None
    rows = await store.window(conversation.id, 10)
    assert [(m.direction, m.text, m.reactions) for m in rows] == [
        ("in", "@backchannel_test_bot deploy?", ()),
        ("out", "on it", (("Alice", "👍"),)),
    ]
    assert len(agent.runs) == 1  # a reaction does not start a run


async def test_after_a_restart_a_reaction_still_lands_on_its_topic_message(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    # the restarted adapter no longer remembers which topic the message was in, and the
    # reaction does not say: the store finds the topic conversation holding the message
    alice, forum, topic, agent, first, asked = await answered_in_a_topic(fake, board_for)
    await first.stop()  # closes the store too
    reopened = SQLiteStore(store.path)
    again = Switchboard(reopened)
    again.add_account(
        TelegramAdapter("tg", fake.settings(mode="polling")),
        Binding(agent, respond="mention"),
        secrets=[fake.token],
    )
    await again.start()
    try:
        reaction = fake.inject_reaction(forum, alice, asked["message"]["message_id"], ["👍"])
        await fake.wait_for(lambda: fake.is_acked(reaction["update_id"]), what="the reaction")
        await again.wait_idle()
        chat = str(forum["id"])
        conversation = await reopened.find_conversation(Address("tg", chat, str(topic)))
        assert conversation is not None
        rows = await reopened.window(conversation.id, 10)
        assert [(m.text, m.reactions) for m in rows] == [
            ("@backchannel_test_bot deploy?", (("Alice", "👍"),)),
            ("on it", ()),
        ]
        # the forum's own (General) conversation was not made for it
        assert await reopened.find_conversation(Address("tg", chat)) is None
    finally:
        await again.stop()


@pytest.mark.parametrize("mode", ["polling", "webhook"])
async def test_a_malformed_update_is_dead_lettered_and_the_rest_of_the_batch_is_answered(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any, mode: str
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    # no date and no sender: Telegram never sends this, a broken relay might
    bad = fake.inject({"message": {"message_id": 1, "chat": {"id": chat["id"]}, "text": "?"}})
    good = fake.inject_message(chat, alice, "hello")
    agent = RecordingAgent(answer_trigger)
    board = await board_for(fake, agent, mode)
    await agent.wait_runs(1)
    await board.wait_idle()
    await fake.wait_for(
        lambda: fake.is_acked(bad["update_id"]) and fake.is_acked(good["update_id"]),
        what="both updates confirmed (the bad one must not be re-read forever)",
    )

    assert fake.sent_texts(chat) == ["answer to hello"]
    (letter,) = await store.dead_letters("tg")
    assert "message.date" in letter["reason"] and str(bad["update_id"]) in letter["payload"]


async def test_a_first_send_to_a_chat_telegram_does_not_know_makes_no_conversation(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    alice = fake.user("Alice")
    private = fake.private_chat(alice)
    group = fake.group("Team")
    forum = fake.supergroup("Engineering", forum=True)
    topic = fake.create_topic(forum, "Deploys", alice)
    board = await board_for(fake, RecordingAgent(lambda run: None))
    refused = {
        "999999": "Telegram says: Bad Request: chat not found",
        "not-a-chat": "is not a Telegram id",
        f"{group['id']}/7": "is not a forum: it has no topics",
        f"{forum['id']}/0": "is not a forum topic id",
        # ids int() reads but inbound events never key a chat or topic by
        f"+{private['id']}": "is not a Telegram id",
        f"0{private['id']}": "is not a Telegram id",
        f" {private['id']}": "is not a Telegram id",
        f"{private['id']} ": "is not a Telegram id",
        f"{str(group['id']).replace('-', '-0')}": "is not a Telegram id",
        f"{str(private['id'])[0]}_{str(private['id'])[1:]}": "is not a Telegram id",
        f"{forum['id']}/+{topic}": "is not a Telegram id",
        f"{forum['id']}/0{topic}": "is not a Telegram id",
    }
    for key, reason in refused.items():
        chat, _, thread = key.partition("/")
        address = Address("tg", chat, thread or None)
        with pytest.raises(Rejected, match=reason):
            await board.send(address, "hello?")
        assert await store.find_conversation(address) is None
    assert fake.sent == []
    # what Telegram knows is sent to, and becomes a conversation
    known = [(private["id"], None), (forum["id"], str(topic)), (group["id"], None)]
    for chat_id, topic_id in known:
        address = Address("tg", str(chat_id), topic_id)
        assert (await board.send(address, "hello")).startswith("sent")
        assert await store.find_conversation(address) is not None
    # when Telegram cannot be asked, the address is taken and the send tells what happened
    fake.fail_next("getChat", "500")
    elsewhere = Address("tg", "424242")
    outcome = await board.send(elsewhere, "hello?")
    assert "chat not found" in outcome
    assert await store.find_conversation(elsewhere) is not None


async def test_a_message_whose_update_id_telegram_reused_is_stored_and_answered(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    """After a week without updates Telegram may reuse a stored update_id (its next id is
    chosen at random): the new message reaches the agent; a true redelivery does not."""
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    agent = RecordingAgent(answer_trigger)
    board = await board_for(fake, agent, mode="webhook")

    def answered_200s() -> int:
        return sum(1 for _, status in fake.webhook_deliveries if status == 200)

    async def inbound_texts() -> list[str]:
        (conversation,) = await store.conversations("tg")
        return [m.text for m in await store.window(conversation.id, 10) if m.direction == "in"]

    before = fake.inject_message(chat, alice, "before the quiet week")
    await agent.wait_runs(1)
    await board.wait_idle()
    fake.restart_update_ids(before["update_id"])  # the random pick hits a stored id
    a_week_later = before["message"]["date"] + 8 * 86_400
    after = fake.inject_message(chat, alice, "after it", extra={"date": a_week_later})
    assert after["update_id"] == before["update_id"]
    await fake.wait_for(lambda: answered_200s() == 2, what="the second update answered")
    # a 200 is sent only after the commit: the message is in the store by now
    assert await inbound_texts() == ["before the quiet week", "after it"]
    await agent.wait_runs(2)
    await board.wait_idle()

    fake.inject(before)  # the old update once more, as after a lost 200
    await fake.wait_for(lambda: answered_200s() == 3, what="the redelivery answered")
    await board.wait_idle()
    assert await inbound_texts() == ["before the quiet week", "after it"]
    assert len(agent.runs) == 2
    assert fake.sent_texts(chat) == ["answer to before the quiet week", "answer to after it"]


async def test_a_poll_batch_reusing_an_edits_event_id_for_a_message_does_not_stall_the_poller(
    fake: FakeTelegram, store: SQLiteStore, board_for: Any
) -> None:
    """Two updates of one getUpdates answer under the same update_id and date (an edit, then
    a message) name one event: the message is that event again, and every later update is
    still stored (before, the batch's commit failed on every read and the offset stood)."""
    from backchannel_telegram.testing import event_id_of

    alice = fake.user("Alice", username="alice")
    chat = fake.private_chat(alice)
    date = 1767225600
    sent = {"chat": chat, "from": alice, "date": date}
    edit = fake.inject(
        {"edited_message": {**sent, "message_id": 10, "text": "edited", "edit_date": date}}
    )
    fake.inject(
        {"update_id": edit["update_id"], "message": {**sent, "message_id": 11, "text": "new"}}
    )
    await board_for(fake, RecordingAgent(lambda run: None))
    later = fake.inject_message(chat, alice, "a later, ordinary message")
    await fake.wait_for(lambda: fake.is_acked(later["update_id"]), what="the later update read")
    assert await store.is_known("tg", event_id_of(later))
    conversation = await store.find_conversation(Address("tg", str(chat["id"])))
    assert conversation is not None
    texts = [m.text for m in await store.window(conversation.id, 10)]
    assert texts == ["edited", "a later, ordinary message"]

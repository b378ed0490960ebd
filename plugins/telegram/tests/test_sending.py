"""Sending: Bot API parameters, splitting in UTF-16 units, edits, reactions, typing, errors, pacing."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from aiohttp import web
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.testing import FakeTelegram, event_id_of


def address_of(chat: dict[str, Any], thread: int | None = None) -> Address:
    return Address("test", str(chat["id"]), thread)


async def test_reply_in_a_forum_topic_carries_thread_reply_and_quiet(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    alice = fake.user("Alice")
    forum = fake.supergroup("Eng", forum=True)
    topic = fake.create_topic(forum, "Deploys", alice)
    question = fake.inject_message(forum, alice, "is it green?", topic=topic)["message"]
    receipt = await adapter.send(
        Outbound(
            address_of(forum, topic), "green", quiet=True, reply_to=str(question["message_id"])
        )
    )
    (params,) = fake.calls_to("sendMessage")
    assert params["message_thread_id"] == topic
    assert params["disable_notification"] is True
    assert params["reply_parameters"] == {
        "message_id": question["message_id"],
        "allow_sending_without_reply": True,
    }
    sent = fake.sent[-1]
    assert (sent.thread_id, sent.reply_to, sent.quiet) == (topic, question["message_id"], True)
    assert receipt.platform_message_id == str(sent.message_id)


async def test_reply_to_a_deleted_message_is_sent_without_the_reply(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat = fake.private_chat(fake.user("Alice"))
    await adapter.send(Outbound(address_of(chat), "still answering", reply_to="9999"))
    assert fake.sent[-1].reply_to is None and fake.sent[-1].text == "still answering"


async def test_text_is_split_by_utf16_units_in_order(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat = fake.private_chat(fake.user("Alice"))
    # 2250 emoji of 2 UTF-16 units each, in words: about 6000 units but 3750 characters,
    # so counting characters would wrongly send it whole
    words = ["😀😀😀" + str(n % 10) for n in range(750)]
    text = "\n".join(" ".join(words[i : i + 10]) for i in range(0, len(words), 10))
    assert len(text) < 4096 < len(text.encode("utf-16-le")) // 2
    receipt = await adapter.send(Outbound(address_of(chat), text))
    parts = fake.sent_texts(chat)
    assert len(parts) == 2
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in parts)
    assert " ".join(parts).split() == text.split()
    assert receipt.part_ids == tuple(str(m.message_id) for m in fake.sent)


async def test_edit_changes_the_text_and_an_unchanged_edit_is_fine(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat = fake.private_chat(fake.user("Alice"))
    receipt = await adapter.send(Outbound(address_of(chat), "draft"))
    target = receipt.platform_message_id
    await adapter.send(Outbound(address_of(chat), "final", kind="edit", target=target))
    assert fake.sent_texts(chat) == ["final"] and fake.sent[-1].edits == ["draft"]
    await adapter.send(Outbound(address_of(chat), "final", kind="edit", target=target))
    with pytest.raises(Rejected, match="message to edit not found"):
        await adapter.send(Outbound(address_of(chat), "x", kind="edit", target="4242"))


async def test_reaction_is_set_and_heart_variation_selector_is_dropped(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    alice = fake.user("Alice")
    chat = fake.private_chat(alice)
    message = fake.inject_message(chat, alice, "thanks!")["message"]
    target = str(message["message_id"])
    await adapter.send(Outbound(address_of(chat), "❤️", kind="reaction", target=target))
    assert fake.reactions[-1] == (
        chat["id"],
        message["message_id"],
        [{"type": "emoji", "emoji": "❤"}],
    )
    with pytest.raises(Rejected, match="REACTION_INVALID"):
        await adapter.send(Outbound(address_of(chat), "🦖", kind="reaction", target=target))


async def test_typing_goes_to_the_topic(fake: FakeTelegram, adapter: TelegramAdapter) -> None:
    alice = fake.user("Alice")
    forum = fake.supergroup("Eng", forum=True)
    topic = fake.create_topic(forum, "Deploys", alice)
    await adapter.typing(address_of(forum, topic))
    assert fake.chat_actions == [(forum["id"], "typing", topic)]


@pytest.mark.parametrize(
    ("fault", "error", "needle"),
    [
        ("429", RateLimited, "Too Many Requests"),
        ("500", Uncertain, "Internal Server Error"),
        ("502", Uncertain, "HTTP 502"),
        ("reset", Uncertain, "connection broke"),
        ("hang", Uncertain, "no answer within"),
        ("hang_after", Uncertain, "no answer within"),
        ("forbidden", Rejected, "bot was blocked by the user"),
    ],
)
async def test_send_failures_map_to_delivery_errors(
    fake: FakeTelegram, adapter: TelegramAdapter, fault: str, error: type, needle: str
) -> None:
    chat = fake.private_chat(fake.user("Alice"))
    fake.fail_next("sendMessage", fault, retry_after=4)
    with pytest.raises(error) as caught:
        await adapter.send(Outbound(address_of(chat), "hello"))
    assert needle in str(caught.value)
    if fault == "429":
        assert isinstance(caught.value, RateLimited)
        assert caught.value.retry_after == 4
    delivered = fake.sent_texts(chat)
    assert delivered == (["hello"] if fault == "hang_after" else [])


async def test_telegram_validation_errors_are_rejections(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    with pytest.raises(Rejected, match="Bad Request: chat not found"):
        await adapter.send(Outbound(Address("test", "424242"), "anyone?"))
    chat = fake.private_chat(fake.user("Alice"))
    with pytest.raises(Rejected, match="message text is empty"):
        await adapter.send(Outbound(address_of(chat), "   "))


async def test_unreachable_api_is_rate_limited_not_uncertain(
    contract_context: ContractContext,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    adapter = TelegramAdapter(
        "test", {"token": "1:x", "api_base": f"http://127.0.0.1:{port}", "request_timeout": 1.0}
    )
    with pytest.raises(RateLimited, match="could not connect"):
        await adapter.send(Outbound(Address("test", "1"), "hello"))
    await adapter.stop()


async def test_a_429_on_a_later_part_is_waited_out(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat = fake.private_chat(fake.user("Alice"))
    text = " ".join(f"w{n:05d}" for n in range(1000))  # two parts
    fake.fail_next("sendMessage", "429", retry_after=1, after=1)
    receipt = await adapter.send(Outbound(address_of(chat), text))
    assert len(receipt.part_ids) == 2
    assert " ".join(fake.sent_texts(chat)).split() == text.split()
    times = [
        t for (name, _), t in zip(fake.calls, fake.call_times, strict=True) if name == "sendMessage"
    ]
    assert len(times) == 3 and times[2] - times[1] >= 0.95  # retry_after honoured


async def test_a_later_part_refused_is_uncertain_naming_the_parts(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat = fake.private_chat(fake.user("Alice"))
    text = " ".join(f"w{n:05d}" for n in range(1000))
    fake.fail_next("sendMessage", "forbidden", after=1)
    with pytest.raises(Uncertain, match=r"parts 1-1 of 2 were delivered"):
        await adapter.send(Outbound(address_of(chat), text))
    assert len(fake.sent_texts(chat)) == 1


async def test_sends_follow_a_group_upgraded_to_a_supergroup(
    fake: FakeTelegram, adapter: TelegramAdapter, contract_context: ContractContext
) -> None:
    group = fake.group("Ops")
    supergroup = fake.migrate_group(group)
    receipt = await adapter.send(Outbound(address_of(group), "where did you go?"))
    assert fake.sent[-1].chat_id == supergroup["id"]
    assert receipt.platform_message_id == str(fake.sent[-1].message_id)
    await adapter.send(Outbound(address_of(group), "found you"))
    chats = [p["chat_id"] for p in fake.calls_to("sendMessage")]
    assert chats == [str(group["id"]), str(supergroup["id"]), str(supergroup["id"])]
    assert str(supergroup["id"]) in (await contract_context.get_state("migrations") or "")


async def test_messages_after_an_upgrade_continue_the_groups_conversation(
    fake: FakeTelegram, adapter: TelegramAdapter, contract_context: ContractContext
) -> None:
    alice = fake.user("Alice")
    group = fake.group("Ops")
    before = fake.inject_message(group, alice, "before")
    await contract_context.wait_ingested(event_id_of(before))
    supergroup = fake.migrate_group(group)
    after = fake.inject_message(supergroup, alice, "after")
    await contract_context.wait_ingested(event_id_of(after))
    rows = await contract_context.transcript(address_of(group))
    assert [m.text for m in rows] == ["before", "after"]
    await adapter.send(Outbound(address_of(group), "still here"))
    assert fake.sent[-1].chat_id == supergroup["id"]
    assert [p["chat_id"] for p in fake.calls_to("sendMessage")] == [str(supergroup["id"])]


async def test_pacing_keeps_a_burst_within_telegram_limits(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    group = fake.group("Ops")
    fake.limit_rates(per_chat=(3, 0.5), per_group=(5, 1.0), overall=None, enforce=False)
    paced = TelegramAdapter(
        "test",
        fake.settings(
            pace_per_chat=3,
            pace_per_chat_period=0.5,
            pace_per_group=5,
            pace_per_group_period=1.0,
            pace_overall=30,
        ),
    )
    await paced.start(contract_context.bind(paced))
    texts = [f"update {n}" for n in range(8)]
    await asyncio.gather(*(paced.send(Outbound(address_of(group), t)) for t in texts))
    await paced.stop()
    assert fake.rate_violations == []
    assert fake.sent_texts(group) == texts


async def test_without_pacing_the_same_burst_breaks_the_limits(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    group = fake.group("Ops")
    fake.limit_rates(per_chat=(3, 0.5), per_group=(5, 1.0), overall=None, enforce=False)
    for n in range(8):
        await adapter.send(Outbound(address_of(group), f"update {n}"))
    assert fake.rate_violations


async def test_enforcing_fake_answers_429_with_retry_after(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat = fake.private_chat(fake.user("Alice"))
    fake.limit_rates(per_chat=(1, 5.0), enforce=True)
    await adapter.send(Outbound(address_of(chat), "one"))
    with pytest.raises(RateLimited) as caught:
        await adapter.send(Outbound(address_of(chat), "two"))
    assert 4 <= caught.value.retry_after <= 6


async def test_a_target_that_is_not_a_telegram_id_is_rejected(
    fake: FakeTelegram, adapter: TelegramAdapter
) -> None:
    chat = fake.private_chat(fake.user("Alice"))
    with pytest.raises(Rejected, match="not a Telegram id"):
        await adapter.send(Outbound(address_of(chat), "x", kind="edit", target="abc"))
    with pytest.raises(Rejected, match="not a Telegram id"):
        await adapter.send(Outbound(address_of(chat), "x", reply_to="1.5"))
    assert fake.calls_to("sendMessage") == []


async def test_a_send_answered_without_a_message_is_uncertain() -> None:
    # a proxy or broken relay that answers ok without the Message Telegram always returns
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "result": True})

    app = web.Application()
    app.router.add_post("/bot{token}/{method}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    settings = {
        "token": "123456789:AAH-not-a-real-token_0123456789abcdef",
        "api_base": f"http://127.0.0.1:{port}",
        "pace_per_chat": 0,
        "pace_per_group": 0,
        "pace_overall": 0,
    }
    adapter = TelegramAdapter("test", settings)
    try:
        with pytest.raises(Uncertain, match="without a message id"):
            await adapter.send(Outbound(Address("test", "42"), "hello"))
    finally:
        await adapter.stop()
        await runner.cleanup()


async def test_a_send_after_stop_leaves_no_session_open_and_a_restart_keeps_one(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    # a worker that lost the account's lease stops the adapter while one of its runs still
    # sends: the send opened a new session that nothing closed ("Unclosed client session")
    adapter = TelegramAdapter(contract_context.account, fake.settings(request_timeout=1.0))
    await adapter.start(contract_context.bind(adapter))
    group = fake.supergroup("Eng")
    await adapter.stop()
    receipt = await adapter.send(Outbound(address_of(group), "still going out"))
    assert receipt.platform_message_id == str(fake.sent[-1].message_id)
    assert adapter._api._session is None
    await adapter.start(contract_context.bind(adapter))
    await adapter.send(Outbound(address_of(group), "after the restart"))
    kept = adapter._api._session
    assert kept is not None and not kept.closed
    await adapter.stop()
    assert kept.closed and adapter._api._session is None

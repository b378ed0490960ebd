"""Sending: threads, replies, edits, reactions, splitting, and every failure mapped."""

from __future__ import annotations

from typing import Any

import pytest
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel.model import Address, Outbound
from backchannel_slack.testing import FakeSlack

GENERAL = Address("test", "C0GENERAL")


async def test_post_in_a_thread_conversation_uses_thread_ts(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    root = slack.message("C0GENERAL", "U0ALICE", "root")["event"]["ts"]
    receipt = await adapter.send(Outbound(Address("test", "C0GENERAL", root), "in the thread"))
    post = slack.posts[-1]
    assert (post["thread_ts"], post["text"], post["ts"]) == (
        root,
        "in the thread",
        receipt.platform_message_id,
    )


async def test_reply_at_channel_top_level_starts_a_thread_under_the_message(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    target = slack.message("C0GENERAL", "U0ALICE", "question")["event"]["ts"]
    await adapter.send(Outbound(GENERAL, "answer", reply_to=target))
    assert slack.posts[-1]["thread_ts"] == target


async def test_reply_in_a_dm_stays_at_top_level(slack: FakeSlack, start_adapter: Any) -> None:
    adapter = await start_adapter("socket")
    target = slack.message("D0ALICE", "U0ALICE", "question")["event"]["ts"]
    await adapter.send(Outbound(Address("test", "D0ALICE"), "answer", reply_to=target))
    assert slack.posts[-1]["thread_ts"] is None


async def test_plain_post_at_top_level_has_no_thread(slack: FakeSlack, start_adapter: Any) -> None:
    adapter = await start_adapter("socket")
    await adapter.send(Outbound(GENERAL, "*bold* and <https://example.com|a link>"))
    post = slack.posts[-1]
    assert post["thread_ts"] is None
    assert post["text"] == "*bold* and <https://example.com|a link>"  # mrkdwn untouched


async def test_edit_uses_chat_update(slack: FakeSlack, start_adapter: Any) -> None:
    adapter = await start_adapter("socket")
    sent = await adapter.send(Outbound(GENERAL, "draft"))
    receipt = await adapter.send(
        Outbound(GENERAL, "final", kind="edit", target=sent.platform_message_id)
    )
    assert slack.updates == [
        {"channel": "C0GENERAL", "ts": sent.platform_message_id, "text": "final"}
    ]
    assert receipt.platform_message_id == sent.platform_message_id


async def test_edit_of_someone_elses_message_is_rejected(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    theirs = slack.message("C0GENERAL", "U0ALICE", "mine")["event"]["ts"]
    with pytest.raises(Rejected) as caught:
        await adapter.send(Outbound(GENERAL, "hijack", kind="edit", target=theirs))
    assert caught.value.reason == "cant_update_message"


@pytest.mark.parametrize(
    ("emoji", "name"),
    [(":tada:", "tada"), ("eyes", "eyes"), ("👍", "thumbsup"), ("❤️", "heart"), ("⚠", "warning")],
)
async def test_reaction_uses_emoji_names_without_colons(
    slack: FakeSlack, start_adapter: Any, emoji: str, name: str
) -> None:
    adapter = await start_adapter("socket")
    target = slack.message("C0GENERAL", "U0ALICE", "nice")["event"]["ts"]
    await adapter.send(Outbound(GENERAL, emoji, kind="reaction", target=target))
    assert slack.reactions == [{"channel": "C0GENERAL", "timestamp": target, "name": name}]


async def test_reacting_twice_is_not_an_error(slack: FakeSlack, start_adapter: Any) -> None:
    adapter = await start_adapter("socket")
    target = slack.message("C0GENERAL", "U0ALICE", "nice")["event"]["ts"]
    for _ in range(2):
        await adapter.send(Outbound(GENERAL, "tada", kind="reaction", target=target))
    assert len(slack.reactions) == 1


async def test_long_text_splits_in_order_under_4000(slack: FakeSlack, start_adapter: Any) -> None:
    adapter = await start_adapter("socket")
    paragraphs = [f"paragraph {n}: " + "x" * 1500 for n in range(6)]
    receipt = await adapter.send(Outbound(GENERAL, "\n\n".join(paragraphs)))
    texts = [p["text"] for p in slack.posts]
    assert all(len(t) <= 4000 for t in texts)
    assert "\n\n".join(texts) == "\n\n".join(paragraphs)
    assert receipt.part_ids == tuple(p["ts"] for p in slack.posts)


async def test_rate_limit_maps_to_rate_limited_with_retry_after_and_no_sdk_wait(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    slack.fail_next("chat.postMessage", "rate_limited", retry_after=30)
    with pytest.raises(RateLimited) as caught:
        await adapter.send(Outbound(GENERAL, "hurry"))
    assert caught.value.retry_after == 30
    assert len(slack.calls_of("chat.postMessage")) == 1
    assert slack.posts == []


@pytest.mark.parametrize("fault", ["server_error", "unavailable", "reset"])
async def test_5xx_and_reset_are_uncertain_and_never_retried(
    slack: FakeSlack, start_adapter: Any, fault: str
) -> None:
    adapter = await start_adapter("socket")
    slack.fail_next("chat.postMessage", fault)
    with pytest.raises(Uncertain):
        await adapter.send(Outbound(GENERAL, "maybe"))
    assert len(slack.calls_of("chat.postMessage")) == 1


async def test_reset_after_posting_is_uncertain_and_posts_once(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    slack.fail_next("chat.postMessage", "reset_after")
    with pytest.raises(Uncertain):
        await adapter.send(Outbound(GENERAL, "did it land?"))
    assert [p["text"] for p in slack.posts] == ["did it land?"]


async def test_slow_answer_past_timeout_is_uncertain(slack: FakeSlack, start_adapter: Any) -> None:
    adapter = await start_adapter("socket", timeout=0.5)
    slack.fail_next("chat.postMessage", "slow", delay=5)
    with pytest.raises(Uncertain) as caught:
        await adapter.send(Outbound(GENERAL, "late"))
    assert "0.5s" in str(caught.value)
    assert [p["text"] for p in slack.posts] == ["late"]


@pytest.mark.parametrize(
    "code", ["channel_not_found", "not_in_channel", "is_archived", "msg_too_long"]
)
async def test_ok_false_is_rejected_with_slacks_code(
    slack: FakeSlack, start_adapter: Any, code: str
) -> None:
    adapter = await start_adapter("socket")
    slack.fail_next("chat.postMessage", "error", error=code)
    with pytest.raises(Rejected) as caught:
        await adapter.send(Outbound(GENERAL, "no"))
    assert caught.value.reason == code


async def test_unknown_channel_is_rejected_by_the_fake_like_slack(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    with pytest.raises(Rejected) as caught:
        await adapter.send(Outbound(Address("test", "C0NOPE"), "hello?"))
    assert caught.value.reason == "channel_not_found"


async def test_internal_error_is_uncertain(slack: FakeSlack, start_adapter: Any) -> None:
    adapter = await start_adapter("socket")
    slack.fail_next("chat.postMessage", "error", error="internal_error")
    with pytest.raises(Uncertain):
        await adapter.send(Outbound(GENERAL, "?"))


async def test_failure_after_first_part_is_uncertain_not_retryable(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket", max_text_len=100)
    slack.fail_next("chat.postMessage", "rate_limited", after=1)
    with pytest.raises(Uncertain) as caught:
        await adapter.send(Outbound(GENERAL, "word " * 60))
    assert "sent 1 of" in str(caught.value)
    assert len(slack.posts) == 1


async def test_refused_connection_is_rate_limited_after_one_sdk_retry(
    slack: FakeSlack, start_adapter: Any
) -> None:
    adapter = await start_adapter("events")
    await slack.stop()
    with pytest.raises(RateLimited) as caught:
        await adapter.send(Outbound(GENERAL, "anyone there?"))
    assert "connect" in str(caught.value)


async def test_read_5xx_is_retried_by_the_sdk(
    slack: FakeSlack, contract_context: Any, start_adapter: Any
) -> None:
    await start_adapter("socket")
    slack.fail_next("users.info", "unavailable")
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "hi"))
    await slack.wait_acked(delivery.event_id)
    assert len(slack.calls_of("users.info")) == 2
    assert contract_context.events[-1].sender.name == "Alice"


async def test_sending_in_a_thread_marks_it_so_replies_there_reach_the_bot(
    slack: FakeSlack, contract_context: Any, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    root = slack.message("C0GENERAL", "U0ALICE", "root")["event"]["ts"]
    await adapter.send(Outbound(Address("test", "C0GENERAL", root), "joining in"))
    assert await contract_context.get_state(f"thread:C0GENERAL:{root}") == "1"
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0BOB", "follow-up", thread_ts=root))
    await slack.wait_acked(delivery.event_id)
    assert contract_context.events[-1].mentions_me


async def test_unreadable_answer_after_posting_is_uncertain_not_rejected(
    slack: FakeSlack, start_adapter: Any
) -> None:
    # slack-sdk raises SlackApiError carrying aiohttp's raw response (no status_code, no
    # data) when a body labelled JSON is not JSON: the post may well have landed
    adapter = await start_adapter("socket")
    slack.fail_next("chat.postMessage", "garbled")
    with pytest.raises(Uncertain) as caught:
        await adapter.send(Outbound(GENERAL, "did it land?"))
    assert "HTTP 200" in str(caught.value)
    assert [p["text"] for p in slack.posts] == ["did it land?"]
    assert len(slack.calls_of("chat.postMessage")) == 1


@pytest.mark.parametrize(
    ("status", "expected"), [(429, RateLimited), (502, Uncertain), (503, Uncertain)]
)
async def test_unreadable_error_answers_keep_their_http_meaning(
    slack: FakeSlack, start_adapter: Any, status: int, expected: type[Exception]
) -> None:
    adapter = await start_adapter("socket")
    slack.fail_next("chat.postMessage", "garbled", status=status, retry_after=7)
    with pytest.raises(expected) as caught:
        await adapter.send(Outbound(GENERAL, "later"))
    if isinstance(caught.value, RateLimited):
        assert caught.value.retry_after == 7
    assert slack.posts == []
    assert len(slack.calls_of("chat.postMessage")) == 1


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("30", 30.0), ("-4", 0.0), ("nan", 1.0), ("soon", 1.0), ("inf", float("inf"))],
)
def test_a_retry_after_header_is_read_as_seconds_and_nonsense_waits_one(
    header: str, seconds: float
) -> None:
    # an infinite one is past any bound: the deliverer gives the send up (rate limited too long)
    from backchannel_slack.delivery import _retry_after

    assert _retry_after({"Retry-After": header}) == seconds

"""Socket Mode receiving: ack after commit, reconnects, redelivery, twins, disorder."""

from __future__ import annotations

from typing import Any

import pytest
from backchannel.testing import ContractContext
from backchannel_slack.testing import FakeSlack

from .conftest import wait_until


async def texts(ctx: ContractContext) -> list[str]:
    found: list[str] = []
    for conversation in await ctx.store.conversations(ctx.account, limit=100):
        found += [m.text for m in await ctx.store.window(conversation.id, 100)]
    return sorted(found)


async def test_each_envelope_is_acked_once_its_event_is_stored(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "good morning"))
    await slack.wait_acked(delivery.event_id)
    assert await texts(contract_context) == ["good morning"]
    assert delivery.acks == 1


async def test_disconnect_message_reconnects_without_losing_or_doubling(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    first = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "before"))
    await slack.wait_acked(first.event_id)
    await slack.disconnect("refresh_requested")
    await slack.wait_connections(2)
    second = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "after"))
    await slack.wait_acked(second.event_id)
    assert await texts(contract_context) == ["after", "before"]
    assert (
        len(slack.calls_of("apps.connections.open")) >= 2
    )  # (a slow loop may add a ping-driven reconnect)


async def test_dropped_socket_mid_event_is_redelivered_and_stored_once(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    contract_context.hold()
    payload = slack.message("C0GENERAL", "U0ALICE", "in flight")
    delivery = await slack.deliver(payload)
    event_id = f"C0GENERAL:{payload['event']['ts']}"
    await contract_context.wait_started(event_id)
    slack.drop_connections()  # the ack for this envelope can no longer arrive on that socket
    await slack.wait_connections(2)
    await slack.wait_for(lambda: len(delivery.envelopes) >= 2, what="the redelivery")
    await wait_until(lambda: adapter.counters["joined"] >= 1, what="the redelivery to join")
    contract_context.release()
    await slack.wait_acked(delivery.event_id)
    assert await texts(contract_context) == ["in flight"]
    assert contract_context.calls(event_id) == 1


async def test_stalled_socket_is_replaced_by_the_keepalive_and_nothing_is_lost(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    assert adapter.settings.ping_interval <= 0.5  # the fake's settings: a quick keepalive
    before = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "before"))
    await slack.wait_acked(before.event_id)
    slack.stall_connections()  # open but silent: no close frame, no pongs
    during = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "during"))
    await slack.wait_connections(2, timeout=15)
    await slack.wait_acked(during.event_id, timeout=15)
    after = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "after"))
    await slack.wait_acked(after.event_id)
    assert await texts(contract_context) == ["after", "before", "during"]


async def test_unacked_envelope_is_retried_with_retry_attempt_and_stored_once(
    contract_context: ContractContext, route_server: Any
) -> None:
    from backchannel_slack import SlackAdapter

    async with FakeSlack(ack_timeout=0.2, max_retries=2) as slack:
        adapter = SlackAdapter("test", slack.settings())
        await adapter.start(contract_context.bind(adapter))
        try:
            contract_context.hold()
            delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "slow store"))
            await slack.wait_for(lambda: len(delivery.envelopes) >= 3, what="two Slack retries")
            await wait_until(lambda: adapter.counters["joined"] >= 2, what="both retries to join")
            contract_context.release()
            await slack.wait_acked(delivery.event_id)
            await slack.wait_for(lambda: delivery.acks >= 3, what="every envelope acked")
        finally:
            await adapter.stop()
    assert await texts(contract_context) == ["slow store"]
    assert adapter.counters["joined"] >= 2


async def test_message_and_app_mention_for_one_mention_make_one_row(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    message, mention = slack.user_says("C0GENERAL", "U0ALICE", f"<@{slack.bot_user_id}> ping")
    deliveries = await slack.deliver_all([mention, message])
    for delivery in deliveries:
        await slack.wait_acked(delivery.event_id)
    assert await texts(contract_context) == [f"<@{slack.bot_user_id}> ping"]
    (conversation,) = await contract_context.store.conversations("test")
    assert conversation.address.thread == message["event"]["ts"]
    assert conversation.kind == "thread"


async def test_out_of_order_and_repeated_events_each_stored_once(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    payloads = [slack.message("C0GENERAL", "U0ALICE", f"n{n}") for n in range(4)]
    order = [payloads[2], payloads[0], payloads[3], payloads[0], payloads[1], payloads[2]]
    for delivery in await slack.deliver_all(order):
        await slack.wait_acked(delivery.event_id)
    assert await texts(contract_context) == ["n0", "n1", "n2", "n3"]
    window = await contract_context.store.window(
        (await contract_context.store.conversations("test"))[0].id, 10
    )
    assert [m.text for m in window] == ["n2", "n0", "n3", "n1"]  # seq is arrival order
    assert sorted(m.sent_at for m in window) == [
        m.sent_at for m in sorted(window, key=lambda m: m.text)
    ]


async def test_names_are_looked_up_before_ingest_and_cached(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    for text in ("one", "two"):
        delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", text))
        await slack.wait_acked(delivery.event_id)
    assert [e.sender.name for e in contract_context.events] == ["Alice", "Alice"]
    assert [e.conversation_title for e in contract_context.events] == ["#general", "#general"]
    assert len(slack.calls_of("users.info")) == 1
    assert len(slack.calls_of("conversations.info")) == 1


async def test_stale_names_are_refreshed(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    adapter = await start_adapter("socket")
    now = [1000.0]
    adapter._directory.clock = lambda: now[0]
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "one"))
    await slack.wait_acked(delivery.event_id)
    slack.users["U0ALICE"]["profile"]["display_name"] = "Alice L."
    now[0] += adapter.settings.name_ttl + 1
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0ALICE", "two"))
    await slack.wait_acked(delivery.event_id)
    assert [e.sender.name for e in contract_context.events] == ["Alice", "Alice L."]


async def test_failed_name_lookup_still_stores_the_event(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    slack.fail_next("users.info", "rate_limited", retry_after=30)
    slack.fail_next("conversations.info", "hang", delay=30)
    delivery = await slack.deliver(slack.message("C0GENERAL", "U0BOB", "still here"))
    await slack.wait_acked(delivery.event_id, timeout=5)
    (event,) = contract_context.events
    assert event.text == "still here"
    assert event.sender.id == "U0BOB"


async def test_dm_sender_name_and_title(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    delivery = await slack.deliver(slack.message("D0ALICE", "U0ALICE", "psst"))
    await slack.wait_acked(delivery.event_id)
    (event,) = contract_context.events
    assert event.conversation_kind == "direct"
    assert event.conversation_title == "Alice"


async def test_own_echo_is_acked_and_not_stored(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    delivery = await slack.deliver(slack.own_message("C0GENERAL", "my own words"))
    await slack.wait_acked(delivery.event_id)
    assert await texts(contract_context) == []


async def test_start_gives_up_when_the_websocket_cannot_open(
    slack: FakeSlack, contract_context: ContractContext
) -> None:
    from backchannel.errors import BackchannelError
    from backchannel_slack import SlackAdapter

    slack.refuse_sockets = True
    adapter = SlackAdapter("test", slack.settings(connect_timeout=0.5))
    with pytest.raises(BackchannelError, match="Socket Mode websocket"):
        await adapter.start(contract_context.bind(adapter))
    await adapter.stop()
    assert slack.connections_opened == 0


async def test_slack_down_at_start_is_not_blamed_on_the_token(
    slack: FakeSlack, contract_context: ContractContext
) -> None:
    from backchannel.errors import BackchannelError, ConfigError
    from backchannel_slack import SlackAdapter

    slack.fail_next("auth.test", "unavailable", times=2)  # the SDK retries a read once
    adapter = SlackAdapter("test", slack.settings())
    with pytest.raises(BackchannelError, match="unavailable at start") as caught:
        await adapter.start(contract_context.bind(adapter))
    assert not isinstance(caught.value, ConfigError)
    assert len(slack.calls_of("auth.test")) == 2


async def test_edit_and_delete_change_the_stored_message(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    original = slack.message("C0GENERAL", "U0ALICE", "helo")
    ts = original["event"]["ts"]
    for payload in (
        original,
        slack.edit("C0GENERAL", ts, "hello"),
        slack.edit("C0GENERAL", ts, "hello!"),
    ):
        delivery = await slack.deliver(payload)
        await slack.wait_acked(delivery.event_id)
    (conversation,) = await contract_context.store.conversations("test")
    (row,) = await contract_context.store.window(conversation.id, 10)
    assert row.text == "hello!" and row.edited_at is not None
    revisions = await contract_context.store.revisions(conversation.id, row.seq)
    assert [text for _kind, text, _at in revisions][:1] == ["helo"]
    delivery = await slack.deliver(slack.delete("C0GENERAL", ts))
    await slack.wait_acked(delivery.event_id)
    deleted = await contract_context.store.message(conversation.id, row.seq)
    assert deleted is not None and deleted.deleted_at is not None


async def test_edit_removing_the_bot_mention_changes_the_row_in_its_thread(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    original = slack.message("C0GENERAL", "U0ALICE", f"<@{slack.bot_user_id}> is prod down?")
    ts = original["event"]["ts"]
    for payload in (original, slack.edit("C0GENERAL", ts, "never mind, it is back")):
        delivery = await slack.deliver(payload)
        await slack.wait_acked(delivery.event_id)
    (conversation,) = await contract_context.store.conversations("test")
    assert conversation.address.thread == ts  # the mention opened the thread under it
    (row,) = await contract_context.store.window(conversation.id, 10)
    assert row.text == "never mind, it is back" and row.edited_at is not None


async def test_events_sent_while_the_socket_is_down_arrive_after_reconnect(
    slack: FakeSlack, contract_context: ContractContext, start_adapter: Any
) -> None:
    await start_adapter("socket")
    slack.drop_connections()
    gap = [await slack.deliver(slack.message("C0GENERAL", "U0ALICE", f"gap {n}")) for n in (1, 2)]
    await slack.wait_connections(2)
    for delivery in gap:
        await slack.wait_acked(delivery.event_id)
    assert await texts(contract_context) == ["gap 1", "gap 2"]

"""Sending through discord.py's HTTP layer to FakeDiscord: replies, edits, reactions, typing, errors."""

from __future__ import annotations

import pytest
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_discord import DiscordAdapter
from backchannel_discord.testing import FakeDiscord
from discord.http import Route

from .conftest import FAST


def posts(fake: FakeDiscord) -> list[dict]:
    return [
        body
        for method, path, body in fake.requests
        if method == "POST" and path.endswith("/messages")
    ]


async def test_reply_carries_message_reference_and_restricted_allowed_mentions(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    asked = await fake.post_message(fake.general, fake.alice, "@everyone look")
    receipt = await adapter.send(
        Outbound(Address("test", fake.general), "@everyone hi", reply_to=asked["id"], outbox_id=7)
    )
    body = posts(fake)[-1]
    assert body["message_reference"] == {
        "type": 0,
        "message_id": int(asked["id"]),
        "channel_id": int(fake.general),
        "fail_if_not_exists": False,
    }
    assert body["allowed_mentions"] == {"parse": ["users"], "replied_user": True}
    assert body["enforce_nonce"] is True
    (sent,) = fake.sent_to(fake.general)
    assert sent["id"] == receipt.platform_message_id
    assert sent["message_reference"]["message_id"] == asked["id"]


async def test_retried_outbox_row_is_not_posted_twice(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    outbound = Outbound(Address("test", fake.general), "exactly once", outbox_id=41)
    first = await adapter.send(outbound)
    second = await adapter.send(outbound)
    assert first.platform_message_id == second.platform_message_id
    assert [m["content"] for m in fake.sent_to(fake.general)] == ["exactly once"]


async def test_reply_to_a_deleted_message_is_posted_plainly(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    receipt = await adapter.send(
        Outbound(Address("test", fake.general), "still here", reply_to="1234567890123")
    )
    (sent,) = fake.sent_to(fake.general)
    assert sent["id"] == receipt.platform_message_id
    assert "message_reference" not in sent


async def test_edit_patches_the_message(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    receipt = await adapter.send(Outbound(Address("test", fake.general), "draft"))
    await adapter.send(
        Outbound(
            Address("test", fake.general), "final", kind="edit", target=receipt.platform_message_id
        )
    )
    assert ("PATCH", f"/channels/{fake.general}/messages/{receipt.platform_message_id}") in [
        (m, p) for m, p, _ in fake.requests
    ]
    assert [m["content"] for m in fake.sent_to(fake.general)] == ["final"]


async def test_edit_longer_than_one_message_is_rejected(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    with pytest.raises(Rejected, match="2000"):
        await adapter.send(
            Outbound(Address("test", fake.general), "x" * 2001, kind="edit", target="123")
        )


async def test_reaction_puts_the_emoji(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    asked = await fake.post_message(fake.general, fake.alice, "ship it?")
    await adapter.send(
        Outbound(Address("test", fake.general), "👍", kind="reaction", target=asked["id"])
    )
    assert fake.reactions == [(fake.general, asked["id"], "👍")]
    assert ("PUT", f"/channels/{fake.general}/messages/{asked['id']}/reactions/👍/@me") in [
        (m, p) for m, p, _ in fake.requests
    ]


async def test_typing_posts_to_the_channel(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    await adapter.typing(Address("test", fake.general))
    assert fake.typing == [fake.general]


async def test_a_thread_address_posts_types_edits_and_reacts_in_the_thread(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    thread = await fake.add_thread(fake.general, "release plan")
    address = Address("test", fake.general, thread)
    asked = await fake.post_message(thread, fake.alice, "ship it?")
    receipt = await adapter.send(Outbound(address, "draft", reply_to=asked["id"]))
    await adapter.send(
        Outbound(address, "shipped", kind="edit", target=receipt.platform_message_id)
    )
    await adapter.send(Outbound(address, "👍", kind="reaction", target=asked["id"]))
    await adapter.typing(address)
    assert fake.sent_to(fake.general) == []
    (sent,) = fake.sent_to(thread)
    assert (sent["content"], sent["message_reference"]["channel_id"]) == ("shipped", thread)
    assert fake.reactions == [(thread, asked["id"], "👍")]
    assert fake.typing == [thread]


async def test_quiet_send_is_silent(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    await adapter.send(Outbound(Address("test", fake.general), "psst", quiet=True))
    assert posts(fake)[-1]["flags"] & (1 << 12)  # SUPPRESS_NOTIFICATIONS


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        ("forbidden", 403, 50013),
        ("unknown_channel", 404, 10003),
        ("bad_request", 400, 50035),
    ],
)
async def test_refusals_become_rejected_with_discords_code(
    fake: FakeDiscord, adapter: DiscordAdapter, fault: str, status: int, code: int
) -> None:
    fake.fail_next(fault)
    with pytest.raises(Rejected) as caught:
        await adapter.send(Outbound(Address("test", fake.general), "nope"))
    assert f"Discord answered {status} (code {code})" in caught.value.reason
    assert fake.sent_to(fake.general) == []


async def test_unknown_channel_is_rejected(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    with pytest.raises(Rejected, match="10003"):
        await adapter.send(Outbound(Address("test", "999999999999"), "anyone?"))


async def test_rate_limit_longer_than_the_wait_budget_is_rate_limited(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    fake.fail_next("rate_limited", retry_after=64.57, is_global=True)
    with pytest.raises(RateLimited) as caught:
        await adapter.send(Outbound(Address("test", fake.general), "later"))
    assert caught.value.retry_after == pytest.approx(64.57)
    assert fake.sent_to(fake.general) == []


async def test_short_rate_limit_is_absorbed_by_discord_py(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    fake.fail_next("rate_limited", retry_after=0.2)
    receipt = await adapter.send(Outbound(Address("test", fake.general), "after a pause"))
    assert fake.sent_to(fake.general)[0]["id"] == receipt.platform_message_id


async def test_503_is_uncertain(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    fake.fail_next("unavailable")
    with pytest.raises(Uncertain, match="503"):
        await adapter.send(Outbound(Address("test", fake.general), "maybe"))


@pytest.mark.parametrize("fault", ["server_error", "bad_gateway"])
async def test_single_500_or_502_is_retried_by_discord_py_and_delivered(
    fake: FakeDiscord, adapter: DiscordAdapter, fault: str
) -> None:
    fake.fail_next(fault)
    receipt = await adapter.send(Outbound(Address("test", fake.general), "second try"))
    assert [m["id"] for m in fake.sent_to(fake.general)] == [receipt.platform_message_id]


async def test_connection_reset_is_uncertain(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    fake.fail_next("reset")
    with pytest.raises(Uncertain, match="connection"):
        await adapter.send(Outbound(Address("test", fake.general), "lost"))


async def test_failure_after_first_part_is_uncertain_and_names_delivered_parts(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    text = "a" * 2000 + " " + "b" * 100
    fake.fail_next("forbidden", skip=1)
    with pytest.raises(Uncertain) as caught:
        await adapter.send(Outbound(Address("test", fake.general), text))
    (first,) = fake.sent_to(fake.general)
    assert first["id"] in caught.value.reason
    assert "part 2 of 2" in caught.value.reason


async def test_cloudflare_429_without_via_is_rate_limited_by_retry_after(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    fake.fail_next("cloudflare", retry_after=30)
    with pytest.raises(RateLimited) as caught:
        await adapter.send(Outbound(Address("test", fake.general), "blocked"))
    assert caught.value.retry_after == 30
    assert fake.sent_to(fake.general) == []


async def test_refused_connection_is_rate_limited_not_uncertain(
    fake: FakeDiscord, adapter: DiscordAdapter, unused_tcp_port: int
) -> None:
    saved = Route.BASE
    Route.BASE = f"http://127.0.0.1:{unused_tcp_port}/api/v10"  # nothing listens there
    try:
        with pytest.raises(RateLimited, match="could not connect"):
            await adapter.send(Outbound(Address("test", fake.general), "nowhere"))
    finally:
        Route.BASE = saved


async def test_a_burst_is_paced_by_discord_py_from_the_rate_limit_headers(
    contract_context: ContractContext,
) -> None:
    async with FakeDiscord(bucket_limit=2, bucket_window=0.3) as fake:
        adapter = DiscordAdapter("test", {**fake.settings, **FAST})
        await adapter.start(contract_context.bind(adapter))
        try:
            texts = [f"burst {n}" for n in range(6)]
            for text in texts:  # sequential, as the outbox sends one conversation's messages
                await adapter.send(Outbound(Address("test", fake.general), text))
        finally:
            await adapter.stop()
        assert [m["content"] for m in fake.sent_to(fake.general)] == texts
        assert fake.over_limit == 0  # discord.py waited on X-RateLimit-Remaining: 0


async def test_long_emoji_text_is_split_by_code_points_and_every_part_accepted(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    text = "🚀" * 2500  # Discord counts code points: two messages, not three
    receipt = await adapter.send(Outbound(Address("test", fake.general), text))
    sent = fake.sent_to(fake.general)
    assert [m["id"] for m in sent] == list(receipt.part_ids)
    assert "".join(m["content"] for m in sent) == text
    assert len(sent) == 2


async def test_empty_text_is_rejected_with_discords_code(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    with pytest.raises(Rejected, match="50006"):
        await adapter.send(Outbound(Address("test", fake.general), ""))


async def test_an_invalid_form_body_is_rejected_in_one_line(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> None:
    # discord.py puts each field error of a 50035 on a line of its own
    fake.fail_next("bad_request")
    with pytest.raises(Rejected) as caught:
        await adapter.send(Outbound(Address("test", fake.general), "nope"))
    assert "\n" not in caught.value.reason
    assert "Invalid Form Body; In content: Must be 2000 or fewer in length." in caught.value.reason


async def test_a_channel_of_a_type_discord_py_does_not_know_is_no_crash(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    # Discord adds channel types; discord.py's fetch_channel raises InvalidData for them
    odd = fake.add_channel(fake.guild_id, "lobby")
    fake.channels[odd]["type"] = 99
    address = Address("test", odd)
    await adapter.check_address(address)  # cannot tell: taken as it is
    message = fake.message_payload(odd, fake.alice, "in an odd channel")
    await fake.dispatch("MESSAGE_CREATE", message)
    await contract_context.wait_for(
        lambda: len(contract_context.malformed) == 1, what="the refusal"
    )
    assert "\n" not in contract_context.malformed[0]

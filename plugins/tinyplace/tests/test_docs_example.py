"""The testing example of docs/channels/tinyplace.md, run as written (with a real seed)."""

from __future__ import annotations

import os
from typing import Any

from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.testing import FakeRelay, RelayPeer


async def test_my_bot_answers(store: Any) -> None:
    async with FakeRelay() as relay, RelayPeer(relay.url) as peer:
        await peer.publish_keys()
        ctx = ContractContext(store, account="agents")
        bot = TinyplaceAdapter(
            "agents",
            {"identity": os.urandom(32).hex(), "relay_url": relay.url, "poll_interval": 0.05},
        )
        relay.make_contacts(peer.agent_id, bot.agent_id)
        await bot.start(ctx.bind(bot))
        relay_id = await peer.send_text(bot.agent_id, "hello", session="s-1")
        await relay.wait_acked(bot.agent_id, relay_id)
        await bot.send(Outbound(Address("agents", peer.agent_id, "s-1"), "hi!"))
        [(_envelope, body)] = await peer.receive()
        assert RelayPeer.text_of(body) == "hi!"
        await bot.stop()
        assert [m.text for m in await ctx.transcript(Address("agents", peer.agent_id, "s-1"))] == [
            "hello"
        ]

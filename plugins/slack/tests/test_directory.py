"""The name directory asks Slack only about ids shaped like Slack's own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backchannel_slack.directory import Directory


async def test_only_slack_shaped_ids_are_looked_up_and_cached() -> None:
    asked: list[str] = []

    async def fetch_user(user_id: str) -> Mapping[str, Any]:
        asked.append(user_id)
        return {"user": {"profile": {"display_name": f"name of {user_id}"}}}

    async def fetch_channel(channel_id: str) -> Mapping[str, Any]:
        asked.append(channel_id)
        return {"channel": {"name": "general"}}

    directory = Directory(fetch_user, fetch_channel)
    assert await directory.user_name("U0ALICE") == "name of U0ALICE"
    assert (await directory.channel("C0GENERAL")) is not None
    # a fuzzed or hostile id costs no API call (one of 10,000 characters made an 8 KB
    # request line), leaves nothing in the cache, and the caller falls back to the id
    for hostile in ("U0ALICE" + "\U0001f642" * 2500, "\ud800", "u0lower", "U", "U" * 33, ""):
        assert await directory.user_name(hostile) is None
        assert await directory.channel(hostile) is None
    assert asked == ["U0ALICE", "C0GENERAL"]
    assert directory.lookups == 2

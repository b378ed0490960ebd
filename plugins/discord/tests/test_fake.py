"""FakeDiscord's wire format, checked with a plain aiohttp client (no discord.py in between)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from backchannel_discord.testing import INTENT_MESSAGE_CONTENT, FakeDiscord

GUILD_MESSAGES, DIRECT_MESSAGES = 1 << 9, 1 << 12


def auth(fake: FakeDiscord) -> dict[str, str]:
    return {"Authorization": f"Bot {fake.token}"}


async def test_rest_answers_carry_exact_json_content_type_and_rate_limit_headers(
    fake: FakeDiscord,
) -> None:
    fake.bucket_limit = 2
    url = f"{fake.settings['api_base']}/channels/{fake.general}/messages"
    async with aiohttp.ClientSession() as http:
        answers = []
        for n in range(3):
            async with http.post(url, json={"content": f"m{n}"}, headers=auth(fake)) as response:
                answers.append((response.status, dict(response.headers), await response.json()))
        async with http.get(f"{fake.settings['api_base']}/users/@me") as response:
            unauthorized = (response.status, await response.json())
    (s1, h1, b1), (_, h2, _), (s3, h3, b3) = answers
    assert s1 == 200 and b1["content"] == "m0" and b1["author"]["id"] == fake.bot_id
    assert h1["Content-Type"] == "application/json"
    assert (h1["X-RateLimit-Limit"], h1["X-RateLimit-Remaining"], h2["X-RateLimit-Remaining"]) == (
        "2",
        "1",
        "0",
    )
    assert float(h1["X-RateLimit-Reset-After"]) > 0 and "X-RateLimit-Bucket" in h1
    assert s3 == 429
    assert h3["Via"] and int(h3["Retry-After"]) >= 1 and h3["X-RateLimit-Scope"] == "user"
    assert set(b3) == {"message", "retry_after", "global"} and b3["global"] is False
    assert unauthorized == (401, {"message": "401: Unauthorized", "code": 0})
    assert [m["content"] for m in fake.sent] == ["m0", "m1"]


async def test_error_bodies_use_discord_codes(fake: FakeDiscord) -> None:
    fake.fail_next("forbidden")
    base = fake.settings["api_base"]
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base}/channels/{fake.general}/messages", json={"content": "x"}, headers=auth(fake)
        ) as response:
            forbidden = (response.status, await response.json())
        async with http.post(
            f"{base}/channels/1/messages", json={"content": "x"}, headers=auth(fake)
        ) as response:
            unknown = (response.status, await response.json())
    assert forbidden == (403, {"message": "Missing Permissions", "code": 50013})
    assert unknown == (404, {"message": "Unknown Channel", "code": 10003})


async def test_read_and_write_faults_queue_apart_and_skip_alike(fake: FakeDiscord) -> None:
    for queue in (fake.fail_next, fake.fail_next_read):
        with pytest.raises(ValueError, match="unknown fault 'teapot'"):
            queue("teapot")
    fake.fail_next("forbidden", skip=1)
    fake.fail_next_read("unknown_channel", skip=1)
    base = f"{fake.settings['api_base']}/channels/{fake.general}"
    statuses = []
    async with aiohttp.ClientSession() as http:
        for _ in range(2):
            async with http.get(base, headers=auth(fake)) as response:
                statuses.append(("read", response.status))
            async with http.post(
                f"{base}/messages", json={"content": "x"}, headers=auth(fake)
            ) as response:
                statuses.append(("write", response.status))
        async with http.get(f"{base}/messages", headers=auth(fake)) as response:
            statuses.append(("history", response.status))
    assert statuses == [
        ("read", 200),
        ("write", 200),
        ("read", 404),
        ("write", 403),
        ("history", 200),
    ]


async def test_content_over_2000_code_points_or_empty_is_refused_like_discord(
    fake: FakeDiscord,
) -> None:
    fake.bucket_limit = 10
    url = f"{fake.settings['api_base']}/channels/{fake.general}/messages"
    answers = []
    async with aiohttp.ClientSession() as http:
        # 2000 astral emoji are 4000 UTF-16 units but 2000 code points: accepted
        for content in ("😀" * 2000, "x" * 2001, ""):
            async with http.post(url, json={"content": content}, headers=auth(fake)) as response:
                answers.append((response.status, await response.json()))
        first_id = answers[0][1]["id"]
        async with http.patch(
            f"{url}/{first_id}", json={"content": "y" * 2001}, headers=auth(fake)
        ) as response:
            edit = (response.status, await response.json())
    (ok, _), (too_long, long_body), (empty, empty_body) = answers
    assert (ok, too_long, empty, edit[0]) == (200, 400, 400, 400)
    assert long_body["code"] == 50035
    assert long_body["errors"]["content"]["_errors"][0]["code"] == "BASE_TYPE_MAX_LENGTH"
    assert empty_body == {"message": "Cannot send an empty message", "code": 50006}
    assert [len(m["content"]) for m in fake.sent] == [2000]


async def next_frame(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    message = await ws.receive(timeout=5)
    assert message.type is aiohttp.WSMsgType.TEXT, message
    return json.loads(message.data)


async def identify(ws: aiohttp.ClientWebSocketResponse, token: str, intents: int) -> None:
    properties = {"os": "linux", "browser": "test", "device": "test"}
    await ws.send_json(
        {"op": 2, "d": {"token": token, "intents": intents, "properties": properties}}
    )


async def test_gateway_hello_identify_ready_resume_and_replay(fake: FakeDiscord) -> None:
    gateway = fake.settings["gateway_url"] + "?v=10&encoding=json"
    intents = GUILD_MESSAGES | DIRECT_MESSAGES | INTENT_MESSAGE_CONTENT
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(gateway) as ws:
            hello = await next_frame(ws)
            assert hello["op"] == 10 and hello["d"]["heartbeat_interval"] == 41250
            await ws.send_json({"op": 1, "d": None})
            assert (await next_frame(ws))["op"] == 11
            await identify(ws, fake.token, intents)
            ready = await next_frame(ws)
            assert (ready["t"], ready["s"]) == ("READY", 1)
            assert ready["d"]["user"]["id"] == fake.bot_id
            resume_url = ready["d"]["resume_gateway_url"]
            assert resume_url != fake.settings["gateway_url"]
            guild = await next_frame(ws)
            assert guild["t"] == "GUILD_CREATE" and guild["d"]["id"] == fake.guild_id
            fake.drop_next_dispatches(1)
            lost = await fake.post_message(fake.general, fake.alice, "lost in flight")
            session, seq = ready["d"]["session_id"], guild["s"]
        async with http.ws_connect(resume_url + "?v=10&encoding=json") as ws:
            assert (await next_frame(ws))["op"] == 10
            await ws.send_json(
                {"op": 6, "d": {"token": fake.token, "session_id": session, "seq": seq}}
            )
            replayed = await next_frame(ws)
            assert (replayed["t"], replayed["d"]["id"], replayed["s"]) == (
                "MESSAGE_CREATE",
                lost["id"],
                seq + 1,
            )
            assert (await next_frame(ws))["t"] == "RESUMED"
        async with http.ws_connect(resume_url + "?v=10&encoding=json") as ws:
            await next_frame(ws)
            await ws.send_json(
                {"op": 6, "d": {"token": fake.token, "session_id": "nope", "seq": 1}}
            )
            assert await next_frame(ws) == {"op": 9, "d": False}


async def test_gateway_close_codes_for_bad_token_and_disallowed_intents(fake: FakeDiscord) -> None:
    fake.granted_intents = 0
    gateway = fake.settings["gateway_url"] + "?v=10&encoding=json"
    codes = []
    async with aiohttp.ClientSession() as http:
        for token, intents in (("wrong", GUILD_MESSAGES), (fake.token, INTENT_MESSAGE_CONTENT)):
            async with http.ws_connect(gateway) as ws:
                await next_frame(ws)
                await identify(ws, token, intents)
                closing = await ws.receive(timeout=5)
                assert closing.type is aiohttp.WSMsgType.CLOSE
                codes.append(closing.data)
    assert codes == [4004, 4014]

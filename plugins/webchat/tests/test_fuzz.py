"""Fuzz suite (hypothesis): the web chat's websocket and HTTP routes take anything anyone sends.

No login stands in front of the web chat, so every frame is hostile until proven
otherwise. Frames are the page's real ones (message, received, ping), mangled
(backchannel.testing.fuzz), or broken framing: deep nesting, not JSON, binary. After
every example the socket is still open and the visitor's next message is acked and
stored once; every HTTP route answers anything below 500; after the run the next
message is answered.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import aiohttp
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel.testing.fuzz import IngressCheck, mangled, random_odd_text, store_leaks
from backchannel_webchat import WebchatAdapter
from backchannel_webchat.session import frame_limit
from backchannel_webchat.testing import FakeBrowser
from hypothesis import given
from hypothesis import strategies as st

ACCOUNT = "web"
FINAL = "final ping"
_ids = itertools.count()

FRAMES: list[dict[str, Any]] = [
    {"type": "message", "client_id": "c0", "text": "hello there"},
    {"type": "received", "delivery": 1},
    {"type": "ping"},
]


def answer_final(run: Run) -> str | None:
    return "pong" if run.trigger is not None and run.trigger.text == FINAL else None


def fresh(frame: dict[str, Any]) -> dict[str, Any]:
    if "client_id" in frame:
        frame["client_id"] = f"fuzz{next(_ids)}"
    return frame


@st.composite
def socket_texts(draw: st.DrawFn) -> str | bytes:
    """What arrives on the socket: mostly mangled frames, sometimes broken framing."""
    kind = draw(st.sampled_from(["frame", "frame", "frame", "nested", "text", "binary"]))
    if kind == "nested":
        depth = draw(st.integers(65, 50_000))
        return "[" * depth + "]" * draw(st.sampled_from([0, depth]))
    if kind == "text":
        return draw(st.text(max_size=40))
    if kind == "binary":
        return draw(st.binary(max_size=40))
    return json.dumps(draw(mangled(FRAMES, fresh=fresh)))


async def test_fuzzed_websocket_frames_never_close_the_socket_or_stall_the_next_message(
    store: SQLiteStore,
) -> None:
    # one page sends as fast as it can, and reloads after every oversized frame
    unlimited = {"rate_limit": 1e6, "rate_burst": 1_000_000}
    unlimited |= {"address_rate_limit": 1e6, "address_burst": 1_000_000}
    unlimited |= {"connect_rate_limit": 1e6, "connect_burst": 1_000_000}
    unlimited |= {"frame_rate_limit": 1e9, "frame_burst": 1_000_000}
    unlimited |= {"address_frame_rate_limit": 1e9, "address_frame_burst": 1_000_000}
    unlimited |= {"request_rate_limit": 1e9, "request_burst": 1_000_000}
    adapter = WebchatAdapter(ACCOUNT, unlimited)
    board = Switchboard(store, port=0)
    board.add_account(adapter, Binding(RecordingAgent(answer_final), debounce=0.2, max_wait=1.0))
    await board.start()
    assert adapter.url is not None
    page_url = adapter.url
    check = IngressCheck(board, ACCOUNT)
    async with FakeBrowser(page_url) as page, aiohttp.ClientSession() as session:
        limit = frame_limit(adapter.settings.max_message_chars)

        async def exchange(sent: str | bytes, path: str) -> None:
            if isinstance(sent, bytes):
                await page.send_bytes(sent)
            else:
                await page.send_text(sent)
            size = len(sent if isinstance(sent, bytes) else sent.encode("utf-8", "surrogatepass"))
            if size > limit:  # documented: a frame over the limit closes with 1009
                assert await page.wait_closed() == 1009
                await page.reload()
            legit = f"legit{next(_ids)}"
            await page.say("a legitimate message", client_id=legit)
            seq = await page.wait_ack(legit)
            assert seq is not None and not page.closed.is_set()
            before = len(page.frames)
            await page.say("a legitimate message", client_id=legit)  # sent twice: stored once
            again = await page.wait_for(
                lambda f: f["type"] == "ack" and f.get("client_id") == legit, after=before
            )
            assert again["seq"] == seq
            async with session.get(page_url + path) as response:
                assert response.status < 500, (path, response.status)

        @given(socket_texts(), st.builds(lambda r: random_odd_text(r)[:50], st.randoms()))
        def example(sent: str | bytes, path: str) -> None:
            check.call(exchange(sent, path))

        await check.explore(example)
        await page.say(FINAL)
        await page.wait_for(lambda f: f["type"] == "message" and f.get("text") == "pong", 20)
    await board.wait_idle()
    await board.stop()
    assert store_leaks(store.path, [page.visitor], WebchatAdapter.secret_fields) == []

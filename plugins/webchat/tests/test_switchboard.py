"""The web chat behind a real Switchboard with the demo agent, driven by fake pages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from backchannel.agents.demo import demo_agent
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_webchat import WebchatAdapter
from backchannel_webchat.testing import FakeBrowser


async def start_board(db: Path, **settings: object) -> tuple[Switchboard, WebchatAdapter]:
    board = Switchboard(SQLiteStore(db), port=0)
    adapter = WebchatAdapter("web", settings)
    board.add_account(adapter, Binding(agent=demo_agent, respond="always"))
    await board.start()
    return board, adapter


def replying_to(seq: int) -> Callable[[dict[str, Any]], bool]:
    """Match the pushed frame of the message right after `seq` (the agent's reply)."""
    return lambda frame: frame["type"] == "message" and frame["seq"] == seq + 1


@pytest.fixture
async def board(tmp_path: Path) -> AsyncIterator[tuple[Switchboard, WebchatAdapter]]:
    started = await start_board(tmp_path / "state.db")
    yield started
    await started[0].stop()


async def test_demo_agent_reply_reaches_the_page_with_its_seq(
    board: tuple[Switchboard, WebchatAdapter],
) -> None:
    switchboard, adapter = board
    assert adapter.url == f"{switchboard.url}/"
    async with FakeBrowser(adapter.url, name="Ada") as page:
        seq = await page.wait_ack(await page.say("hello agent"))
        assert seq is not None
        reply = await page.wait_for(lambda f: f["type"] == "message" and f["role"] == "agent")
        await switchboard.wait_idle()
        assert reply["seq"] == seq + 1
        assert "I can see 1 message from 1 person in this direct chat" in reply["text"]
        conversation = await switchboard.store.find_conversation(page.address("web"))
        assert conversation is not None
        stored = await switchboard.store.message(conversation.id, reply["seq"])
        assert stored is not None and stored.status == "sent"
        assert stored.platform_message_id == reply["id"]
        assert stored.reply_to_seq == seq
        assert any(f["type"] == "typing" for f in page.frames)
        live = page.shown()
        await page.reload()
        assert page.shown() == live
        assert [role for _, role, _ in live] == ["visitor", "agent"]


async def test_server_restart_shows_the_same_transcript_once(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    switchboard, adapter = await start_board(db)
    page = FakeBrowser(adapter.url or "")
    try:
        await page.open()
        for text in ("first", "second"):
            acked = await page.wait_ack(await page.say(text))
            assert acked is not None
            await page.wait_for(replying_to(acked))
            await switchboard.wait_idle()
        before = page.shown()
        await switchboard.stop()
        await page.wait_closed()
        switchboard, adapter = await start_board(db)
        page.page_url = adapter.url or ""
        page.ws_url = page.page_url.replace("http://", "ws://") + "ws"
        page.origin = page.page_url.rstrip("/")
        await page.reload()
        assert page.shown() == before
        assert [seq for seq, _, _ in before] == [1, 2, 3, 4]
    finally:
        await page.close()
        await switchboard.stop()


async def test_operator_send_reaches_the_open_page(
    board: tuple[Switchboard, WebchatAdapter],
) -> None:
    switchboard, adapter = board
    async with FakeBrowser(adapter.url or "") as page:
        outcome = await switchboard.send(page.address("web"), "an operator speaking")
        assert outcome.startswith("sent as #1")
        frame = await page.wait_for(lambda f: f["type"] == "message")
        assert (frame["seq"], frame["text"]) == (1, "an operator speaking")


async def test_a_visitors_held_message_stays_on_their_page_after_a_reload(
    tmp_path: Path,
) -> None:
    # an allowlist that does not name this visitor: the message is stored, held from the
    # agent, and still the visitor's own to see
    board = Switchboard(SQLiteStore(tmp_path / "state.db"), port=0)
    adapter = WebchatAdapter("web", {})
    board.add_account(
        adapter, Binding(agent=demo_agent, respond="always", access="allowlist", allow=["vX"])
    )
    await board.start()
    assert adapter.url is not None
    try:
        async with FakeBrowser(adapter.url, name="Ada") as page:
            seq = await page.wait_ack(await page.say("is anyone there?"))
            await board.wait_idle()
            conversation = await board.store.find_conversation(page.address("web"))
            assert conversation is not None
            stored = await board.store.message(conversation.id, seq or 0)
            assert stored is not None and stored.held
            assert await board.store.window(conversation.id, 10) == []  # not for the agent
            await page.reload()
            assert [(role, text) for _, role, text in page.shown()] == [
                ("visitor", "is anyone there?")
            ]
            [frame] = [f for f in page.frames if f["type"] == "transcript"][-1]["messages"]
            assert frame["held"] is True
    finally:
        await board.stop()

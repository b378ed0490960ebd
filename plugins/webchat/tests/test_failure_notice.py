"""A run that fails shows the account's `failure_notice` on the open pages (or nothing when "")."""

from __future__ import annotations

from pathlib import Path

from backchannel.model import Address
from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_webchat import WebchatAdapter
from backchannel_webchat.settings import DEFAULT_FAILURE_NOTICE
from backchannel_webchat.testing import FakeBrowser


async def broken_agent(run: Run) -> None:
    raise ConnectionError("model at http://127.0.0.1:9/v1 refused the connection")


async def start_board(db: Path, **settings: object) -> tuple[Switchboard, WebchatAdapter]:
    board = Switchboard(SQLiteStore(db), port=0)
    adapter = WebchatAdapter("web", settings)
    board.add_account(adapter, Binding(agent=broken_agent, respond="always"))
    await board.start()
    assert adapter.url is not None
    return board, adapter


async def test_a_failed_run_shows_the_notice_on_the_page(tmp_path: Path) -> None:
    board, adapter = await start_board(tmp_path / "bc.db")
    try:
        async with FakeBrowser(str(adapter.url), name="Ada") as page:
            await page.say("hello?")
            notice = await page.wait_for(lambda f: f.get("code") == "agent_failed")
        assert notice == {
            "type": "error",
            "code": "agent_failed",
            "message": DEFAULT_FAILURE_NOTICE,
        }
        assert "refused" not in notice["message"]  # the reason stays in the log and `runs`
    finally:
        await board.stop()


async def test_an_empty_failure_notice_shows_nothing(tmp_path: Path) -> None:
    board, adapter = await start_board(tmp_path / "bc.db", failure_notice="")
    try:
        async with FakeBrowser(str(adapter.url), name="Ada") as page:
            await page.wait_ack(await page.say("hello?"))
            await board.wait_idle()
            (run,) = await board.store.runs()
            assert run.status == "error"
            # frames arrive in order: once this send is on the page, a notice would be too
            await board.send(Address("web", page.chat), "operator here")
            await page.wait_for(lambda f: f.get("text") == "operator here")
            assert not [f for f in page.frames if f.get("code") == "agent_failed"]
    finally:
        await board.stop()

"""The example in docs/channels/slack.md, kept runnable."""

from __future__ import annotations

from pathlib import Path

from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import RecordingAgent
from backchannel_slack import SlackAdapter
from backchannel_slack.testing import FakeSlack


async def test_my_bot_answers_a_mention_in_its_thread(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        adapter = SlackAdapter("work", slack.settings(mode="socket"))
        agent = RecordingAgent(lambda run: "on it")
        board = Switchboard(SQLiteStore(tmp_path / "db"))
        board.add_account(adapter, Binding(agent, respond="mention"))
        await board.start()
        try:
            said = slack.user_says("C0GENERAL", "U0ALICE", f"<@{slack.bot_user_id}> help")
            await slack.deliver_all(said)  # a message + an app_mention, as Slack sends
            (post,) = await slack.wait_posts(1)
            assert post["thread_ts"] == said[0]["event"]["ts"]
        finally:
            await board.stop()


def test_docs_page_shows_this_example() -> None:
    docs = Path(__file__).parents[3] / "docs" / "channels" / "slack.md"
    text = docs.read_text()
    assert "async def test_my_bot_answers_a_mention_in_its_thread(tmp_path):" in text
    assert 'slack.user_says("C0GENERAL", "U0ALICE", f"<@{slack.bot_user_id}> help")' in text

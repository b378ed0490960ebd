"""The same code over Slack: notify handed to serve (Slack has no silent send), a DM reply routed."""

from __future__ import annotations

from pathlib import Path

import pytest
from backchannel.app import _control_server, build_switchboard
from backchannel.config import load_config
from backchannel_owner.api import notify
from backchannel_owner.inbox import list_markers
from backchannel_slack.testing import FakeSlack

from .conftest import identity


async def test_notify_and_a_dm_reply_over_slack(
    tmp_path: Path, inbox_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeSlack() as slack:
        settings = slack.settings(mode="socket")
        monkeypatch.setenv("OWNER_SLACK_BOT", settings["bot_token"])
        monkeypatch.setenv("OWNER_SLACK_APP", settings["app_token"])
        path = tmp_path / "bc.toml"
        path.write_text(
            f"""
[store]
path = "{tmp_path / "bc.db"}"

[accounts.work]
channel = "slack"
bot_token = "${{OWNER_SLACK_BOT}}"
app_token = "${{OWNER_SLACK_APP}}"
api_base = "{settings["api_base"]}"
timeout = 2.0

[owner]
account = "work"
chat = "D0ALICE"
user = "U0ALICE"
"""
        )
        config = load_config(path)
        board = await build_switchboard(config, serve_http=False)
        control = _control_server(config, board)
        assert control is not None
        await board.start()
        await control.start()
        try:
            sent = await notify(config, "migrations done", identity=identity())
            assert (sent.status, sent.via) == ("sent", "serve")
            (post,) = slack.posts
            assert post["channel"] == "D0ALICE"
            assert post["text"].endswith(f"sent you a message #{sent.id}: migrations done")
            reply = slack.message("D0ALICE", "U0ALICE", f"#{sent.id} now the seeds")
            stranger = slack.message("D0ALICE", "U0BOB", f"#{sent.id} drop the tables")
            for payload in (reply, stranger):
                delivery = await slack.deliver(payload)
                await slack.wait_acked(delivery.event_id)
            (marker,) = list_markers(identity().session_id, inbox_root)
            assert (marker.text, marker.parent_id) == ("now the seeds", sent.id)
        finally:
            await control.stop()
            await board.stop()

"""The plugin registers `slack`; a config file like the docs' builds a working account."""

from __future__ import annotations

from pathlib import Path

import pytest
from backchannel.app import build_switchboard
from backchannel.config import load_config
from backchannel.errors import ConfigError
from backchannel.plugins import channels
from backchannel_slack import SlackAdapter
from backchannel_slack.testing import FakeSlack


def test_the_plugin_registers_the_slack_channel() -> None:
    assert channels().get("slack") is SlackAdapter


def test_capabilities() -> None:
    adapter = SlackAdapter("work", {"bot_token": "xoxb-1", "app_token": "xapp-1"})
    caps = adapter.capabilities
    assert (caps.threads, caps.edits, caps.reactions, caps.typing) == (True, True, True, False)
    assert caps.max_text_len == 4000 and caps.display_name == "Slack"
    assert not hasattr(adapter, "typing")


async def test_a_config_file_like_the_docs_runs_against_the_fake(
    slack: FakeSlack, tmp_path: Path
) -> None:
    config_file = tmp_path / "backchannel.toml"
    config_file.write_text(
        f"""
[store]
path = "{tmp_path / "state" / "db.sqlite"}"

[accounts.work]
channel = "slack"
bot_token = "${{SLACK_BOT_TOKEN}}"
app_token = "${{SLACK_APP_TOKEN}}"
api_base = "{slack.api_base}"
ping_interval = 0.5

[agents.demo]
kind = "demo"

[[bindings]]
agent = "demo"
accounts = ["work"]
respond = "mention"
"""
    )
    environ = {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token}
    config = load_config(config_file, environ=environ)
    assert slack.bot_token not in repr(config)
    board = await build_switchboard(config, serve_http=False)
    await board.start()
    try:
        await slack.deliver(slack.message("D0ALICE", "U0ALICE", "hello there"))
        (post,) = await slack.wait_posts(1)
        assert post["channel"] == "D0ALICE" and post["text"]
    finally:
        await board.stop()


def test_bad_settings_name_the_key(tmp_path: Path) -> None:
    config_file = tmp_path / "backchannel.toml"
    config_file.write_text(
        '[accounts.work]\nchannel = "slack"\nbot_token = "xoxb-1"\nmode = "events"\n'
        '[agents.demo]\nkind = "demo"\n[[bindings]]\nagent = "demo"\n'
    )
    config = load_config(config_file)
    with pytest.raises(ConfigError) as caught:
        from backchannel.app import build_adapter

        build_adapter(config, config.accounts["work"])
    assert caught.value.key == "accounts.work.signing_secret"

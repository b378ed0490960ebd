"""Config: TOML -> attrs, one clear error per mistake, ${VAR} secrets, defaults, building a board."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from backchannel.app import ChatRouter, build_adapter, build_agent, build_switchboard
from backchannel.config import (
    BindingConfig,
    default_store_path,
    load_config,
)
from backchannel.errors import ConfigError
from backchannel.testing.fake_channel import FakePlatform

FULL = """
[store]
path = "state/bc.db"
synchronous = "FULL"

[server]
host = "0.0.0.0"
port = 9001
public_url = "https://bots.example.com"

[accounts.support]
channel = "fake"
token = "${FAKE_TOKEN}"
max_text_len = 500

[agents.helper]
kind = "openai"
model = "llama3.2"
base_url = "http://127.0.0.1:11434/v1"
api_key = "${OPENAI_API_KEY}"

[[bindings]]
agent = "helper"
accounts = ["support"]
respond = "always"
access = "allowlist"
allow = ["12345", 678]
owner = 12345
window = 20
window_chars = 8000
debounce = 0.5
max_wait = 2
run_timeout = 60
"""

TOKEN = "fake-token-7f3a9c1e5b"
API_KEY = "sk-test-0123456789abcdef"


pytestmark = pytest.mark.usefixtures("fake_channel_plugin")


def write(tmp_path: Path, text: str, name: str = "bot.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def env(**extra: str) -> dict[str, str]:
    return {"FAKE_TOKEN": TOKEN, "OPENAI_API_KEY": API_KEY, **extra}


# loading ----------------------------------------------------------------------------


def test_every_key_is_loaded_into_typed_values(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), environ=env())

    assert config.store.path == str(tmp_path / "state" / "bc.db")
    assert config.store.synchronous == "FULL"
    assert (config.server.host, config.server.port) == ("0.0.0.0", 9001)
    assert config.server.public_url == "https://bots.example.com"
    support = config.accounts["support"]
    assert support.channel == "fake"
    assert support.settings == {"token": TOKEN, "max_text_len": 500}
    assert config.agents["helper"].kind == "openai"
    assert config.agents["helper"].settings["model"] == "llama3.2"
    assert config.bindings == (
        BindingConfig(
            agent="helper",
            accounts=("support",),
            respond="always",
            access="allowlist",
            allow=("12345", "678"),
            owner="12345",
            window=20,
            window_chars=8000,
            debounce=0.5,
            max_wait=2.0,
            run_timeout=60.0,
        ),
    )


def test_no_config_file_gives_the_embedded_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    config = load_config(None)

    assert config.store.path == str(tmp_path / "xdg" / "backchannel" / "backchannel.db")
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8765)
    assert {n: a.channel for n, a in config.accounts.items()} == {"webchat": "webchat"}
    assert {n: a.kind for n, a in config.agents.items()} == {"demo": "demo"}
    assert config.bindings == (BindingConfig(agent="demo"),)


def test_state_dir_falls_back_to_local_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/home/someone")
    assert default_store_path() == "/home/someone/.local/state/backchannel/backchannel.db"


def test_a_file_with_only_a_store_section_keeps_the_default_chat_and_agent(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[store]\npath = "/tmp/x/bc.db"\n'))

    assert config.store.path == "/tmp/x/bc.db"
    assert list(config.accounts) == ["webchat"]
    assert list(config.agents) == ["demo"]


def test_missing_sections_fall_back_to_the_web_chat_and_the_demo_agent(tmp_path: Path) -> None:
    only_agent = load_config(write(tmp_path, '[agents.x]\nkind = "openai"\n', "a.toml"))
    assert {n: a.channel for n, a in only_agent.accounts.items()} == {"webchat": "webchat"}
    assert only_agent.bindings == (BindingConfig(agent="x"),)
    only_account = load_config(write(tmp_path, '[accounts.a]\nchannel = "fake"\n', "b.toml"))
    assert {n: a.kind for n, a in only_account.agents.items()} == {"demo": "demo"}
    assert only_account.bindings == (BindingConfig(agent="demo"),)


def test_one_agent_without_bindings_answers_every_account(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            '[accounts.a]\nchannel = "fake"\n[accounts.b]\nchannel = "webchat"\n'
            '[agents.bot]\nkind = "demo"\n',
        )
    )
    assert config.bindings == (BindingConfig(agent="bot"),)
    assert [i for i, _ in config.bindings_for("a")] == [0]


def test_dollar_dollar_brace_is_a_literal_and_not_a_secret(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, '[accounts.a]\nchannel = "webchat"\ntitle = "Costs $${PRICE}"\n'),
        environ={},
    )
    assert config.accounts["a"].settings["title"] == "Costs ${PRICE}"
    assert config.summary()["accounts"]["a"]["title"] == "Costs ${PRICE}"


# mistakes: one error naming the file, the key and what was expected ------------------------

MISTAKES = [
    ('[server]\nport = "eighty"\n', "server.port", 'expected an integer, got "eighty"'),
    ("[server]\nport = true\n", "server.port", "expected an integer, got a boolean"),
    ("[server]\nport = 70000\n", "server.port", "expected a port number 0-65535"),
    (
        "[server]\nprot = 1\n",
        "server.prot",
        "unknown key; did you mean `port`? (known keys: host, port, public_url)",
    ),
    ('[store]\nsynchronous = "fast"\n', "store.synchronous", "expected one of OFF, NORMAL, FULL"),
    ("[stores]\npath = 'x'\n", "stores", "unknown section; did you mean `store`? (known sections:"),
    (
        '[accounts.tg]\nchannel = "telegrm"\n[agents.a]\nkind = "demo"\n',
        "accounts.tg.channel",
        "expected one of discord, fake, slack, telegram, ",
    ),
    ('[accounts.tg]\ntoken = "x"\n', "accounts.tg.channel", "missing"),
    ("[accounts.tg]\nchannel = 5\n", "accounts.tg.channel", "expected a name, got a number (5)"),
    ('[accounts."a/b"]\nchannel = "fake"\n', "accounts.a/b", "names may use letters"),
    ('[accounts]\ntg = "telegram"\n', "accounts.tg", "expected a table"),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "gpt"\n',
        "agents.x.kind",
        'expected one of demo, openai, python (installed), got "gpt"',
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n[[bindings]]\nagent = "y"\n',
        "bindings[0].agent",
        'expected one of x (the [agents] tables), got "y"',
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n[[bindings]]\nrespond = "always"\n',
        "bindings[0].agent",
        "missing (this key is required)",
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\nrespond = "sometimes"\n',
        "bindings[0].respond",
        'expected one of always, mention, never, got "sometimes"',
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\nwindw = 10\n',
        "bindings[0].windw",
        "unknown key; did you mean `window`? (known keys: access, accounts, agent, allow,",
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\naccounts = ["a", "b"]\n',
        "bindings[0].accounts[1]",
        'expected one of a (the [accounts] tables), got "b"',
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\naccounts = "a"\n',
        "bindings[0].accounts",
        'expected a list of ids like ["12345"], got "a"',
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\nallow = [true]\n',
        "bindings[0].allow",
        "expected ids (strings or integers), got a boolean",
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\nwindow = 0\n',
        "bindings[0].window",
        "expected a positive integer, got 0",
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\ndebounce = "1s"\n',
        "bindings[0].debounce",
        'expected a number, got "1s"',
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\naccess = "owner"\n',
        "bindings[0].owner",
        'access = "owner" needs owner',
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[accounts.b]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\naccounts = ["a"]\n',
        "accounts.b",
        "no binding covers this account",
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n[agents.y]\nkind = "demo"\n',
        "bindings",
        "several agents are configured",
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\n[[bindings]]\nagent = "x"\n',
        "bindings[1]",
        "already bound to every chat by bindings[0]",
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\nchats = ["c1"]\n[[bindings]]\nagent = "x"\nchats = ["c1"]\n',
        "bindings[1].chats",
        "chat 'c1' of account 'a' is already bound by bindings[0]",
    ),
    (
        '[accounts.a]\nchannel = "fake"\n[agents.x]\nkind = "demo"\n'
        '[[bindings]]\nagent = "x"\n[[bindings]]\nagent = "x"\nchats = ["c1"]\nwindow = 5\n',
        "bindings[1].window",
        "window is per account",
    ),
]


@pytest.mark.parametrize(
    ("text", "key", "expected"), MISTAKES, ids=[m[1] + ":" + m[2][:24] for m in MISTAKES]
)
def test_each_mistake_is_one_error_naming_file_key_and_expectation(
    tmp_path: Path, text: str, key: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})

    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert expected in message
    assert "\n" not in message
    assert caught.value.key == key
    assert caught.value.path == str(path)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: no such file"):
        load_config(tmp_path / "nope.toml")


def test_broken_toml_says_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"bot\.toml: not valid TOML: .*line 2"):
        load_config(write(tmp_path, "[server]\nport = \n"))


def test_a_plugin_refusing_its_settings_is_reported_at_the_account_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[accounts.web]\nchannel = "webchat"\nmax_message_chars = -1\n[agents.a]\nkind = "demo"\n',
    )
    config = load_config(path)
    with pytest.raises(ConfigError) as caught:
        build_adapter(config, config.accounts["web"])
    assert str(caught.value).startswith(f"{path}: accounts.web.max_message_chars: ")
    assert "positive integer" in str(caught.value)


def test_a_python_agent_that_cannot_be_imported_is_reported_at_the_agent_key(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        '[accounts.a]\nchannel = "fake"\n[agents.mine]\nkind = "python"\n'
        'agent = "no_such_module_here:agent"\n',
    )
    config = load_config(path)
    with pytest.raises(ConfigError) as caught:
        build_agent(config, config.agents["mine"])
    assert str(caught.value).startswith(f"{path}: agents.mine.agent: cannot import")


def test_a_python_agent_next_to_the_config_file_is_importable(tmp_path: Path) -> None:
    (tmp_path / "my_agent_for_config_test.py").write_text(
        "async def agent(run):\n    await run.call('send_message', {'text': 'hi'})\n"
    )
    path = write(
        tmp_path,
        '[accounts.a]\nchannel = "fake"\n[agents.mine]\nkind = "python"\n'
        'agent = "my_agent_for_config_test:agent"\n',
    )
    config = load_config(path)
    assert callable(build_agent(config, config.agents["mine"]))


# secrets ----------------------------------------------------------------------------------


def test_a_missing_environment_variable_names_the_variable_and_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={"OPENAI_API_KEY": API_KEY})
    assert str(caught.value) == (
        f"{path}: accounts.support.token: environment variable FAKE_TOKEN is not set"
        " (the value is ${FAKE_TOKEN})"
    )


def test_secrets_are_masked_in_summary_and_repr(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), environ=env())

    summary = config.summary()
    assert summary["accounts"]["support"]["token"] == "***"
    assert summary["agents"]["helper"]["api_key"] == "***"
    assert summary["agents"]["helper"]["model"] == "llama3.2"
    for text in (repr(config), str(summary), repr(config.accounts["support"])):
        assert TOKEN not in text
        assert API_KEY not in text
    assert config.accounts["support"].secrets == frozenset({TOKEN})
    assert config.agents["helper"].secrets == frozenset({API_KEY})


def test_a_token_written_into_the_file_is_still_a_secret(tmp_path: Path) -> None:
    literal = "999888:literal-token-in-the-file"
    config = load_config(
        write(tmp_path, f'[accounts.t]\nchannel = "telegram"\ntoken = "{literal}"\n'), environ={}
    )
    assert config.summary()["accounts"]["t"]["token"] == "***"
    assert config.accounts["t"].secrets == frozenset({literal})
    assert literal not in repr(config)


def test_secrets_are_redacted_from_logs_once_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    load_config(write(tmp_path, FULL), environ=env())
    with caplog.at_level(logging.INFO):
        logging.getLogger("backchannel.test").info("connecting with %s and %s", TOKEN, API_KEY)
    assert TOKEN not in caplog.text
    assert API_KEY not in caplog.text
    assert "***" in caplog.text


def test_a_secret_value_of_the_wrong_type_is_not_quoted_in_the_error(tmp_path: Path) -> None:
    secret = "not-a-port-but-a-secret-42"
    path = write(tmp_path, '[server]\nport = "${PORT}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={"PORT": secret})
    assert secret not in str(caught.value)
    assert str(caught.value).startswith(f"{path}: server.port: expected an integer")


def test_a_secret_inside_a_longer_string_is_masked_as_a_whole(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            '[server]\npublic_url = "https://${HOST_SECRET}.example.com"\n',
        ),
        environ={"HOST_SECRET": "hidden-subdomain-xyz"},
    )
    assert config.server.public_url == "https://hidden-subdomain-xyz.example.com"
    assert config.summary()["server"]["public_url"] == "***"


# building a switchboard --------------------------------------------------------------------


async def test_build_switchboard_wires_accounts_bindings_and_secrets(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), environ=env())
    board = await build_switchboard(config, serve_http=False)
    try:
        account = board.accounts["support"]
        assert account.adapter.capabilities.max_text_len == 500
        binding = account.binding
        assert binding.policy.respond == "always"
        assert binding.policy.access == "allowlist"
        assert binding.policy.allow == ("12345", "678")
        assert binding.policy.owner == "12345"
        assert (binding.window.messages, binding.window.chars) == (20, 8000)
        assert (binding.debounce, binding.max_wait, binding.run_timeout) == (0.5, 2.0, 60.0)
        assert binding.name == "helper"
        assert str(getattr(board.store, "path", "")) == config.store.path
    finally:
        await board.stop()


async def test_per_chat_bindings_route_each_chat_to_its_agent(
    tmp_path: Path, platform: FakePlatform
) -> None:
    (tmp_path / "routing_agents_for_test.py").write_text(
        "async def ops(run):\n"
        "    await run.call('send_message', {'text': 'ops agent here'})\n"
        "async def general(run):\n"
        "    await run.call('send_message', {'text': 'general agent here'})\n"
    )
    path = write(
        tmp_path,
        f"""
[store]
path = "{tmp_path / "bc.db"}"
[accounts.a]
channel = "fake"
[agents.ops]
kind = "python"
agent = "routing_agents_for_test:ops"
[agents.general]
kind = "python"
agent = "routing_agents_for_test:general"
[[bindings]]
agent = "ops"
chats = ["ops-room"]
respond = "always"
[[bindings]]
agent = "general"
respond = "mention"
""",
    )
    config = load_config(path)
    board = await build_switchboard(config, serve_http=False)
    assert isinstance(board.accounts["a"].binding.agent, ChatRouter)
    await board.start()
    try:
        platform.user_says("status?", chat="ops-room", chat_type="group")
        platform.user_says("hello all", chat="lobby", chat_type="group")
        platform.user_says("@bot hi", chat="lobby", chat_type="group", mention=True)
        await _until(lambda: platform.texts("ops-room") and platform.texts("lobby"))
        await board.wait_idle()
    finally:
        await board.stop()
    assert platform.texts("ops-room") == ["ops agent here"]
    # the unmentioned message in the lobby did not trigger; the mention did, once
    assert platform.texts("lobby") == ["general agent here"]


async def test_chats_no_binding_names_are_stored_but_start_no_run(
    tmp_path: Path, platform: FakePlatform
) -> None:
    path = write(
        tmp_path,
        f"""
[store]
path = "{tmp_path / "bc.db"}"
[accounts.a]
channel = "fake"
[agents.demo]
kind = "demo"
[[bindings]]
agent = "demo"
chats = ["c1"]
""",
    )
    board = await build_switchboard(load_config(path), serve_http=False)
    await board.start()
    try:
        platform.user_says("anyone?", chat="elsewhere")
        platform.user_says("hello", chat="c1")
        await _until(lambda: platform.texts("c1"))
        await board.wait_idle()
        stored = await board.store.conversations()
    finally:
        await board.stop()
    assert platform.texts("elsewhere") == []
    assert sorted(c.address.chat for c in stored) == ["c1", "elsewhere"]


async def _until(condition: Any, timeout: float = 10.0) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


def test_a_misspelled_channel_setting_is_one_error_naming_it(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, '[accounts.f]\nchannel = "fake"\nmax_text_lenght = 50\n'), environ={}
    )
    with pytest.raises(ConfigError) as caught:
        build_adapter(config, config.accounts["f"])
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'bot.toml'}: accounts.f.max_text_lenght: unknown")
    assert "max_text_len" in message  # it says which settings the channel does read
    assert "\n" not in message


def test_every_installed_channel_reads_the_settings_its_page_documents() -> None:
    import re

    from backchannel.app import ReadTracker
    from backchannel.plugins import channels

    docs = Path(__file__).resolve().parents[2] / "docs" / "channels"
    minimal: dict[str, dict[str, Any]] = {
        "telegram": {"token": "123456:ABCdefGHIjklMNOpqrSTUvwxYZ0123456789"},
        "slack": {"bot_token": "xoxb-1-2-abc", "app_token": "xapp-1-abc"},
        "discord": {"token": "MTIzNDU2Nzg5MDEyMzQ1Njc4.Gabcde.abcdefghijklmnopqrstuvwxyz01234"},
        "tinyplace": {"identity": "11" * 32},
    }
    registry = channels()
    for channel, settings in minimal.items():
        tracker = ReadTracker(settings)
        registry.get(channel)("x", tracker)
        documented = set(
            re.findall(r"^\|\s*`([a-z_]+)`", (docs / f"{channel}.md").read_text(), re.M)
        )
        documented -= {"internal_error"}  # an error code in the Slack page's table, not a key
        unread = documented - tracker._asked
        assert not unread, f"{channel} documents settings it never reads: {sorted(unread)}"

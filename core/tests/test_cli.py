"""The `backchannel` command: preview/show/conversations on a web chat conversation, send, check,
plugins, plugin commands, and serve/demo as real processes stopped by a signal."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import click
import pytest
from attrs import evolve
from backchannel.app import open_config_store, serve
from backchannel.cli import main
from backchannel.config import load_config
from backchannel.hookspecs import hookimpl
from backchannel.plugins import get_plugin_manager
from backchannel.store import Inbound
from backchannel.testing.fake_channel import FakeChannelAdapter, FakePlatform
from backchannel_webchat.testing import FakeBrowser
from click.testing import CliRunner, Result

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


pytestmark = pytest.mark.usefixtures("fake_channel_plugin")


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "bot.toml"
    path.write_text(f'[store]\npath = "{tmp_path / "state" / "bc.db"}"\n{body}', encoding="utf-8")
    return path


WEBCHAT = """
[server]
port = 0
[accounts.web]
channel = "webchat"
title = "Support"
[agents.demo]
kind = "demo"
"""


@pytest.fixture
def webchat_conversation(tmp_path: Path) -> tuple[Path, str]:
    """Serve the web chat + demo agent, talk to it from a fake browser tab; return (config, chat)."""
    path = write_config(tmp_path, WEBCHAT)
    chat = asyncio.run(_chat_once(path))
    return path, chat


async def _chat_once(path: Path) -> str:
    config = load_config(path)
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_ready(board: Any) -> None:
        ready.set_result(board.accounts["web"].adapter.url)

    server = asyncio.create_task(serve(config, on_ready=on_ready, stop=stop))
    try:
        url = await asyncio.wait_for(ready, 15)
        async with FakeBrowser(url, name="Ada") as page:
            await page.say("hello there")
            await page.wait_for(lambda f: f["type"] == "message" and f["role"] == "agent", 15)
            chat = page.chat
    finally:
        stop.set()
        await asyncio.wait_for(server, 15)
    return chat


# preview, show, conversations ----------------------------------------------------------------


def test_preview_prints_the_run_for_a_web_chat_conversation(
    webchat_conversation: tuple[Path, str],
) -> None:
    path, chat = webchat_conversation
    result = invoke("preview", f"web/{chat}", "-c", str(path))

    assert result.exit_code == 0, result.output
    text = result.stdout
    assert f"Run preview: conversation 1 (web/{chat})" in text
    assert 'direct conversation "Support", 2 of 2 messages in the window' in text
    assert "trigger #1 from Ada, already handled (runs have covered up to #1)" in text
    sections = [line for line in text.splitlines() if line.startswith("== ")]
    assert sections == ["== Instruction (system) ==", "== Messages (2) ==", "== Tools (4) =="]
    assert 'This is a direct (one-to-one) conversation called "Support" on web chat' in text
    assert (
        'The messages below come from 1 person other than you (names as they chose them): "Ada".'
        in text
    )
    assert "user       [#1] Ada: hello there" in text
    assert "assistant  [#2] (replying to #1) I can see 1 message from 1 person" in text
    assert "reply(message_id: integer, text: string)" in text
    assert "send_message(text: string)" in text
    assert "read_history(before_id: integer, limit: integer = 20)" in text
    assert "    message_id: the id of the message to answer, the number in [#n]" in text
    assert "Nothing was run or sent." in text


def test_preview_of_an_unanswered_message_shows_it_waiting(tmp_path: Path) -> None:
    path = write_config(tmp_path, FAKE)
    asyncio.run(_store_unanswered(load_config(path), "is anyone there?"))
    result = invoke("preview", "ops/c1", "-c", str(path))

    assert result.exit_code == 0, result.output
    assert "trigger #1 from Alice, not answered yet" in result.stdout
    assert "user       [#1] Alice: is anyone there?" in result.stdout
    assert "on Fake Chat (account 'ops', conversation ops/c1)" in result.stdout


async def _store_unanswered(config: Any, text: str) -> None:
    adapter = FakeChannelAdapter("ops", {})
    event = adapter.normalize({**adapter.platform.make_message(text), "update": 1})
    assert event is not None
    store = open_config_store(config)
    try:
        await store.append_inbound([Inbound(event, triggers=True)])
    finally:
        await store.close()


def test_preview_openai_and_anthropic_formats_are_the_exact_request_json(
    webchat_conversation: tuple[Path, str],
) -> None:
    path, chat = webchat_conversation
    openai = json.loads(invoke("preview", "1", "-c", str(path), "--format", "openai").stdout)
    anthropic = json.loads(
        invoke("preview", f"web/{chat}", "-c", str(path), "--format", "anthropic").stdout
    )

    assert [m["role"] for m in openai["messages"]] == ["system", "user", "assistant"]
    assert openai["messages"][1]["content"] == "[#1] Ada: hello there"
    assert {t["function"]["name"] for t in openai["tools"]} >= {"send_message", "reply"}
    assert anthropic["system"] == openai["messages"][0]["content"]
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user"]
    assert {t["name"] for t in anthropic["tools"]} == {
        t["function"]["name"] for t in openai["tools"]
    }


def test_preview_changes_nothing_in_the_store(webchat_conversation: tuple[Path, str]) -> None:
    path, _ = webchat_conversation
    before = invoke("conversations", "--json", "-c", str(path)).stdout
    invoke("preview", "1", "-c", str(path))
    assert invoke("conversations", "--json", "-c", str(path)).stdout == before


def test_conversations_lists_the_web_chat_conversation(
    webchat_conversation: tuple[Path, str],
) -> None:
    path, chat = webchat_conversation
    human = invoke("conversations", "-c", str(path))
    rows = json.loads(invoke("conversations", "--json", "-c", str(path)).stdout)

    assert human.exit_code == 0
    assert human.stdout.splitlines()[0].split() == [
        "ID",
        "CONVERSATION",
        "KIND",
        "MESSAGES",
        "WAITING",
        "TITLE",
    ]
    assert human.stdout.splitlines()[1].split()[:5] == ["1", f"web/{chat}", "direct", "2", "-"]
    assert [(r["id"], r["key"], r["visible_count"]) for r in rows] == [(1, f"web/{chat}", 2)]
    other = invoke("conversations", "--account", "nope", "-c", str(path))
    assert other.stdout.startswith("no conversations of account 'nope' (store: ")


def test_show_prints_the_transcript(webchat_conversation: tuple[Path, str]) -> None:
    path, chat = webchat_conversation
    human = invoke("show", f"web/{chat}", "-c", str(path))
    data = json.loads(invoke("show", "1", "--json", "-c", str(path)).stdout)

    assert human.exit_code == 0
    lines = human.stdout.splitlines()
    assert lines[0] == f'conversation 1: web/{chat} (direct) "Support"'
    assert lines[1] == "2 messages, handled up to #1"
    assert "Ada: hello there" in lines[3]
    assert lines[3].startswith("#1 ")
    assert lines[4].startswith("#2 ")
    assert "-> Support (reply to #1; sent): I can see" in lines[4]
    assert data["conversation"]["key"] == f"web/{chat}"
    assert [(m["seq"], m["direction"], m["status"]) for m in data["messages"]] == [
        (1, "in", "received"),
        (2, "out", "sent"),
    ]


def test_an_unknown_conversation_is_one_line_on_stderr_and_exit_1(
    webchat_conversation: tuple[Path, str],
) -> None:
    path, _ = webchat_conversation
    for command in ("show", "preview"):
        result = invoke(command, "web/nobody", "-c", str(path), env={"UV_RUN_RECURSION_DEPTH": ""})
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr == (
            f"error: no conversation web/nobody (see `backchannel conversations -c {path}`)\n"
        )


def test_hostile_ids_and_limits_are_one_line_errors(
    webchat_conversation: tuple[Path, str],
) -> None:
    """Digits that are not ASCII ("²", "١": str.isdigit says yes), ids past 64 bits and a
    5,000-digit id name no conversation; a --limit past a store's integers is refused by
    the option itself. Never a traceback."""
    path, _ = webchat_conversation
    for reference in ("²", "١", "9" * 25, "1" * 5000):
        result = invoke("show", reference, "-c", str(path), env={"UV_RUN_RECURSION_DEPTH": ""})
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert result.stderr.startswith("error: no conversation ")
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    # a huge argument (a file pasted by mistake) is not echoed back whole
    result = invoke("show", "x" * 100_000, "-c", str(path), env={"UV_RUN_RECURSION_DEPTH": ""})
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert len(result.stderr) < 2_100 and "more characters)" in result.stderr
    for command in ("conversations", "runs", "asks"):
        result = invoke(command, "--limit", "9" * 25, "-c", str(path))
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and "--limit" in result.output


def test_store_commands_without_a_store_say_so(tmp_path: Path) -> None:
    path = write_config(tmp_path, "")
    listed = invoke("conversations", "-c", str(path))
    shown = invoke("show", "1", "-c", str(path))

    assert listed.exit_code == 0
    assert "no conversations yet" in listed.stdout
    assert shown.exit_code == 1
    assert "there is no store at" in shown.stderr
    assert not (tmp_path / "state").exists()


# send ---------------------------------------------------------------------------------------

FAKE = """
[accounts.ops]
channel = "fake"
[agents.demo]
kind = "demo"
"""


def test_send_delivers_through_the_account_and_records_it(
    tmp_path: Path, platform: FakePlatform
) -> None:
    path = write_config(tmp_path, FAKE)
    result = invoke("send", "ops", "c1", "maintenance at 5pm", "-c", str(path))

    assert result.exit_code == 0, result.output
    assert result.stdout == "ops/c1: sent as #1\n"
    assert platform.texts("c1") == ["maintenance at 5pm"]
    shown = json.loads(invoke("show", "ops/c1", "--json", "-c", str(path)).stdout)
    assert [(m["direction"], m["text"], m["status"]) for m in shown["messages"]] == [
        ("out", "maintenance at 5pm", "sent")
    ]


def test_reading_the_store_needs_no_secrets_but_preview_does(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, FAKE.replace('channel = "fake"', 'channel = "fake"\ntoken = "${OPS_TOKEN}"')
    )
    sent = invoke("send", "ops", "c1", "hello", "-c", str(path), env={"OPS_TOKEN": "tok-1234567"})
    without: dict[str, str | None] = {"OPS_TOKEN": None}

    assert sent.exit_code == 0, sent.output
    assert CliRunner().invoke(main, ["conversations", "-c", str(path)], env=without).exit_code == 0
    assert CliRunner().invoke(main, ["show", "ops/c1", "-c", str(path)], env=without).exit_code == 0
    preview = CliRunner().invoke(main, ["preview", "ops/c1", "-c", str(path)], env=without)
    assert preview.exit_code == 1
    assert "environment variable OPS_TOKEN is not set" in preview.stderr


def test_send_into_a_thread_uses_the_thread_address(tmp_path: Path, platform: FakePlatform) -> None:
    path = write_config(tmp_path, FAKE)
    result = invoke(
        "send", "ops", "c1", "in the thread", "--thread", "t9", "--json", "-c", str(path)
    )

    outcome = json.loads(result.stdout)
    assert outcome["conversation"] == "ops/c1/t9"
    # the keys docs/cli.md lists
    assert set(outcome) == {
        "conversation",
        "conversation_id",
        "status",
        "result",
        "seq",
        "platform_message_id",
        "reason",
        "channel",
        "via",
    }
    assert (outcome["status"], outcome["via"], outcome["channel"]) == ("sent", "direct", "fake")
    assert [(m.chat, m.thread) for m in platform.sent] == [("c1", "t9")]


def test_a_refused_send_exits_1_and_is_recorded_as_failed(
    tmp_path: Path, platform: FakePlatform
) -> None:
    path = write_config(tmp_path, FAKE)
    platform.fail_next_send("rejected")
    result = invoke("send", "ops", "c1", "hello?", "--json", "-c", str(path))

    assert result.exit_code == 1
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "failed"
    assert "NOT delivered: fake platform: chat not found" in outcome["result"]
    shown = json.loads(invoke("show", "ops/c1", "--json", "-c", str(path)).stdout)
    assert shown["messages"][0]["status"] == "failed"


def test_send_does_not_run_agents_on_unanswered_conversations(
    tmp_path: Path, platform: FakePlatform
) -> None:
    path = write_config(tmp_path, FAKE)
    platform.user_says("unanswered question", chat="c2")
    invoke("send", "ops", "c1", "notice", "-c", str(path))
    assert platform.texts("c2") == []


def test_send_to_an_unknown_account_is_one_line_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, FAKE)
    result = invoke("send", "nope", "c1", "hi", "-c", str(path))

    assert result.exit_code == 1
    assert result.stderr == f"error: {path}: no account called 'nope' (configured: ops)\n"


# check --------------------------------------------------------------------------------------


def test_check_prints_the_config_with_secrets_masked(tmp_path: Path) -> None:
    secret = "tok-5b1e9d2c7a"
    path = write_config(
        tmp_path, FAKE.replace('channel = "fake"', 'channel = "fake"\ntoken = "${OPS_TOKEN}"')
    )
    human = invoke("check", "-c", str(path), env={"OPS_TOKEN": secret})
    data = json.loads(invoke("check", "-c", str(path), "--json", env={"OPS_TOKEN": secret}).stdout)

    assert human.exit_code == 0
    assert human.stdout.splitlines()[0] == f"{path}: ok"
    assert 'ops            fake       token="***"' in human.stdout
    assert "[0] demo <- every account: respond=mention access=anyone" in human.stdout
    assert secret not in human.output
    assert data["ok"] is True
    assert data["accounts"]["ops"]["token"] == "***"
    assert secret not in json.dumps(data)


def test_check_names_a_postgresql_store_by_its_url_without_the_password(tmp_path: Path) -> None:
    path = tmp_path / "bot.toml"
    path.write_text('[store]\nurl = "postgresql://bc:Pw-9f3a1@db.example:5432/bc"\n' + FAKE)
    human = invoke("check", "-c", str(path))
    assert human.exit_code == 0, human.output
    assert human.stdout.splitlines()[1] == (
        "store     postgresql://bc:***@db.example:5432/bc (PostgreSQL)"
    )
    assert "Pw-9f3a1" not in human.output


def test_check_masks_every_http_header_and_credential_named_keys(tmp_path: Path) -> None:
    """A header written in the file (an Authorization, a proxy's api-key) is a credential
    whatever its name; keys named like one (x-api-key, cookie) are masked too."""
    path = write_config(
        tmp_path,
        '[agents.o]\nkind = "openai"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n'
        '[agents.o.headers]\nAuthorization = "Bearer hdr-5ecr3t-1"\napi-key = "hdr-5ecr3t-2"\n'
        '[agents.o.extra_body]\nX-Api-Key = "hdr-5ecr3t-3"\nsession_cookie = "hdr-5ecr3t-4"\n',
    )
    human = invoke("check", "-c", str(path))
    as_json = invoke("check", "-c", str(path), "--json")
    assert human.exit_code == 0, human.output
    for output in (human.output, as_json.output):
        assert "hdr-5ecr3t" not in output
    assert '"Authorization": "***"' in human.stdout


def test_check_reports_one_line_and_exit_1_on_a_mistake(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[accounts.tg]\nchannel = "telegrm"\n')
    result = invoke("check", "-c", str(path))

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {path}: accounts.tg.channel: expected one of ")
    assert 'got "telegrm"' in result.stderr
    assert "Traceback" not in result.output


def test_check_catches_adapter_settings_and_never_echoes_secrets(tmp_path: Path) -> None:
    secret = "not-a-number-secret"
    path = write_config(
        tmp_path, '[accounts.web]\nchannel = "webchat"\nmax_message_chars = "${LIMIT}"\n'
    )
    result = invoke("check", "-c", str(path), env={"LIMIT": secret})

    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {path}: accounts.web.max_message_chars: ")
    assert secret not in result.output


def test_check_needs_a_config_file() -> None:
    result = CliRunner().invoke(main, ["check"], env={"BACKCHANNEL_CONFIG": ""})
    assert result.exit_code == 2
    assert "Missing option '-c' / '--config'" in result.stderr


EXAMPLE_ENV = {
    "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
    "OPENAI_API_KEY": "ollama-key-unused",
    "TELEGRAM_TOKEN": "123456:example-token-unused",
    "TINYPLACE_IDENTITY": "7" * 64,  # a hex seed: examples/orchestrator.toml asks tiny.place peers
}


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_every_example_config_checks(example: str) -> None:
    result = invoke("check", "-c", str(EXAMPLES / example), env=EXAMPLE_ENV)
    assert result.exit_code == 0, result.output
    assert EXAMPLE_ENV["OPENAI_API_KEY"] not in result.output


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES.iterdir()}
    assert {"webchat-demo.toml", "openai.toml", "python-agent.toml", "echo_agent.py"} <= names


def test_the_installed_command_checks_an_example(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "backchannel", "check", "-c", str(EXAMPLES / "python-agent.toml")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, **EXAMPLE_ENV},
    )
    assert completed.returncode == 0, completed.stderr
    assert "echo_agent:echo" in completed.stdout


# plugins ------------------------------------------------------------------------------------


def test_plugins_lists_what_each_plugin_registers() -> None:
    rows = {r["name"]: r for r in json.loads(invoke("plugins", "--json").stdout)}
    human = invoke("plugins").stdout

    assert rows["backchannel.agents.builtin"]["agents"] == ["demo", "openai", "python"]
    assert rows["webchat"]["channels"] == ["webchat"]
    assert rows["test-fake-channel"]["channels"] == ["fake"]
    assert human.splitlines()[0].split() == ["PLUGIN", "DISTRIBUTION", "REGISTERS"]
    assert any(
        line.startswith("webchat ") and line.endswith("channels: webchat")
        for line in human.splitlines()
    )


def test_plugins_add_commands_through_register_commands() -> None:
    @click.command("hello-plugin")
    def hello() -> None:
        click.echo("hello from a plugin")

    class CommandPlugin:
        @hookimpl
        def register_commands(self, cli: click.Group) -> None:
            cli.add_command(hello)

    pm = get_plugin_manager()
    pm.register(CommandPlugin(), name="test-command-plugin")
    try:
        main.load_plugin_commands(reload=True)
        assert invoke("hello-plugin").stdout == "hello from a plugin\n"
    finally:
        pm.unregister(name="test-command-plugin")
        main.load_plugin_commands(reload=True)
    assert "hello-plugin" not in main.commands


# serve and demo as real processes -------------------------------------------------------------


async def _start(args: list[str], env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "backchannel",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert " open http://127.0.0.1:" in line, line
    return process, line.split(" open ", 1)[1].strip()


async def _stop(process: asyncio.subprocess.Process, signum: int) -> tuple[int, str]:
    process.send_signal(signum)
    assert process.stderr is not None
    try:
        stderr = await asyncio.wait_for(process.stderr.read(), 30)
        code = await asyncio.wait_for(process.wait(), 30)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return code, stderr.decode()


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "BACKCHANNEL_"))}
    return {**env, **extra}


async def test_demo_serves_the_page_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    process, url = await _start(
        ["demo", "--port", "0", "--store", str(tmp_path / "demo.db")], _clean_env()
    )
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        page = await response.text()
    code, stderr = await _stop(process, signal.SIGINT)

    assert response.status == 200
    assert "<html" in page.lower()
    assert code == 0, stderr
    assert "agent: demo (no model, no network)" in stderr
    assert stderr.rstrip().endswith("stopped")
    assert (tmp_path / "demo.db").exists()


async def test_demo_uses_the_openai_agent_when_a_base_url_is_set(tmp_path: Path) -> None:
    env = _clean_env(OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_MODEL="llama3.2")
    process, _ = await _start(["demo", "--port", "0", "--store", str(tmp_path / "d.db")], env)
    code, stderr = await _stop(process, signal.SIGINT)

    assert code == 0, stderr
    assert "agent: openai (model llama3.2 at http://127.0.0.1:9/v1)" in stderr


async def test_serve_runs_a_config_until_sigterm(tmp_path: Path) -> None:
    path = write_config(tmp_path, WEBCHAT)
    process, url = await _start(["serve", "-c", str(path)], _clean_env())
    async with (
        aiohttp.ClientSession() as http,
        http.get(url.split("/", 3)[:3][0] + "//" + url.split("/")[2] + "/healthz") as health,
    ):
        figures = await health.json()
    code, stderr = await _stop(process, signal.SIGTERM)

    assert figures["ok"] is True
    assert figures["accounts"] == ["web"]
    assert code == 0, stderr
    assert stderr.rstrip().endswith("stopped")


def test_an_adapter_failing_to_start_is_one_line_error_and_a_traceback_with_v(
    tmp_path: Path,
) -> None:
    class BrokenAdapter(FakeChannelAdapter):
        async def start(self, ctx: Any) -> None:
            raise RuntimeError("platform is down")

    class BrokenPlugin:
        @hookimpl
        def register_channels(self, register: Any) -> None:
            register("broken", BrokenAdapter)

    pm = get_plugin_manager()
    pm.register(BrokenPlugin(), name="test-broken-channel")
    try:
        path = write_config(tmp_path, '[server]\nport = 0\n[accounts.b]\nchannel = "broken"\n')
        quiet = CliRunner().invoke(main, ["serve", "-c", str(path)])
        verbose = CliRunner().invoke(main, ["serve", "-v", "-c", str(path)])
    finally:
        pm.unregister(name="test-broken-channel")

    assert quiet.exit_code == 1
    assert quiet.stderr.splitlines()[-1] == (
        "error: serve stopped: RuntimeError: platform is down (run with -v for the traceback)"
    )
    assert "Traceback" not in quiet.stderr
    assert isinstance(verbose.exception, RuntimeError)


def test_the_python_agent_example_echoes_through_the_web_chat(tmp_path: Path) -> None:
    config = load_config(EXAMPLES / "python-agent.toml")
    config = evolve(
        config,
        store=evolve(config.store, path=str(tmp_path / "bc.db")),
        server=evolve(config.server, port=0),
    )
    texts = asyncio.run(_say_to_webchat(config, "web", "ping"))
    assert texts == ["You said: ping"]


async def _say_to_webchat(config: Any, account: str, text: str) -> list[str]:
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_ready(board: Any) -> None:
        ready.set_result(board.accounts[account].adapter.url)

    server = asyncio.create_task(serve(config, on_ready=on_ready, stop=stop))
    try:
        url = await asyncio.wait_for(ready, 15)
        async with FakeBrowser(url) as page:
            await page.say(text)
            await page.wait_for(lambda f: f["type"] == "message" and f["role"] == "agent", 15)
            return page.agent_texts()
    finally:
        stop.set()
        await asyncio.wait_for(server, 15)


def test_an_unusable_store_path_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    path = tmp_path / "bot.toml"
    path.write_text(
        f'[store]\npath = "{tmp_path / "a-file" / "sub" / "bc.db"}"\n[server]\nport = 0\n'
    )
    result = invoke("serve", "-c", str(path))

    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"error: cannot open the store at {tmp_path / 'a-file' / 'sub' / 'bc.db'}: "
    )


def test_serve_on_a_busy_port_is_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = write_config(tmp_path, WEBCHAT.replace("port = 0", f"port = {port}"))
        result = invoke("serve", "-c", str(path))

    assert result.exit_code == 1
    assert f"error: cannot serve on 127.0.0.1:{port}: " in result.stderr
    assert "Traceback" not in result.output


def test_an_unset_variable_in_the_store_path_is_an_error_and_messaging_makes_no_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading commands tolerate unset secrets, never an unset store path: "" would open
    (or create) another store. `messaging off` on a store that is not there says so rather
    than making one and reporting OFF about it; a path from the environment is no secret."""
    monkeypatch.delenv("BOT_STATE", raising=False)
    config = tmp_path / "bot.toml"
    config.write_text(
        '[store]\npath = "${BOT_STATE}/bot.db"\n[accounts.tg]\nchannel = "telegram"\n'
        'token = "${TG_TOKEN}"\n[agents.demo]\nkind = "demo"\n',
        encoding="utf-8",
    )
    monkeypatch.delenv("TG_TOKEN", raising=False)
    for command in (["messaging", "off"], ["conversations"], ["runs"]):
        result = CliRunner().invoke(main, [*command, "-c", str(config)])
        assert result.exit_code == 1, (command, result.output)
        assert "store.path: environment variable BOT_STATE is not set" in result.output
    monkeypatch.setenv("BOT_STATE", str(tmp_path / "state"))
    result = CliRunner().invoke(main, ["messaging", "off", "-c", str(config)])
    assert result.exit_code == 1
    assert f"there is no store at {tmp_path / 'state' / 'bot.db'} yet" in result.output
    assert not (tmp_path / "state").exists()
    typo = tmp_path / "typo.db"
    result = CliRunner().invoke(main, ["messaging", "off", "--store", str(typo)])
    assert result.exit_code == 1 and not typo.exists()

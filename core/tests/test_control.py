"""The control socket: other processes hand work to the running `serve`."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from backchannel import control
from backchannel.app import serve
from backchannel.cli import main
from backchannel.config import Config, load_config
from backchannel.hookspecs import hookimpl
from backchannel.plugins import get_plugin_manager
from backchannel.switchboard import Switchboard
from backchannel.testing.fake_channel import FakePlatform
from backchannel_webchat.testing import FakeBrowser
from click.testing import CliRunner

pytestmark = pytest.mark.usefixtures("fake_channel_plugin")

FAKE = """
[accounts.ops]
channel = "fake"
[agents.demo]
kind = "demo"
"""

WEBCHAT = """
[server]
port = 0
[accounts.web]
channel = "webchat"
[agents.demo]
kind = "demo"
"""


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "bot.toml"
    path.write_text(f'[store]\npath = "{tmp_path / "state" / "bc.db"}"\n{body}', encoding="utf-8")
    return path


async def running(config: Config) -> AsyncIterator[Switchboard]:
    stop = asyncio.Event()
    ready: asyncio.Future[Switchboard] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(config, on_ready=ready.set_result, stop=stop))
    try:
        yield await asyncio.wait_for(asyncio.shield(ready), 15)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def test_send_through_the_socket_is_delivered_by_serve_and_recorded(
    tmp_path: Path, platform: FakePlatform
) -> None:
    config = load_config(write_config(tmp_path, FAKE))
    async for board in running(config):
        path = control.socket_path(config.store.path)
        assert path is not None and path.exists()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

        pong = await control.call(config, "ping")
        assert pong == {"pid": os.getpid(), "accounts": ["ops"]}

        address = {"account": "ops", "chat": "c1", "thread": None}
        sent = await control.call(config, "send", address=address, text="maintenance at 5")
        assert sent["state"] == "sent" and sent["seq"] == 1
        assert sent["result"] == "sent as #1"
        assert platform.texts("c1") == ["maintenance at 5"]

        edited = await control.call(config, "edit", conversation="ops/c1", seq=1, text="at 6")
        assert edited["state"] == "sent"
        reacted = await control.call(config, "react", conversation="ops/c1", seq=1, text="👍")
        assert (reacted["state"], reacted["seq"]) == ("sent", 1)
        target = sent["platform_message_id"]
        assert [(m.kind, m.target, m.text) for m in platform.sent[1:]] == [
            ("edit", target, "at 6"),
            ("reaction", target, "👍"),
        ]
        stored = await board.store.outbox(conversation_id=sent["conversation_id"])
        assert [(e.kind, e.status) for e in sorted(stored, key=lambda e: e.id)] == [
            ("message", "sent"),
            ("edit", "sent"),
            ("reaction", "sent"),
        ]
        with pytest.raises(control.ControlError, match="there is no message #9 in ops/c1"):
            await control.call(config, "react", conversation="ops/c1", seq=9, text="👍")
    # serve removed its socket on the way out; nothing answers now
    assert path is not None and not path.exists()
    with pytest.raises(control.ControlUnavailable):
        await control.call(config, "ping")


async def test_bad_requests_get_one_line_answers_and_serve_keeps_serving(
    tmp_path: Path, platform: FakePlatform
) -> None:
    config = load_config(write_config(tmp_path, FAKE))
    async for _board in running(config):
        with pytest.raises(control.ControlError, match=r"unknown operation 'nope' \(known: "):
            await control.call(config, "nope")
        with pytest.raises(control.ControlError, match="no conversation ops/never"):
            await control.call(config, "send", conversation="ops/never", text="x")
        with pytest.raises(control.ControlError, match="no account called 'elsewhere'"):
            await control.call(
                config, "send", address={"account": "elsewhere", "chat": "c"}, text="x"
            )
        with pytest.raises(control.ControlError, match="send: bad arguments"):
            await control.call(config, "send", conversation="ops/c1")
        path = control.socket_path(config.store.path)
        assert path is not None
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b"[[[[not json\n" + b'"just a string"\n')
        await writer.drain()
        first = json.loads(await reader.readline())
        second = json.loads(await reader.readline())
        writer.close()
        await writer.wait_closed()
        assert first == {"ok": False, "error": "not a JSON request line"}
        assert second["ok"] is False and "op" in second["error"]
        assert (await control.call(config, "ping"))["accounts"] == ["ops"]
        # an ask where no account talks to other agents: refused, one sentence, nothing stored
        asked = await control.call(config, "ask", peer="someone", question="status?")
        assert asked["state"] == "refused" and asked["code"] == "no_peers"
        assert "no account of this serve talks to other agents" in asked["description"]
        with pytest.raises(control.ControlError, match="ask: bad arguments"):
            await control.call(config, "ask", question="who?")
        assert await _board.store.asks() == []
    assert platform.texts("c1") == []


async def test_a_socket_left_by_a_killed_serve_is_replaced_and_a_live_one_is_not_taken(
    tmp_path: Path,
) -> None:
    config = load_config(write_config(tmp_path, FAKE))
    path = control.socket_path(config.store.path)
    assert path is not None
    path.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # bound, never listening: what a SIGKILLed serve leaves
    stale.close()
    with pytest.raises(control.ControlUnavailable):
        await control.call(config, "ping")
    async for board in running(config):
        assert (await control.call(config, "ping"))["pid"] == os.getpid()
        second = control.ControlServer(board, path)
        assert await second.start() is False  # the first serve keeps its socket
        assert (await control.call(config, "ping"))["accounts"] == ["ops"]


async def test_plugins_add_operations(tmp_path: Path) -> None:
    class Plugin:
        @hookimpl
        def register_control_ops(self, register: Any) -> None:
            async def accounts(board: Switchboard, args: Any) -> dict[str, Any]:
                return {"accounts": sorted(board.accounts), "echo": args.get("word")}

            register("test.accounts", accounts)

    pm = get_plugin_manager()
    pm.register(Plugin(), name="test-control-op")
    try:
        config = load_config(write_config(tmp_path, FAKE))
        async for _board in running(config):
            got = await control.call(config, "test.accounts", word="hi")
            assert got == {"accounts": ["ops"], "echo": "hi"}
    finally:
        pm.unregister(name="test-control-op")


async def test_an_operations_error_never_hands_a_registered_secret_to_the_client(
    tmp_path: Path,
) -> None:
    from backchannel.errors import DeliveryError
    from backchannel.secrets import register_secret

    secret = "sk-control-" + os.urandom(8).hex()
    register_secret(secret)

    class Plugin:
        @hookimpl
        def register_control_ops(self, register: Any) -> None:
            async def leaky(board: Switchboard, args: Any) -> dict[str, Any]:
                if args.get("kind") == "value":
                    raise ValueError(f"bad token {secret}")
                raise DeliveryError(f"the platform said: token {secret} is revoked")

            register("test.leaky", leaky)

    pm = get_plugin_manager()
    pm.register(Plugin(), name="test-control-leaky")
    try:
        config = load_config(write_config(tmp_path, FAKE))
        async for _board in running(config):
            for kind in ("error", "value"):
                with pytest.raises(control.ControlError) as refused:
                    await control.call(config, "test.leaky", kind=kind)
                assert secret not in str(refused.value) and "***" in str(refused.value)
    finally:
        pm.unregister(name="test-control-leaky")


def test_a_long_store_path_gets_a_socket_in_the_temp_dir(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120) / "bc.db"
    path = control.socket_path(str(deep))
    assert path is not None and len(str(path)) < 108
    assert path == control.socket_path(str(deep))  # stable: client and serve agree
    assert control.socket_path(":memory:") is None


async def test_cli_send_in_another_process_reaches_an_open_web_page_live(tmp_path: Path) -> None:
    config_path = write_config(tmp_path, WEBCHAT)
    config = load_config(config_path)
    async for board in running(config):
        url = _page_url(board)
        async with FakeBrowser(url, name="Ada") as page:
            await page.say("hello")
            await page.wait_for(lambda f: f["type"] == "message" and f["role"] == "agent", 15)
            agent_messages = len(page.agent_texts())
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "backchannel",
                "send",
                "web",
                page.chat,
                "an operator says hi",
                "-c",
                str(config_path),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, err.decode()
            assert out.decode().startswith(f"web/{page.chat}: sent as #")
            assert "no serve is running" not in err.decode()
            # the page shows it without a reload: pushed by the serve that owns the socket
            await page.wait_for(
                lambda f: f["type"] == "message" and f.get("text") == "an operator says hi", 15
            )
            assert len(page.agent_texts()) == agent_messages + 1


def test_cli_send_without_a_serve_says_the_page_shows_it_on_next_load(tmp_path: Path) -> None:
    config_path = write_config(tmp_path, WEBCHAT)
    chat = asyncio.run(_open_chat(load_config(config_path)))
    result = CliRunner().invoke(
        main, ["send", "web", chat, "after hours", "-c", str(config_path)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"web/{chat}: sent as #")
    assert "no serve is running on this store" in result.stderr
    assert "when it next loads" in result.stderr


def _page_url(board: Switchboard) -> str:
    url: str = getattr(board.accounts["web"].adapter, "url")  # noqa: B009 (webchat-only attribute)
    return url


async def _open_chat(config: Config) -> str:
    async for board in running(config):
        async with FakeBrowser(_page_url(board)) as page:
            await page.say("hello")
            await page.wait_for(lambda f: f["type"] == "message" and f["role"] == "agent", 15)
            return page.chat
    raise AssertionError("serve did not start")


async def _fake_serve(path: Path, answer: bytes | None) -> asyncio.AbstractServer:
    """A socket that takes one request, then answers `answer` (None: just closes)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        if answer is not None:
            writer.write(answer)
            await writer.drain()
        writer.close()

    path.parent.mkdir(parents=True, exist_ok=True)
    return await asyncio.start_unix_server(handle, path=str(path))


async def _send_beside(config: Any, config_path: Path, answer: bytes | None) -> Any:
    """What `backchannel send` does beside a fake serve that answers `answer`."""
    path = control.socket_path(config.store.path)
    assert path is not None
    server = await _fake_serve(path, answer)
    try:
        return await asyncio.to_thread(
            CliRunner().invoke, main, ["send", "ops", "c1", "pay it", "-c", str(config_path)]
        )
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("answer", [None, b'{"ok": tr\n', b"[1, 2]\n"])
async def test_a_serve_that_took_a_send_and_gave_no_answer_is_never_sent_around(
    tmp_path: Path, platform: FakePlatform, answer: bytes | None
) -> None:
    """It may have sent: ControlLost, not ControlUnavailable (whose callers send directly),
    and `backchannel send` reports the send uncertain, in one line, and sends nothing."""
    config_path = write_config(tmp_path, FAKE)
    config = load_config(config_path)
    path = control.socket_path(config.store.path)
    assert path is not None
    server = await _fake_serve(path, answer)
    try:
        with pytest.raises(control.ControlLost, match="it may have done it"):
            await control.call(config, "send", address={"account": "ops", "chat": "c1"}, text="x")
    finally:
        server.close()
        await server.wait_closed()
    result = await _send_beside(config, config_path, answer)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout.startswith("ops/c1: delivery uncertain (")
    assert "Traceback" not in result.output
    assert platform.sent == []  # not sent around the serve that may have sent it


async def test_a_stopping_serve_answers_the_send_it_took_before_it_closes(
    tmp_path: Path, platform: FakePlatform
) -> None:
    """A send handed over just before serve stops is finished and answered, not cut off
    (which left it uncertain on both sides)."""
    config = load_config(write_config(tmp_path, FAKE))
    release, sending = asyncio.Event(), asyncio.Event()
    async for board in running(config):
        adapter = board.accounts["ops"].adapter
        real_send = adapter.send

        async def slow_send(outbound: Any, real_send: Any = real_send) -> Any:
            sending.set()
            await release.wait()
            return await real_send(outbound)

        adapter.send = slow_send  # type: ignore[method-assign]
        # a second control server on this board, at the socket of a store path of its own
        other = tmp_path / "other" / "bc.db"
        path = control.socket_path(str(other))
        assert path is not None
        path.parent.mkdir(parents=True)
        server = control.ControlServer(board, path)
        assert await server.start()
        address = {"account": "ops", "chat": "c1", "thread": None}
        call = asyncio.create_task(control.call(str(other), "send", address=address, text="late"))
        await asyncio.wait_for(sending.wait(), 15)
        stopping = asyncio.create_task(server.stop())
        await asyncio.sleep(0)  # the stop has begun: it waits for the request taken
        assert not stopping.done()
        release.set()
        sent = await asyncio.wait_for(call, 15)
        await asyncio.wait_for(stopping, 15)
        assert sent["state"] == "sent"
    assert platform.texts("c1") == ["late"]


async def test_a_listener_of_another_user_gets_nothing_and_nothing_is_sent_around_it(
    tmp_path: Path, platform: FakePlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone else holds the socket where the client looks: the client writes nothing to
    it (ControlRefused), and `backchannel send` fails in one line rather than sending
    directly as if no serve ran (which would hide the takeover)."""
    config_path = write_config(tmp_path, FAKE)
    monkeypatch.setattr(control, "_expected_uid", lambda: os.getuid() + 1)  # not us
    result = await _send_beside(
        load_config(config_path), config_path, b'{"ok": true, "state": "sent"}\n'
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "not sent:" in result.stdout and "uid" in result.stdout
    assert platform.sent == []


async def test_a_client_finds_its_serve_wherever_a_serve_of_its_user_may_have_put_it(
    tmp_path: Path,
) -> None:
    """The socket is beside the store, and the store's folder has become group-writable
    since (so a client now works out the private directory first): the client still
    reaches its serve there, and never sends on its own beside it."""
    store = tmp_path / "shared" / "bc.db"
    store.parent.mkdir()
    beside = store.with_name("bc.db.ctl")
    server = await _fake_serve(beside, b'{"ok": true, "result": {"pid": 1}}\n')
    try:
        store.parent.chmod(0o775)
        assert control.socket_path(str(store)) != beside  # where a serve would put it now
        assert await control.call(str(store), "status") == {"pid": 1}
    finally:
        server.close()
        await server.wait_closed()


async def test_a_second_serve_on_one_store_is_refused_until_the_first_ends_however_it_ends(
    tmp_path: Path, platform: FakePlatform
) -> None:
    """Two serves on one SQLite store would both poll its accounts and answer every message
    twice: the second refuses before it opens anything, naming the first's pid. A serve
    killed with SIGKILL holds nothing: the kernel drops the lock with the process."""
    import signal

    from backchannel.app import StoreInUse

    config = load_config(write_config(tmp_path, "[server]\nport = 0\n" + FAKE))
    async for _board in running(config):
        with pytest.raises(StoreInUse, match=rf"another serve is running .* \(pid {os.getpid()}\)"):
            await serve(config, stop=asyncio.Event())
    async for _board in running(config):  # the first stopped: the next one starts
        pass
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys, time; from backchannel.app import _hold_the_store as hold\n"
        "hold(sys.argv[1]); print('held', flush=True); time.sleep(120)",
        config.store.path,
        stdout=asyncio.subprocess.PIPE,
    )
    assert holder.stdout is not None
    assert await asyncio.wait_for(holder.stdout.readline(), 30) == b"held\n"
    with pytest.raises(StoreInUse, match=rf"\(pid {holder.pid}\)"):
        await serve(config, stop=asyncio.Event())
    holder.send_signal(signal.SIGKILL)
    await holder.wait()
    async for _board in running(config):
        pass


async def test_the_serve_lock_is_the_files_whatever_names_it_and_never_outlives_a_refusal(
    tmp_path: Path, platform: FakePlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store named through a symlink is the same store: the second serve refuses. A serve
    that refuses later in its start (an unsafe socket folder) lets the lock go. In a folder
    other users may write to, the lock is not made there (anyone could make it first)."""
    from backchannel.app import StoreInUse, _hold_the_store

    config = load_config(write_config(tmp_path, "[server]\nport = 0\n" + FAKE))
    real = Path(config.store.path)
    real.parent.mkdir(parents=True, exist_ok=True)
    link = tmp_path / "link.db"
    link.symlink_to(real)
    async for _board in running(config):
        with pytest.raises(StoreInUse):
            _hold_the_store(str(link))
    # refused after the lock was taken: the lock is let go with the refusal
    unsafe = control.ControlUnsafe("refusing to open the control socket: test")

    def refuse(self: control.ControlServer) -> None:
        raise unsafe

    monkeypatch.setattr(control.ControlServer, "prepare", refuse)
    for _ in range(2):
        with pytest.raises(control.ControlUnsafe):
            await serve(config, stop=asyncio.Event())
    monkeypatch.undo()
    held = _hold_the_store(str(real))
    assert held is not None
    os.close(held)
    # a shared folder: the lock goes where the control socket goes, never beside the store
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    store = shared / "bc.db"
    held = _hold_the_store(str(store))
    try:
        assert not (shared / "bc.db.lock").exists()
        socket = control.socket_path(str(store.resolve()))
        assert socket is not None and socket.with_suffix(".lock").exists()
    finally:
        if held is not None:
            os.close(held)

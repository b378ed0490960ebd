"""The control socket on a host with other users: where it lives, who may hold it, idle clients.

- `serve` puts the socket only in a directory no other user can write into: beside the
  store unless that folder is shared, else a private directory it creates ``0700``
  (``$XDG_RUNTIME_DIR/backchannel`` first, else ``<tmp>/backchannel-<uid>``). One that
  is already there and not this user's own ``0700`` directory makes it refuse to start.
- A client sends nothing to a listener that runs as another user (`ControlRefused`, a
  `ControlUnavailable`: nothing was sent, so acting directly stays safe).
- A connection that sends no complete request line in time is closed; a request taken
  is answered however long it runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from backchannel import control

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


def _board() -> Any:
    """What the built-in `ping` reads of a Switchboard (these tests need no more)."""
    return cast(Any, SimpleNamespace(accounts={"ops": None}))


@pytest.fixture
def short(tmp_path: Path) -> Iterator[Path]:
    """A directory with a short path (a socket's path must fit in 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="bc-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def tmp(short: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp dir like /tmp (sticky, world-writable) as TMPDIR, with no XDG_RUNTIME_DIR."""
    shared = short / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    return shared


def _long_store(tmp_path: Path) -> str:
    """A store whose `<store>.ctl` is too long for a unix socket."""
    store = tmp_path / ("d" * 120) / "bc.db"
    store.parent.mkdir(mode=0o700)
    return str(store)


def _fallback(tmp: Path) -> Path:
    return tmp / f"backchannel-{os.getuid()}"


# where the socket lives -----------------------------------------------------------------


async def test_serve_creates_the_fallback_directory_0700_and_a_client_reaches_it(
    tmp_path: Path, tmp: Path
) -> None:
    store = _long_store(tmp_path)
    path = control.socket_path(store)
    assert path is not None and path.parent == _fallback(tmp)
    server = control.ControlServer(_board(), path)
    assert await server.start()
    try:
        info = os.lstat(path.parent)
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
        assert info.st_uid == os.getuid()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert (await control.call(store, "ping"))["accounts"] == ["ops"]
    finally:
        await server.stop()


def _plant(kind: str, directory: Path, tmp_path: Path) -> None:
    if kind == "symlink":  # to a 0700 directory of ours: still not the directory itself
        target = tmp_path / "elsewhere"
        target.mkdir(mode=0o700)
        directory.symlink_to(target)
    elif kind == "file":
        directory.write_text("")
    else:
        directory.mkdir()
        directory.chmod({"world": 0o777, "group": 0o750, "other owner": 0o700}[kind])
        if kind == "other owner":
            os.chown(directory, NOBODY, NOBODY)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("world", "has mode 0777"),
        ("group", "has mode 0750"),
        ("symlink", "is a symbolic link"),
        ("file", "is not a directory"),
        pytest.param("other owner", f"belongs to uid {NOBODY}, not to this user", marks=as_root),
    ],
)
async def test_serve_refuses_a_fallback_directory_someone_else_could_have_made(
    tmp_path: Path, tmp: Path, kind: str, reason: str
) -> None:
    store = _long_store(tmp_path)
    path = control.socket_path(store)
    assert path is not None
    _plant(kind, path.parent, tmp_path)
    before = os.lstat(path.parent)
    server = control.ControlServer(_board(), path)
    with pytest.raises(control.ControlUnsafe) as refused:
        await server.start()
    message = str(refused.value)
    assert "\n" not in message
    assert f"refusing to open the control socket in {path.parent}: it {reason}" in message
    if kind == "other owner":  # not ours to remove: no advice that would fail
        assert "rm -r" not in message
    else:
        assert f"remove it (rm -r {path.parent})" in message
    assert "XDG_RUNTIME_DIR or TMPDIR" in message
    # nothing was made or changed there: no socket for another user to take
    assert not os.path.lexists(path)
    assert not (tmp_path / "elsewhere" / path.name).exists()
    after = os.lstat(path.parent)
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)


async def test_xdg_runtime_dir_is_preferred_when_it_is_private(
    tmp_path: Path, short: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _long_store(tmp_path)
    runtime = short / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    path = control.socket_path(store)
    assert path is not None and path.parent == runtime / "backchannel"
    server = control.ControlServer(_board(), path)
    assert await server.start()
    try:
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
        assert (await control.call(store, "ping"))["accounts"] == ["ops"]
    finally:
        await server.stop()
    assert not _fallback(tmp).exists()
    # one that other users may use is passed over for the temp dir
    runtime.chmod(0o755)
    assert control.socket_path(store) == _fallback(tmp) / path.name
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/run")
    assert control.socket_path(store) == _fallback(tmp) / path.name


async def test_a_client_with_xdg_runtime_dir_finds_a_serve_started_without_it(
    tmp_path: Path, short: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _long_store(tmp_path)
    path = control.socket_path(store)  # no XDG_RUNTIME_DIR: the temp dir
    assert path is not None
    server = control.ControlServer(_board(), path)
    assert await server.start()
    try:
        runtime = short / "run"
        runtime.mkdir(mode=0o700)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        assert control.socket_path(store) == runtime / "backchannel" / path.name
        assert (await control.call(store, "ping"))["accounts"] == ["ops"]
        # and a second serve, started with it, does not take a second socket
        second = control.ControlServer(_board(), runtime / "backchannel" / path.name)
        assert await second.start() is False
    finally:
        await server.stop()


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
async def test_a_store_in_a_shared_folder_gets_its_socket_in_the_private_directory(
    tmp_path: Path, tmp: Path, mode: int
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    store = str(folder / "bc.db")
    path = control.socket_path(store)
    assert path is not None and path.parent == _fallback(tmp)
    server = control.ControlServer(_board(), path)
    assert await server.start()
    try:
        assert (await control.call(store, "ping"))["accounts"] == ["ops"]
        assert not (folder / "bc.db.ctl").exists()
    finally:
        await server.stop()
    # asked to listen in the shared folder all the same, serve refuses
    with pytest.raises(control.ControlUnsafe, match="is writable by other users"):
        await control.ControlServer(_board(), folder / "bc.db.ctl").start()
    assert not (folder / "bc.db.ctl").exists()
    # a folder only its owner writes to keeps the socket beside the store
    folder.chmod(0o755)
    assert control.socket_path(store) == folder / "bc.db.ctl"


# who holds the socket -----------------------------------------------------------------------


async def _recording_listener(path: Path) -> tuple[asyncio.AbstractServer, asyncio.Future[bytes]]:
    """A listener that records all a client sends, until it closes."""
    received: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        if not received.done():
            received.set_result(data)
        writer.close()

    return await asyncio.start_unix_server(handle, path=str(path)), received


def _store_in(tmp_path: Path) -> tuple[str, Path]:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    store = str(folder / "bc.db")
    path = control.socket_path(store)
    assert path == folder / "bc.db.ctl"
    return store, path


def _assert_refused_before_sending(refused: pytest.ExceptionInfo[Any], path: Path) -> None:
    error = refused.value
    assert isinstance(error, control.ControlUnavailable)  # callers may act directly...
    assert not isinstance(error, control.ControlLost)  # ...because nothing was sent
    message = str(error)
    assert "\n" not in message
    assert f"refused the control socket {path}: it is held by" in message
    assert "nothing was sent" in message


async def test_a_client_sends_nothing_to_a_listener_that_is_not_its_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The uid a client expects is injectable: here the (real) listener is "someone else"."""
    store, path = _store_in(tmp_path)
    listener, received = await _recording_listener(path)
    try:
        monkeypatch.setattr(control, "_expected_uid", lambda: os.getuid() + 1)
        with pytest.raises(control.ControlRefused) as refused:
            await control.call(store, "send", conversation="ops/c1", text="secret plans", timeout=5)
        _assert_refused_before_sending(refused, path)
        assert f"held by uid {os.getuid()}, not by this user (uid {os.getuid() + 1})" in str(
            refused.value
        )
        assert await asyncio.wait_for(received, 5) == b""
    finally:
        listener.close()
        await listener.wait_closed()


async def test_without_so_peercred_the_socket_files_owner_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, path = _store_in(tmp_path)
    server = control.ControlServer(_board(), path)
    assert await server.start()
    monkeypatch.delattr(socket, "SO_PEERCRED", raising=False)  # as on macOS
    try:
        assert (await control.call(store, "ping"))["accounts"] == ["ops"]
        monkeypatch.setattr(control, "_expected_uid", lambda: os.getuid() + 1)
        with pytest.raises(control.ControlRefused) as refused:
            await control.call(store, "ping")
        _assert_refused_before_sending(refused, path)
        if os.geteuid() == 0:  # a socket file another user owns
            monkeypatch.setattr(control, "_expected_uid", os.getuid)
            os.chown(path, NOBODY, NOBODY)
            with pytest.raises(control.ControlRefused, match=f"held by uid {NOBODY}"):
                await control.call(store, "ping")
    finally:
        await server.stop()


LISTEN_AS_NOBODY = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])  # as root: the socket file is root's, as the client's own would be
os.chmod(sys.argv[1], 0o666)
os.setgroups([]); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[2]))
s.listen(5)  # as nobody: what SO_PEERCRED reports to a client
print("ready", flush=True)
c, _ = s.accept()
data = b""
while chunk := c.recv(65536):
    data += chunk
print(repr(data), flush=True)
"""


@as_root
async def test_a_client_refuses_a_listener_running_as_another_user(tmp_path: Path) -> None:
    """The attack: another user's process listens where the client looks. The socket file
    is even owned by the client's user, so only the listener's credentials tell."""
    store, path = _store_in(tmp_path)
    spy = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        LISTEN_AS_NOBODY,
        str(path),
        str(NOBODY),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert spy.stdout is not None
        assert await asyncio.wait_for(spy.stdout.readline(), 15) == b"ready\n"
        assert os.lstat(path).st_uid == os.getuid()
        with pytest.raises(control.ControlRefused) as refused:
            await control.call(store, "send", conversation="ops/c1", text="secret plans", timeout=5)
        _assert_refused_before_sending(refused, path)
        assert f"held by uid {NOBODY}" in str(refused.value)
        captured = await asyncio.wait_for(spy.stdout.readline(), 15)
        assert captured == b"b''\n"  # it got a connection and not one byte
    finally:
        if spy.returncode is None:
            spy.kill()
        await spy.wait()


# idle clients --------------------------------------------------------------------------------


async def _closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before closing the connection (waits for the close)."""
    return await asyncio.wait_for(reader.read(), 10)


async def test_a_connection_that_sends_no_request_line_in_time_is_closed(tmp_path: Path) -> None:
    store, path = _store_in(tmp_path)
    server = control.ControlServer(_board(), path, idle_timeout=0.2)
    assert await server.start()
    try:
        silent_reader, silent = await asyncio.open_unix_connection(str(path))
        partial_reader, partial = await asyncio.open_unix_connection(str(path))
        partial.write(b'{"op": "pi')  # never finished
        await partial.drain()
        assert await _closed(silent_reader) == b""
        assert await _closed(partial_reader) == b""
        # one that asked, was answered and then went quiet is closed too
        asked_reader, asked = await asyncio.open_unix_connection(str(path))
        asked.write(b'{"op": "ping"}\n')
        await asked.drain()
        answered = await _closed(asked_reader)
        assert answered.count(b"\n") == 1 and b'"ok": true' in answered
        for writer in (silent, partial, asked):
            writer.close()
        assert (await control.call(store, "ping"))["accounts"] == ["ops"]
    finally:
        await server.stop()


async def test_a_slow_request_outlives_the_idle_timeout_and_is_answered_at_stop(
    tmp_path: Path,
) -> None:
    store, path = _store_in(tmp_path)
    server = control.ControlServer(_board(), path, idle_timeout=0.2)
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(board: Any, args: Any) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return {"done": True}

    server.register("test.slow", slow)
    assert await server.start()
    try:
        call = asyncio.create_task(control.call(store, "test.slow", timeout=30))
        await asyncio.wait_for(entered.wait(), 10)
        # a connection opened after the slow request began is closed for idling: the
        # idle timeout has passed for the slow one too, which is still being handled
        idle_reader, idle = await asyncio.open_unix_connection(str(path))
        assert await _closed(idle_reader) == b""
        idle.close()
        assert not call.done()
        stopping = asyncio.create_task(server.stop())
        await asyncio.sleep(0)
        assert not stopping.done()  # a stop waits for the request taken
        release.set()
        assert await asyncio.wait_for(call, 10) == {"done": True}
        await asyncio.wait_for(stopping, 10)
    finally:
        release.set()
        await server.stop()


async def test_a_socket_path_too_long_for_a_unix_socket_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a long store path and a long TMPDIR: before, "OSError: AF_UNIX path too long", which
    # named neither the socket nor the fix
    long_tmp = tmp_path / ("t" * 100)
    long_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(long_tmp))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    path = control.socket_path(_long_store(tmp_path))
    assert path is not None and len(os.fsencode(path)) > 107
    with pytest.raises(control.ControlUnsafe) as refused:
        control.ControlServer(_board(), path).prepare()
    message = str(refused.value)
    assert "\n" not in message
    assert f"cannot open the control socket {path}: the path is" in message
    assert "longer than a unix socket's 107" in message and "XDG_RUNTIME_DIR or TMPDIR" in message


@as_root
async def test_a_fallback_folder_another_user_made_first_is_passed_over_for_one_at_home(
    tmp_path: Path, tmp: Path, short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another user made <temp dir>/backchannel-<uid> first: before, serve refused to start
    # (rightly: the folder is theirs) and only they could remove it, a way to keep anyone's
    # serve down. Now the socket goes to this user's home, where no one else can make it
    home = short / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    _fallback(tmp).mkdir(mode=0o700)
    os.chown(_fallback(tmp), NOBODY, NOBODY)
    store = _long_store(tmp_path)
    path = control.socket_path(store)
    assert path is not None and path.parent == home / ".cache" / "backchannel" / "run"
    server = control.ControlServer(_board(), path)
    assert await server.start()
    try:
        info = os.lstat(path.parent)
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
        assert (await control.call(store, "ping"))["accounts"] == ["ops"]
    finally:
        await server.stop()

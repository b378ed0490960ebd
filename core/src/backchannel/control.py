"""The control socket: other processes hand work to the `serve` that owns the accounts.

A `backchannel send` (or `notify`, or an MCP server) runs in its own process,
but the account's connection — the Telegram poller, the Discord gateway, the
web chat's open pages — lives in `serve`. When a `serve` runs on a store it
listens on a unix socket beside the store file; a client asks it to do the
work, so the one process that owns the connection sends and open pages update
live. When nothing answers, `call` raises `ControlUnavailable` and the caller
acts directly on the store and the adapter (and says so).

The protocol is one JSON object per line each way: ``{"op": ..., "args": {...}}``
answered by ``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": "..."}``.
A connection that sends no complete request line within `IDLE_TIMEOUT` is closed.

Who may use it, both ways:

- The socket is created ``0600`` beside the store file, unless that path is too long
  for a unix socket or the store's folder is one another user can write into (group-
  or world-writable, or another user's): then it goes in a directory only this user
  may use, ``$XDG_RUNTIME_DIR/backchannel`` (when that is this user's, ``0700``) or
  else ``<temp dir>/backchannel-<uid>``. `serve` creates that directory ``0700``; one
  that is already there must be a real directory of this user's with no group or
  other access, or `serve` refuses to start (`ControlUnsafe`: someone else may have
  made it to take the socket).
- `serve` refuses a connection from another user id (``SO_PEERCRED``).
- A client sends nothing until it knows the listener runs as its own user id
  (``SO_PEERCRED``; where that does not exist, the socket file's owner): anything
  else is refused (`ControlRefused`, a kind of `ControlUnavailable`: nothing was sent).

Built in: ``ping``, ``send``, ``edit``, ``react`` and ``ask``; plugins add operations
through the ``register_control_ops`` hook.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import stat
import struct
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import BackchannelError, ConfigError, StoreError
from .secrets import redact
from .terminal import terminal_safe

if TYPE_CHECKING:
    from .config import Config
    from .model import Conversation
    from .switchboard import Switchboard

__all__ = [
    "ControlError",
    "ControlLost",
    "ControlRefused",
    "ControlServer",
    "ControlUnavailable",
    "ControlUnsafe",
    "Handler",
    "call",
    "socket_path",
]

log = logging.getLogger("backchannel.control")

#: ``async def handler(board, args) -> dict``: one control operation
Handler = Callable[["Switchboard", Mapping[str, Any]], Awaitable[Mapping[str, Any]]]

MAX_LINE = 1024 * 1024
#: how long a stop waits for requests already taken to be answered
STOP_GRACE = 30.0
#: a connection that sends no complete request line within this long is closed
IDLE_TIMEOUT = 30.0
# sun_path holds 108 bytes on Linux; longer store paths get a socket in a private dir
_MAX_SOCKET_PATH = 100
_HOW_TO_FIX = (
    "set XDG_RUNTIME_DIR or TMPDIR to a directory only you can use,"
    " or give the store a shorter path in a folder only you can write to"
)


class ControlUnavailable(BackchannelError):
    """No `serve` answers on this store's control socket."""


class ControlRefused(ControlUnavailable):
    """What listens on the control socket is not this user's `serve`: nothing was sent to it."""


class ControlUnsafe(BackchannelError):
    """`serve` cannot open its control socket where only its user could use it (another
    user could take it over and read what clients send): it refuses to start."""


class ControlLost(BackchannelError):
    """The request reached the `serve`, which then gave no readable answer (it stopped or
    died mid-operation): the operation may have happened. Never act directly after it."""


class ControlError(BackchannelError):
    """The `serve` answered, but refused or failed the operation (the message says why)."""


def socket_path(store_path: str) -> Path | None:
    """Return where the control socket of the store at `store_path` lives (None: in memory).

    Beside the store (``<store>.ctl``) when that path fits a unix socket and the
    store's folder is not shared; else in this user's private directory (see
    `_private_dirs`), named by a digest of the store's path.
    """
    paths = _socket_paths(store_path)
    return paths[0] if paths else None


def _socket_paths(store_path: str) -> list[Path]:
    """Where the control socket of a store may be: where `serve` puts it first, then
    where a `serve` started with another XDG_RUNTIME_DIR would have put it."""
    if not store_path or store_path == ":memory:":
        return []
    store = Path(store_path).expanduser().absolute()
    beside = store.with_name(store.name + ".ctl")
    if _fits(beside) and not _shared(beside.parent):
        return [beside]
    name = hashlib.sha256(os.fsencode(store)).hexdigest()[:24] + ".ctl"
    # a folder another user made first (in the shared temp dir) is not ours to use or to
    # remove: the next one is taken (in this user's home), rather than refusing to start
    return [
        directory / name for directory in _private_dirs() if not _taken_by_another(directory)
    ] or [directory / name for directory in _private_dirs()]


def _taken_by_another(directory: Path) -> bool:
    """True when `directory` exists and is another user's (not root's): only they may
    remove it, so it cannot be made private for this one."""
    try:
        owner = os.lstat(directory).st_uid
    except OSError:
        return False
    return owner not in (os.getuid(), 0)


def _client_paths(store_path: str) -> list[Path]:
    """Every place a `serve` of this user may have put the store's socket, where it
    would put it first: beside the store, and in each private directory it may have
    chosen (its XDG_RUNTIME_DIR may differ from the client's: a systemd user service
    beside a cron job). A client tries them all before it says no serve runs, so it
    never sends on its own beside a running `serve`; each listener's user is checked."""
    paths = _socket_paths(store_path)
    if not paths:
        return []
    store = Path(store_path).expanduser().absolute()
    beside = store.with_name(store.name + ".ctl")
    name = hashlib.sha256(os.fsencode(store)).hexdigest()[:24] + ".ctl"
    more = [beside] if _fits(beside) else []
    runtime = [os.environ.get("XDG_RUNTIME_DIR", ""), f"/run/user/{os.getuid()}"]
    more += [Path(d) / "backchannel" / name for d in runtime if os.path.isabs(d)]
    more += [directory / name for directory in _private_dirs()]
    for path in more:
        if path not in paths and _fits(path):
            paths.append(path)
    return paths


def _private_dirs() -> list[Path]:
    """The directories for sockets that cannot sit beside their store, best first:
    ``$XDG_RUNTIME_DIR/backchannel`` when XDG_RUNTIME_DIR is this user's own ``0700``
    directory (and the socket's path fits), then ``<temp dir>/backchannel-<uid>``, then
    ``~/.cache/backchannel/run`` (used when another user made the temp dir's first)."""
    dirs = []
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and _not_private(Path(runtime)) is None:
        candidate = Path(runtime) / "backchannel"
        if _fits(candidate / ("0" * 24 + ".ctl")):
            dirs.append(candidate)
    dirs.append(Path(tempfile.gettempdir()) / f"backchannel-{os.getuid()}")
    # last: in this user's home, where no other user can make it first
    home = Path(os.path.expanduser("~"))
    if home.is_absolute() and str(home) != "/":
        candidate = home / ".cache" / "backchannel" / "run"
        if _fits(candidate / ("0" * 24 + ".ctl")):
            dirs.append(candidate)
    return dirs


def _fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= _MAX_SOCKET_PATH


def _shared(directory: Path) -> bool:
    """True when another user may create or replace files in `directory`: it is group- or
    world-writable, or belongs to a user other than this one and root (a missing or
    unreadable directory is not: the socket cannot be there, or reached, anyway)."""
    try:
        info = os.stat(directory)
    except OSError:
        return False
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return True
    return info.st_uid not in (os.getuid(), 0)


def _not_private(directory: Path) -> str | None:
    """Why `directory` is not one only this user may use (None: it is): it must be a real
    directory (not a symbolic link), this user's, with no group or other permission."""
    try:
        info = os.lstat(directory)
    except OSError as error:
        return f"cannot be examined ({error.strerror or error})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.getuid():
        return f"belongs to uid {info.st_uid}, not to this user (uid {os.getuid()})"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        return f"has mode {mode:04o} (group or others may use it; it must be 0700)"
    return None


def _owner(path: Path) -> int | None:
    """The uid owning `path` itself (not what a symbolic link names), None if unknown."""
    try:
        return os.lstat(path).st_uid
    except OSError:
        return None


def _expected_uid() -> int:
    """The user id a client wants its `serve` to run as: its own (tests replace it)."""
    return os.getuid()


async def call(
    target: Config | str | Path, op: str, *, timeout: float = 30.0, **args: Any
) -> dict[str, Any]:
    """Ask the `serve` on `target` (a Config or a store path) to run `op`; return its result.

    Raises `ControlUnavailable` when no `serve` listens (act directly instead; its kind
    `ControlRefused` when what listens is another user's, to which nothing was sent),
    `ControlError` when it answered with an error, `ControlLost` when it took the
    request and gave no readable answer, TimeoutError after `timeout` (with either of
    the last two the operation may have happened: never act directly then).
    """
    store_path = str(target) if isinstance(target, str | Path) else target.store.path
    reader, writer = await _connect(store_path, timeout)
    lost = (
        f"the serve on {store_path} took {op!r} and closed the connection without answering;"
        " it may have done it"
    )
    try:
        request = json.dumps({"op": op, "args": args}, ensure_ascii=False) + "\n"
        writer.write(request.encode("utf-8"))
        try:
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"the serve on {store_path} did not answer {op!r} within {timeout:g}s"
            ) from None
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            raise ControlLost(lost) from None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if not line:
        raise ControlLost(lost)
    try:
        answer = json.loads(line)
    except (ValueError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        raise ControlLost(
            f"the serve on {store_path} answered {op!r} with something unreadable;"
            " it may have done it"
        )
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error") or "the serve refused the request"))
    result: dict[str, Any] = answer.get("result") or {}
    return result


async def _connect(
    store_path: str, timeout: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to this user's `serve` on the store; raise `ControlUnavailable` (nothing was
    sent) when none answers, `ControlRefused` when only another user's listener does."""
    unavailable: ControlUnavailable | None = None
    for path in _client_paths(store_path):
        if not os.path.lexists(path):
            continue
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=MAX_LINE), timeout
            )
        except (ConnectionRefusedError, FileNotFoundError):
            continue  # left behind by a serve that was killed
        except OSError as error:
            unavailable = unavailable or ControlUnavailable(
                f"cannot reach the serve on the store {store_path}: {error.strerror or error}"
            )
            continue
        problem = _listener_problem(writer, path)
        if problem is None:
            return reader, writer
        writer.close()  # before a byte of the request was written
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        log.warning("%s", problem)
        if not isinstance(unavailable, ControlRefused):
            unavailable = ControlRefused(problem)
    raise unavailable or ControlUnavailable(f"no serve is running on the store {store_path}")


def _listener_problem(writer: asyncio.StreamWriter, path: Path) -> str | None:
    """Why the listener at the other end of `writer` is not this user's `serve` (None: it
    is): its user id (``SO_PEERCRED``, else the socket file's owner) must be ours."""
    expected = _expected_uid()
    sock = writer.get_extra_info("socket")
    uid: int | None = None
    if sock is not None and getattr(socket, "SO_PEERCRED", None) is not None:
        uid = _peer_uid(sock)  # None: the kernel would not say, refused
    else:  # no SO_PEERCRED here: the socket file's owner is what can be told
        with contextlib.suppress(OSError):
            uid = os.lstat(path).st_uid
    if uid == expected:
        return None
    held_by = "an unknown user" if uid is None else f"uid {uid}"
    return (
        f"refused the control socket {path}: it is held by {held_by}, not by this user"
        f" (uid {expected}), so nothing was sent to it; another user may be posing as serve"
        f" (remove the socket and its directory if no serve of yours runs, or {_HOW_TO_FIX})"
    )


class ControlServer:
    """Listens on a store's control socket for one `Switchboard`.

    A connection that sends no complete request line within `idle_timeout` seconds
    is closed; a request taken is answered however long its operation runs.
    """

    def __init__(self, board: Switchboard, path: Path, *, idle_timeout: float = IDLE_TIMEOUT):
        self.board = board
        self.path = path
        self.idle_timeout = idle_timeout
        self.ops: dict[str, Handler] = dict(BUILTIN_OPS)
        self._server: asyncio.AbstractServer | None = None
        self._clients: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}
        #: requests being handled now, and an event set while there are none: a stop
        #: lets them answer first (a send cut off mid-way would be "uncertain" on both sides)
        self._handling = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def register(self, name: str, handler: Handler) -> None:
        """Add an operation (plugins, through the ``register_control_ops`` hook)."""
        if name in self.ops:
            raise ConfigError(f"control operation {name!r} is registered twice")
        self.ops[name] = handler

    async def start(self) -> bool:
        """Listen; return False (and log why) when another live `serve` already answers.

        Raises `ControlUnsafe` when the socket's directory is not one only this user
        may use (another user could take the socket over and read what clients send).
        """
        self.prepare()
        paths = [self.path]
        if self.path.parent in _private_dirs():  # a serve started with another XDG_RUNTIME_DIR
            paths += [directory / self.path.name for directory in _private_dirs()]
        for path in dict.fromkeys(paths):
            if os.path.lexists(path) and await _answers(path):
                log.warning(
                    "another serve answers on %s: this one does not take the control socket",
                    path,
                )
                return False
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left behind by a serve that was killed
        old_umask = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(
                self._connection, path=str(self.path), limit=MAX_LINE
            )
        finally:
            os.umask(old_umask)
        return True

    def prepare(self) -> None:
        """Create the socket's directory ``0700``, or make sure the one there is safe;
        raise `ControlUnsafe` (one line: what, where, how to fix) when it is not.

        `start` does it first; a caller may do it earlier, before anything else starts.
        """
        directory = self.path.parent
        private = directory in _private_dirs()
        if len(os.fsencode(self.path)) > _MAX_SOCKET_PATH + 7:  # sun_path: 108 with its NUL
            raise ControlUnsafe(
                f"cannot open the control socket {self.path}: the path is"
                f" {len(os.fsencode(self.path))} bytes, longer than a unix socket's 107;"
                f" {_HOW_TO_FIX}"
            )
        try:
            if private:  # in the temp dir, where anyone may have made it first
                directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # home's
                with contextlib.suppress(FileExistsError):
                    directory.mkdir(mode=0o700)
            else:
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise ControlUnsafe(
                f"cannot create the control socket's directory {directory}:"
                f" {error.strerror or error}"
            ) from None
        if private:
            problem = _not_private(directory)
            if problem is not None:
                mine = _owner(directory) == os.getuid()
                fix = f"remove it (rm -r {directory}) and start again, or " if mine else ""
                raise ControlUnsafe(
                    f"refusing to open the control socket in {directory}: it {problem}, so"
                    " another user could take the socket and read what clients send to serve;"
                    f" {fix}{_HOW_TO_FIX}"
                )
        elif _shared(directory):
            raise ControlUnsafe(
                f"refusing to open the control socket {self.path}: its directory {directory}"
                " is writable by other users, who could take the socket and read what clients"
                f" send to serve; {_HOW_TO_FIX}"
            )

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        # requests already taken are answered first (bounded): the board still runs, so a
        # send handed over is finished and its outcome told, not cut off and left uncertain
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), STOP_GRACE)
        # end open connections so their handlers return on their own (never cancel them:
        # asyncio's stream callback logs a cancelled handler as an error)
        for writer in self._clients.values():
            writer.close()
        if self._clients:
            await asyncio.wait(list(self._clients), timeout=5.0)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients[task] = writer
        try:
            if not _same_user(writer):
                await _answer(writer, {"ok": False, "error": "refused: another user"})
                return
            while True:
                try:
                    # the wait for a request is bounded, never the request's own handling
                    line = await asyncio.wait_for(reader.readline(), self.idle_timeout)
                except TimeoutError:
                    log.debug(
                        "control client sent no request line in %gs: closed", self.idle_timeout
                    )
                    return
                except (ValueError, asyncio.LimitOverrunError):
                    await _answer(writer, {"ok": False, "error": "request line too long"})
                    return
                if not line:
                    return
                self._handling += 1
                self._idle.clear()
                try:
                    await _answer(writer, await self._handle(line))
                finally:
                    self._handling -= 1
                    if not self._handling:
                        self._idle.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            log.debug("control client went away")
        finally:
            if task is not None:
                self._clients.pop(task, None)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _handle(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):
            return {"ok": False, "error": "not a JSON request line"}
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return {"ok": False, "error": 'a request is {"op": NAME, "args": {...}}'}
        op = request["op"]
        args = request.get("args") or {}
        handler = self.ops.get(op)
        if handler is None:
            known = ", ".join(sorted(self.ops))
            return {"ok": False, "error": f"unknown operation {op!r} (known: {known})"}
        if not isinstance(args, dict):
            return {"ok": False, "error": f"{op}: args must be an object"}
        try:
            result = await handler(self.board, args)
        except BackchannelError as error:
            # what a library said may quote a registered secret: never handed to a client
            return {"ok": False, "error": terminal_safe(redact(str(error)), one_line=True)}
        except (KeyError, TypeError, ValueError) as error:
            reason = terminal_safe(redact(f"{type(error).__name__}: {error}"), one_line=True)
            return {"ok": False, "error": f"{op}: bad arguments ({reason})"}
        except Exception as error:  # a bug: one line to the client, the traceback in the log
            log.exception("control operation %s failed", op)
            return {"ok": False, "error": f"{op} failed: {type(error).__name__}"}
        return {"ok": True, "result": dict(result)}


# built-in operations ----------------------------------------------------------------


async def _ping(board: Switchboard, args: Mapping[str, Any]) -> Mapping[str, Any]:
    return {"pid": os.getpid(), "accounts": sorted(board.accounts)}


async def _send(board: Switchboard, args: Mapping[str, Any]) -> Mapping[str, Any]:
    text = str(args["text"])
    if "address" in args:  # a chat that may have no conversation yet (`backchannel send`)
        conversation = await board.conversation_for(_address(args["address"]))
    else:
        conversation = await resolve_conversation(board, str(args["conversation"]))
    reply_to = args.get("reply_to")
    return await board.send_outcome(
        conversation,
        text,
        reply_to_seq=int(reply_to) if reply_to is not None else None,
        quiet=bool(args.get("quiet", False)),
        origin=str(args["origin"]) if args.get("origin") else None,
    )


async def _edit(board: Switchboard, args: Mapping[str, Any]) -> Mapping[str, Any]:
    seq, text = int(args["seq"]), str(args["text"])
    conversation = await resolve_conversation(board, str(args["conversation"]))
    return await board.edit_outcome(conversation, seq, text)


async def _react(board: Switchboard, args: Mapping[str, Any]) -> Mapping[str, Any]:
    seq, emoji = int(args["seq"]), str(args["text"])
    conversation = await resolve_conversation(board, str(args["conversation"]))
    return await board.react_outcome(conversation, seq, emoji)


async def _ask(board: Switchboard, args: Mapping[str, Any]) -> Mapping[str, Any]:
    """Ask another agent on behalf of a client outside any conversation (MCP's ask_agent).

    The same checks as the run tool (kill switch, messaging control, the
    ask's own), then the question is sent; the answer is matched and stored
    by this serve's ask coordinator and reported nowhere (the asker reads
    it). `accounts`, when given, limits which accounts may be asked through.
    A refusal is an answer with state "refused", not an error.
    """
    from .asks.tool import ask_controlled, peer_accounts
    from .orchestration import Refused, orchestrator_of

    peer, question = str(args["peer"]), str(args["question"]).strip()
    orchestrator = orchestrator_of(board)
    coordinator = orchestrator.asks if orchestrator is not None else None
    allowed = args.get("accounts")
    names = board.accounts if allowed is None else [str(name) for name in allowed]
    accounts = peer_accounts(coordinator, names) if coordinator is not None else []
    try:
        if orchestrator is None or coordinator is None or not accounts:
            raise Refused(
                "no_peers",
                "refused: no account of this serve talks to other agents (such as tiny.place),"
                " so there is no one to ask. Nothing was sent.",
            )
        if not question:
            raise Refused("empty", "refused: the question is empty. Nothing was sent.")
        outcome = await ask_controlled(
            coordinator,
            orchestrator.config,
            accounts,
            peer=peer,
            question=question,
            session=str(args["session"]) if args.get("session") else None,
            account=str(args["account"]) if args.get("account") else None,
            origin=None,
            trusted=True,  # the operator's own client, as for its sends
        )
    except Refused as refusal:
        log.info("ask through the control socket refused: %s", refusal.code)
        return {"state": "refused", "code": refusal.code, "description": str(refusal)}
    return {
        "state": outcome.state,
        "ask": outcome.ask.id,
        "conversation": outcome.conversation.address.key,
        "description": outcome.describe(),
    }


BUILTIN_OPS: dict[str, Handler] = {
    "ping": _ping,
    "send": _send,
    "edit": _edit,
    "react": _react,
    "ask": _ask,
}


async def resolve_conversation(board: Switchboard, reference: str) -> Conversation:
    """Return the stored conversation named by an id or key, on an account this board serves."""
    from .store import find_by_reference

    found = await find_by_reference(board.store, reference)
    if found is None:
        what = f"with id {reference}" if reference.isdigit() else reference
        raise StoreError(f"no conversation {what} (see `backchannel conversations`)")
    if found.address.account not in board.accounts:
        raise ConfigError(f"this serve has no account {found.address.account!r}")
    return found


# helpers --------------------------------------------------------------------------------


def _address(data: Any) -> Any:
    from .model import Address

    if not isinstance(data, dict) or not data.get("account") or not data.get("chat"):
        raise ValueError("address needs account and chat")
    return Address(str(data["account"]), str(data["chat"]), data.get("thread"))


async def _answer(writer: asyncio.StreamWriter, answer: Mapping[str, Any]) -> None:
    writer.write((json.dumps(answer, ensure_ascii=False, default=str) + "\n").encode("utf-8"))
    await writer.drain()


async def _answers(path: Path) -> bool:
    """Return True when a serve of this user's accepts connections on the socket at `path`."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), 2.0)
    except (OSError, TimeoutError):
        return False
    ours = _listener_problem(writer, path) is None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return ours


def _peer_uid(sock: Any) -> int | None:
    """The user id of the process at the other end of a unix socket (``SO_PEERCRED``);
    None where the platform cannot tell (no ``SO_PEERCRED``) or the query failed."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if sock is None or peercred is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def _same_user(writer: asyncio.StreamWriter) -> bool:
    sock = writer.get_extra_info("socket")
    if sock is None or getattr(socket, "SO_PEERCRED", None) is None:
        return True  # not Linux: the 0600 socket in a 0700 directory is the guard
    uid = _peer_uid(sock)
    return uid is not None and uid in (os.getuid(), 0)

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
The socket is created ``0600`` inside the store's ``0700`` directory, and a
connection from another user id is refused (``SO_PEERCRED``).

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
    "ControlServer",
    "ControlUnavailable",
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
# sun_path holds 108 bytes on Linux; longer store paths get a socket in the temp dir
_MAX_SOCKET_PATH = 100


class ControlUnavailable(BackchannelError):
    """No `serve` answers on this store's control socket."""


class ControlLost(BackchannelError):
    """The request reached the `serve`, which then gave no readable answer (it stopped or
    died mid-operation): the operation may have happened. Never act directly after it."""


class ControlError(BackchannelError):
    """The `serve` answered, but refused or failed the operation (the message says why)."""


def socket_path(store_path: str) -> Path | None:
    """Return where the control socket of the store at `store_path` lives (None: in memory)."""
    if not store_path or store_path == ":memory:":
        return None
    store = Path(store_path).expanduser().absolute()
    beside = store.with_name(store.name + ".ctl")
    if len(os.fsencode(beside)) <= _MAX_SOCKET_PATH:
        return beside
    digest = hashlib.sha256(os.fsencode(store)).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"backchannel-{os.getuid()}" / f"{digest}.ctl"


async def call(
    target: Config | str | Path, op: str, *, timeout: float = 30.0, **args: Any
) -> dict[str, Any]:
    """Ask the `serve` on `target` (a Config or a store path) to run `op`; return its result.

    Raises `ControlUnavailable` when no `serve` listens (act directly instead),
    `ControlError` when it answered with an error, `ControlLost` when it took the
    request and gave no readable answer, TimeoutError after `timeout` (with either of
    the last two the operation may have happened: never act directly then).
    """
    store_path = str(target) if isinstance(target, str | Path) else target.store.path
    path = socket_path(store_path)
    if path is None or not path.exists():
        raise ControlUnavailable(f"no serve is running on the store {store_path}")
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(str(path), limit=MAX_LINE), timeout
        )
    except (ConnectionRefusedError, FileNotFoundError):
        raise ControlUnavailable(f"no serve is running on the store {store_path}") from None
    except OSError as error:
        raise ControlUnavailable(
            f"cannot reach the serve on the store {store_path}: {error.strerror or error}"
        ) from None
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


class ControlServer:
    """Listens on a store's control socket for one `Switchboard`."""

    def __init__(self, board: Switchboard, path: Path):
        self.board = board
        self.path = path
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
        """Listen; return False (and log why) when another live `serve` already answers."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.path.exists():
            if await _answers(self.path):
                log.warning(
                    "another serve answers on %s: this one does not take the control socket",
                    self.path,
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
                    line = await reader.readline()
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
    """Return True when something accepts connections on the socket at `path`."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), 2.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _same_user(writer: asyncio.StreamWriter) -> bool:
    sock = writer.get_extra_info("socket")
    peercred = getattr(socket, "SO_PEERCRED", None)
    if sock is None or peercred is None:
        return True  # not Linux: the 0600 socket in a 0700 directory is the guard
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    except OSError:
        return False
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid in (os.getuid(), 0)

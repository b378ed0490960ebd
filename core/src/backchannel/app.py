"""From a `Config` to a running switchboard: adapters, agents, bindings, serve until a signal.

A binding with ``chats = [...]`` routes those chats of its accounts to its
agent. Because the switchboard takes one `Binding` per account, several
bindings on one account are folded into one: a `ChatRouter` agent that hands
each run to the agent bound to the run's chat, and a `ChatPolicy` that applies
that binding's respond/access rules. Chats no binding names are stored but
never start a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import signal
import sys
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import Any

from attrs import field, frozen

from .adapter import Adapter
from .config import AccountConfig, AgentConfig, BindingConfig, Config
from .control import ControlServer, socket_path
from .errors import BackchannelError, ConfigError, ConfigErrors, StoreError, combine, unknown_key
from .model import Event
from .orchestration import attach as attach_orchestration
from .orchestration import orchestrator_of
from .plugins import agents as agent_registry
from .plugins import channels as channel_registry
from .plugins import get_plugin_manager
from .policy import Policy
from .runs import Agent, Run, WindowSettings
from .runtime import raise_open_file_limit, tune_gc
from .store import SQLiteStore, Store
from .switchboard import Binding, Switchboard

__all__ = [
    "ChatPolicy",
    "ChatRouter",
    "build_adapter",
    "build_agent",
    "build_bindings",
    "build_switchboard",
    "idle_agents",
    "open_config_store",
    "operator_board",
    "serve",
]

log = logging.getLogger("backchannel.app")


def open_config_store(config: Config, *, worker: str | None = None) -> Store:
    """Open the store the config names (creating it, and its 0700 directory, when new).

    With `[store] url` that is PostgreSQL (psycopg is imported only then); `worker`
    names this process among several sharing it.
    """
    if config.store.url:
        from .store.postgres import PostgresStore

        return PostgresStore(config.store.url, worker=worker)
    try:
        return SQLiteStore(
            config.store.path,
            synchronous=config.store.synchronous,
            kept_windows=config.store.kept_windows,
        )
    except OSError as error:
        raise StoreError(
            f"cannot open the store at {config.store.path}: {error.strerror or error}"
            " (set [store] path to a writable place)"
        ) from error


def build_adapter(config: Config, account: AccountConfig) -> Adapter:
    """Instantiate the adapter for one account (nothing is started or connected)."""
    factory = channel_registry().get(account.channel)
    key = f"accounts.{account.name}"
    settings = ReadTracker(account.settings)
    with _config_errors(config, key):
        adapter: Adapter = factory(account.name, settings)
        settings.reject_unread()
    return adapter


def build_agent(config: Config, agent: AgentConfig) -> Agent:
    """Instantiate one agent from its kind's factory (no network: nothing runs yet)."""
    factory = agent_registry().get(agent.kind)
    _importable_next_to(config)
    with _config_errors(config, f"agents.{agent.name}"):
        built: Agent = factory(dict(agent.settings))
    if not callable(built):
        raise ConfigError(
            f"agents.{agent.name}: the {agent.kind!r} factory returned {type(built).__name__},"
            " not an async callable taking a Run",
            path=config.source,
        )
    return built


def build_bindings(config: Config, agents: Mapping[str, Agent]) -> dict[str, Binding]:
    """Return one switchboard Binding per account, folding per-chat bindings together."""
    result: dict[str, Binding] = {}
    for account in config.accounts:
        covering = [binding for _, binding in config.bindings_for(account)]
        result[account] = _fold(account, covering, agents)
    return result


async def build_switchboard(
    config: Config,
    *,
    accounts: Iterable[str] | None = None,
    agents: Mapping[str, Agent] | None = None,
    serve_http: bool = True,
    worker: str | None = None,
    lease_ttl: float | None = None,
) -> Switchboard:
    """Return a Switchboard wired from `config` (not started).

    `accounts` limits which accounts are added (default: all). `agents`
    replaces the configured agents by name (the CLI's preview passes idle
    stand-ins so it never needs an agent's module or key). With `serve_http`
    False there is no HTTP server. `worker` makes this one of several workers
    sharing the PostgreSQL store (account leases, run claims: see workers.py);
    `lease_ttl` (default 10 s) is how long its leases and claims outlive it, and
    it heartbeats every 0.3 of that.
    """
    if worker is not None:
        check_worker_name(config, worker)
    names = list(config.accounts) if accounts is None else list(accounts)
    for name in names:
        if name not in config.accounts:
            known = ", ".join(sorted(config.accounts)) or "none"
            raise ConfigError(
                f"no account called {name!r} (configured: {known})", path=config.source
            )
    built_agents = dict(agents) if agents is not None else {}
    for name, agent_config in config.agents.items():
        if name not in built_agents:
            built_agents[name] = build_agent(config, agent_config)
    bindings = build_bindings(config, built_agents)
    adapters = {name: build_adapter(config, config.accounts[name]) for name in names}
    store = open_config_store(config, worker=worker)
    board = Switchboard(
        store,
        host=config.server.host,
        port=config.server.port if serve_http else None,
        public_url=config.server.public_url,
    )
    if worker is not None:
        from .store.postgres import PostgresStore
        from .workers import DEFAULT_HEARTBEAT, DEFAULT_LEASE_TTL, WorkerCoordinator

        assert isinstance(store, PostgresStore)
        ttl = DEFAULT_LEASE_TTL if lease_ttl is None else lease_ttl
        board.workers = WorkerCoordinator(
            board, store, lease_ttl=ttl, heartbeat=ttl * DEFAULT_HEARTBEAT / DEFAULT_LEASE_TTL
        )
    for name in names:
        account = config.accounts[name]
        board.add_account(
            adapters[name],
            bindings[name],
            name=name,
            secrets=account.secrets,
            config=account.settings,
        )
    attach_orchestration(board, config)
    get_plugin_manager().hook.configure_switchboard(board=board, config=config)
    return board


def check_worker_name(config: Config, worker: str) -> None:
    """Raise ConfigError unless `worker` is a usable name and the store is PostgreSQL."""
    if not config.store.url:
        raise ConfigError(
            f'--worker {worker} needs a shared store: set [store] url = "postgresql://..."'
            " (several workers cannot share one SQLite file)",
            path=config.source,
        )
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", worker):
        raise ConfigError(
            f"worker name {worker!r} must be 1-64 letters, digits, '_', '.' or '-'",
            path=config.source,
        )


def idle_agents(config: Config) -> dict[str, Agent]:
    """Stand-ins for the configured agents that do nothing (operator commands never run one,
    so they need neither an agent's module nor its key)."""

    async def idle(run: Run) -> None:
        return None

    return {name: idle for name in config.agents}


@contextlib.asynccontextmanager
async def operator_board(
    config: Config, account: str | Sequence[str]
) -> AsyncIterator[Switchboard]:
    """A switchboard with only `account`'s adapter started, for one operator action.

    For a command that runs beside (or instead of) `serve`: no recovery, no
    agent runs, no HTTP server, so another process's pending sends and
    unanswered conversations are left alone. On a PostgreSQL store whose
    workers hold `account` (a live lease), the adapter is not started: its
    sends are handed to the holder, which sends them. `account` may name
    several accounts.
    """
    names = [account] if isinstance(account, str) else list(account)
    board = await build_switchboard(
        config, accounts=names, agents=idle_agents(config), serve_http=False
    )
    try:
        leases = getattr(board.store, "leases", None)
        held = set(await leases()) if leases is not None else set()
        # a worker holds their connection (a poller, a socket): starting another here would
        # compete with it; the sends are handed to that worker (Switchboard.deliver_through)
        board.handed_over.update(name for name in names if name in held)
        await board.start_accounts([name for name in names if name not in held])
        yield board
    finally:
        await board.stop()


async def serve(
    config: Config,
    *,
    on_ready: Callable[[Switchboard], Awaitable[None] | None] | None = None,
    stop: asyncio.Event | None = None,
    worker: str | None = None,
    lease_ttl: float | None = None,
) -> None:
    """Run the switchboard until SIGINT/SIGTERM (or `stop` is set), then stop gracefully."""
    # one serve per SQLite store, refused before anything opens or starts
    held = _hold_the_store(config.store.path) if not config.store.url and worker is None else None
    try:
        board = await build_switchboard(config, worker=worker, lease_ttl=lease_ttl)
    except BaseException:
        if held is not None:
            os.close(held)
        raise
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, _on_signal, stop, loop, signum)
            installed.append(signum)
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError, AttributeError):
        loop.add_signal_handler(signal.SIGHUP, reload_config, board, config)
        installed.append(signal.SIGHUP)
    control = _control_server(config, board) if worker is None else None
    restore_gc = None
    try:
        if not config.store.url:
            _warn_if_the_store_folder_is_shared(config.store.path)
        raise_open_file_limit()  # a connection is a file: a thousand must not stop all serving
        if control is not None:
            control.prepare()  # an unsafe socket folder refuses before anything else starts
        await board.start()
        if control is not None and not await control.start():
            control = None
        restore_gc = tune_gc()  # what start-up loaded lives as long as the process
        if on_ready is not None:
            maybe = on_ready(board)
            if maybe is not None:
                await maybe
        await stop.wait()
        log.info("stopping: finishing in-flight runs and sends")
    finally:
        if control is not None:
            await control.stop()
        await board.stop()
        if held is not None:
            os.close(held)  # the store is closed: another serve may have it now
        for signum in installed:
            loop.remove_signal_handler(signum)
        if restore_gc is not None:
            restore_gc()


def _lock_path(store: Path) -> Path:
    """Beside the store (``<store>.lock``); in a folder other users may write to, in this
    user's private folder (as the control socket), where no one else can make it first
    and hold it."""
    socket = socket_path(str(store))
    if socket is None or socket.parent == store.parent:
        return store.with_name(store.name + ".lock")
    return socket.with_suffix(".lock")


class StoreInUse(BackchannelError):
    """Another `serve` runs on this SQLite store: a second would poll the same accounts and
    answer every message twice, so it refuses to start."""


def _hold_the_store(store_path: str) -> int | None:
    """Take the SQLite store's serve lock (``<store>.lock``, an flock the kernel drops when
    the process ends, however it ends) and return its descriptor, to be closed at stop;
    raise `StoreInUse` when another process holds it. None for a store in memory, or
    where no lock file can be opened (logged once; serve starts as before).
    """
    if not store_path or store_path == ":memory:":
        return None
    # the file itself, whatever names it (a symlink, `..`): SQLite opens the target too
    path = Path(store_path).expanduser().resolve()
    lock = _lock_path(path)
    for folder in dict.fromkeys((path.parent, lock.parent)):
        if not folder.exists():
            with contextlib.suppress(OSError):  # as the store makes it; if it cannot, it says why
                folder.mkdir(parents=True, mode=0o700)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        log.warning(
            "cannot open %s (%s): a second serve on this store would not be refused",
            lock,
            error.strerror or error,
        )
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = ""
        with contextlib.suppress(OSError):
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        who = f" (pid {holder})" if holder.isdigit() else ""
        raise StoreInUse(
            f"another serve is running on the store {path}{who}: two would answer every"
            " message twice; stop it first (backchannel serve runs once per store)"
        ) from None
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def reload_config(board: Switchboard, config: Config) -> bool:
    """Re-read the config file and apply what a running serve can change (SIGHUP).

    Today that is the `[orchestration]` kill switch. A file that no longer
    parses is reported in one line and the running settings stay.
    """
    from .config import load_config

    orchestrator = orchestrator_of(board)
    if config.source is None or orchestrator is None:
        return False
    try:
        fresh = load_config(config.source, check_plugins=False)
    except ConfigError as error:
        log.error("config not reloaded, the running settings stay: %s", error)
        return False
    orchestrator.reload(fresh)
    return True


def _warn_if_the_store_folder_is_shared(store_path: str) -> None:
    """One WARNING when the SQLite store's folder is writable by other users: they could
    plant its `-wal` or `-shm` files (the store then fails to open or write) or replace it."""
    from .control import _shared

    if not store_path or store_path == ":memory:" or "://" in store_path:
        return
    folder = Path(store_path).expanduser().absolute().parent
    if _shared(folder):
        log.warning(
            "the store's folder %s is writable by other users, who could replace the store's"
            " files or plant its -wal and -shm files; keep the store in a folder only you can"
            " write to",
            folder,
        )


def _control_server(config: Config, board: Switchboard) -> ControlServer | None:
    """The control socket for this store, with the operations plugins add (None: in memory)."""
    path = socket_path(config.store.path)
    if path is None:
        return None
    server = ControlServer(board, path)
    get_plugin_manager().hook.register_control_ops(register=server.register)
    return server


def _on_signal(stop: asyncio.Event, loop: asyncio.AbstractEventLoop, signum: int) -> None:
    if stop.is_set():
        return
    stop.set()
    # a second Ctrl-C while stopping interrupts the graceful stop
    loop.remove_signal_handler(signum)


# one Binding per account -----------------------------------------------------------


@frozen
class ChatPolicy(Policy):
    """A Policy that applies each chat's own binding rules; unlisted chats store only."""

    by_chat: Mapping[str, Policy] = field(factory=dict)
    fallback: Policy | None = None

    def policy_for(self, chat: str) -> Policy | None:
        """Return the policy of the binding that owns `chat`, or None when none does."""
        return self.by_chat.get(chat, self.fallback)

    def may_reach(self, event: Event) -> bool:
        policy = self.policy_for(event.address.chat)
        return True if policy is None else policy.may_reach(event)

    def triggers(self, event: Event) -> bool:
        policy = self.policy_for(event.address.chat)
        return False if policy is None else policy.triggers(event)

    def bot_turns_in(self, chat: str) -> int | None:
        policy = self.policy_for(chat)
        return 0 if policy is None else policy.bot_turns


class ChatRouter:
    """An agent that hands each run to the agent bound to the run's chat."""

    def __init__(self, by_chat: Mapping[str, Agent], fallback: Agent | None = None):
        self.by_chat = dict(by_chat)
        self.fallback = fallback

    def agent_for(self, chat: str) -> Agent | None:
        """Return the agent bound to `chat`, or None."""
        return self.by_chat.get(chat, self.fallback)

    async def __call__(self, run: Run) -> None:
        agent = self.agent_for(run.conversation.address.chat)
        if agent is None:
            log.debug("no binding for chat %s: run skipped", run.conversation.address.key)
            return
        await agent(run)

    def __repr__(self) -> str:
        return f"ChatRouter(chats={sorted(self.by_chat)}, fallback={self.fallback!r})"


def _policy(binding: BindingConfig) -> Policy:
    return Policy(
        access=binding.access,
        allow=binding.allow,
        owner=binding.owner,
        respond=binding.respond,
        bot_turns=binding.bot_turns,
    )


def _fold(account: str, covering: list[BindingConfig], agents: Mapping[str, Agent]) -> Binding:
    first = covering[0]
    timing: dict[str, Any] = {
        "window": WindowSettings(messages=first.window, chars=first.window_chars),
        "debounce": first.debounce,
        "max_wait": first.max_wait,
        "run_timeout": first.run_timeout,
    }
    if len(covering) == 1 and first.chats is None:
        return Binding(agents[first.agent], _policy(first), name=first.agent, **timing)
    general = next((b for b in covering if b.chats is None), None)
    by_chat_agent: dict[str, Agent] = {}
    by_chat_policy: dict[str, Policy] = {}
    for binding in covering:
        for chat in binding.chats or ():
            by_chat_agent[chat] = agents[binding.agent]
            by_chat_policy[chat] = _policy(binding)
    router = ChatRouter(by_chat_agent, agents[general.agent] if general else None)
    policy = ChatPolicy(by_chat=by_chat_policy, fallback=_policy(general) if general else None)
    names = "+".join(dict.fromkeys(b.agent for b in covering))
    return Binding(router, policy, name=names, **timing)


def _importable_next_to(config: Config) -> None:
    """Let agents import modules that sit next to the config file (python agent kind)."""
    if config.source is None:
        return
    directory = str(Path(config.source).resolve().parent)
    if directory not in sys.path:
        sys.path.append(directory)


class ReadTracker(Mapping[str, Any]):
    """Settings that remember which keys the plugin read, to catch misspelled ones.

    Adapters read every setting they know in their constructor (a missing one
    falls back to its default, but the key is still asked for); a key nobody
    asked for is a typo or belongs to another channel.
    """

    def __init__(self, settings: Mapping[str, Any]):
        self._settings = dict(settings)
        self._asked: set[str] = set()
        self._listed = False

    def __getitem__(self, key: str) -> Any:
        self._asked.add(key)
        return self._settings[key]

    def get(self, key: str, default: Any = None) -> Any:
        self._asked.add(key)
        return self._settings.get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._asked.add(key)
        return key in self._settings

    def __iter__(self) -> Iterator[str]:
        self._listed = True  # a plugin that walks every key checks them itself
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def reject_unread(self) -> None:
        """Raise a ConfigError for every key the plugin never asked for, naming each."""
        if self._listed:
            return
        unknown = sorted(set(self._settings) - self._asked)
        if unknown:
            raise combine(
                [ConfigError(unknown_key(name, self._asked), key=name) for name in unknown]
            )


@contextlib.contextmanager
def _config_errors(config: Config, key: str) -> Any:
    """Turn a plugin factory's failure into one ConfigError naming the file and key."""
    try:
        yield
    except ConfigError as error:
        if error.path is not None:
            raise
        errors = error.errors if isinstance(error, ConfigErrors) else (error,)
        raise combine([_relocated(config, key, e) for e in errors]) from error
    except Exception as error:
        raise _located(config, key, f"{type(error).__name__}: {error}") from error


def _relocated(config: Config, key: str, error: ConfigError) -> ConfigError:
    """Place a plugin's ConfigError (keyed inside its table) under `key` of the config file."""
    inner = error.key or ""
    message = str(error)
    if inner and message.startswith(inner + ": "):
        message = message[len(inner) + 2 :]
    if inner.startswith(("accounts.", "agents.")):
        where = inner
    else:
        where = f"{key}.{inner}" if inner else key
    return _located(config, where, message)


def _located(config: Config, key: str, message: str) -> ConfigError:
    error = ConfigError(f"{key}: {message}", path=config.source)
    error.key = key
    return error

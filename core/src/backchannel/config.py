"""Configuration: one TOML file -> attrs classes (through cattrs), with ${VAR} secrets.

::

    [store]          path, synchronous; or url = "postgresql://..." (several workers)
    [server]         host, port, public_url
    [accounts.NAME]  channel = "telegram"; every other key is the adapter's settings
    [agents.NAME]    kind = "openai"; every other key is the agent's settings
    [[bindings]]     agent, accounts, chats, respond, access, allow, owner, window, ...
    [orchestration]  enabled (the kill switch), ask_timeout, session_live, report
    [<plugin>]       a plugin's own table, named after its entry point (``[owner]``):
                     kept as-is in `Config.sections` for the plugin to validate
    [mcp]            token (`backchannel mcp serve --http`)

Every mistake raises one `ConfigError` whose text names the file, the key path
and what was expected (``bot.toml: bindings[0].respond: expected one of always,
mention, never, got "sometimes"``). Values written as ``${VAR}`` come from the
environment and are secrets: they are registered for log redaction, masked as
``***`` in `Config.summary()` and repr, and never quoted in errors.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from attrs import evolve, field, fields, frozen

from .errors import ConfigError, PluginError, combine, unknown_key
from .policy import MAX_BOT_TURNS, Access, Respond
from .secrets import register_secret

if TYPE_CHECKING:
    import cattrs

__all__ = [
    "DEFAULT_ACCOUNT",
    "DEFAULT_AGENT",
    "AccountConfig",
    "AgentConfig",
    "BindingConfig",
    "Config",
    "McpConfig",
    "OrchestrationConfig",
    "ServerConfig",
    "StoreConfig",
    "default_config",
    "default_store_path",
    "display_url",
    "load_config",
    "parse_config",
    "store_path_for",
]

#: the account and agent names of the embedded defaults
DEFAULT_ACCOUNT = "webchat"
DEFAULT_AGENT = "demo"

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
MASK = "***"
_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
_SECRET_KEY = re.compile(
    r"(token|secret|password|passwd|api[-_]?key|private[-_]?key|identity|seed|credential"
    r"|authori[sz]ation|cookie)",
    re.IGNORECASE,
)
_VAR = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


def default_store_path() -> str:
    """Return $XDG_STATE_HOME/backchannel/backchannel.db (~/.local/state/... when unset)."""
    return os.path.join(_state_dir(), "backchannel.db")


def store_path_for(config_file: str | os.PathLike[str]) -> str:
    """Return the store of a config file that names none: its own, keyed by the file's path.

    ``$XDG_STATE_HOME/backchannel/<file stem>-<8 hex digits of its absolute path>.db``:
    two configs never share a transcript by accident, the same file always finds
    its store again, and no database lands beside a checked-in config.
    """
    resolved = Path(config_file).resolve()
    digest = hashlib.sha256(str(resolved).encode("utf-8")).hexdigest()[:8]
    return os.path.join(_state_dir(), f"{resolved.stem}-{digest}.db")


def _state_dir() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state, "backchannel")


def display_url(url: str) -> str:
    """Return a database URL with any password replaced by *** (for messages and logs)."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


#: conversations whose last run window the SQLite store and the run builder keep, unless
#: [store] kept_windows says otherwise
KEPT_WINDOWS = 64


@frozen
class StoreConfig:
    """Where the transcript lives: a SQLite file (`path`), or PostgreSQL when `url` is set."""

    path: str = field(factory=default_store_path)
    synchronous: Synchronous = "NORMAL"
    #: postgresql://user:${PASSWORD}@host/db: the shared store of several `serve --worker`s
    url: str | None = None
    #: how many conversations' last run window (rows and lines, about 90 KiB each) the
    #: SQLite store keeps, so their next run reads only the new rows; 0 keeps none
    kept_windows: int = KEPT_WINDOWS

    @property
    def location(self) -> str:
        """Where the store is, for people: the file, or the URL without its password."""
        return display_url(self.url) if self.url else self.path


@frozen
class ServerConfig:
    """The switchboard's HTTP server (web chat page, webhooks, /health)."""

    host: str = "127.0.0.1"
    port: int = 8765
    #: the URL the outside world reaches the server at (for webhooks); default http://host:port
    public_url: str | None = None


@frozen
class AccountConfig:
    """One `[accounts.NAME]` table: the channel, and the adapter's settings."""

    name: str
    channel: str
    settings: Mapping[str, Any] = field(factory=dict, repr=False)
    #: the values in `settings` that came from the environment
    secrets: frozenset[str] = field(factory=frozenset, repr=False)


@frozen
class AgentConfig:
    """One `[agents.NAME]` table: the agent kind, and the agent's settings."""

    name: str
    kind: str
    settings: Mapping[str, Any] = field(factory=dict, repr=False)
    secrets: frozenset[str] = field(factory=frozenset, repr=False)


@frozen
class BindingConfig:
    """One `[[bindings]]` entry: which agent answers where, and how."""

    agent: str
    #: account names; None means every account
    accounts: tuple[str, ...] | None = None
    #: chat ids (Address.chat) this binding is limited to; None means every chat
    chats: tuple[str, ...] | None = None
    respond: Respond = "mention"
    access: Access = "anyone"
    allow: tuple[str, ...] = ()
    owner: str | None = None
    window: int = 50
    window_chars: int = 24_000
    debounce: float = 0.0
    max_wait: float = 3.0
    run_timeout: float = 300.0
    #: answers to bots with no person writing in between (0: no limit; unset: 10, or none
    #: on a channel whose peers are all agents)
    bot_turns: int | None = None
    #: runs of this binding get the cross-conversation tools (docs/orchestration.md)
    orchestrate: bool = False
    #: its one chat is the account's master conversation: runs there get the read and
    #: ask tools (list_conversations, read_conversation, ask_agent) without orchestrate
    master: bool = False


@frozen
class OrchestrationConfig:
    """`[orchestration]`: the operator's kill switch for cross-conversation sends."""

    #: false refuses every new cross-conversation send (reads keep working)
    enabled: bool = True
    #: seconds before an unanswered ask to another agent is reported as "no answer yet"
    ask_timeout: float = 86_400.0
    #: an ask without a session reuses a session with activity this recent (seconds)
    session_live: float = 7 * 86_400.0
    #: how an answer is reported: "run" (a reporter run) or "verbatim" (posted as is)
    report: Literal["run", "verbatim"] = "run"


@frozen
class McpConfig:
    """`[mcp]`: the MCP server (`backchannel mcp serve`, plugin backchannel-mcp)."""

    #: bearer token streamable HTTP clients must send (write it as ${BACKCHANNEL_MCP_TOKEN})
    token: str | None = None


@frozen
class Config:
    """A whole configuration. `source` is the file it came from (None: embedded defaults)."""

    store: StoreConfig = field(factory=StoreConfig)
    server: ServerConfig = field(factory=ServerConfig)
    accounts: Mapping[str, AccountConfig] = field(factory=dict)
    agents: Mapping[str, AgentConfig] = field(factory=dict)
    bindings: tuple[BindingConfig, ...] = ()
    orchestration: OrchestrationConfig = field(factory=OrchestrationConfig)
    mcp: McpConfig = field(factory=McpConfig)
    source: str | None = None
    #: the file named no [store] path, so the store is the one `store_path_for` gives it
    store_defaulted: bool = False
    #: [accounts] tables the file declares that could not be read (each has its own
    #: error): a plugin naming one says so instead of "no account called"
    unreadable_accounts: frozenset[str] = frozenset()
    #: key paths whose value came from ${VAR}
    secret_keys: frozenset[str] = field(factory=frozenset, repr=False)
    #: every value that came from ${VAR}
    secret_values: frozenset[str] = field(factory=frozenset, repr=False)
    #: plugins' own top-level tables by entry point name (``[owner]`` -> "owner")
    sections: Mapping[str, Mapping[str, Any]] = field(factory=dict)

    def bindings_for(self, account: str) -> list[tuple[int, BindingConfig]]:
        """Return (index, binding) for each binding that covers `account`."""
        return [
            (index, binding)
            for index, binding in enumerate(self.bindings)
            if binding.accounts is None or account in binding.accounts
        ]

    def summary(self) -> dict[str, Any]:
        """Return the config as plain data with every value that came from ${VAR} as ***."""
        data = {
            "source": self.source or "(embedded defaults)",
            "store": {
                "path": self.store.path,
                "synchronous": self.store.synchronous,
                "kept_windows": self.store.kept_windows,
            }
            | ({"url": display_url(self.store.url)} if self.store.url else {})
            | ({"default": True} if self.store_defaulted else {}),
            "server": {
                "host": self.server.host,
                "port": self.server.port,
                "public_url": self.server.public_url,
            },
            "accounts": {
                name: {"channel": account.channel, **account.settings}
                for name, account in self.accounts.items()
            },
            "agents": {
                name: {"kind": agent.kind, **agent.settings} for name, agent in self.agents.items()
            },
            "bindings": [
                {
                    "agent": b.agent,
                    "accounts": list(b.accounts) if b.accounts is not None else None,
                    "chats": list(b.chats) if b.chats is not None else None,
                    "respond": b.respond,
                    "access": b.access,
                    "allow": list(b.allow),
                    "owner": b.owner,
                    "window": b.window,
                    "window_chars": b.window_chars,
                    "debounce": b.debounce,
                    "max_wait": b.max_wait,
                    "run_timeout": b.run_timeout,
                    "bot_turns": b.bot_turns,
                    "orchestrate": b.orchestrate,
                    "master": b.master,
                }
                for b in self.bindings
            ],
            "orchestration": {
                "enabled": self.orchestration.enabled,
                "ask_timeout": self.orchestration.ask_timeout,
                "session_live": self.orchestration.session_live,
                "report": self.orchestration.report,
            },
        }
        data.update({name: dict(table) for name, table in self.sections.items()})
        return {key: self._masked(value, key) for key, value in data.items()}

    def _masked(self, value: Any, key: str) -> Any:
        if key in self.secret_keys:
            return MASK
        if isinstance(value, Mapping):
            return {k: self._masked(v, f"{key}.{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._masked(v, f"{key}[{i}]") for i, v in enumerate(value)]
        return value

    def __repr__(self) -> str:
        return f"Config({self.summary()!r})"


# loading -----------------------------------------------------------------------


def default_config(*, store_path: str | None = None, port: int | None = None) -> Config:
    """Return the embedded defaults: SQLite in the state dir, the web chat, the demo agent."""
    return Config(
        store=StoreConfig(path=store_path or default_store_path()),
        server=ServerConfig(port=8765 if port is None else port),
        accounts={DEFAULT_ACCOUNT: AccountConfig(DEFAULT_ACCOUNT, "webchat")},
        agents={DEFAULT_AGENT: AgentConfig(DEFAULT_AGENT, "demo")},
        bindings=(BindingConfig(agent=DEFAULT_AGENT),),
    )


def load_config(
    path: str | os.PathLike[str] | None,
    *,
    environ: Mapping[str, str] | None = None,
    check_plugins: bool = True,
    strict_env: bool = True,
) -> Config:
    """Read and validate a TOML config file; with no path, return the embedded defaults.

    `check_plugins` also checks each channel and agent kind against the installed plugins.
    With `strict_env` False, a ${VAR} whose variable is unset becomes "" instead of an
    error (for commands that only read the store and need no secrets).
    """
    if path is None:
        return default_config()
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such file", path=where) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read the file: {error}", path=where) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"not valid TOML: {error}", path=where) from None
    base = Path(path).resolve().parent
    config = parse_config(
        data,
        source=where,
        base_dir=base,
        environ=environ,
        check_plugins=check_plugins,
        strict_env=strict_env,
    )
    store = data.get("store")
    if not (isinstance(store, Mapping) and ("path" in store or "url" in store)):
        own = evolve(config.store, path=store_path_for(path))
        config = evolve(config, store=own, store_defaulted=True)
    return config


def parse_config(
    data: Mapping[str, Any],
    *,
    source: str = "<config>",
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    check_plugins: bool = True,
    strict_env: bool = True,
) -> Config:
    """Validate already-parsed TOML data (see `load_config`)."""
    parser = _Parser(source, os.environ if environ is None else environ, strict_env)
    return parser.parse(data, base_dir or Path.cwd(), check_plugins)


class _Parser:
    def __init__(self, source: str, environ: Mapping[str, str], strict_env: bool = True):
        self.source = source
        self.environ = environ
        self.strict_env = strict_env
        #: key path -> the environment values substituted there
        self.secret_keys: dict[str, list[str]] = {}
        self.converter = _make_converter()
        #: every mistake found so far: a file's mistakes are reported together
        self.problems: list[ConfigError] = []
        #: [accounts] and [agents] tables declared but unreadable (see parse)
        self.unreadable: set[str] = set()

    def secret_values(self, prefix: str = "") -> frozenset[str]:
        return frozenset(
            value
            for key, values in self.secret_keys.items()
            if key.startswith(prefix)
            for value in values
            if value
        )

    # errors ------------------------------------------------------------------
    def error(self, key: str, message: str) -> ConfigError:
        for secret in sorted(self.secret_values(), key=len, reverse=True):
            message = message.replace(secret, MASK)
        error = ConfigError(f"{key}: {message}" if key else message, path=self.source)
        error.key = key or None
        return error

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        """Record a ConfigError raised inside and carry on with the next part of the file."""
        try:
            yield
        except ConfigError as error:
            self.problems.append(error)

    # the whole file ------------------------------------------------------------
    def parse(self, data: Mapping[str, Any], base_dir: Path, check_plugins: bool) -> Config:
        known = ("store", "server", "accounts", "agents", "bindings", "orchestration", "mcp")
        plugin_sections = _plugin_names()
        for key in data:
            if key not in known and key not in plugin_sections:
                self.problems.append(
                    self.error(key, unknown_key(key, [*known, *plugin_sections], "section"))
                )
            elif key in plugin_sections and not isinstance(data[key], Mapping):
                self.problems.append(
                    self.error(key, f"expected a table, got {_describe(data[key])}")
                )
        data = self.interpolate(data, "")
        store = StoreConfig()
        with self.collecting():
            store = self.structure(data.get("store", {}), StoreConfig, "store")
            if store.url is not None and not store.url.startswith(("postgresql://", "postgres://")):
                raise self.error(
                    "store.url",
                    "expected a postgresql://user@host:port/database URL, got"
                    f" {display_url(store.url)!r} (leave it out to use the SQLite file at"
                    " [store] path)",
                )
            stored = data.get("store")
            if isinstance(stored, Mapping) and "path" in stored and not store.path.strip():
                raise self.error(
                    "store.path",
                    "expected the SQLite file's path, got an empty one (leave path out for"
                    " this config's own store)",
                )
            if not 0 <= store.kept_windows <= 1_000_000:
                raise self.error(
                    "store.kept_windows",
                    f"expected 0 to 1000000 conversations, got {store.kept_windows}",
                )
        store = StoreConfig(
            path=_resolve_path(store.path, base_dir),
            synchronous=store.synchronous,
            url=store.url,
            kept_windows=store.kept_windows,
        )
        server = ServerConfig()
        with self.collecting():
            server = self.structure(data.get("server", {}), ServerConfig, "server")
            if not 0 <= server.port <= 65535:
                raise self.error(
                    "server.port", f"expected a port number 0-65535, got {server.port}"
                )
            if server.public_url and not _is_web_url(server.public_url):
                # webhooks are registered at it: a typo would only show as silence
                raise self.error(
                    "server.public_url",
                    "expected the address the platforms reach this server at, like"
                    f" https://bot.example.com, got {_describe(server.public_url)}",
                )
        accounts: dict[str, AccountConfig] = {}
        with self.collecting():
            accounts = {
                name: AccountConfig(name, channel, settings, secrets)
                for name, channel, settings, secrets in self.named_tables(
                    data.get("accounts"), "accounts", "channel"
                )
            }
        agents: dict[str, AgentConfig] = {}
        with self.collecting():
            agents = {
                name: AgentConfig(name, kind, settings, secrets)
                for name, kind, settings, secrets in self.named_tables(
                    data.get("agents"), "agents", "kind"
                )
            }
        # a missing section falls back to the embedded default: the web chat, the demo agent.
        # Tables declared but unreadable (their own error is recorded) are neither replaced
        # by the default nor reported again where they are named (a binding, [owner])
        declared_accounts = _declared(data.get("accounts"))
        declared_agents = _declared(data.get("agents"))
        self.unreadable = (declared_accounts - set(accounts)) | (declared_agents - set(agents))
        defaults = default_config()
        accounts = accounts or ({} if declared_accounts else dict(defaults.accounts))
        agents = agents or ({} if declared_agents else dict(defaults.agents))
        bindings: tuple[BindingConfig, ...] = ()
        with self.collecting():
            bindings = self.bindings(data.get("bindings"), accounts, agents)
        orchestration = OrchestrationConfig()
        with self.collecting():
            orchestration = self.structure(
                data.get("orchestration", {}), OrchestrationConfig, "orchestration"
            )
            for name in ("ask_timeout", "session_live"):
                if getattr(orchestration, name) <= 0:
                    raise self.error(
                        f"orchestration.{name}",
                        f"expected seconds > 0, got {getattr(orchestration, name)}",
                    )
        mcp = McpConfig()
        with self.collecting():
            mcp = self.structure(data.get("mcp", {}), McpConfig, "mcp")
        for secret in self.secret_values():
            register_secret(secret)
        config = Config(
            store=store,
            server=server,
            accounts=accounts,
            agents=agents,
            bindings=bindings,
            orchestration=orchestration,
            mcp=mcp,
            source=self.source,
            unreadable_accounts=frozenset(declared_accounts - set(accounts)),
            secret_keys=frozenset(self.secret_keys),
            secret_values=self.secret_values(),
            sections={
                key: dict(data[key])
                for key in data
                if key in plugin_sections and isinstance(data[key], Mapping)
            },
        )
        if check_plugins:
            self.check_plugins(config)
        if self.problems:
            error = combine(self.problems)
            error.partial = config
            raise error
        return config

    # ${VAR} --------------------------------------------------------------------
    def interpolate(self, value: Any, key: str) -> Any:
        if isinstance(value, str):
            return self.interpolate_text(value, key)
        if isinstance(value, Mapping):
            return {k: self.interpolate(v, f"{key}.{k}" if key else k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.interpolate(v, f"{key}[{i}]") for i, v in enumerate(value)]
        return value

    def interpolate_text(self, text: str, key: str) -> str:
        found: list[str] = []

        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "${"
            name, has_default, default = match.group(1).partition(":-")
            if has_default and _ENV_NAME.match(name) and not self.environ.get(name):
                return default  # written in the file itself: not a secret from the environment
            if not _ENV_NAME.match(name):
                self.problems.append(
                    self.error(key, f"${{{name}}} is not a valid environment variable name")
                )
                return ""
            value = self.environ.get(name)
            if value is None and not self.strict_env and not key.startswith("store."):
                # a command that only reads the store needs no secrets; but where the store
                # is must be known: "" would open (or make) another one
                return ""
            if value is None:
                self.problems.append(
                    self.error(
                        key, f"environment variable {name} is not set (the value is ${{{name}}})"
                    )
                )
                return ""
            if key != "store.path":  # where the store is, not a secret (store.url may hold one)
                found.append(value)
            return value

        result = _VAR.sub(replace, text)
        if result and (_SECRET_KEY.search(key.rsplit(".", 1)[-1]) or ".headers." in key):
            # an HTTP header's value is taken for a credential whatever its name
            # a secret written into the file itself is still a secret
            found = [*found, result]
        if found:
            self.secret_keys[key] = found
        return result

    # [store], [server], [[bindings]] -------------------------------------------------
    def structure(self, data: Any, cls: type[Any], key: str) -> Any:
        if not isinstance(data, Mapping):
            raise self.error(key, f"expected a table, got {_describe(data)}")
        known = [a.name for a in fields(cls)]
        problems = [
            self.error(f"{key}.{name}", unknown_key(name, known))
            for name in data
            if name not in known
        ]
        value = None
        try:
            value = self.converter.structure({k: v for k, v in data.items() if k in known}, cls)
        except Exception as error:
            problems += [self.error(where, message) for where, message in _explain(error, key, cls)]
        if problems:
            raise combine(problems)
        return value

    def named_tables(
        self, data: Any, section: str, type_key: str
    ) -> Iterable[tuple[str, str, dict[str, Any], frozenset[str]]]:
        if data is None:
            return []
        if not isinstance(data, Mapping):
            raise self.error(
                section, f"expected tables like [{section}.NAME], got {_describe(data)}"
            )
        result = []
        for name, table in data.items():
            with self.collecting():
                result.append(self.named_table(name, table, section, type_key))
        return result

    def named_table(
        self, name: str, table: Any, section: str, type_key: str
    ) -> tuple[str, str, dict[str, Any], frozenset[str]]:
        key = f"{section}.{name}"
        if not _NAME.match(name):
            raise self.error(
                key, "names may use letters, digits, '_', '-' and '.' (at most 64 characters)"
            )
        if not isinstance(table, Mapping):
            raise self.error(key, f"expected a table, got {_describe(table)}")
        kind = table.get(type_key)
        if kind is None:
            raise self.error(f"{key}.{type_key}", "missing (every entry needs one)")
        if not isinstance(kind, str) or not kind:
            raise self.error(f"{key}.{type_key}", f"expected a name, got {_describe(kind)}")
        settings = {k: v for k, v in table.items() if k != type_key}
        secrets = self.secret_values(key + ".") | self.secret_values(key + "[")
        return name, kind, settings, secrets

    def bindings(
        self,
        data: Any,
        accounts: Mapping[str, AccountConfig],
        agents: Mapping[str, AgentConfig],
    ) -> tuple[BindingConfig, ...]:
        if data is None:
            if not agents and self.unreadable:
                return ()  # the agents' own errors say it all
            if len(agents) != 1:
                raise self.error(
                    "bindings",
                    "several agents are configured: say which answers where with [[bindings]]",
                )
            data = [{"agent": next(iter(agents))}]
        if not isinstance(data, list):
            raise self.error("bindings", f"expected [[bindings]] entries, got {_describe(data)}")
        bindings = []
        before = len(self.problems)
        for index, entry in enumerate(data):
            key = f"bindings[{index}]"
            with self.collecting():
                binding = self.structure(entry, BindingConfig, key)
                bindings.append(binding)
                self.check_binding(binding, key, accounts, agents)
        if len(self.problems) == before:  # coverage of broken bindings would only repeat them
            self.check_coverage(bindings, accounts)
        return tuple(bindings)

    def check_binding(
        self,
        binding: BindingConfig,
        key: str,
        accounts: Mapping[str, AccountConfig],
        agents: Mapping[str, AgentConfig],
    ) -> None:
        if binding.agent not in agents and binding.agent not in self.unreadable:
            raise self.error(
                f"{key}.agent",
                f"expected one of {_names(agents)} (the [agents] tables), got {_describe(binding.agent)}",
            )
        for i, account in enumerate(binding.accounts or ()):
            if account not in accounts and account not in self.unreadable:
                raise self.error(
                    f"{key}.accounts[{i}]",
                    f"expected one of {_names(accounts)} (the [accounts] tables), got {_describe(account)}",
                )
        if binding.accounts == ():
            raise self.error(f"{key}.accounts", "is empty: leave it out to mean every account")
        if binding.chats == ():
            raise self.error(f"{key}.chats", "is empty: leave it out to mean every chat")
        for name in ("window", "window_chars"):
            if getattr(binding, name) < 1:
                raise self.error(
                    f"{key}.{name}", f"expected a positive integer, got {getattr(binding, name)}"
                )
        for name in ("debounce", "max_wait"):
            if getattr(binding, name) < 0:
                raise self.error(
                    f"{key}.{name}", f"expected seconds >= 0, got {getattr(binding, name)}"
                )
        if binding.run_timeout <= 0:
            raise self.error(
                f"{key}.run_timeout", f"expected seconds > 0, got {binding.run_timeout}"
            )
        if binding.bot_turns is not None and not 0 <= binding.bot_turns <= MAX_BOT_TURNS:
            raise self.error(
                f"{key}.bot_turns",
                f"expected a whole number from 0 (no limit) to {MAX_BOT_TURNS}, got"
                f" {binding.bot_turns}",
            )
        if binding.access == "owner" and binding.owner is None:
            raise self.error(
                f"{key}.owner", 'missing: access = "owner" needs owner = "<sender id>"'
            )
        if binding.master and (binding.chats is None or len(binding.chats) != 1):
            raise self.error(
                f"{key}.master",
                'a master binding names its one conversation: add chats = ["<chat>"]'
                " (`backchannel conversations` shows the chat of each conversation)",
            )
        if binding.access == "allowlist" and not binding.allow and binding.owner is None:
            raise self.error(
                f"{key}.allow", 'missing: access = "allowlist" needs allow = ["<sender id>", ...]'
            )

    def check_coverage(
        self, bindings: list[BindingConfig], accounts: Mapping[str, AccountConfig]
    ) -> None:
        """One account: at most one binding for all chats, chats claimed once, same timing."""
        for account in accounts:
            covering = [
                (i, b)
                for i, b in enumerate(bindings)
                if b.accounts is None or account in b.accounts
            ]
            if not covering:
                raise self.error(
                    f"accounts.{account}",
                    "no binding covers this account: add it to a [[bindings]] entry's accounts",
                )
            general = [i for i, b in covering if b.chats is None]
            if len(general) > 1:
                raise self.error(
                    f"bindings[{general[1]}]",
                    f"account {account!r} is already bound to every chat by bindings[{general[0]}];"
                    " give one of them chats = [...]",
                )
            masters = [i for i, b in covering if b.master]
            if len(masters) > 1:
                raise self.error(
                    f"bindings[{masters[1]}].master",
                    f"account {account!r} already has its master conversation in"
                    f" bindings[{masters[0]}]; an account has at most one",
                )
            claimed: dict[str, int] = {}
            for i, b in covering:
                for chat in b.chats or ():
                    if chat in claimed:
                        raise self.error(
                            f"bindings[{i}].chats",
                            f"chat {chat!r} of account {account!r} is already bound by"
                            f" bindings[{claimed[chat]}]",
                        )
                    claimed[chat] = i
            first_index, first = covering[0]
            for i, b in covering[1:]:
                for name in _PER_ACCOUNT:
                    if getattr(b, name) != getattr(first, name):
                        raise self.error(
                            f"bindings[{i}].{name}",
                            f"account {account!r} is also bound by bindings[{first_index}] with"
                            f" {name} = {getattr(first, name)!r}; {name} is per account, so"
                            " bindings sharing an account must agree on it",
                        )

    # plugins -------------------------------------------------------------------
    def check_plugins(self, config: Config) -> None:
        from .plugins import agents, channels

        channel_names = _installed(channels)
        for name, account in config.accounts.items():
            if account.channel not in channel_names:
                self.problems.append(
                    self.error(
                        f"accounts.{name}.channel",
                        f"expected one of {', '.join(sorted(channel_names)) or 'none'} (installed),"
                        f" got {_describe(account.channel)}",
                    )
                )
        kinds = _installed(agents)
        for name, agent in config.agents.items():
            if agent.kind not in kinds:
                self.problems.append(
                    self.error(
                        f"agents.{name}.kind",
                        f"expected one of {', '.join(sorted(kinds)) or 'none'} (installed),"
                        f" got {_describe(agent.kind)}",
                    )
                )


#: binding keys that configure the account (window, scheduling) rather than one chat
_PER_ACCOUNT = ("window", "window_chars", "debounce", "max_wait", "run_timeout")


def positive_number(value: object) -> bool:
    """True for a finite number above 0 that is not a bool: the one test every numeric
    setting of seconds, rates and sizes takes (TOML's nan compares false with everything,
    so a bound written as "value <= 0 is an error" let it through)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


def _is_web_url(text: str) -> bool:
    """True for an http(s) URL with a host (and no spaces)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises ValueError for a port that is no number)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and " " not in text


def _plugin_names() -> set[str]:
    """Return the loaded plugins' entry point names (each may own a top-level table)."""
    from .plugins import get_plugin_manager

    return {name for name, _ in get_plugin_manager().list_name_plugin() if "." not in name}


def _installed(registry: Callable[[], Any]) -> set[str]:
    try:
        return set(registry().items)
    except PluginError:
        raise
    except Exception as error:  # a plugin's registration hook crashed
        raise PluginError(f"a plugin failed while registering: {error}") from error


def _resolve_path(path: str, base_dir: Path) -> str:
    expanded = Path(os.path.expandvars(os.path.expanduser(path))) if path != ":memory:" else None
    if expanded is None:
        return path
    return str(expanded if expanded.is_absolute() else (base_dir / expanded))


def _declared(section: Any) -> set[str]:
    """The names a [accounts] or [agents] section declares, read or not."""
    return {str(name) for name in section} if isinstance(section, Mapping) else set()


def _names(table: Mapping[str, Any]) -> str:
    return ", ".join(sorted(table)) or "none"


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


# cattrs: strict hooks and readable errors -------------------------------------------


class _Expected(ValueError):
    """A value of the wrong type or outside its choices; the text says what was expected."""


def _make_converter() -> cattrs.Converter:
    import cattrs  # here, not at the top: CLI calls that load no config file skip it

    converter = cattrs.Converter(forbid_extra_keys=True)

    def structure_str(value: Any, _: type) -> str:
        if isinstance(value, str):
            return value
        raise _Expected(f"expected a string, got {_describe(value)}")

    def structure_int(value: Any, _: type) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Expected(f"expected an integer, got {_describe(value)}")

    def structure_bool(value: Any, _: type) -> bool:
        if isinstance(value, bool):
            return value
        raise _Expected(f"expected true or false, got {_describe(value)}")

    def structure_float(value: Any, _: type) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                # TOML has nan and inf: every comparison with nan is false, so a nan
                # debounce passed "< 0" and no run ever came
                raise _Expected(f"expected a finite number, got {value}")
            return float(value)
        raise _Expected(f"expected a number, got {_describe(value)}")

    def structure_ids(value: Any, _: type) -> tuple[str, ...]:
        if isinstance(value, str) or not isinstance(value, list):
            raise _Expected(f'expected a list of ids like ["12345"], got {_describe(value)}')
        ids = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, str | int):
                raise _Expected(f"expected ids (strings or integers), got {_describe(item)}")
            ids.append(str(item))
        return tuple(ids)

    def structure_optional_ids(value: Any, _: type) -> tuple[str, ...] | None:
        return None if value is None else structure_ids(value, tuple)

    def structure_optional_id(value: Any, _: type) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise _Expected(f"expected an id (a string or an integer), got {_describe(value)}")
        return str(value)

    def structure_literal(value: Any, literal: Any) -> Any:
        choices = get_args(literal)
        if value in choices:
            return value
        raise _Expected(f"expected one of {', '.join(choices)}, got {_describe(value)}")

    converter.register_structure_hook(str, structure_str)
    converter.register_structure_hook(int, structure_int)
    converter.register_structure_hook(float, structure_float)
    converter.register_structure_hook(bool, structure_bool)
    exact: dict[Any, Callable[[Any, Any], Any]] = {
        tuple[str, ...]: structure_ids,
        tuple[str, ...] | None: structure_optional_ids,
        str | None: structure_optional_id,
    }
    for hint, hook in exact.items():
        converter.register_structure_hook_func(_is(hint), hook)
    converter.register_structure_hook_func(lambda t: get_origin(t) is Literal, structure_literal)
    return converter


def _is(hint: Any) -> Callable[[Any], bool]:
    def matches(candidate: Any) -> bool:
        return bool(candidate == hint)

    return matches


def _explain(error: BaseException, key: str, cls: type[Any]) -> list[tuple[str, str]]:
    """Return (key path, message) for every problem inside a cattrs error."""
    from cattrs.errors import (
        ClassValidationError,
        ForbiddenExtraKeysError,
        IterableValidationError,
    )

    if isinstance(error, ForbiddenExtraKeysError):
        known = [a.name for a in fields(cls)]
        return [(f"{key}.{name}", unknown_key(name, known)) for name in sorted(error.extra_fields)]
    if isinstance(error, ClassValidationError):
        with_notes, others = error.group_exceptions()
        found = [problem for other in others for problem in _explain(other, key, cls)]
        for inner, note in with_notes:
            if isinstance(inner, KeyError):
                found.append((f"{key}.{note.name}", "missing (this key is required)"))
            else:
                found += _explain(inner, f"{key}.{note.name}", note.type)
        return found
    if isinstance(error, IterableValidationError):
        items, rest = error.group_exceptions()
        found = [
            p for inner, item in items for p in _explain(inner, f"{key}[{item.index}]", item.type)
        ]
        return found + [problem for other in rest for problem in _explain(other, key, cls)]
    if isinstance(error, _Expected):
        return [(key, str(error))]
    if isinstance(error, KeyError):
        return [(f"{key}.{error.args[0]}", "missing (this key is required)")]
    return [(key, f"invalid value: {error}")]

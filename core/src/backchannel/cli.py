"""The `backchannel` command: serve, demo, check, plugins, conversations, show, preview, send, messaging.

Human output by default, ``--json`` for scripts. Expected failures (bad
config, missing plugin, unknown conversation) print one line to stderr and
exit 1; usage mistakes exit 2. Plugins add commands through the
`register_commands(cli)` hook.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from attrs import evolve

from . import hints
from .config import Config, default_config, load_config
from .errors import BackchannelError, ConfigError, ConfigErrors, PluginError, StoreError, combine
from .lazy import LazyCommand, LazyModule, deferred
from .model import Address, Conversation, Message, to_json
from .plugins import get_plugin_manager, plugin_summary
from .secrets import redact
from .terminal import terminal_safe

if TYPE_CHECKING:
    from . import control
    from .app import (
        build_adapter,
        build_agent,
        build_switchboard,
        idle_agents,
        open_config_store,
        operator_board,
        serve,
    )
    from .asklog import ask_reports, render_asks
    from .render import (
        conversation_json,
        conversation_title,
        render_preview,
        render_summary,
        transcript_line,
    )
    from .runlog import failed, failure_line, render_runs, run_reports
    from .runs import Run
    from .store import Store
else:
    # imported when a command uses them: `backchannel --help` (and every command that does
    # not serve) skips the switchboard, the store and asyncio (bench/startup.py)
    control = LazyModule("backchannel.control")
    build_adapter = deferred("backchannel.app:build_adapter")
    build_agent = deferred("backchannel.app:build_agent")
    build_switchboard = deferred("backchannel.app:build_switchboard")
    idle_agents = deferred("backchannel.app:idle_agents")
    operator_board = deferred("backchannel.app:operator_board")
    open_config_store = deferred("backchannel.app:open_config_store")
    serve = deferred("backchannel.app:serve")
    conversation_json = deferred("backchannel.render:conversation_json")
    conversation_title = deferred("backchannel.render:conversation_title")
    render_preview = deferred("backchannel.render:render_preview")
    render_summary = deferred("backchannel.render:render_summary")
    transcript_line = deferred("backchannel.render:transcript_line")
    failed = deferred("backchannel.runlog:failed")
    failure_line = deferred("backchannel.runlog:failure_line")
    render_runs = deferred("backchannel.runlog:render_runs")
    run_reports = deferred("backchannel.runlog:run_reports")
    ask_reports = deferred("backchannel.asklog:ask_reports")
    render_asks = deferred("backchannel.asklog:render_asks")

__all__ = ["main", "render_preview"]

T = TypeVar("T")

CONFIG_ENV = "BACKCHANNEL_CONFIG"


class BackchannelGroup(click.Group):
    """The top-level group: adds plugin commands on first use; turns expected errors into one line."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._plugin_commands: list[str] | None = None

    def load_plugin_commands(self, *, reload: bool = False) -> None:
        """Call every plugin's `register_commands(cli)` (once, or again with `reload`)."""
        if self._plugin_commands is not None and not reload:
            return
        for name in self._plugin_commands or ():
            self.commands.pop(name, None)
        before = set(self.commands)
        self._plugin_commands = []
        get_plugin_manager().hook.register_commands(cli=self)
        self._plugin_commands = sorted(set(self.commands) - before)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_quietly()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._load_quietly()
        return super().get_command(ctx, cmd_name)

    def _load_quietly(self) -> None:
        try:
            self.load_plugin_commands()
        except Exception as error:
            # a broken plugin must not make every command unusable; say so once
            self._plugin_commands = []
            click.echo(
                f"warning: plugin commands not loaded: {type(error).__name__}: {redact(str(error))}",
                err=True,
            )

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BackchannelError as error:
            for line in redact(str(error)).splitlines() or [""]:
                click.echo(f"error: {terminal_safe(_capped(line))}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


#: characters of an error line shown: one naming a huge argument (a pasted file) says so
ERROR_LINE_CHARS = 2_000


def _capped(line: str) -> str:
    if len(line) <= ERROR_LINE_CHARS:
        return line
    return f"{line[:ERROR_LINE_CHARS]}… ({len(line) - ERROR_LINE_CHARS:,} more characters)"


#: a listing's --limit: past this it is no longer a count a store can read (SQLite and
#: PostgreSQL take a 64-bit integer), and no listing is that long
LIMIT = click.IntRange(1, 1_000_000)


@click.group(cls=BackchannelGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="backchannel", prog_name="backchannel")
def main() -> None:
    """Connect agents to chats: flattened transcripts, executable send tools.

    Run `backchannel demo` to try it in a browser, `backchannel preview` to see
    exactly what an agent receives.
    """


config_option = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    help=f"TOML config file (default: ${CONFIG_ENV}, else the embedded defaults).",
)
store_option = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Use this store file instead of the config's [store] path.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
verbose_option = click.option("-v", "--verbose", is_flag=True, help="Log debug details.")


# serve, demo ------------------------------------------------------------------------


@main.command("serve")
@config_option
@click.option(
    "--worker",
    help="Run as this named worker, one of several sharing the [store] url (PostgreSQL).",
)
@click.option(
    "--lease-ttl",
    type=click.FloatRange(1.0, 300.0),
    default=10.0,
    show_default=True,
    help="With --worker: seconds before a dead worker's accounts are taken over"
    " (takeover within 1.3x this; heartbeats every 0.3x).",
)
@verbose_option
def serve_command(
    config_path: Path | None, worker: str | None, lease_ttl: float, verbose: bool
) -> None:
    """Run the switchboard until Ctrl-C (in-flight runs and sends finish first)."""
    config = _load(config_path)
    _setup_logging(verbose)
    as_worker = f"; worker: {worker}" if worker else ""
    _echo_err(
        f"config: {config.source or 'embedded defaults'}; store: {config.store.location}"
        + (" (this config's own, chosen by its path)" if config.store_defaulted else "")
        + as_worker
    )
    _serve(config, verbose, worker=worker, lease_ttl=lease_ttl)


@main.command("demo")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="0 picks a free port.",
)
@store_option
@verbose_option
def demo_command(host: str, port: int, store_path: Path | None, verbose: bool) -> None:
    """Serve the web chat with the demo agent (or an OpenAI-compatible model if configured)."""
    config = default_config(store_path=str(store_path) if store_path else None, port=port)
    hints.use(None, store_path)
    config = evolve(config, server=evolve(config.server, host=host))
    if os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY"):
        agent = evolve(config.agents["demo"], kind="openai")
        config = evolve(config, agents={"demo": agent})
        where = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        model = os.environ.get("OPENAI_MODEL") or "gpt-4o-mini"
        _echo_err(
            f"agent: openai (model {model} at {where}), because OPENAI_BASE_URL/OPENAI_API_KEY is set"
        )
    else:
        _echo_err(
            "agent: demo (no model, no network). Set OPENAI_BASE_URL or OPENAI_API_KEY to use"
            " an OpenAI-compatible model instead."
        )
    _setup_logging(verbose)
    _echo_err(f"store: {config.store.path}")
    _serve(config, verbose)


def _serve(
    config: Config, verbose: bool, *, worker: str | None = None, lease_ttl: float | None = None
) -> None:
    try:
        _run(serve(config, on_ready=_announce, worker=worker, lease_ttl=lease_ttl))
    except BackchannelError:
        raise
    except OSError as error:
        if error.errno not in _ADDRESS_ERRORS:
            _unexpected(error, verbose)
        where = f"{config.server.host}:{config.server.port}"
        raise BackchannelError(
            f"cannot serve on {where}: {os.strerror(error.errno) if error.errno else error}"
            f" (pick another port: {_port_hint(config)})"
        ) from None
    except Exception as error:
        _unexpected(error, verbose)
    _echo_err("stopped")


_ADDRESS_ERRORS = {errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES}


def _port_hint(config: Config) -> str:
    """How to choose another port, as the person started this process."""
    if config.source is not None:
        return "[server] port in the config"
    if os.environ.get("MAKELEVEL"):  # started by `make demo`, which passes PORT on
        return "make demo PORT=9000 (0 picks a free one)"
    return f"`{hints.command('demo', '--port', '9000')}` (0 picks a free one)"


def _unexpected(error: Exception, verbose: bool) -> NoReturn:
    """Re-raise with the traceback under -v; else one line for people."""
    if verbose:
        raise error
    raise BackchannelError(
        f"serve stopped: {type(error).__name__}: {error} (run with -v for the traceback)"
    ) from None


def _announce(board: Any) -> None:
    for name, account in board.accounts.items():
        url = getattr(account.adapter, "url", None)
        if url:
            click.echo(f"{name}: open {url}")
    if board.url:
        _echo_err(f"serving on {board.url} (health: {board.url}/healthz); press Ctrl-C to stop")
    _echo_err(
        f"in another terminal: `{hints.command('conversations')}` lists conversations,"
        f" `{hints.command('runs', '--failed')}` the runs that failed"
    )
    sys.stdout.flush()


# check, plugins ---------------------------------------------------------------------


@main.command("check")
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    required=True,
    help="TOML config file to validate.",
)
@json_option
def check_command(config_path: Path, as_json: bool) -> None:
    """Validate a config without starting anything; print it with secrets masked.

    Every mistake in the file is reported, one line each (exit 1).
    """
    problems: list[ConfigError] = []
    try:
        config = _load(config_path)
    except ConfigError as error:
        if error.partial is None:
            raise
        problems.append(error)
        config = error.partial
    # the adapters and agents check their own settings: ask each, even after a mistake,
    # but not one whose table already has one (an unset ${VAR} read as "" would be
    # reported again as a malformed token)
    keys = [
        error.key
        for problem in problems
        for error in (problem.errors if isinstance(problem, ConfigErrors) else (problem,))
        if error.key
    ]

    def owners(section: str, names: Iterable[str]) -> set[str]:
        # the table each mistake is in: a name may hold a dot, so the longest that fits
        found = set()
        for key in keys:
            fits = [
                n for n in names if key in (f"{section}.{n}",) or key.startswith(f"{section}.{n}.")
            ]
            if fits:
                found.add(max(fits, key=len))
        return found

    flawed_accounts = owners("accounts", config.accounts)
    flawed_agents = owners("agents", config.agents)
    builds: list[Callable[[], object]] = [
        functools.partial(build_adapter, config, a)
        for a in config.accounts.values()
        if a.name not in flawed_accounts
    ]
    builds += [
        functools.partial(build_agent, config, a)
        for a in config.agents.values()
        if a.name not in flawed_agents
    ]
    # and each plugin its own table ([owner]), as serve would read it
    hook = get_plugin_manager().hook.check_config
    builds += [functools.partial(impl.function, config=config) for impl in hook.get_hookimpls()]
    for build in builds:
        try:
            build()
        except ConfigError as error:
            problems.append(error)
        except PluginError:
            if not problems:  # an uninstalled channel or kind is already a problem
                raise
    if problems:
        raise combine(problems)
    summary = config.summary()
    if as_json:
        _echo_json({"ok": True, **summary})
        return
    click.echo(f"{config_path}: ok")
    click.echo(render_summary(summary))


@main.command("plugins")
@json_option
def plugins_command(as_json: bool) -> None:
    """List installed plugins and the channels and agent kinds they register."""
    rows = plugin_summary()
    if as_json:
        _echo_json(rows)
        return
    width = max((len(r["name"]) for r in rows), default=4)
    dist_width = max((len(r["distribution"]) for r in rows), default=12)
    click.echo(f"{'PLUGIN':<{width}}  {'DISTRIBUTION':<{dist_width}}  REGISTERS")
    for row in rows:
        parts = []
        if row["channels"]:
            parts.append("channels: " + ", ".join(row["channels"]))
        if row["agents"]:
            parts.append("agents: " + ", ".join(row["agents"]))
        click.echo(
            f"{row['name']:<{width}}  {row['distribution']:<{dist_width}}  "
            + ("; ".join(parts) or "-")
        )


# store-reading commands -------------------------------------------------------------------


@main.command("workers")
@config_option
@json_option
def workers_command(config_path: Path | None, as_json: bool) -> None:
    """List the workers sharing the PostgreSQL store, their accounts and leases."""
    from .workers_report import print_workers

    print_workers(_load(config_path, secrets=False), as_json)


@main.command("conversations")
@config_option
@store_option
@click.option("--account", help="Only this account's conversations.")
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@json_option
def conversations_command(
    config_path: Path | None,
    store_path: Path | None,
    account: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List conversations, most recently active first."""
    config = _load(config_path, store_path, secrets=False)

    async def read(store: Store) -> list[Conversation]:
        return await store.conversations(account, limit)

    found = _with_store(config, read, missing=[])
    if as_json:
        _echo_json([conversation_json(c) for c in found])
        return
    if not found:
        if account is not None:
            shown = terminal_safe(account, one_line=True)
            click.echo(f"no conversations of account {shown!r} (store: {config.store.path})")
        else:
            click.echo(f"no conversations yet (store: {config.store.path})")
        return
    # stored text, made terminal-safe before the column is measured
    keys = [terminal_safe(c.address.key, one_line=True) for c in found]
    width = max(len(key) for key in keys)
    click.echo(
        f"{'ID':>4}  {'CONVERSATION':<{width}}  {'KIND':<6}  {'MESSAGES':>8}  WAITING  TITLE"
    )
    for c, key in zip(found, keys, strict=True):
        waiting = f"#{c.trigger_seq}" if c.trigger_seq > c.handled_seq else "-"
        click.echo(
            f"{c.id:>4}  {key:<{width}}  {c.kind:<6}  {c.visible_count:>8}  "
            f"{waiting:<7}  {terminal_safe(c.title or '', one_line=True)}".rstrip()
        )


@main.command("show")
@click.argument("conversation")
@config_option
@store_option
@click.option("--limit", type=LIMIT, default=100, show_default=True, help="Last N messages.")
@json_option
def show_command(
    conversation: str,
    config_path: Path | None,
    store_path: Path | None,
    limit: int,
    as_json: bool,
) -> None:
    """Print a conversation's transcript (CONVERSATION: an id or a key like webchat/abc)."""
    config = _load(config_path, store_path, secrets=False)

    async def show(store: Store) -> None:
        found = await _find(store, conversation)
        pages = _transcript_pages(store, found, limit)
        first_page: list[Message] = await anext(pages, [])
        oldest = first_page[0].seq if first_page else found.last_seq + 1
        reports = await run_reports(store, found, only_failed=True, limit=limit)
        failures = [r for r in reports if r.run.upto_seq >= oldest]
        if as_json:
            await _stream_show_json(found, first_page, pages, failures)
            return
        shown = min(found.visible_count, limit)
        marks: dict[int, list[Any]] = {}
        if failures:
            # a failed run is marked after the last message it saw or sent before it ended:
            # known once every message shown is, so a first pass over them finds where
            marks = await _failure_marks(
                failures, first_page, _transcript_pages(store, found, limit, skip_first=True)
            )
        click.echo(click.style(conversation_title(found), bold=True))
        click.echo(
            f"{found.visible_count} messages, handled up to #{found.handled_seq}"
            + (
                f", {found.held_count} held (not shown: the binding's access rules kept them out)"
                if found.held_count
                else ""
            )
        )
        if isinstance(found.meta.get("created_by"), str):
            click.echo(terminal_safe(f"started by an ask from {found.meta['created_by']}"))
        if shown < found.visible_count:
            click.echo(f"(showing the last {shown}; use --limit for more)")
        if failures:
            click.echo(
                f"{len(failures)} failed run{'s' if len(failures) != 1 else ''} (marked !!;"
                f" details: `{hints.command('runs', found.address.key, '--failed')}`)"
            )
        click.echo("")
        for report in marks.pop(0, []):
            click.echo(click.style(failure_line(report), fg="red"))
        page = first_page
        while page:
            for message in page:
                click.echo(transcript_line(message))
                for report in marks.get(message.seq, []):
                    click.echo(click.style(failure_line(report), fg="red"))
            page = await anext(pages, [])

    _with_store(config, show)


#: `show` reads (and prints) a long transcript this many messages at a time
SHOW_PAGE = 1000


async def _transcript_pages(
    store: Store, found: Conversation, limit: int, *, skip_first: bool = False
) -> AsyncIterator[list[Message]]:
    """Yield the last `limit` visible messages of `found` (up to its `last_seq`), oldest first.

    A page at a time (`SHOW_PAGE`), so that `show --limit 1000000` of a
    150,000-message group holds one page, not the whole transcript.
    `skip_first`: all pages but the first.
    """
    if limit <= SHOW_PAGE:
        if not skip_first:
            yield await store.window(found.id, limit, found.last_seq)
        return
    after = await _seq_before_last(store, found, limit)
    left = limit
    first_page = True
    while left > 0:
        page = [
            m
            for m in await store.messages_after(found.id, after, min(SHOW_PAGE, left))
            if m.seq <= found.last_seq
        ]
        if not page:
            return
        if not (skip_first and first_page):
            yield page
        first_page = False
        left -= len(page)
        after = page[-1].seq


async def _seq_before_last(store: Store, found: Conversation, limit: int) -> int:
    """Return the seq after which the last `limit` visible messages of `found` start.

    A binary search over `count_visible` (how many visible messages come
    before a seq): a few counts instead of reading every message older.
    """
    skip = found.visible_count - limit
    if skip <= 0:
        return 0
    low, high = 1, found.last_seq + 1  # the first seq with more than `skip` visible before it
    while low < high:
        middle = (low + high) // 2
        if await store.count_visible(found.id, middle) > skip:
            high = middle
        else:
            low = middle + 1
    return max(low - 2, 0)


async def _failure_marks(
    failures: list[Any], first_page: list[Message], rest: AsyncIterator[list[Message]]
) -> dict[int, list[Any]]:
    """Return, per seq, the failed runs to mark after that message (0: before the first)."""
    after = {report.run.id: 0 for report in failures}
    ends = {r.run.id: r.run.finished_at or r.run.started_at for r in failures}
    page = first_page
    while page:
        for report in failures:
            run = report.run
            for m in page:
                if m.seq <= run.upto_seq or (m.direction == "out" and m.sent_at <= ends[run.id]):
                    after[run.id] = max(after[run.id], m.seq)
        page = await anext(rest, [])
    marks: dict[int, list[Any]] = {}
    for report in sorted(failures, key=lambda r: r.run.id):
        marks.setdefault(after[report.run.id], []).append(report)
    return marks


async def _stream_show_json(
    found: Conversation,
    first_page: list[Message],
    pages: AsyncIterator[list[Message]],
    failures: list[Any],
) -> None:
    """Print `show --json`'s object as `_echo_json` would, one message at a time."""

    def dumped(value: Any, indent: str) -> str:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
        return text.replace("\n", "\n" + indent)

    def out(text: str) -> None:
        click.echo(text, nl=False)

    out('{\n  "conversation": ' + dumped(conversation_json(found), "  ") + ",\n")
    out('  "messages": [')
    page, count = first_page, 0
    while page:
        for message in page:
            out(("," if count else "") + "\n    " + dumped(to_json(message), "    "))
            count += 1
        page = await anext(pages, [])
    out("\n  ]" if count else "]")
    out(',\n  "failed_runs": ' + dumped([r.to_json() for r in failures], "  ") + "\n}\n")


@main.command("runs")
@click.argument("conversation", required=False)
@config_option
@store_option
@click.option("--failed", "only_failed", is_flag=True, help="Only runs that did not end ok.")
@click.option("--limit", type=LIMIT, default=50, show_default=True)
@json_option
def runs_command(
    conversation: str | None,
    config_path: Path | None,
    store_path: Path | None,
    only_failed: bool,
    limit: int,
    as_json: bool,
) -> None:
    """List agent runs, newest first: trigger, duration, tools called, outcome, error.

    CONVERSATION (an id or key) limits the list to one conversation.
    """
    config = _load(config_path, store_path, secrets=False)

    async def read(store: Store) -> list[Any]:
        found = await _find(store, conversation) if conversation else None
        return await run_reports(store, found, only_failed=only_failed, limit=limit)

    what = "failed runs yet" if only_failed else "runs yet"
    reports = _report_listing(config, read, as_json, what, render_runs)
    if not only_failed and any(failed(r.run) for r in reports):
        click.echo(f"(only the failed ones: `{hints.command('runs', '--failed')}`)")


@main.command("asks")
@click.argument("conversation", required=False)
@config_option
@store_option
@click.option(
    "--waiting", "only_waiting", is_flag=True, help="Only asks still waiting for an answer."
)
@click.option("--limit", type=LIMIT, default=50, show_default=True)
@json_option
def asks_command(
    conversation: str | None,
    config_path: Path | None,
    store_path: Path | None,
    only_waiting: bool,
    limit: int,
    as_json: bool,
) -> None:
    """List the questions agents asked other agents, newest first: from, session, state, answer.

    CONVERSATION (an id or key) limits the list to the asks made from it or in it.
    """
    config = _load(config_path, store_path, secrets=False)

    async def read(store: Store) -> list[Any]:
        found = await _find(store, conversation) if conversation else None
        return await ask_reports(store, found, only_waiting=only_waiting, limit=limit)

    what = "asks waiting for an answer" if only_waiting else "asks"
    _report_listing(config, read, as_json, what, render_asks)


@main.command("preview")
@click.argument("conversation")
@config_option
@store_option
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "openai", "anthropic"]),
    default="text",
    show_default=True,
    help="text: for people; openai/anthropic: the exact request JSON.",
)
def preview_command(
    conversation: str, config_path: Path | None, store_path: Path | None, output_format: str
) -> None:
    """Print exactly the Run an agent would receive now: instruction, messages, tools.

    Nothing is started or sent: the run is built from the store with the
    account's binding (window, framing, tools) as `serve` would build it.
    """
    config = _load(config_path, store_path)
    run = _run(_preview(config, conversation))
    if output_format == "openai":
        _echo_json(run.to_openai())
    elif output_format == "anthropic":
        _echo_json(run.to_anthropic())
    else:
        click.echo(render_preview(run))  # its text escaped inside, its headings styled


async def _preview(config: Config, reference: str) -> Run:
    _require_store(config)
    board = await build_switchboard(config, agents=idle_agents(config), serve_http=False)
    try:
        found = await _find(board.store, reference)
        if found.address.account not in board.accounts:
            raise ConfigError(
                f"conversation {found.address.key} belongs to account {found.address.account!r},"
                " which this config does not have",
                path=config.source,
            )
        return await board.build_run(found.id)
    finally:
        await board.stop()


@main.command("send")
@click.argument("target", nargs=-1, required=True)
@click.option("--thread", help="Thread (topic) id within the chat.")
@config_option
@store_option
@json_option
def send_command(
    target: tuple[str, ...],
    thread: str | None,
    config_path: Path | None,
    store_path: Path | None,
    as_json: bool,
) -> None:
    """Send TEXT as the operator; it is recorded in the transcript.

    \b
    backchannel send CONVERSATION TEXT     a key or id from `backchannel conversations`
    backchannel send ACCOUNT CHAT TEXT     an address, also one no one has written from yet

    A running `serve` on the same store does the sending (open web pages show
    it at once); on a PostgreSQL store, the worker holding the account does;
    without either, this starts that account's adapter for the send.
    """
    config = _load(config_path, store_path)
    if len(target) not in (2, 3):
        raise click.UsageError(
            f"send takes CONVERSATION TEXT or ACCOUNT CHAT TEXT, got {len(target)} arguments"
            " (quote the text)"
        )
    *where, text = target
    if not text.strip():
        raise click.UsageError("the text is empty: nothing to send")
    outcome = _run(_send(config, where, thread, text))
    if as_json:
        _echo_json(outcome)
    else:
        click.echo(terminal_safe(f"{outcome['conversation']}: {outcome['result']}"))
        if outcome["via"] == "direct":
            _echo_err(_DIRECT_NOTES.get(outcome["channel"], _DIRECT_NOTES[""]))
    if outcome["status"] != "sent":
        sys.exit(1)


_DIRECT_NOTES = {
    "webchat": "no serve is running on this store: the message is stored, and an open page"
    " shows it when it next loads",
    "": "sent directly: no serve is running on this store",
}


async def _send(config: Config, where: list[str], thread: str | None, text: str) -> dict[str, Any]:
    """Hand the send to the serve that owns the account, or send directly when none runs."""
    address = await _resolve_send_address(config, where, thread)
    address_args = {"account": address.account, "chat": address.chat, "thread": address.thread}
    try:
        outcome = await control.call(config, "send", address=address_args, text=text)
        via = "serve"
    except control.ControlRefused as error:
        # not this user's serve listening there: nothing was sent to it, nor is sent around it
        outcome = {
            "conversation": address.key,
            "state": "failed",
            "seq": None,
            "platform_message_id": None,
            "reason": str(error),
            "result": f"not sent: {error}",
        }
        via = "serve"
    except control.ControlUnavailable:
        outcome, via = await _send_directly(config, address, text)
    except (control.ControlLost, TimeoutError) as error:
        # the serve took the send and did not say what became of it: never sent again here
        reason = str(error)
        outcome = {
            "conversation": address.key,
            "state": "uncertain",
            "seq": None,
            "platform_message_id": None,
            "reason": reason,
            "result": f"delivery uncertain ({reason}): the message may or may not have arrived;"
            " do not resend unless you know it did not",
        }
        via = "serve"
    status = outcome.pop("state")  # printed as `status`, the name `send --json` has always used
    channel = config.accounts[address.account].channel
    return {**outcome, "status": status, "via": via, "channel": channel}


async def _send_address(
    config: Config, store: Store, where: list[str], thread: str | None
) -> Address:
    """Return the address `send` was given: a stored conversation's key or id, or ACCOUNT CHAT."""
    if len(where) == 2:
        account, chat = where
        if account not in config.accounts:
            known = ", ".join(sorted(config.accounts)) or "none"
            raise ConfigError(
                f"no account called {account!r} (configured: {known})", path=config.source
            )
        if chat.startswith(f"{account}/"):
            raise StoreError(
                f"{chat!r} is a conversation key, not a chat id: run"
                f" `{hints.command('send', chat, 'TEXT')}` (without the account)"
            )
        return Address(account, chat, thread)
    (reference,) = where
    try:
        found = await _find(store, reference)
    except StoreError:
        account, _, rest = reference.partition("/")
        if reference.isdigit() or account not in config.accounts or not rest:
            raise
        chat, _, key_thread = rest.partition("/")
        return Address(account, chat, thread or key_thread or None)
    if thread is not None:
        return Address(found.address.account, found.address.chat, thread)
    return found.address


async def _resolve_send_address(config: Config, where: list[str], thread: str | None) -> Address:
    store = open_config_store(config)
    try:
        address = await _send_address(config, store, where, thread)
    finally:
        await store.close()
    if address.account not in config.accounts:
        raise ConfigError(
            f"conversation {address.key} belongs to account {address.account!r},"
            " which this config does not have",
            path=config.source,
        )
    return address


async def _send_directly(config: Config, address: Address, text: str) -> tuple[dict[str, Any], str]:
    """Send through the account's own adapter ("direct"), or, on a PostgreSQL store whose
    workers hold the account, by the worker holding it ("worker")."""
    async with operator_board(config, address.account) as board:
        outcome = await board.send_outcome(await board.conversation_for(address), text)
        return outcome, "worker" if address.account in board.handed_over else "direct"


main.add_command(
    LazyCommand(
        "fake-model",
        "backchannel.fake_model:fake_model_command",
        "Serve a fake OpenAI-compatible model on 127.0.0.1 (no key, no network).",
    )
)
main.add_command(
    LazyCommand(
        "messaging",
        "backchannel.orchestration.cli:messaging_command",
        "Turn cross-conversation sends off or on, or say what holds them.",
    )
)


# helpers --------------------------------------------------------------------------------


def _load(
    config_path: Path | None, store_path: Path | None = None, *, secrets: bool = True
) -> Config:
    """Load the config; with `secrets` False, unset ${VAR}s are tolerated (store reading only)."""
    config = load_config(config_path, strict_env=secrets)
    hints.use(config_path, store_path)
    if store_path is not None:
        config = evolve(config, store=evolve(config.store, path=str(store_path)))
    return config


def _require_store(config: Config) -> None:
    if config.store.url:
        return  # a database server: opening it says whether it is there
    if config.store.path != ":memory:" and not Path(config.store.path).exists():
        raise StoreError(
            f"there is no store at {config.store.path} yet (run `{hints.command('serve')}`"
            " first, or pass -c/--store)"
        )


def _report_listing(
    config: Config, read: Any, as_json: bool, what: str, render: Callable[[Any], str]
) -> list[Any]:
    """Print the reports `read` returns: JSON, a table, or "no WHAT (store: ...)".

    Return them when the table was printed (a command may add a hint), else [].
    """
    reports: list[Any] = _with_store(config, read, missing=[])
    if as_json:
        _echo_json([report.to_json() for report in reports])
        return []
    if not reports:
        click.echo(f"no {what} (store: {config.store.path})")
        return []
    click.echo(render(reports))
    return reports


def _with_store(config: Config, read: Any, **kwargs: Any) -> Any:
    if "missing" in kwargs and not config.store.url and not Path(config.store.path).exists():
        return kwargs["missing"]
    _require_store(config)

    async def go() -> Any:
        store = open_config_store(config)
        try:
            return await read(store)
        finally:
            await store.close()

    return _run(go())


async def _find(store: Store, reference: str) -> Conversation:
    """Return the conversation named by a numeric id or an address key account/chat[/thread]."""
    from .store import find_by_reference

    account, _, rest = reference.partition("/")
    if not reference.isdigit() and not (account and rest):
        raise StoreError(
            f"{reference!r} is not a conversation: give its id (see"
            f" `{hints.command('conversations')}`)"
            " or its key, like webchat/v1a2b3c.tab1"
        )
    found = await find_by_reference(store, reference)
    if found is not None:
        return found
    if reference.isdigit():
        raise StoreError(f"no conversation with id {reference}")
    raise StoreError(f"no conversation {reference} (see `{hints.command('conversations')}`)")


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    import asyncio

    return asyncio.run(coroutine)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _echo_err(text: str) -> None:
    click.echo(text, err=True)


def _setup_logging(verbose: bool) -> None:
    from .terminal import log_to_stderr

    log_to_stderr(verbose)  # log lines quote platform text: escaped, never acted on

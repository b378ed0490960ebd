"""Which agent session is calling: walk the process ancestry to a harness's session file.

Claude Code writes ``~/.claude/sessions/<pid>.json`` (``sessionId``, ``name``,
``cwd``, ``tmux``, ...) for each running session. `resolve_identity` walks
from the calling process up through ``/proc/<pid>/stat`` (at most 40 hops) to
the nearest process that has such a file. Other harnesses plug in as more
`SessionLocator`s. Every field that cannot be read is None: omitted, never
guessed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import evolve, frozen
from backchannel.wire import repair_text

__all__ = [
    "MAX_HOPS",
    "SESSION_ENV",
    "SESSION_NAME_ENV",
    "TERMINALS",
    "ProcessInfo",
    "SessionIdentity",
    "SessionLocator",
    "claude_code_locator",
    "resolve_identity",
    "x11_workspace",
]

MAX_HOPS = 40
#: set by harnesses without session files: the session id (and name) to use as-is
SESSION_ENV = "BACKCHANNEL_SESSION_ID"
SESSION_NAME_ENV = "BACKCHANNEL_SESSION_NAME"
#: process names (``/proc/<pid>/comm``, at most 15 characters) of terminal emulators
TERMINALS = {
    "gnome-terminal-": "gnome-terminal",
    "gnome-terminal": "gnome-terminal",
    "gnome-terminal.": "gnome-terminal",
    "konsole": "konsole",
    "kitty": "kitty",
    "alacritty": "alacritty",
    "xterm": "xterm",
    "vte": "vte",
}


@frozen
class ProcessInfo:
    """One process of the ancestry: pid, parent pid and its short name."""

    pid: int
    ppid: int
    comm: str


@frozen
class SessionIdentity:
    """Who is calling, as far as can be known. None means unknown (never guessed)."""

    session_id: str
    name: str
    terminal: str | None = None
    workspace: str | None = None
    cwd: str | None = None
    host: str | None = None
    #: the process that owns the session file (or the caller, for unknown sessions)
    pid: int | None = None
    #: which harness's session file named it ("claude-code"), None when synthesized
    harness: str | None = None

    @property
    def where(self) -> str:
        """The parenthetical's parts joined: ``gnome-terminal, Workspace 5`` (may be empty)."""
        return ", ".join(part for part in (self.terminal, self.workspace) if part)


#: (pid, home) -> the session record of that process (sessionId at least), or None
SessionLocator = Callable[[int, Path], "tuple[str, Mapping[str, Any]] | None"]


def claude_code_locator(pid: int, home: Path) -> tuple[str, Mapping[str, Any]] | None:
    """Return ("claude-code", record) when Claude Code keeps a session file for `pid`."""
    path = home / ".claude" / "sessions" / f"{pid}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("sessionId"), str):
        return None
    if not record["sessionId"].strip():
        return None
    return "claude-code", record


def x11_workspace(environ: Mapping[str, str]) -> str | None:
    """Return ``Workspace N`` on X11 through xdotool (bounded), else None."""
    if not environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    if environ.get("XDG_SESSION_TYPE", "x11") != "x11":
        return None
    tool = shutil.which("xdotool")
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, "get_desktop"], capture_output=True, text=True, timeout=0.5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    if done.returncode != 0 or not text.isdigit():
        return None
    return f"Workspace {int(text) + 1}"


def resolve_identity(
    pid: int | None = None,
    *,
    proc_root: str | os.PathLike[str] = "/proc",
    home: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    host: str | None = None,
    locators: Sequence[SessionLocator] = (claude_code_locator,),
    workspace: Callable[[Mapping[str, str]], str | None] = x11_workspace,
) -> SessionIdentity:
    """Return the identity of the session that runs process `pid` (default: the caller's parent).

    Walks at most `MAX_HOPS` ancestors. The first ancestor with a session file
    gives the id and name; the walk goes on (from there) to find a terminal
    emulator or sshd. With no session file, the id is ``unknown-<pid>``.
    """
    return _readable(_resolve(pid, proc_root, home, environ, host, locators, workspace))


def _readable(identity: SessionIdentity) -> SessionIdentity:
    """`identity` with text that is not UTF-8 (an environment variable, a folder named in
    another encoding: Python keeps such bytes as lone surrogates) made readable, the
    bytes no UTF-8 reads shown as U+FFFD: no store or platform can hold the rest."""
    fields: dict[str, Any] = {
        name: _utf8(getattr(identity, name))
        for name in ("session_id", "name", "terminal", "workspace", "cwd", "host")
    }
    if all(fields[name] is getattr(identity, name) for name in fields):
        return identity
    return evolve(identity, **fields)


def _utf8(text: str | None) -> str | None:
    return None if text is None else repair_text(text)


def _resolve(
    pid: int | None,
    proc_root: str | os.PathLike[str],
    home: str | os.PathLike[str] | None,
    environ: Mapping[str, str] | None,
    host: str | None,
    locators: Sequence[SessionLocator],
    workspace: Callable[[Mapping[str, str]], str | None],
) -> SessionIdentity:
    environ = os.environ if environ is None else environ
    home_path = Path(home) if home is not None else Path(environ.get("HOME") or Path.home())
    start = os.getppid() if pid is None else pid
    ancestry = list(_ancestry(start, Path(proc_root)))
    named = _text(environ.get(SESSION_ENV))
    if named is not None:  # a harness without session files names its session itself
        cwd = _proc_cwd(Path(proc_root), start)
        return SessionIdentity(
            session_id=named,
            name=_text(environ.get(SESSION_NAME_ENV)) or _name(None, cwd, named),
            terminal=_terminal(ancestry),
            workspace=workspace(environ),
            cwd=cwd,
            host=host if host is not None else socket.gethostname() or None,
            pid=start,
            harness="env",
        )
    found: tuple[int, str, Mapping[str, Any]] | None = None
    for process in ancestry:
        for locate in locators:
            located = locate(process.pid, home_path)
            if located is not None:
                found = (process.pid, located[0], located[1])
                break
        if found is not None:
            break
    if found is not None:
        owner_pid, harness, record = found
        session_id = str(record["sessionId"])
        cwd = _text(record.get("cwd")) or _proc_cwd(Path(proc_root), owner_pid)
        above = [p for p in ancestry if _index(ancestry, p.pid) >= _index(ancestry, owner_pid)]
        terminal = _tmux(record.get("tmux")) or _terminal(above)
        name = _name(_text(record.get("name")), cwd, session_id)
    else:
        owner_pid, harness = start, None
        session_id = f"unknown-{start}"
        cwd = _proc_cwd(Path(proc_root), start)
        terminal = _terminal(ancestry)
        name = _name(None, cwd, session_id)
    return SessionIdentity(
        session_id=session_id,
        name=name,
        terminal=terminal,
        workspace=workspace(environ),
        cwd=cwd,
        host=host if host is not None else socket.gethostname() or None,
        pid=owner_pid,
        harness=harness,
    )


# helpers ------------------------------------------------------------------------------


def _ancestry(pid: int, proc: Path) -> Iterator[ProcessInfo]:
    """Yield `pid` and its ancestors (at most MAX_HOPS), stopping at pid 1 or a loop."""
    seen: set[int] = set()
    for _ in range(MAX_HOPS):
        if pid <= 0 or pid in seen:
            return
        seen.add(pid)
        info = _process(proc, pid)
        if info is None:
            return
        yield info
        if info.ppid == pid:
            return
        pid = info.ppid


def _process(proc: Path, pid: int) -> ProcessInfo | None:
    try:
        stat = (proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    open_at, close_at = stat.find("("), stat.rfind(")")
    if open_at < 0 or close_at < open_at:
        return None
    fields = stat[close_at + 1 :].split()
    try:
        ppid = int(fields[1])
    except (IndexError, ValueError):
        return None
    return ProcessInfo(pid, ppid, stat[open_at + 1 : close_at])


def _index(ancestry: list[ProcessInfo], pid: int) -> int:
    return next(i for i, p in enumerate(ancestry) if p.pid == pid)


def _proc_cwd(proc: Path, pid: int) -> str | None:
    try:
        return os.readlink(proc / str(pid) / "cwd")
    except OSError:
        return None


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _tmux(value: Any) -> str | None:
    """Return ``tmux:<session>`` from a session file's tmux field (a name or a table)."""
    if isinstance(value, Mapping):
        value = value.get("session") or value.get("sessionName") or value.get("name")
    name = _text(value)
    return f"tmux:{name}" if name else None


def _terminal(ancestry: Sequence[ProcessInfo]) -> str | None:
    """Return the nearest terminal emulator's name, else "ssh" under sshd, else None."""
    for process in ancestry:
        terminal = TERMINALS.get(process.comm)
        if terminal is not None:
            return terminal
    if any(process.comm == "sshd" or process.comm.startswith("sshd-") for process in ancestry):
        return "ssh"
    return None


def _name(named: str | None, cwd: str | None, session_id: str) -> str:
    """The session's name; the worktree slug; the repo's basename; the id's first 8 characters."""
    if named:
        return named
    if cwd:
        parts = Path(cwd).parts
        if ".worktrees" in parts:
            at = parts.index(".worktrees")
            if at + 1 < len(parts):
                return parts[at + 1]
        repo = _repo_root(Path(cwd))
        if repo is not None and repo.name:
            return repo.name
    # a synthesized id is short already, and its first 8 characters would say nothing
    return session_id if session_id.startswith("unknown-") else session_id[:8]


def _repo_root(path: Path) -> Path | None:
    for candidate in (path, *path.parents):
        if (candidate / ".git").exists():
            return candidate
    return None

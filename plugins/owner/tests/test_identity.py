"""Identity of the calling session: an injected /proc and session files, every null path."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from backchannel_owner.identity import MAX_HOPS, resolve_identity


class FakeProc:
    """A /proc tree of (pid, ppid, comm, cwd) written as real files."""

    def __init__(self, root: Path):
        self.root = root

    def add(self, pid: int, ppid: int, comm: str, cwd: Path | None = None) -> None:
        directory = self.root / str(pid)
        directory.mkdir(parents=True)
        (directory / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560")
        if cwd is not None:
            os.symlink(cwd, directory / "cwd")


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / ".claude" / "sessions").mkdir(parents=True)
    return tmp_path / "home"


def session_file(home: Path, pid: int, **record: Any) -> None:
    path = home / ".claude" / "sessions" / f"{pid}.json"
    path.write_text(json.dumps(record))


def no_workspace(environ: Mapping[str, str]) -> str | None:
    return None


def resolve(proc: FakeProc, home: Path, pid: int, **kwargs: Any) -> Any:
    kwargs.setdefault("workspace", no_workspace)
    return resolve_identity(pid, proc_root=proc.root, home=home, host="devbox", **kwargs)


def test_named_session_under_gnome_terminal(proc: FakeProc, home: Path, tmp_path: Path) -> None:
    proc.add(1, 0, "systemd")
    proc.add(50, 1, "gnome-terminal-")
    proc.add(60, 50, "bash")
    proc.add(70, 60, "claude")
    proc.add(80, 70, "bash")
    proc.add(90, 80, "backchannel")
    session_file(home, 70, sessionId="abcdef12-3456", name="ci-cd-incremental-2", cwd="/src/x")
    found = resolve(proc, home, 90, workspace=lambda env: "Workspace 5")
    assert found.session_id == "abcdef12-3456"
    assert found.name == "ci-cd-incremental-2"
    assert (found.terminal, found.workspace) == ("gnome-terminal", "Workspace 5")
    assert (found.cwd, found.host, found.pid, found.harness) == (
        "/src/x",
        "devbox",
        70,
        "claude-code",
    )
    assert found.where == "gnome-terminal, Workspace 5"


def test_name_falls_back_to_the_worktree_slug_then_repo_then_id(
    proc: FakeProc, home: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repos" / "shop"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    proc.add(70, 1, "claude")
    session_file(home, 70, sessionId="s-1", cwd=f"{repo}/.worktrees/fix-login/src")
    assert resolve(proc, home, 70).name == "fix-login"
    session_file(home, 70, sessionId="s-1", cwd=str(repo / "src"))
    assert resolve(proc, home, 70).name == "shop"
    session_file(home, 70, sessionId="0123456789abcdef", cwd=str(tmp_path))
    assert resolve(proc, home, 70).name == "01234567"


def test_tmux_wins_over_the_terminal_emulator(proc: FakeProc, home: Path) -> None:
    proc.add(50, 1, "kitty")
    proc.add(70, 50, "claude")
    session_file(home, 70, sessionId="s-2", name="n", tmux={"session": "work"})
    assert resolve(proc, home, 70).terminal == "tmux:work"
    session_file(home, 70, sessionId="s-2", name="n", tmux="play")
    assert resolve(proc, home, 70).terminal == "tmux:play"


def test_ssh_when_an_ancestor_is_sshd_and_no_terminal(proc: FakeProc, home: Path) -> None:
    proc.add(40, 1, "sshd")
    proc.add(50, 40, "sshd-session")
    proc.add(70, 50, "claude")
    session_file(home, 70, sessionId="s-3", name="remote")
    found = resolve(proc, home, 70)
    assert found.terminal == "ssh" and found.where == "ssh"


def test_every_missing_field_is_omitted(proc: FakeProc, home: Path) -> None:
    proc.add(70, 1, "claude")
    session_file(home, 70, sessionId="s-4", name="bare")
    found = resolve(proc, home, 70)
    assert (found.terminal, found.workspace, found.cwd) == (None, None, None)
    assert found.where == ""


def test_no_session_file_synthesizes_unknown_pid(
    proc: FakeProc, home: Path, tmp_path: Path
) -> None:
    proc.add(50, 1, "xterm")
    proc.add(70, 50, "python3", cwd=tmp_path)
    found = resolve(proc, home, 70)
    assert found.session_id == "unknown-70"
    assert found.harness is None and found.terminal == "xterm" and found.cwd == str(tmp_path)
    assert found.name == "unknown-70"


def test_broken_session_files_are_skipped(proc: FakeProc, home: Path) -> None:
    proc.add(60, 1, "claude")
    proc.add(70, 60, "bash")
    (home / ".claude" / "sessions" / "70.json").write_text("{not json")
    session_file(home, 60, sessionId="s-5", name="outer")
    assert resolve(proc, home, 70).session_id == "s-5"


def test_the_walk_stops_after_max_hops(proc: FakeProc, home: Path) -> None:
    chain = list(range(1000, 1000 + MAX_HOPS + 5))
    proc.add(chain[0], 1, "claude")
    for child, parent in zip(chain[1:], chain, strict=False):
        proc.add(child, parent, "sh")
    session_file(home, chain[0], sessionId="far", name="far")
    assert resolve(proc, home, chain[-1]).session_id == f"unknown-{chain[-1]}"
    assert resolve(proc, home, chain[MAX_HOPS - 1]).session_id == "far"


def test_a_parent_loop_ends_the_walk(proc: FakeProc, home: Path) -> None:
    proc.add(70, 71, "a")
    proc.add(71, 70, "b")
    assert resolve(proc, home, 70).session_id == "unknown-70"


def test_more_harnesses_plug_in_as_locators(proc: FakeProc, home: Path) -> None:
    proc.add(70, 1, "codex")

    def codex(pid: int, home: Path) -> tuple[str, Mapping[str, Any]] | None:
        return ("codex", {"sessionId": "cx-1", "name": "codex run"}) if pid == 70 else None

    found = resolve(proc, home, 70, locators=[codex])
    assert (found.session_id, found.name, found.harness) == ("cx-1", "codex run", "codex")


def test_the_workspace_is_asked_of_x11_only() -> None:
    from backchannel_owner.identity import x11_workspace

    assert x11_workspace({}) is None
    assert x11_workspace({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}) is None
    assert x11_workspace({"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland"}) is None


def test_a_harness_without_session_files_names_its_session_in_the_environment(
    proc: FakeProc, home: Path, tmp_path: Path
) -> None:
    proc.add(50, 1, "alacritty")
    proc.add(70, 50, "codex", cwd=tmp_path)
    session_file(home, 70, sessionId="ignored", name="ignored")
    env = {"BACKCHANNEL_SESSION_ID": "codex-run-7", "BACKCHANNEL_SESSION_NAME": "lint sweep"}
    found = resolve(proc, home, 70, environ=env)
    assert (found.session_id, found.name, found.harness) == ("codex-run-7", "lint sweep", "env")
    assert (found.terminal, found.cwd) == ("alacritty", str(tmp_path))
    unnamed = resolve(proc, home, 70, environ={"BACKCHANNEL_SESSION_ID": "0123456789"})
    assert unnamed.name == "01234567"


def test_text_that_is_not_utf8_is_made_readable(proc: FakeProc, home: Path, tmp_path: Path) -> None:
    # Python keeps bytes no UTF-8 reads (an environment in Latin-1, a folder named in it)
    # as lone surrogates, which no store, hash or platform takes
    folder = tmp_path / "repo\udcff"
    folder.mkdir()
    proc.add(50, 1, "alacritty")
    proc.add(70, 50, "codex", cwd=folder)
    env = {"BACKCHANNEL_SESSION_ID": "s\udcff1", "BACKCHANNEL_SESSION_NAME": "n\udcff"}
    found = resolve(proc, home, 70, environ=env)
    assert (found.session_id, found.name) == ("s\ufffd1", "n\ufffd")
    assert found.cwd == str(tmp_path / "repo\ufffd")
    for text in (found.session_id, found.name, found.cwd, found.terminal):
        assert text is not None
        text.encode("utf-8")
    # the same bytes give the same id every time
    assert resolve(proc, home, 70, environ=env).session_id == found.session_id
    plain = resolve(proc, home, 70, environ={"BACKCHANNEL_SESSION_ID": "ascii"})
    assert plain.session_id == "ascii"

"""Marker files: the cache the inbox hook reads, stdlib only (the hook must start fast).

``<inbox dir>/<session>/<id>.json`` exists while owner message `id` waits for
that session. The store is the source of truth: `serve` writes a marker
after the row is committed and rebuilds them all from the store at start.
Each marker names the store file, so the hook stamps attempts and deliveries
there without reading any config.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "INBOX_ENV",
    "InboxItem",
    "inbox_dir",
    "list_markers",
    "markers_in",
    "remove_marker",
    "safe_name",
    "session_dir",
    "stamp_attempt",
    "stamp_delivered",
    "stamp_parked",
    "write_marker",
]

INBOX_ENV = "BACKCHANNEL_OWNER_INBOX"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class InboxItem:
    """One owner message waiting for a session, as its marker describes it."""

    __slots__ = (
        "config",
        "created_at",
        "id",
        "kind",
        "meta",
        "parent_id",
        "path",
        "session_id",
        "store",
        "text",
    )

    def __init__(self, data: dict[str, Any], path: Path | None = None):
        self.id: str = str(data["id"])
        self.session_id: str = str(data["session_id"])
        self.kind: str = str(data.get("kind") or "message")
        self.text: str = str(data.get("text") or "")
        self.parent_id: str | None = data.get("parent_id")
        self.store: str = str(data["store"])
        self.config: str | None = data.get("config")
        self.created_at: float = float(data.get("created_at") or 0.0)
        self.meta: dict[str, Any] = dict(data.get("meta") or {})
        self.path = path

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "kind": self.kind,
            "text": self.text,
            "parent_id": self.parent_id,
            "store": self.store,
            "config": self.config,
            "created_at": self.created_at,
            "meta": self.meta,
        }

    def __repr__(self) -> str:
        return f"InboxItem(id={self.id!r}, session_id={self.session_id!r}, kind={self.kind!r})"


def inbox_dir() -> Path:
    """$BACKCHANNEL_OWNER_INBOX, else $XDG_STATE_HOME/backchannel/owner/inbox (~/.local/state)."""
    explicit = os.environ.get(INBOX_ENV)
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "backchannel" / "owner" / "inbox"


def session_dir(session_id: str, root: Path | None = None) -> Path:
    """The marker directory of one session (its id made safe as a file name).

    Never ``.`` or ``..`` (which would name the inbox root or its parent): a name
    of dots only gets a leading ``_``. Different ids may share a folder
    (``a/b`` and ``a:b``); each marker names its session, which readers check.
    """
    return (root or inbox_dir()) / safe_name(session_id)


def safe_name(session_id: str) -> str:
    """A session id as one safe path component (the hook applies the same rule)."""
    name = _UNSAFE.sub("_", session_id) or "_"
    return "_" + name if not name.strip(".") else name


def _trusted(path: Path, *, directory: bool) -> bool:
    """True when `path` is a real directory or file of this user, not a symlink.

    A marker becomes words in an agent's context as its owner's: one planted by
    another user (an inbox on a shared path), or a link to somewhere else, is
    never read, and never written through. (Ownership, not mode bits: another
    user cannot make a file this user owns.)
    """
    import stat

    try:
        info = os.lstat(path)
    except OSError:
        return False
    kind = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    return kind and info.st_uid == os.geteuid()


def write_marker(item: InboxItem, root: Path | None = None) -> Path:
    """Write (atomically) the marker of one waiting message; return its path."""
    directory = session_dir(item.session_id, root)
    if _UNSAFE.search(item.id) or not item.id.strip("."):
        raise ValueError(f"not a marker id: {item.id!r}")
    path = directory / f"{item.id}.json"
    partial = directory / f".{item.id}.json.tmp"
    for attempt in range(5):
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not _trusted(directory, directory=True):
            raise PermissionError(
                f"{directory} is not a folder of this user (a symlink, or another user's):"
                " no marker is written there"
            )
        try:
            os.unlink(partial)  # a leftover of a crash (or a planted link): never written through
        except FileNotFoundError:
            pass
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(partial, flags, 0o600)
        except FileNotFoundError:
            if attempt == 4:
                raise
            continue  # the hook removed the emptied folder meanwhile: make it again
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(item.to_json(), handle, ensure_ascii=False)
        os.replace(partial, path)
        break
    return path


def list_markers(session_id: str, root: Path | None = None) -> list[InboxItem]:
    """Return the session's waiting messages, oldest first ([] when none: one listing).

    Only markers naming this very session: ids that share a folder name (``a/b``,
    ``a:b``) never see each other's messages.
    """
    items = markers_in(session_dir(session_id, root))
    return [item for item in items if item.session_id == session_id]


def markers_in(directory: Path) -> list[InboxItem]:
    """Return every readable marker in one session folder, oldest first."""
    if not _trusted(directory, directory=True):
        return []  # missing, a symlink, or not this user's own
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    items = []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = directory / name
        if not _trusted(path, directory=False):
            continue  # a link or another user's file is not a marker
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            items.append(InboxItem(data, path))
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            continue  # half-written or foreign: the store rebuilds markers at serve start
    items.sort(key=lambda item: (item.created_at, item.id))
    return items


def remove_marker(item: InboxItem) -> None:
    """Delete a marker, and its session's folder once empty (the hook's empty case is then
    an empty inbox root)."""
    path = item.path or session_dir(item.session_id) / f"{item.id}.json"
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    try:
        path.parent.rmdir()
    except OSError:
        pass  # not empty (or already gone)


def stamp_attempt(item: InboxItem) -> int | None:
    """Count one delivery attempt in the store; return the attempts so far (None: not waiting)."""
    with _connect(item.store) as db:
        row = db.execute(
            "UPDATE owner_messages SET attempts = attempts + 1, updated_at = ?"
            " WHERE id = ? AND status = 'waiting' RETURNING attempts",
            (time.time(), item.id),
        ).fetchone()
    return None if row is None else int(row[0])


def stamp_delivered(item: InboxItem) -> bool:
    """Record that the session received the message; delete its marker."""
    return _finish(item, "delivered")


def stamp_parked(item: InboxItem) -> bool:
    """Record that the message could not be delivered; delete its marker."""
    return _finish(item, "parked")


def _finish(item: InboxItem, status: str) -> bool:
    stamp = time.time()
    with _connect(item.store) as db:
        changed = db.execute(
            "UPDATE owner_messages SET status = ?, delivered_at = ?, updated_at = ?"
            " WHERE id = ? AND status = 'waiting'",
            (status, stamp if status == "delivered" else None, stamp, item.id),
        ).rowcount
    remove_marker(item)
    return bool(changed)


class _connect:
    """A short write transaction on the store file (busy waits bounded to 5 s)."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self) -> sqlite3.Connection:
        import sqlite3  # only when there is something to stamp: the empty case stays fast
        import urllib.parse

        # mode=rw: a marker naming a store that is gone must not create an empty one
        uri = "file:" + urllib.parse.quote(self.path) + "?mode=rw"
        self.db = sqlite3.connect(uri, uri=True, timeout=5.0, isolation_level=None)
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            self.db.execute("COMMIT" if kind is None else "ROLLBACK")
        finally:
            self.db.close()

"""`backchannel-owner-hook`: hand a Claude Code session its owner's messages, mid-turn.

Reads a hook payload on stdin (PostToolUse, UserPromptSubmit, SessionStart,
Stop). It runs after every tool call, so the empty case is one directory
listing with nothing but json, os and sys imported: no config, no store, no
network. With messages waiting it counts an attempt in the store first,
prints them (``hookSpecificOutput.additionalContext``; for Stop a top-level
``{"decision": "block", "reason": ...}``), then stamps them delivered. A crash
between printing and stamping shows them again marked ``(redelivery)``; the
third attempt parks the message and tells the owner. A hook holds its
session's lock file while it delivers: another hook of the session (parallel
tool calls) finds it taken and leaves the messages to the one showing them.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing itself is not imported at run time: the empty case stays fast
    from collections.abc import Sequence
    from typing import IO, Any

__all__ = ["lock_path", "main", "run"]

INBOX_ENV = "BACKCHANNEL_OWNER_INBOX"


def main() -> None:
    sys.exit(run(sys.stdin, sys.stdout, sys.stderr))


def run(stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> int:
    """Handle one hook call; return the exit status (0, or 1 with one line on stderr)."""
    try:
        if not os.listdir(_root()):
            return 0  # no session has anything waiting (emptied session folders are removed)
    except OSError:
        return 0
    import json  # json pulls in re and enum: only paid when some session has mail

    try:
        payload = _read_payload(stdin, json)
    except (ValueError, RecursionError, MemoryError) as error:
        # RecursionError: a tool's deeply nested output inside the payload
        why = str(error) if isinstance(error, ValueError) else type(error).__name__
        stderr.write(f"backchannel-owner-hook: stdin is not a JSON hook payload: {why}\n")
        return 1
    if not isinstance(payload, dict):
        stderr.write("backchannel-owner-hook: stdin is not a JSON object (a hook payload)\n")
        return 1
    event = payload.get("hook_event_name") or "PostToolUse"
    if event == "Stop" and payload.get("stop_hook_active"):
        return 0  # Claude Code is already continuing because of a Stop hook: never loop
    session_id = payload.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        stderr.write("backchannel-owner-hook: the payload has no session_id\n")
        return 1
    try:
        names = os.listdir(os.path.join(_root(), _safe(session_id)))
    except OSError:
        return 0
    if not any(name.endswith(".json") and not name.startswith(".") for name in names):
        return 0
    try:
        return _deliver(session_id, str(event), stdout, stderr)
    except Exception as error:  # one line for people; Claude Code carries on (exit 1)
        stderr.write(f"backchannel-owner-hook: {type(error).__name__}: {error}\n")
        return 1


#: characters of a payload read whole; a larger one (a tool's huge output) is read by its head
MAX_PAYLOAD = 8 * 1024 * 1024


def _read_payload(stdin: IO[str], json: Any) -> Any:
    """Return the hook payload: whole, or, when it is too large or too deeply nested to
    read whole, the top-level members before the one that is (Claude Code writes
    `session_id` and `hook_event_name` before the tool's input and output)."""
    text = stdin.read(MAX_PAYLOAD + 1)
    if len(text) <= MAX_PAYLOAD:
        try:
            return json.loads(text or "{}")
        except RecursionError:
            pass
    else:
        while stdin.read(1 << 20):  # the rest is not kept (the writer is not left blocked)
            pass
    members = _leading_members(text, json)
    if "session_id" not in members:
        what = "too large" if len(text) > MAX_PAYLOAD else "too deeply nested"
        raise ValueError(f"{what} to read, and no session_id before that")
    return members


def _leading_members(text: str, json: Any) -> dict[str, Any]:
    """The members of the JSON object `text` starts, up to the first that cannot be read."""
    decoder = json.JSONDecoder()
    members: dict[str, Any] = {}
    at = _skip_space(text, 0)
    if not text.startswith("{", at):
        raise ValueError("not a JSON object")
    at += 1
    while True:
        at = _skip_space(text, at)
        if text.startswith("}", at) or at >= len(text):
            return members
        try:
            key, at = decoder.raw_decode(text, at)
            at = _skip_space(text, at)
            if not isinstance(key, str) or not text.startswith(":", at):
                return members
            value, at = decoder.raw_decode(text, _skip_space(text, at + 1))
        except (ValueError, RecursionError):
            return members
        members[key] = value  # as json.loads: the last of a repeated key
        at = _skip_space(text, at)
        if not text.startswith(",", at):
            return members
        at += 1


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _root() -> str:
    explicit = os.environ.get(INBOX_ENV)
    if explicit:
        return explicit
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state, "backchannel", "owner", "inbox")


def _safe(session_id: str) -> str:
    """The marker directory's name for a session id (same rule as inbox.safe_name)."""
    allowed = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
    name = "".join(c if c in allowed else "_" for c in session_id) or "_"
    return "_" + name if not name.strip(".") else name  # never "." or ".."


def lock_path(session_id: str) -> str:
    """The file a hook delivering this session's messages holds locked (beside the inbox,
    not in it: a session's folder exists only while something waits for it)."""
    return os.path.join(os.path.dirname(_root().rstrip(os.sep)), ".inbox-locks", _safe(session_id))


def _deliver(session_id: str, event: str, stdout: IO[str], stderr: IO[str]) -> int:
    import fcntl

    path = lock_path(session_id)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        lock = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        lock = -1  # no lock to be had (a read-only state folder): deliver as before
    try:
        if lock >= 0:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                # another hook of this session (parallel tool calls) is showing them right
                # now: taking them too would show them twice, count attempts, park them
                return 0
        return _deliver_locked(session_id, event, stdout, stderr)
    finally:
        if lock >= 0:
            os.close(lock)


def _deliver_locked(session_id: str, event: str, stdout: IO[str], stderr: IO[str]) -> int:
    from .inbox import list_markers, remove_marker, stamp_attempt, stamp_delivered, stamp_parked
    from .lines import delivery_text

    shown = []
    texts = []
    parked = []
    for item in list_markers(session_id):
        if item.kind != "message":
            continue  # permission answers are for the MCP server's permission prompt
        attempts = stamp_attempt(item)
        if attempts is None:
            remove_marker(item)  # delivered or parked elsewhere: the marker was stale
            continue
        if attempts > 2:
            stamp_parked(item)
            parked.append(item)
            continue
        texts.append(delivery_text(item.id, item.text, parent_id=item.parent_id, attempts=attempts))
        shown.append(item)
    if texts:
        _emit(texts, event, stdout)
        for item in shown:
            stamp_delivered(item)
    if parked:  # after the messages went out: telling the owner takes a network round trip
        _tell_owner_parked(parked, stderr)
    return 0


def _emit(texts: list[str], event: str, stdout: IO[str]) -> None:
    text = "\n\n".join(texts)
    if event == "Stop":
        output: dict[str, object] = {"decision": "block", "reason": text}
    else:
        output = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    import json

    stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
    stdout.flush()


def _tell_owner_parked(parked: Sequence[object], stderr: IO[str]) -> None:
    """Tell the owner of every parked message at once (one bounded wait, not one each)."""
    try:
        from .api import tell_owner_parked

        tell_owner_parked(parked)  # type: ignore[arg-type]
    except Exception as error:
        ids = ", ".join(f"#{getattr(item, 'id', '?')}" for item in parked)
        stderr.write(
            f"backchannel-owner-hook: message(s) {ids} parked, but the owner could not be"
            f" told: {error}\n"
        )


if __name__ == "__main__":
    main()

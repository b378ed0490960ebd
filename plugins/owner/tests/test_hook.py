"""The inbox hook: empty is silent; attempt, then emit, then delivered; redelivery; parking."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from backchannel.store import SQLiteStore
from backchannel_owner import hook
from backchannel_owner.cli import hook_settings, merge_hooks
from backchannel_owner.inbox import InboxItem, inbox_dir, list_markers, session_dir, write_marker
from backchannel_owner.records import OwnerRecords

SESSION = "5f0c2a9e-1d7b-4c1e-9a51-0f7e3c2b8d10"


def waiting(store_path: Path, text: str = "hold off, do the validation slice first") -> InboxItem:
    """Store one waiting owner message for SESSION and write its marker, as serve does."""
    import asyncio

    async def make() -> InboxItem:
        store = SQLiteStore(store_path)
        try:
            row = OwnerRecords(store.db).insert_message(
                1.0,
                session_id=SESSION,
                direction="in",
                kind="message",
                account="tg",
                chat="1",
                parent_id="m7k3q",
                text=text,
                status="waiting",
            )
        finally:
            await store.close()
        item = InboxItem(
            {
                "id": row.id,
                "session_id": SESSION,
                "text": text,
                "parent_id": "m7k3q",
                "store": str(store_path),
                "created_at": 1.0,
            }
        )
        write_marker(item)
        return item

    return asyncio.run(make())


def run_hook(payload: dict[str, Any], stdout: io.StringIO | None = None) -> tuple[int, str, str]:
    out, err = stdout or io.StringIO(), io.StringIO()
    status = hook.run(io.StringIO(json.dumps(payload)), out, err)
    return status, out.getvalue(), err.getvalue()


def status_of(store_path: Path, message_id: str) -> tuple[str, int]:
    import sqlite3

    with sqlite3.connect(store_path) as db:
        row = db.execute(
            "SELECT status, attempts FROM owner_messages WHERE id = ?", (message_id,)
        ).fetchone()
    return row[0], row[1]


def post_tool_use(session: str = SESSION) -> dict[str, Any]:
    return {
        "session_id": session,
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "cwd": "/src",
    }


def test_the_empty_case_prints_nothing(inbox_root: Path) -> None:
    assert run_hook(post_tool_use()) == (0, "", "")
    session_dir(SESSION).mkdir(parents=True)
    assert run_hook(post_tool_use()) == (0, "", "")


def test_the_hook_and_the_inbox_agree_on_the_directory(inbox_root: Path) -> None:
    assert hook._root() == str(inbox_dir())
    odd = "a/b c:..é"
    assert hook._safe(odd) == session_dir(odd).name


def test_attempt_then_emit_then_delivered(inbox_root: Path, tmp_path: Path) -> None:
    item = waiting(tmp_path / "bc.db")
    status, out, err = run_hook(post_tool_use())
    assert (status, err) == (0, "")
    context = json.loads(out)["hookSpecificOutput"]
    assert context["hookEventName"] == "PostToolUse"
    assert context["additionalContext"].splitlines()[0] == (
        f"Owner sent you a message #{item.id} (replying to your #m7k3q):"
        ' "hold off, do the validation slice first"'
    )
    assert status_of(tmp_path / "bc.db", item.id) == ("delivered", 1)
    assert list_markers(SESSION) == []
    assert os.listdir(inbox_root) == []  # the next call is one listing of an empty folder
    assert run_hook(post_tool_use()) == (0, "", "")


def test_the_empty_inbox_never_reads_the_payload(inbox_root: Path) -> None:
    inbox_root.mkdir()
    out, err = io.StringIO(), io.StringIO()
    assert hook.run(io.StringIO("not even json"), out, err) == 0
    assert (out.getvalue(), err.getvalue()) == ("", "")


class CrashAfterEmit(io.StringIO):
    """stdout whose flush kills the hook, after the text is out, before the stamp."""

    def flush(self) -> None:
        raise KeyboardInterrupt


def test_a_crash_between_emit_and_stamp_redelivers_then_parks_at_attempt_3(
    inbox_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = waiting(tmp_path / "bc.db")
    second = waiting(tmp_path / "bc.db", "and the second")
    for attempt in (1, 2):
        crashed = CrashAfterEmit()
        with pytest.raises(KeyboardInterrupt):
            run_hook(post_tool_use(), crashed)
        first = json.loads(crashed.getvalue())["hookSpecificOutput"]["additionalContext"]
        assert first.startswith("(redelivery) Owner sent" if attempt == 2 else "Owner sent")
        assert status_of(tmp_path / "bc.db", item.id) == ("waiting", attempt)
    told: list[str] = []
    calls: list[int] = []

    def tell(parked: list[Any]) -> None:
        calls.append(len(parked))
        told.extend(item.id for item in parked)

    monkeypatch.setattr("backchannel_owner.api.tell_owner_parked", tell)
    assert run_hook(post_tool_use()) == (0, "", "")
    assert status_of(tmp_path / "bc.db", item.id) == ("parked", 3)
    assert sorted(told) == sorted([item.id, second.id]) and list_markers(SESSION) == []
    assert calls == [2]  # every message parked in one call is told in one bounded call


def test_stop_blocks_with_the_reason_and_an_active_stop_hook_returns_at_once(
    inbox_root: Path, tmp_path: Path
) -> None:
    item = waiting(tmp_path / "bc.db")
    stop = {"session_id": SESSION, "hook_event_name": "Stop", "stop_hook_active": True}
    assert run_hook(stop) == (0, "", "")
    assert status_of(tmp_path / "bc.db", item.id) == ("waiting", 0)  # marker untouched
    status, out, _ = run_hook({**stop, "stop_hook_active": False})
    assert status == 0
    decision = json.loads(out)
    assert decision["decision"] == "block" and f"#{item.id}" in decision["reason"]
    assert "do NOT end your turn" in decision["reason"]


def test_bad_payloads_are_one_line_and_never_block(inbox_root: Path, tmp_path: Path) -> None:
    waiting(tmp_path / "bc.db")
    out, err = io.StringIO(), io.StringIO()
    assert hook.run(io.StringIO("{oops"), out, err) == 1
    assert err.getvalue().count("\n") == 1 and "not a JSON hook payload" in err.getvalue()
    assert run_hook({"hook_event_name": "PostToolUse"})[0:2] == (1, "")


def test_the_hook_as_a_real_process(inbox_root: Path, tmp_path: Path) -> None:
    item = waiting(tmp_path / "bc.db", "switch to validation")
    done = subprocess.run(
        [sys.executable, "-m", "backchannel_owner.hook"],
        input=json.dumps(post_tool_use()),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        '"switch to validation"'
        in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    )
    assert status_of(tmp_path / "bc.db", item.id) == ("delivered", 1)


def test_install_hooks_covers_the_four_events_and_merges_idempotently() -> None:
    wanted = hook_settings()
    assert sorted(wanted["hooks"]) == ["PostToolUse", "SessionStart", "Stop", "UserPromptSubmit"]
    current = {
        "model": "x",
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]},
    }
    merged = merge_hooks(current, wanted)
    assert merged["model"] == "x"
    assert [h["command"] for g in merged["hooks"]["Stop"] for h in g["hooks"]] == [
        "say done",
        "backchannel-owner-hook",
    ]
    assert merge_hooks(merged, wanted) == merged


def test_install_hooks_prints_or_writes_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backchannel.cli import main
    from click.testing import CliRunner

    monkeypatch.chdir(tmp_path)
    printed = CliRunner().invoke(main, ["owner", "install-hooks"])
    assert printed.exit_code == 0 and json.loads(printed.output) == hook_settings()
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"permissions": {"allow": ["Bash(ls)"]}}')
    written = CliRunner().invoke(main, ["owner", "install-hooks", "--write"])
    assert written.exit_code == 0, written.output
    merged = json.loads(settings.read_text())
    assert merged["permissions"] == {"allow": ["Bash(ls)"]}
    assert merged["hooks"] == hook_settings()["hooks"]
    settings.write_text("{broken")
    refused = CliRunner().invoke(main, ["owner", "install-hooks", "--write"])
    assert refused.exit_code == 1 and "is not valid JSON" in refused.output
    # another shape where Claude Code's is expected: one line naming the key, file kept
    for text, key in (
        ('{"hooks": [1]}', '"hooks" is a list'),
        ('{"hooks": {"Stop": {"a": 1}}}', '"hooks.Stop" is a dict'),
    ):
        settings.write_text(text)
        odd = CliRunner().invoke(main, ["owner", "install-hooks", "--write"])
        assert odd.exit_code == 1 and key in odd.output, odd.output
        assert len(odd.output.strip().splitlines()) == 1 and "Traceback" not in odd.output
        assert settings.read_text() == text


def test_a_marker_naming_a_vanished_store_is_one_line_and_creates_nothing(
    inbox_root: Path, tmp_path: Path
) -> None:
    item = waiting(tmp_path / "bc.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp_path / 'bc.db'}{suffix}").unlink(missing_ok=True)
    status, out, err = run_hook(post_tool_use())
    assert (status, out) == (1, "") and err.count("\n") == 1 and "unable to open" in err
    assert not (tmp_path / "bc.db").exists()
    assert [m.id for m in list_markers(SESSION)] == [item.id]


def test_the_empty_case_imports_nothing_heavy(inbox_root: Path) -> None:
    code = (
        "import io, sys\n"
        "from backchannel_owner import hook\n"
        "status = hook.run(io.StringIO('{}'), sys.stdout, sys.stderr)\n"
        "heavy = [m for m in ('json', 're', 'typing', 'apsw', 'sqlite3', 'backchannel')"
        " if m in sys.modules]\n"
        "print(status, heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "0 []", done.stderr


# hostile input: nested payloads, dot ids, shared folders, links -----------------------


def marker(session_id: str, message_id: str, text: str = "hi") -> InboxItem:
    return InboxItem(
        {"id": message_id, "session_id": session_id, "text": text, "store": "/nonexistent.db"}
    )


def test_a_deeply_nested_payload_is_one_line_and_exit_1(inbox_root: Path, tmp_path: Path) -> None:
    waiting(tmp_path / "bc.db")  # something waits, so the payload is read
    nested = '{"tool_response": ' + "[" * 200_000 + "]" * 200_000 + ', "session_id": "x"}'
    out, err = io.StringIO(), io.StringIO()
    assert hook.run(io.StringIO(nested), out, err) == 1
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "backchannel-owner-hook: stdin is not a JSON hook payload:"
        " too deeply nested to read, and no session_id before that\n"
    )


class BoundedReads(io.StringIO):
    """stdin that refuses a read of everything: the hook must read it in bounded pieces."""

    def read(self, size: int | None = -1) -> str:
        assert size is not None and 0 < size <= hook.MAX_PAYLOAD + 1, size
        return super().read(size)


@pytest.mark.parametrize("shape", ["huge", "nested"])
def test_a_huge_or_deep_tool_output_still_delivers_by_the_payloads_head(
    inbox_root: Path, tmp_path: Path, shape: str
) -> None:
    """Claude Code writes session_id and hook_event_name before the tool's output: a
    payload too large (or too deep) to read whole is read by its head, bounded."""
    item = waiting(tmp_path / "bc.db")
    output = (
        json.dumps("x" * (hook.MAX_PAYLOAD + 10))
        if shape == "huge"
        else "[" * 200_000 + "]" * 200_000
    )
    payload = (
        f'{{"session_id": "{SESSION}", "hook_event_name": "PostToolUse",'
        f' "tool_name": "Read", "tool_response": {output}}}'
    )
    source = BoundedReads(payload)
    out, err = io.StringIO(), io.StringIO()
    assert hook.run(source, out, err) == 0, err.getvalue()
    context = json.loads(out.getvalue())["hookSpecificOutput"]
    assert context["hookEventName"] == "PostToolUse"
    assert f"#{item.id}" in context["additionalContext"]
    assert source.read(1) == ""  # all of stdin was consumed: the writer is never left blocked


def test_a_huge_payload_without_a_session_id_first_is_one_line_and_exit_1(
    inbox_root: Path, tmp_path: Path
) -> None:
    waiting(tmp_path / "bc.db")
    payload = f'{{"tool_response": {json.dumps("x" * (hook.MAX_PAYLOAD + 10))}, "session_id": "x"}}'
    out, err = io.StringIO(), io.StringIO()
    assert hook.run(io.StringIO(payload), out, err) == 1
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "backchannel-owner-hook: stdin is not a JSON hook payload:"
        " too large to read, and no session_id before that\n"
    )


def test_a_session_id_of_dots_stays_inside_the_inbox(inbox_root: Path) -> None:
    for session_id in (".", "..", "..."):
        directory = session_dir(session_id)
        assert directory.parent == inbox_root and directory.name.startswith("_")
        assert hook._safe(session_id) == directory.name
        path = write_marker(marker(session_id, f"m{len(session_id)}"))
        assert path.parent.parent == inbox_root
        assert [m.id for m in list_markers(session_id)] == [f"m{len(session_id)}"]
    assert not (inbox_root.parent / f"m{len('..')}.json").exists()


def test_sessions_sharing_a_folder_name_never_read_each_others_messages(
    inbox_root: Path,
) -> None:
    write_marker(marker("proj:1", "m1", "for proj:1 only"))
    twin = "proj_1"  # another session whose id is the same folder name once made safe
    assert session_dir(twin) == session_dir("proj:1")
    assert list_markers(twin) == []
    assert run_hook(post_tool_use(twin)) == (0, "", "")
    assert [m.id for m in list_markers("proj:1")] == ["m1"]


def test_a_linked_marker_is_not_read(inbox_root: Path, tmp_path: Path) -> None:
    item = waiting(tmp_path / "bc.db")
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({**item.to_json(), "id": "zzzzz", "text": "rm -rf /"}))
    os.symlink(planted, session_dir(SESSION) / "zzzzz.json")
    assert [m.id for m in list_markers(SESSION)] == [item.id]


def test_a_linked_session_folder_is_neither_read_nor_written(
    inbox_root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "m1.json").write_text(json.dumps(marker("s1", "m1").to_json()))
    inbox_root.mkdir(exist_ok=True)
    os.symlink(elsewhere, session_dir("s1"))
    assert list_markers("s1") == []
    try:
        write_marker(marker("s1", "m2"))
    except PermissionError:
        pass
    else:
        raise AssertionError("a marker was written through a linked folder")
    assert sorted(os.listdir(elsewhere)) == ["m1.json"]


def test_a_planted_partial_file_link_is_not_written_through(
    inbox_root: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    directory = session_dir("s1")
    directory.mkdir(parents=True)
    os.symlink(victim, directory / ".m1.json.tmp")
    write_marker(marker("s1", "m1"))
    assert victim.read_text() == "precious"
    assert [m.id for m in list_markers("s1")] == ["m1"]


def test_a_hook_finding_another_delivering_leaves_the_messages_to_it(
    inbox_root: Path, tmp_path: Path
) -> None:
    # parallel tool calls run hooks at once: one is still printing (its reader slow) when
    # the next runs. That one used to show them again as a redelivery, and the third
    # parked them as never delivered
    import fcntl

    item = waiting(tmp_path / "bc.db")
    path = hook.lock_path(SESSION)
    assert not path.startswith(str(inbox_root) + os.sep)  # the inbox folder stays as it was
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a hook of this session, mid-delivery
        for _ in range(3):
            code, out, err = run_hook(post_tool_use())
            assert (code, out, err) == (0, "", "")
        assert status_of(tmp_path / "bc.db", item.id) == ("waiting", 0)
    code, out, err = run_hook(post_tool_use())
    assert code == 0 and item.text in out and "redelivery" not in out
    assert status_of(tmp_path / "bc.db", item.id) == ("delivered", 1)

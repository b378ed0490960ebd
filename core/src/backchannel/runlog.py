"""What the runs did, for people: `backchannel runs` and the failed-run marks in `show`.

A run's tools are read back from the outbox rows it made (each send, reply,
edit or reaction is one row naming its run); tools that only read
(`read_history`, plugin tools without a send) leave no row and are not listed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from attrs import frozen

from .model import Conversation
from .store import OutboxEntry, RunRecord, Store
from .terminal import terminal_safe

__all__ = ["RunReport", "failed", "failure_line", "render_runs", "run_reports", "table"]

#: how a run ended when nothing went wrong (or it has not ended yet)
_FINE = ("ok", "running")


@frozen
class RunReport:
    """One run as `backchannel runs` prints it."""

    run: RunRecord
    conversation: str
    tools: tuple[str, ...]

    @property
    def duration(self) -> float | None:
        if self.run.finished_at is None:
            return None
        return max(0.0, self.run.finished_at - self.run.started_at)

    @property
    def error_line(self) -> str:
        """The error's first line, at most 160 characters ('' when the run went fine)."""
        text = (self.run.error or "").strip().splitlines()
        first = text[0] if text else ""
        return first if len(first) <= 160 else first[:157] + "..."

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.run.id,
            "conversation": self.conversation,
            "conversation_id": self.run.conversation_id,
            "trigger_seq": self.run.trigger_seq,
            "upto_seq": self.run.upto_seq,
            "started_at": self.run.started_at,
            "finished_at": self.run.finished_at,
            "duration": self.duration,
            "tools": list(self.tools),
            "outcome": self.run.status,
            "error": self.run.error,
        }


def failed(run: RunRecord) -> bool:
    """True when the run ended without finishing its work (error, timeout, cancelled, ...)."""
    return run.status not in _FINE


async def run_reports(
    store: Store,
    conversation: Conversation | None = None,
    *,
    only_failed: bool = False,
    limit: int = 50,
) -> list[RunReport]:
    """Return the newest runs (of one conversation, or all), with their conversation and tools."""
    # failed runs are usually few among many: read further back before filtering
    fetched = await store.runs(
        conversation.id if conversation else None, limit * 20 if only_failed else limit
    )
    runs = [run for run in fetched if failed(run) or not only_failed][:limit]
    keys: dict[int, str] = {}
    tools: dict[int, list[str]] = {}
    for conversation_id in {run.conversation_id for run in runs}:
        found = conversation if conversation else await store.conversation(conversation_id)
        keys[conversation_id] = found.address.key
    # what these runs did, wherever they sent (a send into another conversation included)
    for row in await store.outbox(run_ids=[run.id for run in runs], limit=1_000_000):
        if row.run_id is not None:
            tools.setdefault(row.run_id, []).insert(0, _tool_name(row))
    return [RunReport(run, keys[run.conversation_id], tuple(tools.get(run.id, ()))) for run in runs]


def render_runs(reports: Iterable[RunReport]) -> str:
    """A table for people: one line per run, newest first."""
    rows = [
        (
            str(report.run.id),
            report.conversation,
            f"#{report.run.trigger_seq}",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.run.started_at)),
            "-" if report.duration is None else f"{report.duration:.1f}s",
            ", ".join(report.tools) or "-",
            report.run.status,
            report.error_line,
        )
        for report in reports
    ]
    header = ("RUN", "CONVERSATION", "TRIGGER", "STARTED", "TOOK", "TOOLS", "OUTCOME", "ERROR")
    return table(header, rows)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last one is not padded.

    Cells are made terminal-safe (stored text: see terminal.py) before they are
    measured, so an escaped character widens its column, not the line.
    """
    rows = [[terminal_safe(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def failure_line(report: RunReport) -> str:
    """The mark `show` prints after the message a failed run was answering (terminal-safe)."""
    did = f" after {', '.join(report.tools)}" if report.tools else ", nothing sent"
    return terminal_safe(
        f"   !! run {report.run.id} {report.run.status}{did}:"
        f" {report.error_line or 'no reason recorded'} (answering #{report.run.trigger_seq})"
    )


def _tool_name(row: OutboxEntry) -> str:
    if row.origin is not None:  # sent into another conversation (its row is there)
        return "send_to_conversation"
    if row.kind == "edit":
        return "edit_message"
    if row.kind == "reaction":
        return "react"
    return "reply" if row.reply_to else "send_message"

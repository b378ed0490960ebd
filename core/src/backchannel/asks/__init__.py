"""Asking other agents: session choice, durable reply correlation, reporter runs, expiry.

See docs/orchestration.md ("Asking another agent"). `AskCoordinator` runs
beside the switchboard; `ask_peer` asks; `ask_tools` is the `ask_agent` run
tool the orchestrator offers.
"""

from __future__ import annotations

from .asking import MASTER_THREAD, AskOutcome, AskRefused, ask_peer, choose_session
from .coordinator import (
    REPORT_NOTE,
    AskCoordinator,
    answer_message,
    duration_words,
    verbatim_report,
)
from .settings import AskSettings

__all__ = [
    "MASTER_THREAD",
    "REPORT_NOTE",
    "AskCoordinator",
    "AskOutcome",
    "AskRefused",
    "AskSettings",
    "answer_message",
    "ask_peer",
    "choose_session",
    "duration_words",
    "verbatim_report",
]

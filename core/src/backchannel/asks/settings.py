"""How asks to other agents behave: timeout, which sessions are live, how answers are reported."""

from __future__ import annotations

from typing import Literal

from attrs import frozen

__all__ = ["DAY", "AskSettings"]

DAY = 86_400.0


@frozen
class AskSettings:
    """The ask flow's settings (`[orchestration]` in the config: ask_timeout, session_live, report)."""

    #: seconds after which an unanswered ask is reported once as "no answer yet" (24 h)
    ask_timeout: float = DAY
    #: a session conversation with activity this recent (seconds, 7 days) is reused by an
    #: ask that names no session; an expired or uncertain ask unanswered this long past its
    #: deadline lapses (its session's later messages are no longer its answer)
    session_live: float = 7 * DAY
    #: "run": a reporter run (only a send into the origin) relays the answer;
    #: "verbatim": the answer is posted into the origin as is, with attribution
    report: Literal["run", "verbatim"] = "run"

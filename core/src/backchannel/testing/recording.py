"""`RecordingAgent`: an agent for tests that keeps every Run it is handed and can reply."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..runs import Run
from .watch import Watch

__all__ = ["RecordingAgent"]


class RecordingAgent:
    """Records runs; optionally answers each by replying to its trigger with `answer(run)`.

    `await agent.wait_runs(n)` returns once n runs have finished.
    """

    def __init__(
        self,
        answer: Callable[[Run], str | None] | None = None,
        *,
        action: Callable[[Run], Awaitable[Any]] | None = None,
    ):
        self.answer = answer
        self.action = action
        self.runs: list[Run] = []
        self.results: list[str] = []
        self._finished = 0
        self._watch = Watch("RecordingAgent")

    async def __call__(self, run: Run) -> None:
        self.runs.append(run)
        try:
            if self.action is not None:
                await self.action(run)
            if self.answer is not None:
                text = self.answer(run)
                if text is not None:
                    if run.trigger is not None and run.tool("reply") is not None:
                        result = await run.call(
                            "reply", {"message_id": run.trigger.seq, "text": text}
                        )
                    else:
                        result = await run.call("send_message", {"text": text})
                    self.results.append(result)
        finally:
            self._finished += 1
            self._watch.changed()

    async def wait_runs(self, count: int, timeout: float = 10.0) -> None:
        """Return once `count` runs have finished."""
        await self._watch.wait_for(
            lambda: self._finished >= count, timeout, f"{count} finished runs"
        )

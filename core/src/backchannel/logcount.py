"""Log lines anyone can trigger, counted: the first, then at most one a minute.

A request refused for a wrong secret, a bad signature or a body too slow is
free for a stranger to send by the thousand; a line for each would fill the
disk (5,000 unsigned Telegram webhook POSTs wrote 695 KB in 3 s). `CountedLog`
logs the first at its level, counts the rest at DEBUG, and once `interval`
seconds have passed since its last line logs the next one with how many came
meanwhile.
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["CountedLog", "Tally"]


class Tally:
    """Counts occurrences and says when a line about them is due: the first time, then
    once `interval` seconds have passed since the last line."""

    def __init__(self, interval: float = 60.0):
        self.interval = interval
        #: occurrences since the start
        self.count = 0
        self._unreported = 0
        self._reported_at: float | None = None

    def tick(self) -> int | None:
        """Count one; return how many came since the last line (this one included) when a
        line is due now, else None."""
        self.count += 1
        self._unreported += 1
        moment = time.monotonic()
        if self._reported_at is not None and moment - self._reported_at < self.interval:
            return None
        since, self._unreported, self._reported_at = self._unreported, 0, moment
        return since


class CountedLog:
    """One kind of line strangers can trigger: logged the first time, then counted."""

    def __init__(
        self,
        log: logging.Logger | logging.LoggerAdapter[Any],
        *,
        level: int = logging.WARNING,
        interval: float = 60.0,
    ):
        self.log = log
        self.level = level
        self.tally = Tally(interval)

    @property
    def count(self) -> int:
        """Lines noted since the start."""
        return self.tally.count

    def note(self, message: str, *args: Any) -> None:
        """Count one; log it (with how many were only counted since) when the last line
        is `interval` old, else at DEBUG."""
        since = self.tally.tick()
        if since is None:
            self.log.debug(message, *args)
            return
        if since > 1:
            message += " (%d such since the last line)"
            args = (*args, since)
        self.log.log(self.level, message, *args)

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

__all__ = ["CountedLog"]


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
        self.interval = interval
        #: lines noted since the start
        self.count = 0
        self._unreported = 0
        self._reported_at: float | None = None

    def note(self, message: str, *args: Any) -> None:
        """Count one; log it (with how many were only counted since) when the last line
        is `interval` old, else at DEBUG."""
        self.count += 1
        self._unreported += 1
        moment = time.monotonic()
        if self._reported_at is not None and moment - self._reported_at < self.interval:
            self.log.debug(message, *args)
            return
        if self._unreported > 1:
            message += " (%d such since the last line)"
            args = (*args, self._unreported)
        self.log.log(self.level, message, *args)
        self._unreported = 0
        self._reported_at = moment

"""Keep secrets out of logs: every known secret is replaced by *** in every log record.

`register_secret(value)` adds a value; the first call installs a log record
factory, so the redaction covers all loggers (aiohttp, discord.py, slack-sdk,
ours) and exception tracebacks, whatever handlers are attached.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from typing import Any

__all__ = ["longest_secret", "raised", "redact", "register_secret"]

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_installed = False


def register_secret(value: str | None) -> None:
    """Redact `value` (when 6 characters or longer) from every log record from now on."""
    global _pattern
    if not value or len(value) < 6:
        return
    with _lock:
        if value in _secrets:
            return
        _secrets.add(value)
        ordered = sorted(_secrets, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))
        _install()


def redact(text: str) -> str:
    """Return `text` with every registered secret replaced by ***."""
    pattern = _pattern
    return pattern.sub("***", text) if pattern is not None else text


def longest_secret() -> int:
    """The length of the longest registered secret (0 when none): how far past a cut of a
    text redaction may still find one that starts before it."""
    with _lock:
        return max(map(len, _secrets), default=0)


def raised(record: logging.LogRecord) -> str | None:
    """The qualified name of the exception a log record carries (``module.Class``), or None.

    Once a secret is registered, the record factory below folds a record's traceback
    into its message (so that it is redacted too) and clears `exc_info`: the name is
    then read off the traceback's last line.
    """
    if record.exc_info and record.exc_info[1] is not None:
        kind = type(record.exc_info[1])
        return f"{kind.__module__}.{kind.__qualname__}"
    text = record.msg
    marker = "\nTraceback (most recent call last):\n"
    if not isinstance(text, str) or marker not in text:
        return None
    # after the last traceback's frames (indented lines): "module.Class: message", the
    # message possibly of several lines
    for line in text.rsplit(marker, 1)[1].splitlines():
        if line and not line[0].isspace():
            name = line.split(":", 1)[0]
            return name if " " not in name else None
    return None


def _install() -> None:
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if _pattern is None:
            return record
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to logging's own handling
            return record
        if record.exc_info and record.exc_info[1] is not None:
            message += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
            record.exc_info = None
            record.exc_text = None
        record.msg = redact(message)
        record.args = None
        return record

    logging.setLogRecordFactory(factory)
    _installed = True

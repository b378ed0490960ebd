"""Text from platforms, fit for an operator's terminal.

People and peer agents choose their own names, titles and messages, and a
platform's error text can quote them. Printed raw, a control character in
them is a command to the terminal: an escape sequence can recolor or clear
the screen, rewrite the window title, or hide what follows; a carriage
return or a bidi override can make a line read as something else. Every
command that prints stored text for people passes it through
`terminal_safe`: such characters are shown escaped (``\\x1b``, ``\\u202e``),
never acted on. Line breaks and tabs stay; JSON output needs none of this.
"""

from __future__ import annotations

import logging
import re
import sys

__all__ = ["SafeFormatter", "log_to_stderr", "terminal_safe"]

#: C0 controls but tab and line feed, DEL and C1, and the bidi embeddings, overrides
#: and isolates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: the same, and whatever breaks a line (tab and line feed, the Unicode separators)
_UNSAFE_IN_A_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str, *, one_line: bool = False) -> str:
    """Return `text` with every character a terminal would act on shown escaped.

    `one_line`: line breaks and tabs too (an answer that must stay one line).
    """
    if text.isascii() and text.isprintable():
        return text
    unsafe = _UNSAFE_IN_A_LINE if one_line else _UNSAFE
    return unsafe.sub(lambda found: found.group().encode("unicode_escape").decode(), text)


class SafeFormatter(logging.Formatter):
    """A log formatter whose lines are `terminal_safe`: a log line can quote platform text
    (a chat title, an error a platform wrote), and `serve` logs to a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().format(record))


def log_to_stderr(verbose: bool) -> None:
    """Log INFO (DEBUG when `verbose`) and up to stderr, one `SafeFormatter` line a record."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        SafeFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", datefmt="%H:%M:%S")
    )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    if not verbose:
        # the PostgreSQL pool says each connection it tries and each one it drops (a line a
        # second through an outage); the workers' heartbeat says the outage, once
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)

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

import re

__all__ = ["terminal_safe"]

#: C0 controls but tab and line feed, DEL and C1, and the bidi embeddings, overrides
#: and isolates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """Return `text` with every character a terminal would act on shown escaped."""
    if text.isascii() and text.isprintable():
        return text
    return _UNSAFE.sub(lambda found: found.group().encode("unicode_escape").decode(), text)

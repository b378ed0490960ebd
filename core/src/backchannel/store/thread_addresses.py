"""Moving threads stored as their own chat to the one thread address (m007 / pg007).

The rule (docs/concepts.md, "Addresses"): a thread is its own conversation,
addressed ``(account, chat=<parent>, thread=<thread id>)``. Discord threads
used to be stored as ``(account, chat=<thread id>, thread='')``, kind
"thread", with the parent only in ``meta["parent_channel_id"]`` of their
messages (and of the conversation, when something put it there). Both
backends' migrations use these helpers to read that parent and drop the key
once the parent is the address's chat.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

__all__ = ["PARENT_KEY", "parent_in", "without_parent"]

#: the meta key the old Discord shape kept a thread's parent channel id in
PARENT_KEY = "parent_channel_id"


def _parent(meta_text: str | None) -> str | None:
    if not meta_text:
        return None
    try:
        meta = json.loads(meta_text)
    except ValueError:
        return None
    value = meta.get(PARENT_KEY) if isinstance(meta, dict) else None
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    return text if text.isascii() and text.isdigit() else None


def parent_in(meta_texts: Iterable[str | None]) -> str | None:
    """The first parent id recorded in these meta JSON texts, or None when none records one."""
    for meta_text in meta_texts:
        parent = _parent(meta_text)
        if parent is not None:
            return parent
    return None


def without_parent(meta_text: str | None) -> str | None:
    """The meta JSON text without the parent key; None when nothing else is left."""
    if not meta_text:
        return meta_text
    try:
        meta = json.loads(meta_text)
    except ValueError:
        return meta_text
    if not isinstance(meta, dict) or PARENT_KEY not in meta:
        return meta_text
    del meta[PARENT_KEY]
    return json.dumps(meta) if meta else None

"""The exceptions backchannel raises, under one root.

::

    BackchannelError
    ├── ConfigError          bad or missing configuration (names the file and key)
    │   └── ConfigErrors     several of them, found together (one line each)
    ├── PluginError          a plugin failed to load or registered a clashing name
    ├── NormalizeError       a platform payload is malformed (says what and where)
    ├── StoreError           the transcript store refused an operation
    └── DeliveryError        an outbound send did not complete as asked
        ├── RateLimited      definitely not delivered; safe to retry after `retry_after`
        ├── Rejected         the platform said no (bad target, no permission, ...)
        └── Uncertain        may or may not have arrived (timeout, reset, 5xx)

Adapters raise only the three `DeliveryError` leaves from `send`, and only
`NormalizeError` from `normalize`. Messages never contain secrets.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "BackchannelError",
    "ClaimLost",
    "ConfigError",
    "ConfigErrors",
    "DeliveryError",
    "LeaseLost",
    "NormalizeError",
    "PluginError",
    "RateLimited",
    "Rejected",
    "StoreError",
    "Superseded",
    "Uncertain",
    "UnknownConversation",
    "log_failure",
    "unknown_key",
]


class BackchannelError(Exception):
    """Root of every error backchannel raises on purpose."""


class ConfigError(BackchannelError):
    """Configuration is missing or wrong. The message names the file and key."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None):
        where = ", ".join(part for part in (path, key) if part)
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.key = key
        #: the config as far as it could be read (set by the loader), for `check` to look further
        self.partial: Any = None


class ConfigErrors(ConfigError):
    """Every mistake found in one config, in file order; the text is one line per mistake."""

    def __init__(self, errors: Sequence[ConfigError]):
        BackchannelError.__init__(self, "\n".join(str(error) for error in errors))
        self.errors = tuple(errors)
        self.path = errors[0].path if errors else None
        self.key = errors[0].key if errors else None
        self.partial = None


def combine(errors: Sequence[ConfigError]) -> ConfigError:
    """Return the one error, or a `ConfigErrors` holding several (flattened)."""
    flat = [
        e
        for error in errors
        for e in (error.errors if isinstance(error, ConfigErrors) else (error,))
    ]
    return flat[0] if len(flat) == 1 else ConfigErrors(flat)


def unknown_key(key: str, known: Iterable[str], what: str = "key") -> str:
    """The one wording for a name nobody reads, with the closest known one when there is one.

    ``unknown key; did you mean `poll_timeout`? (known keys: poll_limit, poll_timeout, token)``
    """
    names = sorted(set(known))
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    suggestion = f"; did you mean `{close[0]}`?" if close else ""
    return f"unknown {what}{suggestion} (known {what}s: {', '.join(names) or 'none'})"


class PluginError(BackchannelError):
    """A plugin could not be loaded, or registered a name another plugin owns."""

    def __init__(self, message: str, *, plugin: str | None = None):
        super().__init__(message)
        self.plugin = plugin


class NormalizeError(BackchannelError):
    """A raw platform payload could not be understood.

    `where` is the dotted path of the offending field (``message.chat.id``).
    """

    def __init__(self, message: str, *, where: str | None = None):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where


class StoreError(BackchannelError):
    """The transcript store refused an operation (unknown id, closed store, ...)."""


class UnknownConversation(StoreError):
    """No conversation has this id (a store that could not be asked raises StoreError)."""


class LeaseLost(StoreError):
    """An account's adapter state written by a process while another worker holds the
    account's lease (this one stalled past it): refused, so that it cannot overwrite what
    the holder wrote (a tiny.place ratchet, a poll offset). Expected after a stall."""


class ClaimLost(StoreError):
    """A run's send was fenced: its worker no longer holds the run's conversation (it
    stalled past its claim, and another run has it or has answered it). Expected with
    several workers; nothing was sent."""


class DeliveryError(BackchannelError):
    """An outbound operation did not complete as asked."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class RateLimited(DeliveryError):
    """The platform refused for now; nothing was delivered. Retry after `retry_after` seconds."""

    def __init__(self, retry_after: float, reason: str = "rate limited"):
        super().__init__(f"{reason} (retry after {retry_after:g}s)")
        self.retry_after = float(retry_after)


class Rejected(DeliveryError):
    """The platform said no: the message was not delivered and retrying will not help."""


class Uncertain(DeliveryError):
    """The outcome is unknown: the message may have arrived. Never retried automatically.

    `platform_message_id`: the id the message has on the platform if it arrived,
    when the adapter knows it without an answer (a client-chosen id): it is
    recorded, so a reply to the message can still be placed.
    """

    def __init__(self, reason: str, *, platform_message_id: str | None = None):
        super().__init__(reason)
        self.platform_message_id = platform_message_id


class Superseded(BackchannelError):
    """Raised by a send's `recorded` callback: what the send is for was done already
    (another worker, or a stalled run's successor, reported the answer first). The
    send is not made; its pending row is marked failed with this reason."""


def log_failure(logger: logging.Logger, error: BaseException, message: str, *args: Any) -> None:
    """Log `message: error` at ERROR; the traceback only when it is a bug.

    A `BackchannelError` already says what failed in one line, so its traceback
    (and the chain of library errors under it) is logged at DEBUG only, which
    `-v` shows. Anything else is unexpected and is logged with its traceback.
    """
    if isinstance(error, BackchannelError):
        logger.error(f"{message}: %s", *args, error)
        logger.debug("traceback of the error above", exc_info=error)
    else:
        logger.error(f"{message}: %s: %s", *args, type(error).__name__, error, exc_info=error)

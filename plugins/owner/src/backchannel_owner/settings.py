"""The ``[owner]`` config table, validated with errors that name the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import fields, frozen
from backchannel.config import Config, positive_number
from backchannel.errors import ConfigError, unknown_key

__all__ = ["OwnerSettings"]


@frozen
class OwnerSettings:
    """Where the owner is, and the timings of the duplex."""

    account: str
    chat: str
    #: the owner's user id on that channel; None: outbound only, inbound steering refused
    user: str | None = None
    #: seconds an owner message may wait before the first "not picked up" notice
    stale_after: float = 300.0
    #: seconds before the second (and last) notice
    late_after: float = 86400.0
    #: a session's fyi sends closer together than this are one message, edited
    burst_window: float = 30.0
    #: seconds a permission prompt can be answered
    permission_ttl: float = 600.0
    #: at most one correction per chat in this many seconds ...
    correction_per_chat: float = 60.0
    #: ... and one per id in this many
    correction_per_id: float = 3600.0
    #: rows older than this many days are pruned
    keep_days: float = 30.0
    #: seconds a notify may take in all before it fails
    timeout: float = 15.0

    @classmethod
    def from_config(cls, config: Config) -> OwnerSettings:
        """Read ``[owner]``; raise ConfigError naming the key when something is off."""
        table = config.sections.get("owner")
        where = config.source or "the config"
        if table is None:
            raise ConfigError(
                f"{where} has no [owner] table: add account, chat and user (see docs/owner.md)"
            )
        return cls.from_table(table, config, where)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], config: Config, where: str) -> OwnerSettings:
        known = {f.name for f in fields(cls)}
        for key in table:
            if key not in known:
                raise ConfigError(f"{where}: owner.{key}: {unknown_key(key, known)}")
        values: dict[str, Any] = {}
        for key in ("account", "chat", "user"):
            value = table.get(key)
            if value is None:
                if key == "user":
                    continue
                raise ConfigError(f"{where}: owner.{key}: missing (see docs/owner.md)")
            if isinstance(value, bool) or not isinstance(value, str | int) or not str(value):
                raise ConfigError(f"{where}: owner.{key}: expected a string, got {value!r}")
            values[key] = str(value)
        for field in fields(cls):
            if field.name in values or field.name not in table:
                continue
            value = table[field.name]
            if not positive_number(value):
                raise ConfigError(
                    f"{where}: owner.{field.name}: expected a positive number of seconds"
                    f" (days for keep_days), got {value!r}"
                )
            values[field.name] = float(value)
        defaults = {field.name: field.default for field in fields(cls)}
        stale = values.get("stale_after", defaults["stale_after"])
        late = values.get("late_after", defaults["late_after"])
        if late <= stale:
            raise ConfigError(
                f"{where}: owner.late_after: {late:g} is not after owner.stale_after"
                f" ({stale:g}): the second notice comes after the first"
            )
        if values["account"] in config.unreadable_accounts:
            raise ConfigError(
                f"{where}: owner.account: the account {values['account']!r} could not be read"
                " (its own error says why)"
            )
        if values["account"] not in config.accounts:
            known_accounts = ", ".join(sorted(config.accounts)) or "none"
            raise ConfigError(
                f"{where}: owner.account: no account called {values['account']!r}"
                f" (configured: {known_accounts})"
            )
        return cls(**values)

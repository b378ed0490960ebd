"""The two controls over cross-conversation sends: the config kill switch and the durable toggle.

- ``[orchestration] enabled = false`` in the config file (re-read on SIGHUP by
  `serve`, and at every start);
- ``backchannel messaging off|on``: a flag in the store, so it survives
  restarts and reaches a running `serve` without one.

A send (or, later, an ask) is allowed only when both allow it: neither control
can override the other. The store flag is read at every send (one primary-key
lookup), so there is no cache to go stale.
"""

from __future__ import annotations

import json

from attrs import frozen

from ..config import Config
from ..model import now
from ..store import Store

__all__ = ["MESSAGING_KEY", "MessagingStatus", "messaging_status", "set_messaging"]

#: where the durable toggle lives: the store's state table, under no account ("")
MESSAGING_ACCOUNT = ""
MESSAGING_KEY = "orchestration.messaging"


@frozen
class MessagingStatus:
    """Whether new cross-conversation sends are allowed, and which control says so."""

    #: `[orchestration] enabled` in the config
    config_enabled: bool
    #: the durable toggle (`backchannel messaging on|off`)
    messaging_on: bool
    #: when the toggle last changed (Unix seconds), None if never
    changed_at: float | None = None

    @property
    def allowed(self) -> bool:
        return self.config_enabled and self.messaging_on

    @property
    def held_by(self) -> list[str]:
        """The controls currently refusing sends: "config", "messaging" (empty when allowed)."""
        holders = []
        if not self.config_enabled:
            holders.append("config")
        if not self.messaging_on:
            holders.append("messaging")
        return holders

    def describe(self) -> str:
        """One paragraph for people: the state, and what holds it."""
        if self.allowed:
            return "cross-conversation messaging is ON: orchestrating runs may send to other conversations"
        reasons = []
        if not self.config_enabled:
            reasons.append(
                "the config's kill switch ([orchestration] enabled = false; set it to true"
                " and restart or send SIGHUP to serve)"
            )
        if not self.messaging_on:
            reasons.append(
                "the messaging control (turned off with `backchannel messaging off`;"
                " `backchannel messaging on` turns it back on)"
            )
        return "cross-conversation messaging is OFF, held by " + " and ".join(reasons)

    def to_json(self) -> dict[str, object]:
        return {
            "allowed": self.allowed,
            "config_enabled": self.config_enabled,
            "messaging_on": self.messaging_on,
            "held_by": self.held_by,
            "changed_at": self.changed_at,
        }


async def messaging_status(store: Store, config: Config) -> MessagingStatus:
    """Return the current state of both controls (reads the store: cheap, never cached)."""
    raw = await store.get_state(MESSAGING_ACCOUNT, MESSAGING_KEY)
    on, changed_at = True, None
    if raw:
        try:
            data = json.loads(raw)
            flag = data.get("on", True)
            # only what set_messaging writes counts as on; anything else fails closed
            on = flag is True
            changed_at = float(data["at"]) if data.get("at") is not None else None
        except (ValueError, TypeError, AttributeError):
            on = False  # an unreadable flag fails closed
    return MessagingStatus(config.orchestration.enabled, on, changed_at)


async def set_messaging(store: Store, on: bool) -> None:
    """Turn the durable messaging control on or off (takes effect at the next send)."""
    await store.set_state(MESSAGING_ACCOUNT, MESSAGING_KEY, json.dumps({"on": on, "at": now()}))

"""backchannel: connect agents to where people and agents talk, flattened.

The channel layer owns the transcript; each time an agent should act it is
handed a `Run`: a framing instruction, a plain messages list and executable
send tools. Outbound is always a tool call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapter import Adapter, AdapterContext, Capabilities, IngestResult, split_text
    from .errors import (
        BackchannelError,
        ConfigError,
        DeliveryError,
        NormalizeError,
        PluginError,
        RateLimited,
        Rejected,
        StoreError,
        Uncertain,
    )
    from .hookspecs import hookimpl
    from .model import (
        Address,
        Attachment,
        Conversation,
        Event,
        Message,
        Outbound,
        Receipt,
        Sender,
    )
    from .policy import Policy
    from .runs import Agent, Run, RunBuilder, WindowSettings
    from .switchboard import Binding, Switchboard
    from .tools import Tool

#: where each public name lives: imported on first use, so `import backchannel` (and every
#: CLI call) does not pay for the HTTP server, the store and the run machinery up front
_EXPORTS = {
    **dict.fromkeys(
        ("Adapter", "AdapterContext", "Capabilities", "IngestResult", "split_text"), "adapter"
    ),
    **dict.fromkeys(
        (
            "BackchannelError",
            "ConfigError",
            "DeliveryError",
            "NormalizeError",
            "PluginError",
            "RateLimited",
            "Rejected",
            "StoreError",
            "Uncertain",
        ),
        "errors",
    ),
    "hookimpl": "hookspecs",
    **dict.fromkeys(
        ("Address", "Attachment", "Conversation", "Event", "Message", "Outbound", "Receipt"),
        "model",
    ),
    "Sender": "model",
    "Policy": "policy",
    **dict.fromkeys(("Agent", "Run", "RunBuilder", "WindowSettings"), "runs"),
    **dict.fromkeys(("Binding", "Switchboard"), "switchboard"),
    "Tool": "tools",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'backchannel' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__version__ = "0.1.0"

__all__ = [
    "Adapter",
    "AdapterContext",
    "Address",
    "Agent",
    "Attachment",
    "BackchannelError",
    "Binding",
    "Capabilities",
    "ConfigError",
    "Conversation",
    "DeliveryError",
    "Event",
    "IngestResult",
    "Message",
    "NormalizeError",
    "Outbound",
    "PluginError",
    "Policy",
    "RateLimited",
    "Receipt",
    "Rejected",
    "Run",
    "RunBuilder",
    "Sender",
    "StoreError",
    "Switchboard",
    "Tool",
    "Uncertain",
    "WindowSettings",
    "hookimpl",
    "split_text",
]

"""backchannel: connect agents to where people and agents talk, flattened.

The channel layer owns the transcript; each time an agent should act it is
handed a `Run`: a framing instruction, a plain messages list and executable
send tools. Outbound is always a tool call.
"""

from __future__ import annotations

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

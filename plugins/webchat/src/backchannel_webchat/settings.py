"""The web chat account's settings, read from its config table with clear errors."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from attrs import frozen
from backchannel.config import positive_number
from backchannel.errors import ConfigError, combine, unknown_key

__all__ = ["DEFAULT_FAILURE_NOTICE", "WebchatSettings"]

DEFAULT_FAILURE_NOTICE = "The agent could not answer this time. Please try again in a moment."


@frozen
class WebchatSettings:
    """Everything a web chat account can be configured with (all optional)."""

    #: URL prefix the page is served under; always starts and ends with "/"
    path: str = "/"
    #: page title and, unless `agent_name` is set, the agent's display name
    title: str = "Chat"
    agent_name: str = "Agent"
    #: longest visitor message, in characters
    max_message_chars: int = 4000
    #: visitor messages per minute per visitor (token bucket refill), and the burst allowed
    rate_limit: float = 20.0
    rate_burst: int = 5
    #: messages of the transcript shown when a page (re)connects
    history: int = 200
    #: extra origins allowed to open the websocket (same-origin is always allowed)
    allowed_origins: tuple[str, ...] = ()
    #: open websockets (tabs) per visitor, and in all
    max_sockets_per_visitor: int = 8
    max_sockets: int = 1000
    #: open websockets (handshakes included) per client address
    max_sockets_per_address: int = 20
    #: new websockets (page loads, reconnects) per minute per client address, and the burst
    connect_rate_limit: float = 30.0
    connect_burst: int = 30
    #: visitor messages per minute per client address (all its visitors), and the burst
    address_rate_limit: float = 60.0
    address_burst: int = 20
    #: seconds a page may stay connected without its visitor sending a message
    idle_timeout: float = 1800.0
    #: the same, for a page whose visitor has not sent a message on it yet (at most idle_timeout)
    silent_timeout: float = 300.0
    #: frames per minute per page (one per 4 KiB started), and the burst allowed
    frame_rate_limit: float = 600.0
    frame_burst: int = 60
    #: frames per minute per client address (all its pages), and the burst
    address_frame_rate_limit: float = 1200.0
    address_frame_burst: int = 120
    #: HTTP requests (the page, its files, websocket upgrades) per minute per client
    #: address, and the burst (a page load is about five)
    request_rate_limit: float = 600.0
    request_burst: int = 60
    #: host names the page and websocket answer for, besides public_url's host, the address
    #: the connection came in on and localhost; "*" answers for any
    allowed_hosts: tuple[str, ...] = ()
    #: addresses (or networks) of reverse proxies whose X-Forwarded-For names the client
    trusted_proxies: tuple[str, ...] = ()
    #: seconds `send` waits for a connected page to confirm it displayed a message
    delivery_timeout: float = 10.0
    #: agent messages per minute per conversation (a runaway agent cannot flood a tab)
    agent_rate_limit: float = 60.0
    agent_burst: int = 20
    #: longest agent message part; longer sends are split
    max_text_len: int = 20000
    #: shown on the page when a run fails (error or timeout); "" shows nothing
    failure_notice: str = DEFAULT_FAILURE_NOTICE

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any], where: str = "webchat") -> WebchatSettings:
        """Build settings from an account's config table; raise ConfigError naming the key."""
        known = {a.name for a in cls.__attrs_attrs__}
        values: dict[str, Any] = {}
        problems: list[ConfigError] = []
        for key, value in settings.items():
            if key in {"channel", "agent", "binding", "enabled"}:
                continue  # keys the config layer may leave in the table
            if key not in known:
                problems.append(ConfigError(unknown_key(key, known), key=f"{where}.{key}"))
                continue
            try:
                values[key] = _check(key, value, where)
            except ConfigError as error:
                problems.append(error)
        if problems:
            raise combine(problems)
        title = values.get("title", cls.title)
        if "agent_name" not in values and "title" in values:
            values["agent_name"] = title
        if "path" in values:
            values["path"] = _normal_path(values["path"], where)
        return cls(**values)


_POSITIVE_NUMBERS = {
    "rate_limit",
    "delivery_timeout",
    "agent_rate_limit",
    "connect_rate_limit",
    "address_rate_limit",
    "idle_timeout",
    "silent_timeout",
    "frame_rate_limit",
    "address_frame_rate_limit",
    "request_rate_limit",
}
_POSITIVE_INTS = {
    "max_message_chars",
    "rate_burst",
    "history",
    "max_sockets_per_visitor",
    "max_sockets",
    "max_sockets_per_address",
    "connect_burst",
    "address_burst",
    "agent_burst",
    "max_text_len",
    "frame_burst",
    "address_frame_burst",
    "request_burst",
}


def _check(key: str, value: Any, where: str) -> Any:
    name = f"{where}.{key}"
    if key in _POSITIVE_INTS:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"expected a positive integer, got {value!r}", key=name)
        return value
    if key in _POSITIVE_NUMBERS:
        if not positive_number(value):
            raise ConfigError(f"expected a positive number, got {value!r}", key=name)
        return float(value)
    if key == "allowed_origins":
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise ConfigError("expected a list of origins like 'https://example.com'", key=name)
        return tuple(v.rstrip("/") for v in value)
    if key == "allowed_hosts":
        return _hosts(value, name)
    if key == "trusted_proxies":
        return _networks(value, name)
    if key == "failure_notice" and isinstance(value, str):
        return value.strip()
    if not isinstance(value, str) or (key != "path" and not value.strip()):
        raise ConfigError(f"expected a non-empty string, got {value!r}", key=name)
    return value


def _hosts(value: Any, name: str) -> tuple[str, ...]:
    """Host names as the Host header carries them (no scheme, port or path), lowercased."""

    def host_name(entry: str) -> str:
        host = entry.strip().lower().rstrip(".")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # an IPv6 address, written as in a URL
        if not host or (any(c in host for c in "/:@?#[] \t") and not _is_ip(host)):
            raise ValueError(entry)
        return host

    return _list_of(
        value,
        name,
        host_name,
        "expected a list of host names like 'chat.example.com' (no scheme, port or path),"
        " or ['*'] for any",
    )


def _networks(value: Any, name: str) -> tuple[str, ...]:
    """Addresses or networks ('10.0.0.0/8'), checked here, kept as their canonical text."""
    return _list_of(
        value,
        name,
        lambda entry: str(ipaddress.ip_network(entry.strip(), strict=False)),
        "expected a list of IP addresses or networks like '127.0.0.1' or '10.0.0.0/8'",
    )


def _list_of(value: Any, name: str, parse: Callable[[str], str], expected: str) -> tuple[str, ...]:
    """A list of strings, each made by `parse` (ValueError: not one); one error for all."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"{expected}; got {value!r}", key=name)
    try:
        if not all(isinstance(entry, str) for entry in value):
            raise ValueError(value)
        return tuple(parse(entry) for entry in value)
    except ValueError:
        raise ConfigError(f"{expected}; got {value!r}", key=name) from None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _normal_path(path: str, where: str) -> str:
    if not path.startswith("/"):
        raise ConfigError(f"must start with '/', got {path!r}", key=f"{where}.path")
    if any(c in path for c in "?#\\ "):
        raise ConfigError(f"must be a plain URL path, got {path!r}", key=f"{where}.path")
    return path if path.endswith("/") else path + "/"

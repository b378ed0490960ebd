"""The account's config table, read into a typed value; proxy resolution for slack-sdk."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from attrs import field, frozen
from backchannel.config import positive_number
from backchannel.errors import ConfigError

__all__ = ["DEFAULT_API_BASE", "SlackSettings", "resolve_proxy"]

DEFAULT_API_BASE = "https://slack.com/api/"

Mode = Literal["socket", "events"]


@frozen
class SlackSettings:
    """One Slack app's settings. Secrets are kept out of repr."""

    bot_token: str = field(repr=False)
    app_token: str | None = field(default=None, repr=False)
    signing_secret: str | None = field(default=None, repr=False)
    mode: Mode = "socket"
    api_base: str = DEFAULT_API_BASE
    events_path: str = "/slack/events"
    #: seconds a Web API call may take before it counts as lost (sends become Uncertain)
    timeout: float = 10.0
    #: seconds name lookups may add to receiving one event (Slack wants an answer in 3)
    lookup_timeout: float = 2.0
    #: seconds a looked-up user or channel name stays fresh
    name_ttl: float = 3600.0
    #: seconds start() waits for the first Socket Mode websocket before giving up
    connect_timeout: float = 30.0
    #: Socket Mode keepalive: ping interval; a dead socket is replaced within about two
    ping_interval: float = 5.0
    #: None: HTTPS_PROXY / HTTP_PROXY as slack-sdk reads them, minus hosts in NO_PROXY;
    #: "": no proxy at all; a URL: that proxy
    proxy: str | None = None
    #: a top-level channel message that mentions the bot opens the thread under it
    thread_on_mention: bool = True
    #: longest text of one chat.postMessage; longer texts are split
    max_text_len: int = 4000

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret in these settings (for log redaction)."""
        return tuple(s for s in (self.bot_token, self.app_token, self.signing_secret) if s)

    @classmethod
    def from_mapping(cls, account: str, settings: Mapping[str, Any]) -> SlackSettings:
        """Read and check an account's config table; raise ConfigError naming the key."""
        where = f"accounts.{account}"

        def text(key: str, required: bool = False, prefix: str | None = None) -> str | None:
            value = settings.get(key)
            if value is None or value == "":
                if required:
                    raise ConfigError(f"missing {key!r}", key=f"{where}.{key}")
                return None
            if not isinstance(value, str):
                raise ConfigError(f"{key!r} must be a string", key=f"{where}.{key}")
            if prefix and not value.startswith(prefix):
                raise ConfigError(
                    f"{key!r} should start with {prefix!r} (check you pasted the right token)",
                    key=f"{where}.{key}",
                )
            return value.strip()

        def number(key: str, default: float) -> float:
            value = settings.get(key, default)
            if not positive_number(value):
                raise ConfigError(f"{key!r} must be a positive number", key=f"{where}.{key}")
            return float(value)

        bot_token = text("bot_token", required=True, prefix="xoxb-")
        app_token = text("app_token", prefix="xapp-")
        signing_secret = text("signing_secret")
        chosen = settings.get("mode") or ("socket" if app_token else "events")
        if chosen not in ("socket", "events"):
            raise ConfigError("'mode' must be 'socket' or 'events'", key=f"{where}.mode")
        mode: Mode = "socket" if chosen == "socket" else "events"
        if mode == "socket" and not app_token:
            raise ConfigError(
                "Socket Mode needs an app-level token (xapp-...) with connections:write",
                key=f"{where}.app_token",
            )
        if mode == "events" and not signing_secret:
            raise ConfigError(
                "the Events API needs the app's signing secret", key=f"{where}.signing_secret"
            )
        events_path = text("events_path") or f"/slack/{account}/events"
        if not events_path.startswith("/"):
            raise ConfigError("'events_path' must start with '/'", key=f"{where}.events_path")
        proxy = settings.get("proxy")
        if proxy is not None and not isinstance(proxy, str):
            raise ConfigError("'proxy' must be a URL or ''", key=f"{where}.proxy")
        api_base = text("api_base") or DEFAULT_API_BASE
        return cls(
            bot_token=bot_token or "",
            app_token=app_token,
            signing_secret=signing_secret,
            mode=mode,
            api_base=api_base if api_base.endswith("/") else api_base + "/",
            events_path=events_path,
            timeout=number("timeout", 10.0),
            lookup_timeout=number("lookup_timeout", 2.0),
            name_ttl=number("name_ttl", 3600.0),
            ping_interval=number("ping_interval", 5.0),
            connect_timeout=number("connect_timeout", 30.0),
            proxy=proxy,
            thread_on_mention=bool(settings.get("thread_on_mention", True)),
            max_text_len=int(number("max_text_len", 4000)),
        )


def resolve_proxy(setting: str | None, url: str) -> str | None:
    """Return the proxy URL to use for `url`, or None for a direct connection.

    slack-sdk reads HTTPS_PROXY / HTTP_PROXY itself but ignores NO_PROXY, and
    hands the proxy to aiohttp explicitly, so a proxy meant for the internet
    would also swallow loopback traffic. We apply NO_PROXY here and set the
    clients' `proxy` attribute ourselves.
    """
    if setting is not None:
        return setting.strip() or None
    parts = urlsplit(url)
    host = parts.hostname or ""
    proxies = urllib.request.getproxies_environment()
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if host and bypass(host, proxies):
        return None
    scheme = "https" if parts.scheme in ("https", "wss") else "http"
    chosen = proxies.get(scheme) or proxies.get("https") or proxies.get("http")
    return chosen.strip() or None if chosen else None

"""Who is asking: the client address a request counts against, and the hosts the chat answers for.

The per-address limits count a visitor's *client address*: the peer address
of the connection, or, when that peer is a configured `trusted_proxies`
entry, the address its ``X-Forwarded-For`` names (the rightmost hop that is
not itself a trusted proxy). Without `trusted_proxies` the header is ignored:
anyone can write one. IPv6 addresses count by their /64, the block one
subscriber is usually given, so cycling through one's own block gains nothing.

The host check is the DNS-rebinding defence: a page whose host name an
attacker points at this server's address, after the browser loaded it, is
same-origin with the websocket it opens, so the Origin check cannot catch it;
its ``Host`` header still names the attacker's domain. Only the host of
``[server] public_url``, the address the connection came in on (the bind
address), ``localhost`` and loopback addresses, and `allowed_hosts` are
answered; names an attacker cannot point anywhere (IP literals of this
machine, ``localhost``) need no listing.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

from aiohttp import web
from backchannel.logcount import Tally

__all__ = ["ClientAddresses", "HostCheck", "RefusalLog", "hostname", "parse_ip"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: requests without a peer address (not TCP) share one key
UNKNOWN = "unknown"


def parse_ip(text: str | None) -> IPAddress | None:
    """Return the address in `text` ("1.2.3.4", "1.2.3.4:80", "[::1]:80", "::1"), or None."""
    if not text:
        return None
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]  # IPv4 with a port
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def address_key(ip: IPAddress) -> str:
    """The key the per-address limits count `ip` under: IPv4 itself, IPv6 by its /64."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


class ClientAddresses:
    """Finds the client address of a request (see the module's docstring)."""

    def __init__(self, trusted_proxies: Iterable[str] = ()):
        self.trusted: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(entry, strict=False) for entry in trusted_proxies
        )
        #: a forwarded header came from a peer not trusted: said once, for the operator
        self.warned_untrusted = False

    def of(self, request: web.Request, log: logging.LoggerAdapter[logging.Logger]) -> str:
        """Return the key `request` counts against."""
        peer = parse_ip(request.remote)
        if peer is None:
            return UNKNOWN
        forwarded = request.headers.getall("X-Forwarded-For", [])
        if not self._trusts(peer):
            if forwarded and not self.warned_untrusted:
                self.warned_untrusted = True
                log.warning(
                    "web chat: a request from %s carries X-Forwarded-For, but trusted_proxies"
                    " does not list %s: the per-address limits count it as %s. If a reverse"
                    " proxy there sets that header, list it in trusted_proxies (said once)",
                    peer,
                    peer,
                    peer,
                )
            return address_key(peer)
        return address_key(self.forwarded_client(peer, forwarded))

    def forwarded_client(self, peer: IPAddress, headers: Sequence[str]) -> IPAddress:
        """The rightmost X-Forwarded-For hop that is not a trusted proxy (`peer` is one)."""
        client = peer
        hops = [hop for header in headers for hop in header.split(",")]
        for hop in reversed(hops):
            ip = parse_ip(hop)
            if ip is None:
                break  # not an address: the trusted hop that passed it on answers for it
            client = ip
            if not self._trusts(ip):
                break
        return client

    def _trusts(self, ip: IPAddress) -> bool:
        return any(ip in network for network in self.trusted)


def hostname(host: str) -> str | None:
    """The name in a Host header ("Example.com:80" -> "example.com"), or None if it has none."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0 or (host[end + 1 :] and not _is_port(host[end + 1 :])):
            return None
        return host[1:end]
    name, colon, port = host.rpartition(":")
    if colon and _is_port(":" + port):
        host = name
    host = host.rstrip(".")
    if not host or any(c in host for c in "/\\@?#[]; \t,\"'<>{}|^`%"):
        return None
    return host


def _is_port(text: str) -> bool:
    return text.startswith(":") and text[1:].isdigit() and len(text) <= 6


class HostCheck:
    """Says whether a request's Host is one this web chat answers for."""

    def __init__(self, allowed_hosts: Iterable[str], public_url: Callable[[], str]):
        hosts = frozenset(allowed_hosts)
        self.any = "*" in hosts
        self.allowed = hosts | {"localhost"}
        #: called at each request: the switchboard fills in its port once it listens
        self._public_url = public_url

    def allows(self, request: web.Request) -> bool:
        if self.any:
            return True
        header = request.headers.get("Host")
        if header is None:
            return True  # not a browser (every browser sends one): nothing to rebind
        host = hostname(header)
        if host is None:
            return False
        if host in self.allowed or host == self._public_host():
            return True
        ip = parse_ip(host)
        if ip is None:
            return False
        return ip.is_loopback or ip == self._local_address(request)

    def _public_host(self) -> str | None:
        try:
            host = urlsplit(self._public_url()).hostname
        except ValueError:
            return None
        return host.rstrip(".") if host else None

    @staticmethod
    def _local_address(request: web.Request) -> IPAddress | None:
        transport = request.transport
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        if isinstance(sockname, list | tuple) and sockname:
            return parse_ip(str(sockname[0]))
        return None


class RefusalLog:
    """Logs refused requests: the first one, then at most one line a minute with the count."""

    def __init__(
        self,
        log: logging.LoggerAdapter[logging.Logger],
        what: str,
        *,
        level: int = logging.INFO,
        interval: float = 60.0,
        verb: str = "refused",
    ):
        self.log = log
        self.what = what
        self.verb = verb
        self.level = level
        self.tally = Tally(interval)

    @property
    def count(self) -> int:
        """Refused since the start."""
        return self.tally.count

    def note(self, latest: str) -> None:
        """Count one refusal; log the count when the last line is `interval` old."""
        since = self.tally.tick()
        if since is not None:
            self.log.log(
                self.level, "web chat: %s %d %s; latest: %s", self.verb, since, self.what, latest
            )

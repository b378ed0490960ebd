"""Token buckets with a controlled clock; client addresses and host names."""

from __future__ import annotations

import pytest
from backchannel_webchat.clients import ClientAddresses, address_key, hostname, parse_ip
from backchannel_webchat.limits import Buckets, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_the_burst_then_says_how_long_to_wait() -> None:
    clock = Clock()
    bucket = TokenBucket(per_minute=30, burst=3, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0, 0, 0]
    assert bucket.take() == pytest.approx(2.0)
    clock.now = 1.0
    assert bucket.take() == pytest.approx(1.0)
    clock.now = 2.0
    assert bucket.take() == 0


def test_a_take_may_cost_several_tokens_at_most_the_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(per_minute=60, burst=10, clock=clock)
    assert bucket.take(6) == 0
    assert bucket.take(6) == pytest.approx(2.0)  # nothing taken: 4 left, 2 to come
    assert bucket.take(4) == 0
    clock.now = 20.0
    assert bucket.take(50) == 0  # a cost over the burst costs the burst: never out of reach
    assert bucket.take(1) == pytest.approx(1.0)


def test_buckets_are_per_key() -> None:
    buckets = Buckets(per_minute=60, burst=1, clock=Clock())
    assert buckets.take("a") == 0
    assert buckets.take("a") > 0
    assert buckets.take("b") == 0


def test_buckets_keep_a_bounded_number_of_keys() -> None:
    clock = Clock()
    buckets = Buckets(per_minute=60, burst=1, max_keys=100, clock=clock)
    for n in range(1000):
        buckets.take(f"visitor{n}")
    assert len(buckets) <= 100
    clock.now = 10.0  # every bucket refilled: all may be forgotten
    buckets.take("late")
    assert len(buckets) <= 100


# client addresses --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("203.0.113.5", "203.0.113.5"),
        (" 203.0.113.5:4711 ", "203.0.113.5"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("2001:db8::1", "2001:db8::1"),
        ("unknown", None),
        ("", None),
        (None, None),
        ("[2001:db8::1", None),
    ],
)
def test_parse_ip_takes_what_peers_and_forwarded_headers_carry(
    text: str | None, expected: str | None
) -> None:
    ip = parse_ip(text)
    assert (str(ip) if ip else None) == expected


def test_ipv6_addresses_count_by_their_64_block_and_mapped_ipv4_as_ipv4() -> None:
    first = parse_ip("2001:db8:1:2:aaaa::1")
    second = parse_ip("2001:db8:1:2:ffff::9")
    third = parse_ip("2001:db8:1:3::1")
    assert first and second and third
    assert address_key(first) == address_key(second) == "2001:db8:1:2::/64"
    assert address_key(third) != address_key(first)
    mapped = parse_ip("::ffff:203.0.113.5")
    assert mapped and address_key(mapped) == "203.0.113.5"


@pytest.mark.parametrize(
    ("header", "client"),
    [
        ("203.0.113.5", "203.0.113.5"),
        ("192.0.2.1, 203.0.113.5", "203.0.113.5"),  # the left part is the client's own
        ("203.0.113.5, 10.0.0.7", "203.0.113.5"),  # through a second trusted proxy
        ("10.0.0.9, 10.0.0.7", "10.0.0.9"),  # only proxies: the first of them
        ("not-an-address, 10.0.0.7", "10.0.0.7"),
        ("", "10.0.0.1"),
    ],
)
def test_the_client_is_the_rightmost_hop_that_is_not_a_trusted_proxy(
    header: str, client: str
) -> None:
    addresses = ClientAddresses(["10.0.0.0/8"])
    peer = parse_ip("10.0.0.1")
    assert peer is not None
    assert str(addresses.forwarded_client(peer, [header])) == client


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("Chat.Example.com", "chat.example.com"),
        ("chat.example.com.:8443", "chat.example.com"),
        ("[::1]:8765", "::1"),
        ("[::1]", "::1"),
        ("127.0.0.1:8765", "127.0.0.1"),
        ("evil.example; script-src *", None),
        ("evil.example/x", None),
        ("[::1]x", None),
        ("", None),
    ],
)
def test_hostname_of_a_host_header(header: str, name: str | None) -> None:
    assert hostname(header) == name

"""Guard: the discord.py attributes the adapter and FakeDiscord rely on still exist and still work.

The adapter never patches discord.py. It sets two class attributes when the
account config asks (``api_base``, ``gateway_url``), one instance attribute
(``client.http.max_ratelimit_timeout``), and listens to the documented
``on_socket_raw_receive`` debug event. If a discord.py release renames any of
them, these tests fail before anything subtler does.
"""

from __future__ import annotations

import inspect

import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route


def test_route_base_is_a_class_attribute_every_url_is_built_from() -> None:
    assert isinstance(Route.BASE, str)
    saved = Route.BASE
    try:
        Route.BASE = "http://127.0.0.1:1/api/v10"
        route = Route("POST", "/channels/{channel_id}/messages", channel_id=42)
        assert route.url == "http://127.0.0.1:1/api/v10/channels/42/messages"
    finally:
        Route.BASE = saved


def test_default_gateway_is_a_url_class_attribute_from_client_reads() -> None:
    assert isinstance(DiscordWebSocket.DEFAULT_GATEWAY, yarl.URL)
    source = inspect.getsource(DiscordWebSocket.from_client)
    assert "cls.DEFAULT_GATEWAY" in source


def test_http_client_reads_max_ratelimit_timeout_per_bucket() -> None:
    assert "max_ratelimit_timeout" in inspect.signature(HTTPClient.__init__).parameters
    assert "self.max_ratelimit_timeout" in inspect.getsource(HTTPClient.get_ratelimit)
    assert "self.max_ratelimit_timeout" in inspect.getsource(HTTPClient.request)


def test_raw_receive_event_and_client_options_exist() -> None:
    assert hasattr(DiscordWebSocket, "debug_log_receive")
    assert "socket_raw_receive" in inspect.getsource(DiscordWebSocket.debug_log_receive)
    client_doc = inspect.getdoc(discord.Client) or ""
    for option in (
        "enable_debug_events",
        "heartbeat_timeout",
        "guild_ready_timeout",
        "max_ratelimit_timeout",
    ):
        assert option in client_doc
    assert issubclass(discord.PrivilegedIntentsRequired, discord.ClientException)
    assert hasattr(discord, "RateLimited")
    assert discord.version_info.major == 2


def test_a_failed_clients_gateway_socket_can_be_closed_alone() -> None:
    # the supervisor closes `client.ws` of a client whose loop failed, keeping its HTTP to send
    assert "self.ws" in inspect.getsource(discord.Client.__init__)
    assert isinstance(inspect.getattr_static(DiscordWebSocket, "open"), property)
    assert "code" in inspect.signature(DiscordWebSocket.close).parameters
    assert "_keep_alive.stop()" in inspect.getsource(DiscordWebSocket.close)

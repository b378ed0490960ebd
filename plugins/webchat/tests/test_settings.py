"""Settings: defaults, validation with errors that name the key."""

from __future__ import annotations

import pytest
from backchannel.errors import ConfigError
from backchannel.lazy import load
from backchannel_webchat import WebchatAdapter, WebchatSettings


def test_defaults() -> None:
    adapter = WebchatAdapter("web", {})
    assert adapter.channel == "webchat"
    assert adapter.settings.path == "/" and adapter.settings.max_message_chars == 4000
    capabilities = adapter.capabilities
    assert capabilities.edits and capabilities.typing
    assert not capabilities.threads and not capabilities.reactions
    assert capabilities.max_text_len >= 10_000
    assert adapter.me is not None and (adapter.me.id, adapter.me.name) == ("agent", "Agent")
    assert adapter.me.is_bot


def test_title_names_the_agent_unless_agent_name_is_set() -> None:
    assert WebchatAdapter("web", {"title": "Helpdesk"}).me.name == "Helpdesk"  # type: ignore[union-attr]
    named = WebchatAdapter("web", {"title": "Helpdesk", "agent_name": "Robin"})
    assert named.me is not None and named.me.name == "Robin"


@pytest.mark.parametrize(
    ("path", "expected"), [("/", "/"), ("/chat", "/chat/"), ("/a/b/", "/a/b/")]
)
def test_path_always_ends_with_a_slash(path: str, expected: str) -> None:
    assert WebchatSettings.from_mapping({"path": path}).path == expected


@pytest.mark.parametrize(
    ("settings", "key", "expected"),
    [
        ({"max_message_chars": 0}, "accounts.web.max_message_chars", "positive integer"),
        ({"max_message_chars": "4000"}, "accounts.web.max_message_chars", "positive integer"),
        ({"rate_limit": -1}, "accounts.web.rate_limit", "positive number"),
        ({"history": True}, "accounts.web.history", "positive integer"),
        ({"path": "chat"}, "accounts.web.path", "must start with '/'"),
        ({"path": "/chat?x"}, "accounts.web.path", "plain URL path"),
        ({"title": ""}, "accounts.web.title", "non-empty string"),
        ({"allowed_origins": "https://x"}, "accounts.web.allowed_origins", "list of origins"),
        ({"colour": "blue"}, "accounts.web.colour", "unknown key (known keys: address_burst,"),
        ({"idle_timeout": 0}, "accounts.web.idle_timeout", "positive number"),
        ({"max_sockets_per_address": -1}, "accounts.web.max_sockets_per_address", "positive"),
        ({"connect_burst": 1.5}, "accounts.web.connect_burst", "positive integer"),
        ({"address_rate_limit": "60"}, "accounts.web.address_rate_limit", "positive number"),
        ({"allowed_hosts": "chat.example.com"}, "accounts.web.allowed_hosts", "host names"),
        (
            {"allowed_hosts": ["https://chat.example.com"]},
            "accounts.web.allowed_hosts",
            "no scheme",
        ),
        ({"allowed_hosts": ["chat.example.com:443"]}, "accounts.web.allowed_hosts", "no scheme"),
        ({"trusted_proxies": "127.0.0.1"}, "accounts.web.trusted_proxies", "IP addresses"),
        ({"trusted_proxies": ["proxy.local"]}, "accounts.web.trusted_proxies", "IP addresses"),
        ({"silent_timeout": 0}, "accounts.web.silent_timeout", "positive number"),
        ({"frame_rate_limit": "10"}, "accounts.web.frame_rate_limit", "positive number"),
        ({"frame_burst": 0}, "accounts.web.frame_burst", "positive integer"),
        ({"address_frame_burst": 2.5}, "accounts.web.address_frame_burst", "positive integer"),
        ({"request_burst": -1}, "accounts.web.request_burst", "positive integer"),
    ],
)
def test_bad_settings_raise_config_error_naming_the_key(
    settings: dict[str, object], key: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        WebchatAdapter("web", settings)
    assert caught.value.key == key
    assert expected in str(caught.value)


def test_plugin_registers_the_webchat_channel() -> None:
    import backchannel_webchat

    registered: dict[str, object] = {}
    backchannel_webchat.register_channels(lambda name, factory: registered.update({name: factory}))
    # by reference: the adapter (and aiohttp's server) is imported only when an account is built
    assert registered == {"webchat": "backchannel_webchat.adapter:WebchatAdapter"}
    assert load(registered["webchat"]) is WebchatAdapter  # type: ignore[arg-type]


def test_hosts_and_proxies_are_kept_in_canonical_form() -> None:
    settings = WebchatSettings.from_mapping(
        {
            "allowed_hosts": ["Chat.Example.com.", "[::1]", "*"],
            "trusted_proxies": ["127.0.0.1", "10.1.2.3/8", "::1"],
        }
    )
    assert settings.allowed_hosts == ("chat.example.com", "::1", "*")
    assert settings.trusted_proxies == ("127.0.0.1/32", "10.0.0.0/8", "::1/128")


def test_per_address_defaults() -> None:
    settings = WebchatSettings.from_mapping({})
    assert settings.max_sockets_per_address == 20
    assert (settings.connect_rate_limit, settings.connect_burst) == (30, 30)
    assert (settings.address_rate_limit, settings.address_burst) == (60, 20)
    assert settings.idle_timeout == 1800
    assert settings.silent_timeout == 300
    assert (settings.frame_rate_limit, settings.frame_burst) == (600, 60)
    assert (settings.address_frame_rate_limit, settings.address_frame_burst) == (1200, 120)
    assert (settings.request_rate_limit, settings.request_burst) == (600, 60)
    assert settings.allowed_hosts == settings.trusted_proxies == ()

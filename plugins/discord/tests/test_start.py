"""Starting and stopping: clear early errors (4014, wrong token, no READY) and secrets never shown."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from backchannel.errors import ConfigError, RateLimited, Rejected
from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_discord import DiscordAdapter, DiscordStartError
from backchannel_discord.testing import FakeDiscord

from .conftest import FAST


def files_under(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in root.rglob("*") if path.is_file())


async def test_message_content_intent_not_granted_fails_start_saying_what_to_enable(
    contract_context: ContractContext,
) -> None:
    async with FakeDiscord(granted_intents=0) as fake:
        adapter = DiscordAdapter("test", {**fake.settings, **FAST})
        with pytest.raises(DiscordStartError) as caught:
            await adapter.start(contract_context.bind(adapter))
        message = str(caught.value)
        assert "4014" in message
        assert "Bot -> Privileged Gateway Intents -> MESSAGE CONTENT INTENT" in message
        assert fake.close_codes == [4014]
        assert fake.token not in message
        await adapter.stop()


async def test_wrong_token_fails_start_without_showing_the_token(
    fake: FakeDiscord, contract_context: ContractContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "MTE5wrong-token.Gx1yZa.secretsecretsecret"
    adapter = DiscordAdapter("test", {**fake.settings, **FAST, "token": wrong})
    with pytest.raises(DiscordStartError, match="401 Unauthorized") as caught:
        await adapter.start(contract_context.bind(adapter))
    assert wrong not in str(caught.value)
    assert wrong not in caplog.text
    assert wrong not in repr(adapter)


async def test_gateway_4004_fails_start_as_a_bad_token(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    fake.gateway_token = "rotated-after-login"
    adapter = DiscordAdapter("test", {**fake.settings, **FAST})
    with pytest.raises(DiscordStartError, match="4004") as caught:
        await adapter.start(contract_context.bind(adapter))
    assert fake.token not in str(caught.value)
    assert fake.close_codes == [4004]


async def test_no_ready_within_the_timeout_is_a_clear_error(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    fake.answer_identify = False
    adapter = DiscordAdapter("test", {**fake.settings, **FAST, "ready_timeout": 0.5})
    with pytest.raises(DiscordStartError, match=r"not ready within 0\.5s"):
        await adapter.start(contract_context.bind(adapter))


async def test_unreachable_gateway_is_a_clear_error(
    fake: FakeDiscord, contract_context: ContractContext
) -> None:
    settings = {**fake.settings, **FAST, "ready_timeout": 10.0}
    settings["gateway_url"] = settings["gateway_url"].replace("/gateway", "/nowhere")
    adapter = DiscordAdapter("test", settings)
    # discord.py backs off (0-2 s, at random) before it gives up on a first connection
    with pytest.raises(DiscordStartError, match=r"could not reach Discord .*404"):
        await adapter.start(contract_context.bind(adapter))


def test_missing_token_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"accounts\.main\.token"):
        DiscordAdapter("main", {"token": "  "})
    # a token that is no string is said to be one, not "missing", and never quoted
    with pytest.raises(ConfigError, match=r"token: expected the bot token as a string") as caught:
        DiscordAdapter("main", {"token": 1234567890})
    assert "1234567890" not in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("request_timeout", "soon", "accounts.main.request_timeout: expected a positive number"),
        ("catch_up_limit", -1, "accounts.main.catch_up_limit: expected a positive number"),
        ("catch_up", "yes", "accounts.main.catch_up: expected true or false"),
        ("allowed_mentions", "users", "accounts.main.allowed_mentions: expected a list"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_key(key: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        DiscordAdapter("main", {"token": "x", key: value})
    assert says in str(caught.value)


def test_unknown_allowed_mentions_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="allowed_mentions"):
        DiscordAdapter("main", {"token": "x", "allowed_mentions": ["users", "here"]})


async def test_stop_before_start_and_twice_is_harmless() -> None:
    adapter = DiscordAdapter("test", {"token": "x"})
    await adapter.stop()
    await adapter.stop()
    with pytest.raises(RateLimited, match="not connected"):
        await adapter.send(Outbound(Address("test", "1"), "hi"))


async def test_token_appears_in_no_log_error_repr_or_store(
    fake: FakeDiscord,
    contract_context: ContractContext,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)  # discord.py's own debug logs included
    adapter = DiscordAdapter("test", {**fake.settings, **FAST})
    await adapter.start(contract_context.bind(adapter))
    errors: list[str] = []
    try:
        message = await fake.post_message(fake.general, fake.alice, "hello")
        await contract_context.wait_ingested(message["id"])
        await adapter.send(Outbound(Address("test", fake.general), "hi"))
        for fault in ("forbidden", "unavailable", "reset", "bad_request"):
            fake.fail_next(fault)
            try:
                await adapter.send(Outbound(Address("test", fake.general), "x"))
            except Exception as error:
                errors.append(f"{error!r} {error}")
        with pytest.raises(Rejected):
            await adapter.send(Outbound(Address("test", "not-a-snowflake"), "x"))
        await fake.disconnect()
        await fake.wait_until(lambda: fake.resumes == 1, what="a RESUME")
    finally:
        await adapter.stop()
    assert len(errors) == 4
    assert fake.token not in caplog.text
    assert all(fake.token not in text for text in errors)
    assert fake.token not in repr(adapter)
    assert fake.token not in repr(adapter.settings)
    assert fake.token.encode() not in files_under(tmp_path)  # the store and its WAL


async def test_without_the_message_content_intent_only_mentions_carry_text(
    contract_context: ContractContext,
) -> None:
    async with FakeDiscord(granted_intents=0) as fake:
        settings = {**fake.settings, **FAST, "message_content_intent": False}
        adapter = DiscordAdapter("test", settings)
        await adapter.start(contract_context.bind(adapter))
        try:
            plain = await fake.post_message(fake.general, fake.alice, "not for the bot")
            mention = await fake.post_message(fake.general, fake.alice, f"<@{fake.bot_id}> hi")
            await contract_context.wait_ingested(mention["id"])
        finally:
            await adapter.stop()
        texts = {e.event_id: e.text for e in contract_context.events}
        assert texts == {plain["id"]: "", mention["id"]: f"@backchannel-bot (<@{fake.bot_id}>) hi"}


class LineSeen(logging.Handler):
    """Sets `seen` when a record containing `words` is logged."""

    def __init__(self, words: str):
        super().__init__()
        self.words = words
        self.seen = asyncio.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if self.words in line:
            self.lines.append(line)
            self.seen.set()


async def test_fatal_close_after_start_is_logged_for_people(
    fake: FakeDiscord,
    adapter: DiscordAdapter,
    contract_context: ContractContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    watcher = LineSeen("stopped listening")
    contract_context.log.logger.addHandler(watcher)
    try:
        await fake.disconnect(code=4004)  # e.g. the token was reset in the portal
        await asyncio.wait_for(watcher.seen.wait(), 10)
    finally:
        contract_context.log.logger.removeHandler(watcher)
    assert "4004" in watcher.lines[0]
    assert fake.token not in caplog.text


async def test_discord_py_failing_after_start_is_logged_for_people(
    fake: FakeDiscord, adapter: DiscordAdapter, contract_context: ContractContext
) -> None:
    # a READY without session_id makes discord.py's gateway loop raise KeyError, which
    # ends Client.connect: nobody awaits the client, so say it in the log (the supervisor
    # then restarts receiving: see test_supervisor)
    watcher = LineSeen("stopped listening")
    contract_context.log.logger.addHandler(watcher)
    try:
        await fake.dispatch("READY", {})
        await asyncio.wait_for(watcher.seen.wait(), 10)
    finally:
        contract_context.log.logger.removeHandler(watcher)
    assert "KeyError" in watcher.lines[0] and "\n" not in watcher.lines[0]
    assert fake.token not in watcher.lines[0]


@pytest.mark.parametrize(
    ("code", "says"),
    [(4010, "invalid shard"), (4011, "sharding required"), (4013, "invalid intents")],
)
def test_fatal_close_codes_say_what_they_mean(code: int, says: str) -> None:
    from backchannel_discord.failures import explain_connection_failure
    from discord import ConnectionClosed

    class Socket:
        close_code = code

    explained = explain_connection_failure(ConnectionClosed(Socket(), shard_id=None), "ops")  # type: ignore[arg-type]
    assert explained is not None and f"code {code} ({says}" in str(explained)

"""A bare /command in a group wakes only the bot whose command it is (issue 14, item 7)."""

from __future__ import annotations

from backchannel.testing import ContractContext
from backchannel_telegram import TelegramAdapter
from backchannel_telegram.testing import FakeTelegram, event_id_of


async def said_in_a_group(
    fake: FakeTelegram, contract_context: ContractContext, texts: tuple[str, ...]
) -> dict[str, bool]:
    """Each of `texts` said by Alice in a group, and whether it was taken as a mention."""
    alice = fake.user("Alice")
    group = fake.group("Ops")
    said = {text: fake.inject_message(group, alice, text) for text in texts}
    for update in said.values():
        await contract_context.wait_ingested(event_id_of(update))
    return {
        text: next(e.mentions_me for e in contract_context.events if e.event_id == event_id_of(u))
        for text, u in said.items()
    }


async def test_bare_commands_in_a_group_count_only_when_they_are_the_bots_own(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    fake.commands = [{"command": "report", "description": "the weekly report"}]
    adapter = TelegramAdapter("test", fake.settings(commands=["deploy"]))
    await adapter.start(contract_context.bind(adapter))
    try:
        texts = ("/report", "/deploy now", "/start", "/start@backchannel_test_bot")
        mentioned = await said_in_a_group(fake, contract_context, texts)
        assert mentioned == {
            "/report": True,  # from getMyCommands
            "/deploy now": True,  # from `commands`
            "/start": False,  # another bot's, as far as we know
            "/start@backchannel_test_bot": True,  # named: always ours
        }
        alice = fake.user("Alice")
        direct = fake.inject_message(fake.private_chat(alice), alice, "/start")
        await contract_context.wait_ingested(event_id_of(direct))
        assert contract_context.events[-1].mentions_me
    finally:
        await adapter.stop()


async def test_commands_set_for_groups_only_count_as_the_bots_own(
    fake: FakeTelegram, contract_context: ContractContext
) -> None:
    """A menu set with setMyCommands for a scope (all_group_chats, admins) is not in the
    default one: a bare /command from it, as a group's only bot's members send it, is ours."""
    fake.commands = [{"command": "help", "description": "help"}]
    fake.scoped_commands = {
        "all_group_chats": [{"command": "standup", "description": "the daily standup"}],
        "all_chat_administrators": [{"command": "purge", "description": "clean up"}],
    }
    adapter = TelegramAdapter("test", fake.settings())
    await adapter.start(contract_context.bind(adapter))
    try:
        mentioned = await said_in_a_group(
            fake, contract_context, ("/standup", "/purge", "/help", "/other")
        )
        assert mentioned == {"/standup": True, "/purge": True, "/help": True, "/other": False}
    finally:
        await adapter.stop()

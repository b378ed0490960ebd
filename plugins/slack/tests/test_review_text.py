"""Text both ways: people mentioned by id are named for the agent; what the agent
writes is escaped the way Slack's mrkdwn wants (found in review)."""

from __future__ import annotations

from typing import Any

from backchannel.model import Address, Outbound
from backchannel_slack.adapter import slack_escape
from backchannel_slack.testing import FakeSlack

GENERAL = Address("test", "C0GENERAL")


async def test_a_mention_of_someone_who_never_spoke_is_named_for_the_agent(
    slack: FakeSlack, contract_context: Any, start_adapter: Any
) -> None:
    """Slack writes a person's mention as ``<@U…>``, no name (a real capture's text:
    ``"<#C06NRA6JLER|zulip-mirror> ... "``, users unlabelled): the agent saw only an id."""
    await start_adapter("socket")
    bot = slack.bot_user_id
    said = slack.message(
        "C0GENERAL", "U0ALICE", f"<@{bot}> ask <@U0BOB> and <@U0ALICE>, not <@U0BOB|bobby>"
    )
    delivery = await slack.deliver(said)
    await slack.wait_acked(delivery.event_id)
    (result,) = contract_context.results
    assert result.event.text == (
        f"<@{bot}> ask <@U0BOB|Bob Builder> and <@U0ALICE|Alice>, not <@U0BOB|bobby>"
    )
    assert result.event.mentions_me and result.event.sender.name == "Alice"


async def test_a_mention_named_by_no_lookup_stays_an_id(
    slack: FakeSlack, contract_context: Any, start_adapter: Any
) -> None:
    await start_adapter("socket")
    slack.fail_next("users.info", "error", error="user_not_found", times=5)
    said = slack.message("C0GENERAL", "U0ALICE", "ask <@U0NOBODY>")
    delivery = await slack.deliver(said)
    await slack.wait_acked(delivery.event_id)
    (result,) = contract_context.results
    assert result.event.text == "ask <@U0NOBODY>"


async def test_at_most_eight_people_a_message_mentions_are_looked_up(
    slack: FakeSlack, contract_context: Any, start_adapter: Any
) -> None:
    """Naming mentions costs a lookup each: at most MENTIONS_NAMED (8) a message, besides
    its sender, whoever the sender is."""
    from backchannel_slack.adapter import MENTIONS_NAMED

    await start_adapter("socket")
    text = " ".join(f"<@U0P{n:03d}>" for n in range(12))
    said = slack.message("C0GENERAL", "U0ALICE", text)
    delivery = await slack.deliver(said)
    await slack.wait_acked(delivery.event_id)
    looked_up = {call["user"] for call in slack.calls_of("users.info")}
    assert looked_up == {"U0ALICE"} | {f"U0P{n:03d}" for n in range(MENTIONS_NAMED)}
    # an integration's post (its sender no user to look up): eight, not nine
    posted = slack.bot_message("C0GENERAL", " ".join(f"<@U0Q{n:03d}>" for n in range(12)))
    delivery = await slack.deliver(posted)
    await slack.wait_acked(delivery.event_id)
    looked_up = {c["user"] for c in slack.calls_of("users.info") if c["user"].startswith("U0Q")}
    assert looked_up == {f"U0Q{n:03d}" for n in range(MENTIONS_NAMED)}


async def test_what_the_agent_writes_is_escaped_but_its_mentions_and_links_are_kept(
    slack: FakeSlack, start_adapter: Any
) -> None:
    """Slack parses ``<`` … ``>`` as a control sequence: unescaped, ``Vec<String>``
    or ``a < b && c > d`` lose words or turn into links on Slack."""
    adapter = await start_adapter("socket")
    text = (
        "if a < b && c > d: use `Vec<String>`, ask <@U0ALICE> or <!here>, see <https://x.io|docs>"
    )
    sent = await adapter.send(Outbound(GENERAL, text))
    assert slack.posts[-1]["text"] == (
        "if a &lt; b &amp;&amp; c &gt; d: use `Vec&lt;String&gt;`, ask <@U0ALICE> or <!here>,"
        " see <https://x.io|docs>"
    )
    await adapter.send(Outbound(GENERAL, "AT&T <b>", kind="edit", target=sent.platform_message_id))
    assert slack.updates[-1]["text"] == "AT&amp;T &lt;b&gt;"


def test_escaping_keeps_slacks_own_forms_and_entities() -> None:
    kept = (
        "<@U0ALICE|Alice> <#C0GENERAL|general> <!subteam^S0OPS|@ops> <!date^1700000000^{date}|x>"
        " <mailto:a@b.io|a@b.io> <tel:+15551234> &lt;already&gt; &amp; plain"
    )
    assert slack_escape(kept) == kept
    assert slack_escape("> quoted\n1 < 2") == "&gt; quoted\n1 &lt; 2"
    assert slack_escape("<https://x y> <@> <>") == "&lt;https://x y&gt; &lt;@&gt; &lt;&gt;"


async def test_a_handle_written_as_the_agent_is_shown_it_becomes_a_slack_mention(
    slack: FakeSlack, start_adapter: Any
) -> None:
    """The agent sees people as ``Alice (@U0ALICE)``; ``@U0ALICE`` sent as is shows on
    Slack as that text, mentioning no one."""
    adapter = await start_adapter("socket")
    await adapter.send(Outbound(GENERAL, "@U0ALICE, over to you (cc <@U0BOB>, a@U0ALICE.io)"))
    assert slack.posts[-1]["text"] == "<@U0ALICE>, over to you (cc <@U0BOB>, a@U0ALICE.io)"


async def test_a_person_posting_through_an_app_is_a_person_and_an_app_user_a_bot(
    slack: FakeSlack, contract_context: Any, start_adapter: Any
) -> None:
    """Slack adds the posting app's ``bot_id``, ``app_id`` and ``bot_profile`` to a message
    a person posts with their own token through an app (IRCCloud, a script): the author's
    account, which ``users.info`` says, decides. An app's own bot user stays a bot, and so
    does anything ``users.info`` could not be asked about (bot_turns counts bots)."""
    await start_adapter("socket")
    slack.add_user("U0IRC", "ira", real_name="Ira Client")
    slack.add_user("U0APPBOT", "deploy", is_bot=True)
    app = {"bot_id": "B0IRCCLOUD", "app_id": "A0IRC", "bot_profile": {"name": "IRCCloud"}}
    senders = []
    for user in ("U0IRC", "U0APPBOT", "U0GONE"):
        said = slack.message("C0GENERAL", user, f"hello from {user}")
        said["event"].update(app)
        delivery = await slack.deliver(said)
        await slack.wait_acked(delivery.event_id)
        sender = contract_context.results[-1].event.sender
        senders.append((sender.id, sender.name, sender.is_bot))
    assert senders == [
        ("U0IRC", "ira", False),
        ("U0APPBOT", "deploy", True),
        ("U0GONE", "IRCCloud", True),  # users.info has no such user: the bot_id says
    ]


def test_an_old_bot_message_naming_a_user_is_a_bot() -> None:
    """hubot-slack#589: ``bot_message`` events that carry a ``user`` and no ``bot_id``."""
    from backchannel_slack.normalize import BotIdentity, normalize_payload

    event = {
        "type": "message",
        "subtype": "bot_message",
        "user": "U0HUBOT",
        "text": "deployed",
        "ts": "1700000000.000100",
        "channel": "C0GENERAL",
        "channel_type": "channel",
    }
    normalized = normalize_payload(event, account="work", me=BotIdentity("U0ME", "B0ME"))
    assert normalized is not None
    sender = normalized.sender
    assert (sender.id, sender.is_bot) == ("U0HUBOT", True)

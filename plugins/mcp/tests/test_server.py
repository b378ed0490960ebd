"""The MCP server with the SDK's own client, in process: tools, reading, sending, resources."""

from __future__ import annotations

from backchannel.model import Address
from backchannel_mcp.server import BackchannelMcp, resource_uri
from backchannel_mcp.tools import ToolBox

from .conftest import World, connected, open_store, text_of


async def test_lists_the_tools_and_reads_a_conversation_seeded_in_the_store(world: World) -> None:
    await world.seed()
    config = world.config()
    store = open_store(config)
    try:
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            tools = await client.list_tools()
            names = [tool.name for tool in tools.tools]
            assert names == [
                "list_conversations",
                "read_conversation",
                "send_message",
                "reply",
                "react",
            ]
            schema = next(t for t in tools.tools if t.name == "reply").input_schema
            assert schema["required"] == ["conversation", "message", "text"]

            listed = text_of(await client.call_tool("list_conversations", {}))
            assert world.group_key in listed and '"Ops"' in listed and "Alice" in listed
            read = await client.call_tool("read_conversation", {"conversation": world.group_key})
            assert not read.is_error
            body = text_of(read)
            assert "[#1] Alice: the invoice is due Friday" in body
            assert "[#2] Alice: I sent it to billing" in body
            assert body.splitlines()[1].startswith("Untrusted content:")  # framed as runs frame it
            found = text_of(await client.call_tool("list_conversations", {"query": "billing"}))
            assert world.group_key in found
            none = text_of(await client.call_tool("list_conversations", {"query": "zebra"}))
            assert world.group_key not in none
    finally:
        await store.close()


async def test_send_message_goes_out_once_and_is_stored_once_as_outbound(world: World) -> None:
    await world.seed()
    config = world.config()
    store = open_store(config)
    try:
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            result = await client.call_tool(
                "send_message", {"conversation": world.group_key, "text": "paid, thanks"}
            )
            assert not result.is_error, text_of(result)
            assert text_of(result) == f"sent to {world.group_key} as #3"
            replied = await client.call_tool(
                "reply", {"conversation": world.group_key, "message": 1, "text": "noted"}
            )
            assert text_of(replied) == f"sent to {world.group_key} as #4"
        assert [m.text for m in world.fake.sent] == ["paid, thanks", "noted"]
        assert world.fake.sent[1].reply_to == 1
        conversation = await store.find_conversation(Address("tg", str(world.group["id"])))
        assert conversation is not None
        rows = await store.window(conversation.id, 10)
        outbound = [(m.seq, m.text, m.status) for m in rows if m.direction == "out"]
        assert outbound == [(3, "paid, thanks", "sent"), (4, "noted", "sent")]
        assert len(await store.outbox(conversation_id=conversation.id)) == 2
    finally:
        await store.close()


async def test_bad_input_is_one_clear_tool_error_and_the_server_keeps_serving(world: World) -> None:
    await world.seed()
    config = world.config()
    store = open_store(config)
    try:
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            unknown = await client.call_tool(
                "send_message", {"conversation": "tg/999", "text": "hi"}
            )
            assert unknown.is_error
            assert text_of(unknown).startswith("refused: there is no conversation 'tg/999'")
            missing = await client.call_tool(
                "reply", {"conversation": world.group_key, "message": 42, "text": "x"}
            )
            assert missing.is_error and "no message #42" in text_of(missing)
            wrong = await client.call_tool(
                "read_conversation", {"conversation": world.group_key, "limit": "many"}
            )
            assert wrong.is_error and "limit must be an integer" in text_of(wrong)
            nothing = await client.call_tool("no_such_tool", {})
            assert nothing.is_error and "there is no tool 'no_such_tool'" in text_of(nothing)
            still = await client.call_tool("read_conversation", {"conversation": world.group_key})
            assert not still.is_error
        assert world.fake.sent == []
    finally:
        await store.close()


async def test_each_conversation_is_a_resource_with_its_flattened_transcript(world: World) -> None:
    await world.seed()
    config = world.config()
    store = open_store(config)
    try:
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            resources = await client.list_resources()
            uris = [str(r.uri) for r in resources.resources]
            assert resource_uri(world.group_key) in uris
            read = await client.read_resource(resource_uri(world.group_key))
            text = read.contents[0].text  # type: ignore[union-attr]
            assert "[#2] Alice: I sent it to billing" in text
            templates = await client.list_resource_templates()
            assert (
                templates.resource_templates[0].uri_template == "backchannel://conversation/{key}"
            )
    finally:
        await store.close()


async def test_an_uncertain_send_is_reported_as_such_and_not_retried(world: World) -> None:
    await world.seed()
    config = world.config()
    store = open_store(config)
    world.fake.fail_next("sendMessage", "500")
    world.fake.fail_next("setMessageReaction", "forbidden")
    try:
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            sent = await client.call_tool(
                "send_message", {"conversation": world.group_key, "text": "did it arrive?"}
            )
            result = text_of(sent)
            assert result.startswith(f"delivery to {world.group_key} uncertain")
            assert "read the conversation before trying again" in result
            assert not sent.is_error  # it may have arrived
            react = await client.call_tool(
                "react", {"conversation": world.group_key, "message": 1, "emoji": "👍"}
            )
            reacted = text_of(react)
            assert reacted.startswith(f"reaction to {world.group_key} NOT delivered")
            assert react.is_error  # it did not: the client is told it failed
        assert len(world.fake.calls_to("sendMessage")) == 1  # never retried
        conversation = await store.find_conversation(Address("tg", str(world.group["id"])))
        assert conversation is not None
        statuses = [
            m.status for m in await store.window(conversation.id, 10) if m.direction == "out"
        ]
        assert statuses == ["uncertain"]
    finally:
        await store.close()


async def test_the_kill_switch_and_the_messaging_control_refuse_sends_but_not_reads(
    world: World,
) -> None:
    from attrs import evolve
    from backchannel.config import OrchestrationConfig
    from backchannel.orchestration import set_messaging

    await world.seed()
    config = world.config()
    store = open_store(config)
    try:
        await set_messaging(store, False)
        async with connected(BackchannelMcp(ToolBox(config, store))) as client:
            off = await client.call_tool(
                "send_message", {"conversation": world.group_key, "text": "hello?"}
            )
            assert off.is_error and "`backchannel messaging off`" in text_of(off)
            reacted = await client.call_tool(
                "react", {"conversation": world.group_key, "message": 1, "emoji": "👍"}
            )
            assert reacted.is_error and text_of(reacted).startswith("refused:")
            read = await client.call_tool("read_conversation", {"conversation": world.group_key})
            assert not read.is_error
        await set_messaging(store, True)
        disabled = evolve(config, orchestration=OrchestrationConfig(enabled=False))
        async with connected(BackchannelMcp(ToolBox(disabled, store))) as client:
            killed = await client.call_tool(
                "reply", {"conversation": world.group_key, "message": 1, "text": "x"}
            )
            assert killed.is_error and "[orchestration] enabled = false" in text_of(killed)
        assert world.fake.sent == [] and world.fake.reactions == []
        conversation = await store.find_conversation(Address("tg", str(world.group["id"])))
        assert conversation is not None
        assert await store.outbox(conversation_id=conversation.id) == []
    finally:
        await store.close()

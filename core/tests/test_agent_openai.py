"""The `openai` built-in agent against the loopback FakeOpenAI server."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from backchannel.agents.openai import ModelError, OpenAIAgent, make_openai_agent
from backchannel.errors import ConfigError
from backchannel.policy import Policy
from backchannel.switchboard import Binding, Switchboard
from backchannel.testing import FakeChannel
from backchannel.testing.fake_openai import FakeOpenAI

KEY = "sk-test-5f1e0c9a7b2d4e6f8a0b"
ALWAYS = Policy(respond="always")

SEND_SCHEMA = {
    "type": "function",
    "function": {
        "name": "send_message",
        "description": "Send a message to the conversation.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}
REPLY_SCHEMA = {
    "type": "function",
    "function": {
        "name": "reply",
        "description": "Reply to one message.",
        "parameters": {
            "type": "object",
            "properties": {"message_id": {"type": "integer"}, "text": {"type": "string"}},
            "required": ["message_id", "text"],
        },
    },
}


class StandInRun:
    """A Run-shaped object: fixed export, records tool calls, scripted mid-run inbound."""

    def __init__(self, steering: list[list[dict[str, str]]] | None = None):
        self.calls: list[tuple[str, Any]] = []
        self.steering = list(steering or [])
        self.new_messages_calls = 0

    def to_openai(self) -> dict[str, Any]:
        return {
            "messages": [
                {"role": "system", "content": "This is a test chat. Use the tools to answer."},
                {"role": "user", "content": "[#1] Ada: hello?"},
            ],
            "tools": [SEND_SCHEMA, REPLY_SCHEMA],
        }

    async def call(self, name: str, arguments: Any) -> str:
        self.calls.append((name, arguments))
        return f"sent #{len(self.calls) + 1}"

    async def new_messages(self) -> list[dict[str, str]]:
        self.new_messages_calls += 1
        return self.steering.pop(0) if self.steering else []


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def agent_for(fake: FakeOpenAI, **settings: Any) -> OpenAIAgent:
    settings.setdefault("retry_backoff", 0.01)
    return OpenAIAgent(base_url=fake.base_url, api_key=KEY, model="test-model", **settings)


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


async def test_tool_calls_run_over_several_steps_until_the_model_stops(fake: FakeOpenAI):
    fake.call_tool("reply", {"message_id": 1, "text": "hi Ada"})
    fake.call_tools(("send_message", {"text": "one"}), ("send_message", {"text": "two"}))
    fake.answer("all done")
    run = StandInRun()

    await agent_for(fake, temperature=0.2)(run)

    assert run.calls == [
        ("reply", {"message_id": 1, "text": "hi Ada"}),
        ("send_message", {"text": "one"}),
        ("send_message", {"text": "two"}),
    ]
    first, second, third = fake.bodies
    assert first["model"] == "test-model"
    assert first["temperature"] == 0.2
    assert first["tools"] == [SEND_SCHEMA, REPLY_SCHEMA]
    assert first["messages"] == run.to_openai()["messages"]
    # each tool result goes back with the id of the call it answers
    assistant = second["messages"][2]
    assert assistant["role"] == "assistant"
    call_id = assistant["tool_calls"][0]["id"]
    assert tool_messages(second) == [
        {"role": "tool", "tool_call_id": call_id, "content": "sent #2"}
    ]
    ids = [c["id"] for c in third["messages"][4]["tool_calls"]]
    assert [m["tool_call_id"] for m in tool_messages(third)[1:]] == ids
    assert [m["content"] for m in tool_messages(third)] == ["sent #2", "sent #3", "sent #4"]
    assert fake.pending == 0


async def test_loop_stops_at_max_steps_and_leaves_later_inbound_unread(fake: FakeOpenAI):
    for n in range(5):
        fake.call_tool("send_message", {"text": f"again {n}"})
    run = StandInRun()

    await agent_for(fake, max_steps=3)(run)

    assert len(fake.bodies) == 3
    assert [args["text"] for _, args in run.calls] == ["again 0", "again 1", "again 2"]
    # new_messages is only taken when the model will see it: not after the last step
    assert run.new_messages_calls == 2
    assert fake.pending == 2


async def test_mid_run_inbound_is_injected_before_the_next_step(fake: FakeOpenAI):
    fake.call_tool("reply", {"message_id": 1, "text": "looking"})
    fake.call_tool("send_message", {"text": "ok, Bob"})
    fake.answer("done")
    steer = {"role": "user", "content": "[#3] Bob: actually, stop"}
    run = StandInRun(steering=[[steer]])

    await agent_for(fake)(run)

    second = fake.bodies[1]
    assert second["messages"][-1] == steer
    assert second["messages"][-2]["role"] == "tool"
    assert steer in fake.bodies[2]["messages"]


async def test_inbound_arriving_after_a_final_answer_gets_another_step(fake: FakeOpenAI):
    fake.answer("nothing to do")
    fake.call_tool("send_message", {"text": "hello Bob"})
    fake.answer("done")
    steer = {"role": "user", "content": "[#2] Bob: are you there?"}
    run = StandInRun(steering=[[steer]])

    await agent_for(fake)(run)

    assert run.calls == [("send_message", {"text": "hello Bob"})]
    assert fake.bodies[1]["messages"][-2:] == [
        {"role": "assistant", "content": "nothing to do"},
        steer,
    ]


async def test_plain_text_is_not_sent_and_is_logged_at_debug(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
):
    fake.answer("I would say hello, but text is not a tool call")
    run = StandInRun()
    with caplog.at_level(logging.DEBUG, logger="backchannel.agents.openai"):
        await agent_for(fake)(run)

    assert run.calls == []
    assert any("text is not a tool call" in r.getMessage() for r in caplog.records)
    assert all(r.levelno == logging.DEBUG for r in caplog.records)


async def test_rate_limit_is_retried_after_the_servers_retry_after(fake: FakeOpenAI):
    fake.fail(429, "Rate limit reached for test-model", retry_after=0.3)
    fake.answer("done")
    agent = agent_for(fake, retry_backoff=0.0)
    loop = asyncio.get_running_loop()

    started = loop.time()
    await agent(StandInRun())
    waited = loop.time() - started

    assert len(fake.bodies) == 2
    assert fake.bodies[0] == fake.bodies[1]
    assert waited >= 0.3


async def test_retry_after_ms_header_is_preferred_to_retry_after(fake: FakeOpenAI):
    from aiohttp import web

    def limited(body: dict[str, Any]) -> web.Response:
        error = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
        headers = {"retry-after-ms": "150", "Retry-After": "100"}
        return web.json_response(error, status=429, headers=headers)

    fake.respond(limited)
    fake.answer("done")

    # waiting 100s would exceed max_retry_delay and raise; 150ms is within it
    await agent_for(fake, max_retry_delay=5)(StandInRun())

    assert len(fake.bodies) == 2


async def test_retry_after_as_an_http_date_is_honoured(fake: FakeOpenAI):
    from email.utils import formatdate

    fake.fail(503, "Service Unavailable", retry_after=formatdate(time.time() + 120, usegmt=True))

    with pytest.raises(ModelError, match=r"asks to wait 1[01]\d(\.\d+)?s") as caught:
        await agent_for(fake, max_retry_delay=30)(StandInRun())

    assert caught.value.status == 503


async def test_extra_body_and_headers_reach_the_server(fake: FakeOpenAI):
    fake.answer("done")
    agent = agent_for(
        fake, headers={"OpenAI-Organization": "org-test"}, extra_body={"max_tokens": 64}
    )

    await agent(StandInRun())

    assert fake.bodies[0]["max_tokens"] == 64
    assert "temperature" not in fake.bodies[0]
    assert fake.requests[0].headers["OpenAI-Organization"] == "org-test"
    assert fake.requests[0].authorized


async def test_retry_after_longer_than_the_cap_is_a_clear_error(fake: FakeOpenAI):
    fake.fail(429, "Rate limit reached", retry_after=120)

    with pytest.raises(ModelError) as caught:
        await agent_for(fake, max_retry_delay=30)(StandInRun())

    assert "asks to wait 120s" in str(caught.value)
    assert caught.value.status == 429
    assert len(fake.bodies) == 1


async def test_server_errors_are_retried_then_reported_in_one_line(fake: FakeOpenAI):
    for _ in range(3):
        fake.fail(500, "The server had an error while processing your request.")

    with pytest.raises(ModelError) as caught:
        await agent_for(fake, max_retries=2)(StandInRun())

    message = str(caught.value)
    assert len(fake.bodies) == 3
    assert "\n" not in message
    assert f"127.0.0.1:{fake.base_url.split(':')[2].split('/')[0]}" in message
    assert "after 3 tries" in message
    assert "HTTP 500" in message
    assert "The server had an error" in message
    assert caught.value.status == 500


async def test_server_error_then_success_completes_the_run(fake: FakeOpenAI):
    fake.fail(503, "overloaded")
    fake.call_tool("send_message", {"text": "made it"})
    fake.answer("done")
    run = StandInRun()

    await agent_for(fake)(run)

    assert run.calls == [("send_message", {"text": "made it"})]


async def test_bad_request_is_not_retried_and_names_the_problem(fake: FakeOpenAI):
    fake.fail(400, "Invalid value for 'temperature': must be at most 2.")

    with pytest.raises(ModelError) as caught:
        await agent_for(fake)(StandInRun())

    assert len(fake.bodies) == 1
    assert "HTTP 400" in str(caught.value)
    assert "must be at most 2" in str(caught.value)
    assert "'test-model'" in str(caught.value)


async def test_wrong_key_is_a_clear_error_without_the_key(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
):
    wrong = "sk-wrong-9d8c7b6a5f4e3d2c1b0a"
    agent = OpenAIAgent(base_url=fake.base_url, api_key=wrong, model="test-model")

    with caplog.at_level(logging.DEBUG), pytest.raises(ModelError) as caught:
        await agent(StandInRun())

    assert caught.value.status == 401
    assert "HTTP 401" in str(caught.value)
    assert "Incorrect API key" in str(caught.value)
    assert "OPENAI_API_KEY" in str(caught.value)
    assert wrong not in str(caught.value)
    assert wrong not in repr(agent)
    assert wrong not in caplog.text
    assert fake.requests[0].authorized is False


async def test_api_key_never_appears_in_logs_errors_or_repr(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
):
    # a careless server (or proxy) that echoes the key it was given
    fake.fail(502, f"upstream refused key {KEY}")
    fake.fail(429, f"slow down, {KEY}", retry_after=0)
    fake.malformed(f"<html>proxy error for Bearer {KEY}</html>")
    agent = agent_for(fake, headers={"X-Proxy-Token": "proxy-secret-123"})

    with caplog.at_level(logging.DEBUG), pytest.raises(ModelError) as caught:
        await agent(StandInRun())

    assert fake.requests[0].headers["X-Proxy-Token"] == "proxy-secret-123"
    text = f"{caught.value!s} {caught.value!r} {agent!r} {caplog.text}"
    assert "upstream refused key ***" in caplog.text
    assert "***" in str(caught.value)
    assert KEY not in text
    assert "proxy-secret-123" not in text


async def test_malformed_json_body_is_a_clear_error(fake: FakeOpenAI):
    fake.malformed()

    with pytest.raises(ModelError) as caught:
        await agent_for(fake)(StandInRun())

    assert "malformed response (not JSON)" in str(caught.value)
    assert "chatcmpl-broken" in str(caught.value)


async def test_response_without_choices_is_a_clear_error(fake: FakeOpenAI):
    from aiohttp import web

    fake.respond(lambda body: web.json_response({"id": "chatcmpl-x", "object": "chat.completion"}))

    with pytest.raises(ModelError, match="malformed response: no choices"):
        await agent_for(fake)(StandInRun())


async def test_bad_tool_arguments_are_fed_back_so_the_model_can_correct(fake: FakeOpenAI):
    fake.call_tool("send_message", '{"text": "unterminated')
    fake.call_tool("send_message", '["not", "an", "object"]')
    fake.call_tool("send_message", {"text": "fixed"})
    fake.answer("done")
    run = StandInRun()

    await agent_for(fake)(run)

    assert run.calls == [("send_message", {"text": "fixed"})]
    first_error = tool_messages(fake.bodies[1])[0]["content"]
    assert first_error.startswith("error: the arguments of send_message are not valid JSON")
    second_error = tool_messages(fake.bodies[2])[1]["content"]
    assert "must be a JSON object, not list" in second_error


async def test_unknown_tool_gets_a_tool_message_naming_the_real_tools(fake: FakeOpenAI):
    fake.call_tool("delete_everything", {})
    fake.answer("sorry")
    run = StandInRun()

    await agent_for(fake)(run)

    assert run.calls == []
    result = tool_messages(fake.bodies[1])[0]["content"]
    assert result == (
        "error: there is no tool named 'delete_everything'; the tools are: send_message, reply"
    )


async def test_hung_request_times_out_and_is_retried_within_bounds(fake: FakeOpenAI):
    fake.hang()
    fake.hang()

    with pytest.raises(ModelError) as caught:
        await agent_for(fake, request_timeout=0.3, max_retries=1)(StandInRun())

    assert len(fake.bodies) == 2
    assert "no answer within request_timeout=0.3s" in str(caught.value)
    assert caught.value.status is None


async def test_hung_request_then_answer_completes_the_run(fake: FakeOpenAI):
    fake.hang()
    fake.call_tool("send_message", {"text": "late but fine"})
    fake.answer("done")
    run = StandInRun()

    # generous enough that the answered requests never time out on a loaded machine
    await agent_for(fake, request_timeout=1.0)(run)

    assert run.calls == [("send_message", {"text": "late but fine"})]
    assert len(fake.bodies) == 3


async def test_unreachable_server_is_reported_with_its_host():
    async with FakeOpenAI() as gone:
        url = gone.base_url
    agent = OpenAIAgent(base_url=url, api_key=KEY, model="m", max_retries=1, retry_backoff=0.01)

    with pytest.raises(ModelError, match=r"connection failed") as caught:
        await agent(StandInRun())

    assert "127.0.0.1" in str(caught.value)
    assert KEY not in str(caught.value)


async def test_dropped_connection_is_retried(fake: FakeOpenAI):
    fake.reset()
    fake.call_tool("send_message", {"text": "after the reset"})
    fake.answer("done")
    run = StandInRun()

    await agent_for(fake)(run)

    assert run.calls == [("send_message", {"text": "after the reset"})]
    assert len(fake.bodies) == 3


async def test_dropped_connections_give_up_with_a_clear_error(fake: FakeOpenAI):
    fake.reset()
    fake.reset()

    with pytest.raises(ModelError, match=r"failed after 2 tries: connection failed"):
        await agent_for(fake, max_retries=1)(StandInRun())


async def test_arguments_sent_as_an_object_and_missing_ids_are_mended(fake: FakeOpenAI):
    from aiohttp import web

    def ollama_style(body: dict[str, Any]) -> web.Response:
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "send_message", "arguments": {"text": "hey"}}}],
        }
        return web.json_response(
            {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
        )

    fake.respond(ollama_style)
    fake.answer("done")
    run = StandInRun()

    await agent_for(fake)(run)

    assert run.calls == [("send_message", {"text": "hey"})]
    echoed = fake.bodies[1]["messages"][2]["tool_calls"][0]
    assert json.loads(echoed["function"]["arguments"]) == {"text": "hey"}
    assert tool_messages(fake.bodies[1])[0]["tool_call_id"] == echoed["id"]


async def test_fake_refuses_tool_messages_that_answer_no_call(fake: FakeOpenAI):
    import aiohttp

    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_nope", "content": "x"},
        ],
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            fake.base_url + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {KEY}"},
        ) as response,
    ):
        payload = await response.json()

    assert response.status == 400
    assert "must be a response to a preceeding message" in payload["error"]["message"]


async def test_empty_script_is_a_loud_error(fake: FakeOpenAI):
    with pytest.raises(ModelError, match="no scripted response left for request #1"):
        await agent_for(fake)(StandInRun())


def test_factory_reads_settings_then_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-0000")
    monkeypatch.setenv("OPENAI_MODEL", "llama3.2")

    from_env = make_openai_agent({"kind": "openai"})
    configured = make_openai_agent(
        {"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "qwen", "max_steps": 3}
    )

    assert (from_env.base_url, from_env.api_key, from_env.model) == (
        "http://localhost:11434/v1",
        "sk-from-env-0000",
        "llama3.2",
    )
    assert from_env.host == "localhost:11434"
    assert (configured.base_url, configured.model, configured.max_steps) == (
        "http://127.0.0.1:8000/v1",
        "qwen",
        3,
    )
    assert configured.api_key == "sk-from-env-0000"


def test_factory_defaults_without_environment(monkeypatch: pytest.MonkeyPatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)

    agent = make_openai_agent({})

    assert agent.url == "https://api.openai.com/v1/chat/completions"
    assert agent.api_key is None
    assert agent.model == "gpt-4o-mini"
    assert agent.max_steps == 8


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"max_steps": 0}, "max_steps: expected a whole number of at least 1, got 0"),
        ({"temperature": "hot"}, "temperature: expected a number, got 'hot'"),
        ({"base_url": "localhost:11434"}, "base_url: expected an http(s) URL"),
        ({"modle": "x"}, "modle: unknown key; did you mean `model`? (known keys: api_key,"),
        ({"api_key": 12345678}, "api_key: expected a string, got int"),
    ],
)
def test_factory_rejects_bad_settings_with_one_clear_error(settings: dict[str, Any], expected: str):
    with pytest.raises(ConfigError) as caught:
        make_openai_agent(settings)

    assert str(caught.value).startswith(expected)
    assert "12345678" not in str(caught.value)


def test_credentials_in_the_base_url_stay_out_of_the_host():
    agent = OpenAIAgent(base_url="https://user:hunter22@proxy.example:8443/v1", api_key=None)

    assert agent.host == "proxy.example:8443"
    assert "hunter22" not in repr(agent)
    assert "https://proxy.example:8443/v1" in repr(agent)


# -- the real path: Switchboard + FakeChannel + a real Run -----------------------------------


async def test_inbound_message_gets_the_models_reply_on_the_channel(
    switchboard: Switchboard, fake_channel: FakeChannel, fake: FakeOpenAI
):
    fake.call_tool("reply", {"message_id": 1, "text": "Hello Alice!"})
    fake.answer("done")
    agent = agent_for(fake)
    switchboard.add_account(fake_channel.adapter("fake"), Binding(agent, ALWAYS))
    await switchboard.start()

    inbound = fake_channel.platform.user_says("hi")
    await fake.wait_requests(2)
    await switchboard.wait_idle()

    sent = fake_channel.platform.sent
    assert [(m.text, m.reply_to) for m in sent] == [("Hello Alice!", inbound["message_id"])]
    first, second = fake.bodies
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][-1] == {"role": "user", "content": "[#1] Alice: hi"}
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert {"send_message", "reply"} <= offered
    call_id = second["messages"][-2]["tool_calls"][0]["id"]
    result = second["messages"][-1]
    assert result["role"] == "tool"
    assert result["tool_call_id"] == call_id
    assert "error" not in result["content"].lower()
    assert switchboard.counters["run_errors"] == 0


async def test_message_arriving_mid_run_steers_the_same_run(
    switchboard: Switchboard, fake_channel: FakeChannel, fake: FakeOpenAI
):
    fake.call_tool("reply", {"message_id": 1, "text": "checking the staging server"})
    fake.call_tool("send_message", {"text": "switching to prod, Alice"})
    fake.answer("done")
    switchboard.add_account(fake_channel.adapter("fake"), Binding(agent_for(fake), ALWAYS))
    await switchboard.start()
    platform = fake_channel.platform

    fake.hold()
    platform.user_says("is the server up?")
    await fake.wait_requests(1)
    # ingested the way the adapter does it; returns once committed to the store
    stored = await switchboard.ingest("fake", platform.make_message("sorry, I meant prod"))
    assert stored.status == "stored"
    fake.release()
    await fake.wait_requests(3)
    await switchboard.wait_idle()

    second = fake.bodies[1]["messages"]
    assert second[-2]["role"] == "tool"
    assert second[-1]["role"] == "user"
    assert second[-1]["content"].endswith("Alice: sorry, I meant prod")
    assert platform.texts() == ["checking the staging server", "switching to prod, Alice"]
    # the correction was handled inside the first run: no second run, no unscripted request
    assert switchboard.counters["runs"] == 1
    assert fake.pending == 0
    assert len(fake.bodies) == 3


async def test_model_failure_fails_the_run_without_the_key_in_logs(
    switchboard: Switchboard,
    fake_channel: FakeChannel,
    fake: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
):
    fake.fail(401, f"Incorrect API key provided: {KEY}.", code="invalid_api_key")
    switchboard.add_account(fake_channel.adapter("fake"), Binding(agent_for(fake), ALWAYS))
    await switchboard.start()

    with caplog.at_level(logging.DEBUG):
        fake_channel.platform.user_says("hello?")
        await fake.wait_requests(1)
        await switchboard.wait_idle()

    assert switchboard.counters["run_errors"] == 1
    assert fake_channel.platform.sent == []
    assert "HTTP 401" in caplog.text
    assert KEY not in caplog.text

"""`FakeOpenAI`: a loopback OpenAI-compatible chat-completions server for tests.

It speaks the real wire format (``POST /v1/chat/completions`` with a bearer
key, ``chat.completion`` objects, OpenAI-shaped error bodies), answers from a
script, injects faults, and records every request so a test can assert what
the model was sent::

    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.call_tool("reply", {"message_id": 1, "text": "hello"})
        fake.answer("done")
        agent = OpenAIAgent(base_url=fake.base_url, api_key="sk-test", model="m")
        await agent(run)
        assert fake.bodies[1]["messages"][-1]["role"] == "tool"

Like the real server it refuses (400) a conversation whose tool messages do
not answer the preceding assistant message's tool calls, so an agent that
loses a ``tool_call_id`` fails loudly here too. A request that finds the
script empty gets a 400 that says so.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from attrs import define, field, frozen

from .loopback import serve_loopback

__all__ = ["FakeOpenAI", "RecordedRequest"]

#: a scripted step: given the request body, produce the HTTP response
Responder = Callable[[dict[str, Any]], "web.StreamResponse | Awaitable[web.StreamResponse]"]


@frozen
class RecordedRequest:
    """One request the fake received: the JSON body and the headers (Authorization left out)."""

    body: dict[str, Any]
    headers: Mapping[str, str]
    authorized: bool


@define
class FakeOpenAI:
    """A scriptable OpenAI-compatible server on 127.0.0.1 (ephemeral port).

    `api_key`: the bearer key requests must carry; None accepts any (or none).
    Script steps are consumed one per authorized, well-formed request, in order.
    """

    api_key: str | None = field(default="sk-fake-test-key", repr=False)
    #: the port to listen on (0: an ephemeral one)
    listen_port: int = 0
    #: answers every request once the script is used up (None: a 400 saying it is empty)
    fallback: Responder | None = None
    requests: list[RecordedRequest] = field(factory=list)
    _script: list[Responder] = field(factory=list)
    _runner: web.AppRunner | None = None
    _port: int = 0
    _released: asyncio.Event = field(factory=asyncio.Event)
    _gate: asyncio.Event = field(factory=asyncio.Event)
    _arrived: asyncio.Condition = field(factory=asyncio.Condition)
    _ids: itertools.count[int] = field(factory=lambda: itertools.count(1))

    def __attrs_post_init__(self) -> None:
        self._gate.set()

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> str:
        """Start serving; return the base URL to give an agent (``http://127.0.0.1:PORT/v1``)."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner, url = await serve_loopback(app, port=self.listen_port, shutdown_timeout=1.0)
        self._port = int(url.rsplit(":", 1)[1])
        return self.base_url

    async def stop(self) -> None:
        """Stop serving; hung requests are let go first. Idempotent."""
        self._released.set()
        self._gate.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> FakeOpenAI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """Return ``http://127.0.0.1:PORT/v1`` (valid after start)."""
        if not self._port:
            raise RuntimeError("FakeOpenAI is not started")
        return f"http://127.0.0.1:{self._port}/v1"

    # -- script ----------------------------------------------------------------

    def answer(self, text: str, *, finish_reason: str = "stop") -> FakeOpenAI:
        """Queue a plain assistant answer (no tool calls). Returns self for chaining."""
        return self.respond(lambda body: self._completion(body, text, None, finish_reason))

    def call_tool(self, name: str, arguments: Mapping[str, Any] | str) -> FakeOpenAI:
        """Queue a call of one tool; `arguments` is an object or a raw (maybe bad) JSON string."""
        return self.call_tools((name, arguments))

    def call_tools(
        self, *calls: tuple[str, Mapping[str, Any] | str], text: str | None = None
    ) -> FakeOpenAI:
        """Queue an answer calling several tools at once (parallel tool calls)."""

        def build(body: dict[str, Any]) -> web.Response:
            tool_calls = [self._tool_call(name, args) for name, args in calls]
            return self._completion(body, text, tool_calls, "tool_calls")

        return self.respond(build)

    def fail(
        self,
        status: int,
        message: str = "The server had an error while processing your request.",
        *,
        retry_after: float | str | None = None,
        error_type: str | None = None,
        code: str | None = None,
    ) -> FakeOpenAI:
        """Queue an OpenAI-shaped error (429 with `retry_after`, 500, 400, ...)."""
        kind = error_type or _ERROR_TYPES.get(status, "server_error" if status >= 500 else "")
        headers = {} if retry_after is None else {"Retry-After": _header_value(retry_after)}
        payload = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return self.respond(lambda body: web.json_response(payload, status=status, headers=headers))

    def malformed(self, raw: str = '{"id": "chatcmpl-broken", "choices": [', *, status: int = 200):
        """Queue a response whose body is not valid JSON (cut short by default)."""
        return self.respond(
            lambda body: web.Response(status=status, text=raw, content_type="application/json")
        )

    def hang(self) -> FakeOpenAI:
        """Queue a request that never gets an answer (until `stop`): the client must time out."""

        async def never(body: dict[str, Any]) -> web.StreamResponse:
            await self._released.wait()
            return web.Response(status=503)

        return self.respond(never)

    def reset(self) -> FakeOpenAI:
        """Queue a dropped connection: the request is read, then the socket closes unanswered."""

        async def drop(body: dict[str, Any]) -> web.StreamResponse:
            raise _Reset

        return self.respond(drop)

    def echo(self) -> FakeOpenAI:
        """Answer every unscripted request like a model that repeats what it was told.

        It calls `reply` (else `send_message`) with ``You said: <the last message>``,
        then, given that tool's result, ends the turn without calling another.
        """

        def build(body: dict[str, Any]) -> web.Response:
            messages = body.get("messages") or [{}]
            last = messages[-1] if isinstance(messages[-1], dict) else {}
            offered = {
                tool.get("function", {}).get("name")
                for tool in body.get("tools") or []
                if isinstance(tool, dict)
            }
            if last.get("role") != "user" or not offered & {"reply", "send_message"}:
                return self._completion(body, "", None, "stop")
            content = last.get("content")
            said = content if isinstance(content, str) else json.dumps(content)
            seq, _, rest = said.removeprefix("[#").partition("] ")
            words = rest.split(": ", 1)[-1] if rest else said
            if "reply" in offered and seq.isdigit():
                call = ("reply", {"message_id": int(seq), "text": f"You said: {words}"})
            else:
                call = ("send_message", {"text": f"You said: {words}"})
            return self._completion(body, None, [self._tool_call(*call)], "tool_calls")

        self.fallback = build
        return self

    def respond(self, responder: Responder) -> FakeOpenAI:
        """Queue a custom step: `responder(body)` returns (or awaits) an aiohttp response."""
        self._script.append(responder)
        return self

    @property
    def pending(self) -> int:
        """Return how many scripted steps are still unused."""
        return len(self._script)

    # -- observing -------------------------------------------------------------

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """Return the JSON bodies of the authorized requests, in arrival order."""
        return [request.body for request in self.requests if request.authorized]

    def hold(self) -> None:
        """Make following requests wait (recorded, unanswered) until `release()`."""
        self._gate.clear()

    def release(self) -> None:
        """Let held requests go on to their scripted answers."""
        self._gate.set()

    async def wait_requests(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Return the bodies once at least `count` authorized requests arrived (bounded wait)."""
        try:
            async with asyncio.timeout(timeout), self._arrived:
                await self._arrived.wait_for(lambda: len(self.bodies) >= count)
        except TimeoutError:
            raise AssertionError(
                f"FakeOpenAI: waited {timeout:g}s for {count} requests, got {len(self.bodies)}"
            ) from None
        return self.bodies

    # -- the server side -------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        authorized = self.api_key is None or (
            request.headers.get("Authorization") == f"Bearer {self.api_key}"
        )
        try:
            body = await request.json()
        except ValueError:
            body = None
        await self._record(
            RecordedRequest(body if isinstance(body, dict) else {}, headers, authorized)
        )
        if not authorized:
            return _error(
                401,
                "Incorrect API key provided. You can find your API key in your account settings.",
                "invalid_request_error",
                "invalid_api_key",
            )
        if not isinstance(body, dict):
            return _error(400, "We could not parse the JSON body of your request.", code=None)
        problem = _check_request(body)
        if problem:
            return _error(400, problem)
        await self._gate.wait()
        if not self._script and self.fallback is None:
            number = len(self.bodies)
            return _error(400, f"FakeOpenAI: no scripted response left for request #{number}")
        try:
            step = self._script.pop(0) if self._script else self.fallback
            assert step is not None
            result = step(body)
            if isinstance(result, Awaitable):
                result = await result
        except _Reset:
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=500)
        return result

    async def _record(self, recorded: RecordedRequest) -> None:
        async with self._arrived:
            self.requests.append(recorded)
            self._arrived.notify_all()

    def _tool_call(self, name: str, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
        return {
            "id": f"call_fake_{next(self._ids)}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            },
        }

    def _completion(
        self,
        body: dict[str, Any],
        text: str | None,
        tool_calls: list[dict[str, Any]] | None,
        finish_reason: str,
    ) -> web.Response:
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        prompt_tokens = len(json.dumps(body.get("messages", []))) // 4
        completion_tokens = len(json.dumps(message)) // 4
        return web.json_response(
            {
                "id": f"chatcmpl-fake{next(self._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "system_fingerprint": "fp_fake",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )


class _Reset(Exception):
    """Raised by a scripted step to drop the connection without an answer."""


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
}


def _error(
    status: int, message: str, error_type: str = "invalid_request_error", code: str | None = None
) -> web.Response:
    payload = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return web.json_response(payload, status=status)


def _header_value(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def _check_request(body: dict[str, Any]) -> str | None:
    """Return what the real API would refuse in this body (as its 400 message), or None."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    tools = body.get("tools", [])
    if not isinstance(tools, list) or any(
        not isinstance(tool, dict) or tool.get("type") != "function" for tool in tools
    ):
        return "'tools' must be an array of {'type': 'function', 'function': {...}} objects"
    owed: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in {"system", "developer", "user", "assistant", "tool"}:
            return f"Invalid value for 'messages[{index}].role': {role!r}"
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in owed:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceeding message with 'tool_calls' (messages[{index}], "
                    f"tool_call_id {call_id!r})."
                )
            owed.remove(call_id)
            if not isinstance(message.get("content"), str):
                return f"Invalid type for 'messages[{index}].content': expected a string"
            continue
        if owed:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(owed)}"
            )
        if role == "assistant":
            owed = [call.get("id") for call in message.get("tool_calls") or []]
    if owed:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            f"responding to each 'tool_call_id'. Missing: {', '.join(owed)}"
        )
    return None

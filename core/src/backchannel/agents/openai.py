"""`OpenAIAgent`: an agent that runs an OpenAI-compatible chat-completions tool loop.

Works with any server that speaks ``POST {base_url}/chat/completions`` with
function tools: OpenAI itself, Ollama, vLLM, llama.cpp's server, LM Studio.

One run goes like this::

    messages = run.to_openai()["messages"]        # framing (system) + transcript window
    repeat up to max_steps:
        answer = POST /chat/completions {model, messages, tools}
        no tool calls?  -> new inbound since the run began? append them, go on; else stop
        for each tool call: result = await run.call(name, arguments)
        append the assistant message and one `tool` message per call (same tool_call_id)
        append `await run.new_messages()` (inbound that arrived mid-run steers the model)

The model's plain text is never sent anywhere: outbound is always a tool call,
so its text is only logged at debug level.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from attrs import define, field

from ..errors import BackchannelError, ConfigError, combine, unknown_key
from ..secrets import register_secret

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "ModelError",
    "OpenAIAgent",
    "make_openai_agent",
]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"

#: statuses worth another try: timeout, conflict, rate limit, and every 5xx
RETRY_STATUSES = frozenset({408, 409, 429})

log = logging.getLogger("backchannel.agents.openai")


class ModelError(BackchannelError):
    """The model server failed or answered something unusable. One line, never the key.

    `host` is the server's host (and port), `status` the HTTP status when there was one.
    """

    def __init__(self, message: str, *, host: str, status: int | None = None):
        super().__init__(message)
        self.host = host
        self.status = status


class RunLike(Protocol):
    """The part of a Run this agent uses."""

    def to_openai(self) -> dict[str, Any]: ...

    async def call(self, name: str, arguments: Any) -> str: ...

    async def new_messages(self) -> list[dict[str, Any]]: ...


def _env_base_url() -> str:
    return os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


def _env_api_key() -> str | None:
    return os.environ.get("OPENAI_API_KEY") or None


def _env_model() -> str:
    return os.environ.get("OPENAI_MODEL") or DEFAULT_MODEL


@define
class OpenAIAgent:
    """An async callable taking a Run: the chat-completions tool loop.

    Settings default from the environment (``OPENAI_BASE_URL``,
    ``OPENAI_API_KEY``, ``OPENAI_MODEL``) when the agent is built. The key is
    sent only as ``Authorization: Bearer``; it is kept out of repr, logs and
    error text (a server that echoes it back has it replaced by ``***``).
    """

    base_url: str = field(factory=_env_base_url, repr=lambda url: _without_credentials(url))
    api_key: str | None = field(factory=_env_api_key, repr=False)
    model: str = field(factory=_env_model)
    #: model calls per run; the loop stops after this many even if the model wants more
    max_steps: int = 8
    #: sampling temperature; None leaves the server's default
    temperature: float | None = None
    #: seconds one chat-completions request may take, connect to last byte
    request_timeout: float = 120.0
    #: extra tries after a 429, 408/409, 5xx, timeout or connection failure
    max_retries: int = 3
    #: first backoff in seconds when the server gives no Retry-After; doubles each try
    retry_backoff: float = 0.5
    #: longest wait accepted between tries; a longer Retry-After is reported as an error
    max_retry_delay: float = 60.0
    #: extra HTTP headers (an org header, a proxy's key); kept out of repr and logs
    headers: Mapping[str, str] = field(factory=dict, repr=False)
    #: extra request fields merged into each request (max_tokens, tool_choice, ...)
    extra_body: Mapping[str, Any] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        # belt and braces: whatever logs the key (aiohttp, a tool, a traceback) shows ***
        for secret in (self.api_key, *self.headers.values()):
            register_secret(secret)

    @property
    def url(self) -> str:
        """Return the chat-completions endpoint."""
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def host(self) -> str:
        """Return the server's host[:port], without any credentials in the URL."""
        parts = urlsplit(self.base_url)
        host = parts.hostname or self.base_url
        return f"{host}:{parts.port}" if parts.port else host

    async def __call__(self, run: RunLike) -> None:
        """Run the tool loop for `run` until the model stops calling tools or max_steps."""
        exported = run.to_openai()
        messages: list[dict[str, Any]] = list(exported["messages"])
        tools: list[dict[str, Any]] = list(exported.get("tools") or [])
        tool_names = [tool["function"]["name"] for tool in tools]
        async with aiohttp.ClientSession() as http:
            for step in range(1, self.max_steps + 1):
                message = await self.complete(http, messages, tools)
                text = message.get("content")
                if text:
                    log.debug("model text at step %d (not sent anywhere): %s", step, text)
                calls = _tool_calls(message, step)
                last_step = step == self.max_steps
                if not calls:
                    steering = [] if last_step else await run.new_messages()
                    if not steering:
                        log.debug("model finished at step %d", step)
                        return
                    messages.append({"role": "assistant", "content": text or ""})
                    messages.extend(steering)
                    continue
                messages.append({"role": "assistant", "content": text, "tool_calls": calls})
                for call in calls:
                    result = await self._execute(run, call, tool_names)
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
                if not last_step:
                    messages.extend(await run.new_messages())
        log.warning(
            "model %s at %s still calling tools after max_steps=%d; run stopped",
            self.model,
            self.host,
            self.max_steps,
        )

    async def complete(
        self,
        http: aiohttp.ClientSession,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """POST one chat-completions request (with retries); return the assistant message."""
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        headers = {**self.headers, "Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        timeout = aiohttp.ClientTimeout(total=self.request_timeout)
        attempt = 0
        while True:
            try:
                async with http.post(
                    self.url, json=body, headers=headers, timeout=timeout
                ) as response:
                    status = response.status
                    raw = await response.read()
                    wait_hint = _retry_after(response.headers)
            except (TimeoutError, aiohttp.ClientError) as error:
                if isinstance(error, TimeoutError):
                    problem = f"no answer within request_timeout={self.request_timeout:g}s"
                else:
                    reason = self._redact(str(error)) or type(error).__name__
                    problem = f"connection failed ({reason})"
                attempt = await self._backoff(attempt, None, problem, status=None)
                continue
            if 200 <= status < 300:
                return self._parse(raw)
            problem = f"HTTP {status}: {self._server_message(raw)}"
            if status in RETRY_STATUSES or status >= 500:
                attempt = await self._backoff(attempt, wait_hint, problem, status=status)
                continue
            raise ModelError(self._describe(problem, status), host=self.host, status=status)

    async def _backoff(
        self, attempt: int, wait_hint: float | None, problem: str, *, status: int | None
    ) -> int:
        """Sleep before the next try; return the new attempt count, or raise when out of tries."""
        if attempt >= self.max_retries:
            tries = f"after {attempt + 1} tries" if attempt else "on the only try"
            raise ModelError(
                f"model server {self.host} failed {tries}: {problem}", host=self.host, status=status
            )
        delay = wait_hint if wait_hint is not None else self.retry_backoff * 2**attempt
        if delay > self.max_retry_delay:
            raise ModelError(
                f"model server {self.host} asks to wait {delay:g}s before retrying, longer than "
                f"max_retry_delay={self.max_retry_delay:g}s: {problem}",
                host=self.host,
                status=status,
            )
        log.warning(
            "model server %s: %s; retrying in %.2fs (retry %d of %d)",
            self.host,
            problem,
            delay,
            attempt + 1,
            self.max_retries,
        )
        await asyncio.sleep(delay)
        return attempt + 1

    def _parse(self, raw: bytes) -> dict[str, Any]:
        """Return the first choice's message from a 200 body, or raise ModelError."""
        try:
            payload = json.loads(raw)
        except ValueError:
            snippet = raw[:120].decode("utf-8", "replace").replace("\n", " ")
            raise ModelError(
                f"model server {self.host} returned a malformed response (not JSON): "
                f"{self._redact(snippet)!r}",
                host=self.host,
                status=200,
            ) from None
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if isinstance(payload, dict) and "error" in payload and not choices:
            # some servers report failures with 200 and an error object
            problem = f"error in a 200 response: {self._server_message(raw)}"
            raise ModelError(self._describe(problem, 200), host=self.host, status=200)
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ModelError(
                f"model server {self.host} returned a malformed response: no choices",
                host=self.host,
                status=200,
            )
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ModelError(
                f"model server {self.host} returned a malformed response: "
                "choices[0] has no message",
                host=self.host,
                status=200,
            )
        return message

    async def _execute(self, run: RunLike, call: dict[str, Any], tool_names: list[str]) -> str:
        """Run one tool call and return the text for its `tool` message (errors included)."""
        name = call["function"]["name"]
        if name not in tool_names:
            offered = ", ".join(tool_names) or "none"
            return f"error: there is no tool named {name!r}; the tools are: {offered}"
        arguments = call["function"]["arguments"]
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError as error:
            return (
                f"error: the arguments of {name} are not valid JSON ({error}); "
                f"call {name} again with a JSON object that matches its parameters"
            )
        if not isinstance(parsed, dict):
            return (
                f"error: the arguments of {name} must be a JSON object, "
                f"not {type(parsed).__name__}; call {name} again"
            )
        try:
            result = await run.call(name, parsed)
        except Exception as error:
            # a tool bug must not end the run silently: tell the model, keep the trace in the log
            log.warning("tool %s raised while running for the model", name, exc_info=True)
            return f"error: {name} failed: {type(error).__name__}: {error}"
        return str(result)

    def _server_message(self, raw: bytes) -> str:
        """Return the server's own error message from an error body, on one line."""
        text = raw.decode("utf-8", "replace")
        message: Any = None
        try:
            payload = json.loads(text)
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            error = payload.get("error")
            if isinstance(error, dict):
                message = error.get("message")
            elif isinstance(error, str):
                message = error
            message = message or payload.get("message") or payload.get("detail")
        if not isinstance(message, str) or not message.strip():
            message = text.strip() or "(empty body)"
        message = " ".join(message.split())
        if len(message) > 300:
            message = message[:297] + "..."
        return self._redact(message)

    def _describe(self, problem: str, status: int) -> str:
        hint = ""
        if status == 401:
            hint = " (check api_key / OPENAI_API_KEY)"
        elif status == 404:
            hint = f" (check base_url={self._safe_base_url()!r}, usually ending in /v1, and model)"
        return f"model server {self.host} refused model {self.model!r}: {problem}{hint}"

    def _safe_base_url(self) -> str:
        return _without_credentials(self.base_url)

    def _redact(self, text: str) -> str:
        for secret in (self.api_key, *self.headers.values()):
            if secret and len(secret) >= 4:
                text = text.replace(secret, "***")
        return text


def make_openai_agent(settings: Mapping[str, Any]) -> OpenAIAgent:
    """Build an OpenAIAgent from an ``[agents.NAME]`` table (kind = "openai").

    Keys: base_url, api_key, model, max_steps, temperature, request_timeout,
    max_retries, retry_backoff, max_retry_delay, headers, extra_body. Missing
    keys fall back to the environment, then to the defaults.
    """
    given = {key: value for key, value in settings.items() if key != "kind"}
    problems = [
        ConfigError(unknown_key(key, _SETTINGS), key=key)
        for key in sorted(given)
        if key not in _SETTINGS
    ]
    for key, value in given.items():
        check = _SETTINGS.get(key)
        if check is not None and not check(value):
            problems.append(
                ConfigError(f"expected {check.__doc__}, got {_shown(key, value)}", key=key)
            )
    if problems:
        raise combine(problems)
    return OpenAIAgent(**given)


def _string(value: Any) -> bool:
    """a string"""
    return isinstance(value, str)


def _optional_string(value: Any) -> bool:
    """a string"""
    return value is None or isinstance(value, str)


def _non_empty_string(value: Any) -> bool:
    """a non-empty string"""
    return isinstance(value, str) and bool(value.strip())


def _url(value: Any) -> bool:
    """an http(s) URL such as "http://localhost:11434/v1\""""
    return isinstance(value, str) and urlsplit(value).scheme in {"http", "https"}


def _positive_int(value: Any) -> bool:
    """a whole number of at least 1"""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _non_negative_int(value: Any) -> bool:
    """a whole number of at least 0"""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive_number(value: Any) -> bool:
    """a number greater than 0"""
    return _number(value) and value > 0


def _non_negative_number(value: Any) -> bool:
    """a number of at least 0"""
    return _number(value) and value >= 0


def _optional_number(value: Any) -> bool:
    """a number"""
    return value is None or _number(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _string_table(value: Any) -> bool:
    """a table of string values"""
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _table(value: Any) -> bool:
    """a table"""
    return isinstance(value, Mapping)


def _shown(key: str, value: Any) -> str:
    """Describe a bad value without echoing anything that may be a secret."""
    if key in {"api_key", "headers"}:
        return type(value).__name__
    return repr(value)


_SETTINGS = {
    "base_url": _url,
    "api_key": _optional_string,
    "model": _non_empty_string,
    "max_steps": _positive_int,
    "temperature": _optional_number,
    "request_timeout": _positive_number,
    "max_retries": _non_negative_int,
    "retry_backoff": _non_negative_number,
    "max_retry_delay": _non_negative_number,
    "headers": _string_table,
    "extra_body": _table,
}


def _without_credentials(url: str) -> str:
    """Return `url` with any user:password@ part removed, for repr and error text."""
    parts = urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _tool_calls(message: dict[str, Any], step: int) -> list[dict[str, Any]]:
    """Return the message's tool calls in wire shape: id, type, function{name, arguments str}.

    Servers differ: some send arguments as an object rather than a JSON
    string, some leave out the id. Both are mended here so the calls can be
    echoed back in the conversation.
    """
    calls = message.get("tool_calls") or []
    mended = []
    for index, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        if arguments is None:
            arguments = ""
        elif not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        mended.append(
            {
                "id": str(call.get("id") or f"call_{step}_{index}"),
                "type": "function",
                "function": {"name": str(function.get("name") or ""), "arguments": arguments},
            }
        )
    return mended


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Return the server's requested wait in seconds (retry-after-ms or Retry-After), if any."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())

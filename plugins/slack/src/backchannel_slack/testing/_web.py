"""The Web API side of the fake: the methods a bot calls, Slack's shapes and errors, faults."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from typing import Any

from aiohttp import web

from ._shared import FAULTS, FakeBase, Fault

__all__ = ["WebApi"]


class WebApi(FakeBase):
    """Answers ``/api/<method>`` like slack.com/api."""

    # Web API ---------------------------------------------------------------------------
    def fail_next(
        self,
        method: str,
        fault: str,
        *,
        retry_after: float = 1.0,
        error: str = "channel_not_found",
        delay: float = 30.0,
        times: int = 1,
        after: int = 0,
        status: int = 200,
    ) -> None:
        """Make the next `times` calls of `method` fail with `fault` (see the module docstring).

        ``hang`` waits `delay` seconds and answers nothing useful (not processed);
        ``slow`` processes the call, then waits `delay` before answering;
        ``reset`` cuts the connection before processing; ``reset_after`` after.
        ``garbled`` answers HTTP `status` labelled ``application/json`` with a body that
        is not JSON (a truncated answer, or a proxy's error page); with status 200
        the call was processed first, otherwise not (``retry_after`` goes in a
        ``Retry-After`` header when the status is 429).
        `after` lets that many calls through first.
        """
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
        queue = self._faults.setdefault(method, deque())
        for _ in range(after):
            queue.append(Fault("none"))
        for _ in range(times):
            queue.append(
                Fault(fault, retry_after=retry_after, error=error, delay=delay, status=status)
            )

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        """Arguments of every call of `method`, oldest first."""
        return [arguments for name, arguments in self.calls if name == method]

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        arguments = await _arguments(request)
        token = arguments.pop("token", None)
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            token = header[len("Bearer ") :]
        self.calls.append((method, dict(arguments)))
        self._notify()
        queue = self._faults.get(method)
        fault = queue.popleft() if queue else None
        if fault is not None:
            early = await self._fault_before(request, fault)
            if early is not None:
                return early
        answer = self._dispatch(method, token, arguments)
        if fault is not None and fault.kind == "garbled":
            return _garbled(200)
        if fault is not None and fault.kind == "slow":
            await self._pause(fault.delay)
        if fault is not None and fault.kind == "reset_after":
            _abort(request)
        return answer

    async def _fault_before(self, request: web.Request, fault: Fault) -> web.StreamResponse | None:
        if fault.kind == "rate_limited":
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(max(round(fault.retry_after), 0))},
            )
        if fault.kind in ("server_error", "unavailable"):
            status = 500 if fault.kind == "server_error" else 503
            return web.Response(
                status=status,
                text="<html><body>Slack is having trouble</body></html>",
                content_type="text/html",
            )
        if fault.kind == "error":
            answer: dict[str, Any] = {"ok": False, "error": fault.error}
            if fault.error == "missing_scope":  # Slack names what the call needed
                answer.update(needed="channels:read", provided="chat:write,reactions:write")
            return web.json_response(answer)
        if fault.kind == "hang":
            await self._pause(fault.delay)
            return web.json_response({"ok": False, "error": "request_timeout"})
        if fault.kind == "reset":
            _abort(request)
            return web.Response(status=500)
        if fault.kind == "garbled" and fault.status != 200:
            headers = {"Retry-After": str(max(round(fault.retry_after), 0))}
            return _garbled(fault.status, headers if fault.status == 429 else None)
        return None

    async def _pause(self, seconds: float) -> None:
        assert self._closing is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    def _dispatch(self, method: str, token: str | None, arguments: dict[str, Any]) -> web.Response:
        if not token:
            return _error("not_authed")
        if method == "apps.connections.open":
            if token.startswith("xoxb-"):
                return _error("not_allowed_token_type")
            if token != self.app_token:
                return _error("invalid_auth")
            ticket = uuid.uuid4()
            return web.json_response(
                {
                    "ok": True,
                    "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={self.app_id}",
                }
            )
        if token.startswith("xapp-"):
            return _error("not_allowed_token_type")
        if token != self.bot_token:
            return _error("invalid_auth")
        handler = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "reactions.add": self._react,
            "users.info": self._users_info,
            "conversations.info": self._conversations_info,
        }.get(method)
        if handler is None:
            return _error("unknown_method")
        return handler(arguments)

    def _auth_test(self, arguments: dict[str, Any]) -> web.Response:
        return web.json_response(
            {
                "ok": True,
                "url": "https://fake-workspace.slack.com/",
                "team": "Fake Workspace",
                "user": self.bot_name,
                "team_id": self.team_id,
                "user_id": self.bot_user_id,
                "bot_id": self.bot_id,
                "is_enterprise_install": False,
            }
        )

    def _post_message(self, arguments: dict[str, Any]) -> web.Response:
        channel = str(arguments.get("channel") or "")
        text = arguments.get("text") or ""
        if channel not in self.channels:
            return _error("channel_not_found")
        if not text and not arguments.get("blocks"):
            return _error("no_text")
        if len(text) > 40000:
            return _error("msg_too_long")
        thread_ts = arguments.get("thread_ts") or None
        ts = self.next_ts()
        event = self._bot_event(channel, ts, text, thread_ts)
        self.history[channel][ts] = dict(event)
        self.posts.append({"channel": channel, "ts": ts, "text": text, "thread_ts": thread_ts})
        message = {
            k: v for k, v in event.items() if k not in ("channel", "event_ts", "channel_type")
        }
        self._notify()
        if self.echo_own_posts:
            self._echo(self.event_callback(event))
        return web.json_response({"ok": True, "channel": channel, "ts": ts, "message": message})

    def _update(self, arguments: dict[str, Any]) -> web.Response:
        channel = str(arguments.get("channel") or "")
        ts = str(arguments.get("ts") or "")
        text = arguments.get("text") or ""
        if channel not in self.channels:
            return _error("channel_not_found")
        message = self.history[channel].get(ts)
        if message is None:
            return _error("message_not_found")
        if message.get("user") != self.bot_user_id:
            return _error("cant_update_message")
        if not text:
            return _error("no_text")
        payload = self.edit(channel, ts, text)
        self.updates.append({"channel": channel, "ts": ts, "text": text})
        self._notify()
        if self.echo_own_posts:
            self._echo(payload)
        return web.json_response(
            {
                "ok": True,
                "channel": channel,
                "ts": ts,
                "text": text,
                "message": payload["event"]["message"],
            }
        )

    def _react(self, arguments: dict[str, Any]) -> web.Response:
        channel = str(arguments.get("channel") or "")
        ts = str(arguments.get("timestamp") or "")
        name = str(arguments.get("name") or "")
        if channel not in self.channels:
            return _error("channel_not_found")
        if ts not in self.history[channel]:
            return _error("message_not_found")
        if not name or ":" in name or " " in name:
            return _error("invalid_name")
        if any(
            r["channel"] == channel and r["timestamp"] == ts and r["name"] == name
            for r in self.reactions
        ):
            return _error("already_reacted")
        self.reactions.append({"channel": channel, "timestamp": ts, "name": name})
        self._notify()
        return web.json_response({"ok": True})

    def _users_info(self, arguments: dict[str, Any]) -> web.Response:
        user = self.users.get(str(arguments.get("user") or ""))
        if user is None:
            return _error("user_not_found")
        return web.json_response({"ok": True, "user": user})

    def _conversations_info(self, arguments: dict[str, Any]) -> web.Response:
        channel = self.channels.get(str(arguments.get("channel") or ""))
        if channel is None:
            return _error("channel_not_found")
        return web.json_response({"ok": True, "channel": channel})

    def _echo(self, payload: dict[str, Any]) -> None:
        if self.events_url is not None or self._connections:
            self._spawn(self.deliver(payload))


async def _arguments(request: web.Request) -> dict[str, Any]:
    arguments: dict[str, Any] = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            with contextlib.suppress(ValueError):
                body = await request.json()
                if isinstance(body, dict):
                    arguments.update(body)
        else:
            form = await request.post()
            arguments.update({key: value for key, value in form.items() if isinstance(value, str)})
    return arguments


def _error(code: str) -> web.Response:
    return web.json_response({"ok": False, "error": code})


def _garbled(status: int, headers: dict[str, str] | None = None) -> web.Response:
    """An answer that says it is JSON and is not (cut short, or a proxy's page)."""
    return web.Response(
        status=status,
        body=b'{"ok": true, "channel": "C0',
        content_type="application/json",
        headers=headers,
    )


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()

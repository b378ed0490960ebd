"""Receiving updates: long polling (`Poller`) or a webhook (`WebhookReceiver`).

Both acknowledge only what is committed. The poller commits each poll's
updates in one transaction together with the `offset` that confirms them
(``ctx.ingest_many(state=...)``) and tells Telegram only on the following getUpdates, so a crash re-reads rather than
loses; the webhook answers 200 only after the ingest returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from attrs import frozen
from backchannel.adapter import AdapterContext
from backchannel.errors import BackchannelError, ConfigError
from backchannel.logcount import CountedLog
from backchannel.secrets import register_secret
from backchannel.wire import BadPayload, parse_json

from .api import BotApi, TelegramError, sleep_or_stop
from .normalize import int_field, split_update

__all__ = ["SECRET_HEADER", "PollSettings", "Poller", "WebhookReceiver", "WebhookSettings"]

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

#: given one raw update, return adapter state to commit with it (may be empty)
StateFor = Callable[[Mapping[str, Any]], dict[str, str | None]]


@frozen
class PollSettings:
    timeout: int
    limit: int
    allowed_updates: tuple[str, ...]
    request_timeout: float
    retry_initial: float
    retry_max: float


@frozen
class WebhookSettings:
    path: str
    url: str | None
    max_connections: int
    allowed_updates: tuple[str, ...]


class Poller:
    """Long-polls getUpdates and hands each update to `ctx.ingest`, in order."""

    def __init__(
        self,
        api: BotApi,
        ctx: AdapterContext,
        account: str,
        settings: PollSettings,
        state_for: StateFor,
    ):
        self._api = api
        self._ctx = ctx
        self._account = account
        self._settings = settings
        self._state_for = state_for
        self._stopping = asyncio.Event()
        self._ingesting = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Remove a webhook if one is set (getUpdates is refused while it is), then poll."""
        try:
            info = await self._api.call("getWebhookInfo")
            if isinstance(info, Mapping) and info.get("url"):
                await self._api.call("deleteWebhook", {"drop_pending_updates": False})
                self._ctx.log.info("deleted the bot's webhook to receive updates by polling")
        except TelegramError as error:
            self._ctx.log.warning("could not check or delete the webhook: %s", error)
        self._task = asyncio.create_task(self._supervised(), name=f"telegram-{self._account}")

    async def stop(self) -> None:
        """Stop; an ingest in progress is allowed to finish (bounded), a long poll is dropped."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is None:
            return
        if not self._ingesting:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, self._settings.request_timeout + 5)

    async def _supervised(self) -> None:
        """Poll until stopped: whatever ends the loop unexpectedly (a bug) is logged and
        polling starts again after a pause, never a poller gone without a word while this
        process keeps the account (and, with several workers, its lease)."""
        pause = self._settings.retry_initial
        while not self._stopping.is_set():
            try:
                await self._poll_forever()
                return
            except Exception:
                self._ctx.log.exception("the Telegram poller failed; starting it again")
            if await sleep_or_stop(self._stopping, pause):
                return
            pause = min(pause * 2, self._settings.retry_max)

    async def _saved_offset(self) -> tuple[bool, int | None]:
        """Whether it was read (False: stopped meanwhile), and the offset committed last
        (None: none yet): read until the store answers."""
        pause = self._settings.retry_initial
        failing = False
        while True:
            try:
                saved = await self._ctx.get_state("offset")
            except Exception as error:
                if not failing:
                    self._ctx.log.warning(
                        "could not read the saved offset (%s: %s); trying again",
                        type(error).__name__,
                        error,
                    )
                    failing = True
                if await sleep_or_stop(self._stopping, pause):
                    return False, None
                pause = min(pause * 2, self._settings.retry_max)
                continue
            if failing:
                self._ctx.log.info("read the saved offset; polling")
            return True, int(saved) if saved else None

    async def _poll_forever(self) -> None:
        settings = self._settings
        read, offset = await self._saved_offset()
        if not read:
            return  # stopped before the store answered
        backoff = settings.retry_initial
        failing: str | None = None
        stuck = False  # the last batch did not move the offset
        unstored = 0  # tries in a row that could not store the batch
        while not self._stopping.is_set():
            params: dict[str, Any] = {
                "timeout": settings.timeout,
                "limit": settings.limit,
                "allowed_updates": list(settings.allowed_updates),
            }
            if offset is not None:
                params["offset"] = offset
            try:
                updates = await self._api.call(
                    "getUpdates", params, timeout=settings.timeout + settings.request_timeout
                )
                if not isinstance(updates, list):
                    # a proxy or relay answering ok without a list: nothing to store, and
                    # asking again at once would spin
                    raise TelegramError(
                        "getUpdates",
                        "bad_answer",
                        f"answered a {type(updates).__name__}, not a list",
                    )
            except Exception as error:
                # whatever goes wrong (a TelegramError, or a bug), the loop never ends: a
                # dead poller would lose every update after it without a word
                if self._stopping.is_set():
                    return
                if not isinstance(error, TelegramError):
                    error = TelegramError("getUpdates", "bad_answer", type(error).__name__)
                failing = self._log_failure(error, failing)
                delay = error.retry_after if error.retry_after else backoff
                backoff = min(backoff * 2, settings.retry_max)
                if await sleep_or_stop(self._stopping, delay):
                    return
                continue
            if failing is not None:
                self._ctx.log.info("getUpdates works again; polling resumed")
                failing = None
            if not stuck and not unstored:
                backoff = settings.retry_initial
            try:
                asked, offset = offset, await self._ingest_batch(updates, offset)
                if unstored:
                    self._ctx.log.info("storing updates works again, after %d tries", unstored)
                    unstored = 0
                if updates and offset == asked:
                    # stored (or dead-lettered), yet nothing moves the offset past them (no
                    # readable update id: only a broken relay sends that): the same batch
                    # comes back, so ask again after a growing pause, not at once
                    if not stuck:
                        self._ctx.log.warning(
                            "getUpdates answered updates whose update_id does not move the"
                            " offset past them; asking again with backoff"
                        )
                    stuck = True
                    if await sleep_or_stop(self._stopping, backoff):
                        return
                    backoff = min(backoff * 2, settings.retry_max)
                    continue
                stuck = False
            except Exception as error:
                # the store away (a database restarting) fails every try the same way: the
                # first is logged whole, then a line every tenth, not a traceback a second
                unstored += 1
                if unstored == 1:
                    self._ctx.log.exception("could not store updates; will read them again")
                elif unstored % 10 == 0:
                    self._ctx.log.warning(
                        "still cannot store updates after %d tries (%s: %s)",
                        unstored,
                        type(error).__name__,
                        error,
                    )
                if await sleep_or_stop(self._stopping, backoff):
                    return
                backoff = min(backoff * 2, settings.retry_max)

    async def _ingest_batch(self, updates: Any, offset: int | None) -> int | None:
        """Ingest one poll's updates in one commit; return the offset that confirms them."""
        if not isinstance(updates, list):
            self._ctx.log.warning("getUpdates answered a %s, not a list", type(updates).__name__)
            return offset
        if not updates:
            return offset
        # update ids as normalize reads them (ints, or digit strings from a relay): an
        # id it accepts must move the offset past its update, or the batch is read forever
        ids = [int_field(u.get("update_id")) for u in updates if isinstance(u, Mapping)]
        readable = [i for i in ids if i is not None]
        # past this batch, not past the highest offset ever sent: the ids may have moved
        # down (Telegram numbers at random after a quiet week; a local Bot API server has
        # ids of its own). The server answers an offset "in the future" from its queue's
        # head, so keeping the old, higher offset would read that same batch again and
        # again, and never what came after it
        next_offset = max(readable) + 1 if readable else offset
        # the offset commits with the updates it confirms, so a crash cannot lose or
        # double them; a group upgrade learnt from the batch commits with it too
        state: dict[str, str | None] = {}
        if next_offset is not None:
            state["offset"] = str(next_offset)
        for update in updates:
            if isinstance(update, Mapping):
                state.update(self._state_for(update))
        self._ingesting = True
        try:
            await self._ctx.ingest_many(_split(updates), state=state)
        finally:
            self._ingesting = False
        return next_offset

    def _log_failure(self, error: TelegramError, failing: str | None) -> str:
        """Log a failed getUpdates once per kind of failure; return that kind."""
        kind = f"{error.code}:{error.description}" if error.code == 409 else error.outcome
        if kind == failing:
            return kind
        log = self._ctx.log
        if error.code == 409 and "webhook" in error.description.lower():
            log.error(
                "Telegram refuses getUpdates for account %r because a webhook is set (409 "
                'Conflict). Use mode = "webhook", or call deleteWebhook (restarting in '
                "polling mode does that). Retrying with backoff.",
                self._account,
            )
        elif error.code == 409:
            log.error(
                "Telegram ended this getUpdates because another process is polling the same "
                "bot token (409 Conflict) for account %r. Stop the other bot process: only one "
                "poller per token works. Retrying with backoff.",
                self._account,
            )
        elif error.code == 401:
            log.error(
                "Telegram refused the token of account %r (401); check `token`", self._account
            )
        else:
            log.warning("getUpdates failed: %s; retrying with backoff", error)
        return kind


class WebhookReceiver:
    """Serves the webhook route and registers it with setWebhook and a secret token."""

    def __init__(
        self,
        api: BotApi,
        ctx: AdapterContext,
        account: str,
        settings: WebhookSettings,
        state_for: StateFor,
    ):
        self._api = api
        self._ctx = ctx
        self._account = account
        self._settings = settings
        self._state_for = state_for
        self._secret = ""
        self._serving = False
        #: requests refused for the secret: anyone can send them, so counted, not a line each
        self._strangers = CountedLog(ctx.log)

    async def start(self) -> None:
        """Add the route, then setWebhook with a secret derived from the token (never stored)."""
        # hex is within setWebhook's alphabet (A-Z a-z 0-9 _ -) and length (1-256)
        secret = self._api.derive_secret(f"webhook:{self._account}")
        register_secret(secret)
        self._secret = secret
        route_url = self._ctx.routes.add(
            "POST", self._settings.path, self._on_request, check=self._refuse_stranger
        )
        self._serving = True
        url = self._settings.url or route_url
        try:
            await self._api.call(
                "setWebhook",
                {
                    "url": url,
                    "secret_token": secret,
                    "allowed_updates": list(self._settings.allowed_updates),
                    "max_connections": self._settings.max_connections,
                },
            )
        except TelegramError as error:
            await self.stop()
            if error.outcome != "error":
                raise BackchannelError(
                    f"could not reach Telegram to set the webhook of account {self._account!r}"
                    f" ({error.description}); try again"
                ) from None
            raise ConfigError(
                f"Telegram refused the webhook of account {self._account!r}: {error.description}",
                key="webhook_url",
            ) from None
        self._ctx.log.info("webhook set; Telegram delivers updates to %s", url)

    async def stop(self) -> None:
        """Remove the route. The webhook stays set: Telegram queues updates until we are back."""
        if self._serving:
            self._serving = False
            self._ctx.routes.remove("POST", self._settings.path)

    def _refuse_stranger(self, request: web.Request) -> web.StreamResponse | None:
        """The secret header, checked before the body is read (the server's route check): a
        request without it costs no buffering."""
        given = request.headers.get(SECRET_HEADER, "")
        if self._secret and _secret_matches(given, self._secret):
            return None
        self._strangers.note(
            "refused a webhook request from %s: wrong or missing %s header",
            request.remote,
            SECRET_HEADER,
        )
        return web.json_response({"ok": False, "description": "Unauthorized"}, status=401)

    async def _on_request(self, request: web.Request) -> web.StreamResponse:
        refused = self._refuse_stranger(request)  # also here: a server without route checks
        if refused is not None:
            return refused
        if not self._serving:
            return web.json_response({"ok": False, "description": "stopping"}, status=503)
        try:
            update = parse_json(await request.read())
        except BadPayload as error:
            # Telegram never sends such a body (and retries any non-2xx answer alike): a
            # 400 tells whoever did what is wrong, where a 500 would blame the store
            self._ctx.log.warning("refused a webhook update: %s", error)
            return web.json_response({"ok": False, "description": str(error)}, status=400)
        try:
            parts = split_update(update) if isinstance(update, Mapping) else [update]
            if len(parts) == 1:
                await self._ctx.ingest(update, state=self._state_for(update) or None)
            else:  # several deleted business messages: one commit for all of them
                await self._ctx.ingest_many(parts, state=self._state_for(update) or None)
        except Exception:
            self._ctx.log.exception("could not store a webhook update; Telegram will retry")
            return web.json_response({"ok": False}, status=500)
        return web.json_response({"ok": True})


def _split(updates: list[Any]) -> list[Any]:
    """The batch as normalize takes it: one update per deleted business message (see
    split_update); the same list when nothing needs splitting, the usual case."""
    if not any(
        isinstance(update, Mapping) and "deleted_business_messages" in update for update in updates
    ):
        return updates
    return [
        part
        for update in updates
        for part in (split_update(update) if isinstance(update, Mapping) else [update])
    ]


def _secret_matches(given: str, secret: str) -> bool:
    """Compare the secret header in constant time, whatever bytes it holds.

    aiohttp keeps header bytes that are not UTF-8 as surrogate escapes; they are
    encoded back to those bytes (a plain ``encode()`` would raise, and the
    request would be answered 500 with a traceback in the log).
    """
    try:
        raw = given.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(raw, secret.encode())

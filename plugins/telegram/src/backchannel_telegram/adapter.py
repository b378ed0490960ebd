"""The Telegram adapter: long polling or a webhook in, Bot API calls out.

Receiving acks only what is committed: in polling mode the next `offset` is
written in the same transaction as each update (``ctx.ingest(state=...)``) and
sent to Telegram only on the following getUpdates, so a crash re-reads rather
than loses; in webhook mode the answer is 200 only after the ingest returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from backchannel.adapter import AdapterContext, Capabilities, split_text, utf16_len
from backchannel.errors import (
    ConfigError,
    DeliveryError,
    RateLimited,
    Rejected,
    Uncertain,
)
from backchannel.model import Address, Event, Outbound, Receipt, Sender

from .api import BotApi, TelegramError, Token, sleep_or_stop
from .normalize import BotIdentity, migration_of, normalize_update
from .pacing import Pacer, PacingLimits

__all__ = ["DEFAULT_ALLOWED_UPDATES", "TelegramAdapter"]

#: `message_reaction` must be asked for by name: Telegram leaves it out by default.
DEFAULT_ALLOWED_UPDATES = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "message_reaction",
)
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_TEXT = 4096
#: the longest a later part of a split text waits out a 429 before giving up
MAX_PART_RETRY_WAIT = 60.0


class TelegramAdapter:
    """One Telegram bot account. Settings are the account's config table (see docs)."""

    channel = "telegram"
    capabilities = Capabilities(
        threads=True,
        edits=True,
        reactions=True,
        typing=True,
        replies=True,
        max_text_len=MAX_TEXT,
        display_name="Telegram",
    )

    def __init__(self, account: str, settings: Mapping[str, Any]):
        self.account = account
        if "token" not in settings:
            raise ConfigError("a Telegram account needs `token` (from @BotFather)", key="token")
        try:
            self._token = Token(settings["token"])
        except ValueError as error:
            raise ConfigError(str(error), key="token") from None
        self.mode = str(settings.get("mode", "polling"))
        if self.mode not in ("polling", "webhook"):
            raise ConfigError(f"mode must be 'polling' or 'webhook', not {self.mode!r}", key="mode")
        self.api_base = str(settings.get("api_base", "https://api.telegram.org"))
        number = _NumberReader(settings)
        self.poll_timeout = number.int("poll_timeout", 25, low=0)
        self.poll_limit = number.int("poll_limit", 100, low=1)
        self.request_timeout = number.float("request_timeout", 15.0)
        allowed = settings.get("allowed_updates", DEFAULT_ALLOWED_UPDATES)
        if not isinstance(allowed, list | tuple) or not all(isinstance(a, str) for a in allowed):
            raise ConfigError("expected a list of update kinds", key="allowed_updates")
        self.allowed_updates = list(allowed)
        self.webhook_path = str(settings.get("webhook_path", f"/telegram/{account}"))
        self.webhook_url: str | None = settings.get("webhook_url")
        self.webhook_max_connections = number.int("webhook_max_connections", 40, low=1)
        self.retry_initial = number.float("retry_initial", 1.0)
        self.retry_max = number.float("retry_max", 30.0)
        self.pacing = PacingLimits(
            per_chat=number.int("pace_per_chat", 1, low=0),
            per_chat_period=number.float("pace_per_chat_period", 1.0),
            per_group=number.int("pace_per_group", 20, low=0),
            per_group_period=number.float("pace_per_group_period", 60.0),
            overall=number.int("pace_overall", 30, low=0),
            overall_period=number.float("pace_overall_period", 1.0),
        )
        self.me: Sender | None = Sender(self._token.bot_id, "", settings.get("username"), True)
        self._username: str | None = settings.get("username")
        self._api = BotApi(self._token, self.api_base, self.request_timeout)
        self._pacer = Pacer(self.pacing)
        self._ctx: AdapterContext | None = None
        self._stopping = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._ingesting = False
        self._webhook_secret: str | None = None
        self._route_added = False
        #: old group chat id -> supergroup chat id, learnt from Telegram
        self._migrated: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"TelegramAdapter(account={self.account!r}, mode={self.mode!r})"

    # lifecycle --------------------------------------------------------------

    async def start(self, ctx: AdapterContext) -> None:
        """Learn who the bot is, then poll or register the webhook."""
        self._ctx = ctx
        self._stopping.clear()
        self._migrated = json.loads(await ctx.get_state("migrations") or "{}")
        await self._learn_identity()
        if self.mode == "webhook":
            await self._start_webhook(ctx)
        else:
            await self._leave_webhook(ctx)
            self._poller = asyncio.create_task(
                self._poll_forever(ctx), name=f"telegram-poll-{self.account}"
            )
        await ctx.set_state("mode", self.mode)

    async def stop(self) -> None:
        """Stop polling (after an in-flight ingest finishes) and close the session. Idempotent."""
        self._stopping.set()
        poller, self._poller = self._poller, None
        if poller is not None:
            if not self._ingesting:
                poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(poller, self.request_timeout + 5)
        if self._route_added and self._ctx is not None:
            self._ctx.routes.remove("POST", self.webhook_path)
            self._route_added = False
        await self._api.close()

    # receiving --------------------------------------------------------------

    def normalize(self, raw: Mapping[str, Any]) -> Event | None:
        """Turn one Bot API Update into an Event (see normalize.py)."""
        identity = BotIdentity(self._token.bot_id, self._username)
        return normalize_update(raw, self.account, identity, self._aliases)

    @property
    def _aliases(self) -> dict[str, str]:
        """Supergroup id -> the id its conversation is filed under (the original group)."""
        aliases: dict[str, str] = {}
        for old, new in self._migrated.items():
            original = old
            while original in aliases:  # a chain of upgrades files under the first id
                original = aliases[original]
            aliases[new] = original
        return aliases

    def _learn_migration(self, update: Mapping[str, Any]) -> dict[str, str | None]:
        """Note a group upgrade announced by `update`; return the state to commit with it."""
        found = migration_of(update) if isinstance(update, Mapping) else None
        if found is None or self._migrated.get(found[0]) == found[1]:
            return {}
        old, new = found
        self._migrated[old] = new
        self._log().info("group %s was upgraded to supergroup %s; following it", old, new)
        return {"migrations": json.dumps(self._migrated)}

    async def _learn_identity(self) -> None:
        try:
            me = await self._api.call("getMe")
        except TelegramError as error:
            if error.code in (401, 404):
                raise ConfigError(
                    f"Telegram refused the token of account {self.account!r} ({error.description});"
                    " check `token` against @BotFather",
                    key="token",
                ) from None
            self._log().warning("getMe failed (%s); going on without the bot's @username", error)
            return
        self._username = me.get("username") or self._username
        name = " ".join(str(p) for p in (me.get("first_name"), me.get("last_name")) if p)
        self.me = Sender(str(me.get("id", self._token.bot_id)), name, self._username, True)

    async def _poll_forever(self, ctx: AdapterContext) -> None:
        saved = await ctx.get_state("offset")
        offset = int(saved) if saved else None
        backoff = self.retry_initial
        failing: str | None = None
        while not self._stopping.is_set():
            params: dict[str, Any] = {
                "timeout": self.poll_timeout,
                "limit": self.poll_limit,
                "allowed_updates": self.allowed_updates,
            }
            if offset is not None:
                params["offset"] = offset
            try:
                updates = await self._api.call(
                    "getUpdates", params, timeout=self.poll_timeout + self.request_timeout
                )
            except TelegramError as error:
                if self._stopping.is_set():
                    return
                failing = self._log_poll_failure(error, failing)
                delay = error.retry_after if error.retry_after else backoff
                backoff = min(backoff * 2, self.retry_max)
                if await sleep_or_stop(self._stopping, delay):
                    return
                continue
            if failing is not None:
                self._log().info("getUpdates works again; polling resumed")
                failing = None
            backoff = self.retry_initial
            try:
                offset = await self._ingest_batch(ctx, updates, offset)
            except Exception:
                self._log().exception("could not store updates; will read them again")
                if await sleep_or_stop(self._stopping, backoff):
                    return
                backoff = min(backoff * 2, self.retry_max)

    async def _ingest_batch(
        self, ctx: AdapterContext, updates: Any, offset: int | None
    ) -> int | None:
        """Ingest updates in order; return the offset that confirms the committed ones."""
        if not isinstance(updates, list):
            self._log().warning("getUpdates answered a %s, not a list", type(updates).__name__)
            return offset
        moved = False
        for update in updates:
            update_id = update.get("update_id") if isinstance(update, Mapping) else None
            if not isinstance(update_id, int):
                self._log().warning("skipped an update without an integer update_id")
                continue
            next_offset = max(offset or 0, update_id + 1)
            self._ingesting = True
            try:
                # the offset commits with the update, so a crash cannot lose or double it
                state = {"offset": str(next_offset), **self._learn_migration(update)}
                await ctx.ingest(update, state=state)
            finally:
                self._ingesting = False
            offset, moved = next_offset, True
            if self._stopping.is_set():
                break
        if moved and offset is not None:
            # ignored and malformed updates store nothing, so write the cursor once more
            await ctx.set_state("offset", str(offset))
        return offset

    def _log_poll_failure(self, error: TelegramError, failing: str | None) -> str:
        """Log a failed getUpdates once per kind of failure; return that kind."""
        kind = f"{error.code}:{error.description}" if error.code == 409 else error.outcome
        if kind == failing:
            return kind
        if error.code == 409 and "webhook" in error.description.lower():
            self._log().error(
                "Telegram refuses getUpdates for account %r because a webhook is set (409 "
                'Conflict). Use mode = "webhook", or call deleteWebhook (restarting in '
                "polling mode does that). Retrying with backoff.",
                self.account,
            )
        elif error.code == 409:
            self._log().error(
                "Telegram ended this getUpdates because another process is polling the same "
                "bot token (409 Conflict) for account %r. Stop the other bot process: only one "
                "poller per token works. Retrying with backoff.",
                self.account,
            )
        elif error.code == 401:
            self._log().error(
                "Telegram refused the token of account %r (401); check `token`", self.account
            )
        else:
            self._log().warning("getUpdates failed: %s; retrying with backoff", error)
        return kind

    async def _leave_webhook(self, ctx: AdapterContext) -> None:
        """In polling mode, remove a webhook this bot has set (getUpdates is refused while one is)."""
        try:
            info = await self._api.call("getWebhookInfo")
            if isinstance(info, Mapping) and info.get("url"):
                await self._api.call("deleteWebhook", {"drop_pending_updates": False})
                self._log().info("deleted the bot's webhook to receive updates by polling")
        except TelegramError as error:
            self._log().warning("could not check or delete the webhook: %s", error)

    async def _start_webhook(self, ctx: AdapterContext) -> None:
        secret = await ctx.get_state("webhook_secret")
        if not secret:
            secret = secrets.token_urlsafe(32)  # A-Z a-z 0-9 _ -, as setWebhook requires
            await ctx.set_state("webhook_secret", secret)
        self._webhook_secret = secret
        url = ctx.routes.add("POST", self.webhook_path, self._on_webhook)
        self._route_added = True
        try:
            await self._api.call(
                "setWebhook",
                {
                    "url": self.webhook_url or url,
                    "secret_token": secret,
                    "allowed_updates": self.allowed_updates,
                    "max_connections": self.webhook_max_connections,
                },
            )
        except TelegramError as error:
            raise ConfigError(
                f"setWebhook failed for account {self.account!r}: {error.description}",
                key="webhook_url",
            ) from None
        self._log().info("webhook set; Telegram delivers updates to %s", self.webhook_url or url)

    async def _on_webhook(self, request: web.Request) -> web.StreamResponse:
        given = request.headers.get(SECRET_HEADER, "")
        expected = self._webhook_secret or ""
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            self._log().warning(
                "refused a webhook request from %s: wrong or missing %s header",
                request.remote,
                SECRET_HEADER,
            )
            return web.json_response({"ok": False, "description": "Unauthorized"}, status=401)
        if self._stopping.is_set() or self._ctx is None:
            return web.json_response({"ok": False, "description": "stopping"}, status=503)
        try:
            update = await request.json()
        except ValueError:
            return web.json_response({"ok": False, "description": "not JSON"}, status=400)
        try:
            await self._ctx.ingest(update, state=self._learn_migration(update) or None)
        except Exception:
            self._log().exception("could not store a webhook update; Telegram will retry")
            return web.json_response({"ok": False}, status=500)
        return web.json_response({"ok": True})

    # sending ------------------------------------------------------------------

    async def send(self, outbound: Outbound) -> Receipt:
        """Send, edit or react. Raise RateLimited, Rejected or Uncertain only."""
        try:
            if outbound.kind == "edit":
                return await self._edit(outbound)
            if outbound.kind == "reaction":
                return await self._react(outbound)
            return await self._send_text(outbound)
        except DeliveryError:
            raise
        except TelegramError as error:
            raise _delivery_error(error) from None

    async def typing(self, address: Address) -> None:
        """Show "typing…" in the conversation (Telegram shows it for about 5 seconds)."""
        params: dict[str, Any] = {"chat_id": self._chat(address), "action": "typing"}
        if address.thread:
            params["message_thread_id"] = int(address.thread)
        try:
            await self._api.call("sendChatAction", params)
        except TelegramError as error:
            self._log().debug("sendChatAction failed: %s", error)

    async def _send_text(self, outbound: Outbound) -> Receipt:
        parts = split_text(outbound.text, MAX_TEXT, utf16_len)
        ids: list[str] = []
        for index, part in enumerate(parts):
            params: dict[str, Any] = {"text": part}
            if outbound.address.thread:
                params["message_thread_id"] = int(outbound.address.thread)
            if outbound.quiet:
                params["disable_notification"] = True
            if index == 0 and outbound.reply_to:
                params["reply_parameters"] = {
                    "message_id": int(outbound.reply_to),
                    "allow_sending_without_reply": True,
                }
            try:
                message = await self._call_paced(
                    outbound.address, "sendMessage", params, absorb_429=index > 0
                )
            except TelegramError as error:
                if index == 0:
                    raise
                raise Uncertain(
                    f"parts 1-{index} of {len(parts)} were delivered, part {index + 1} was not "
                    f"({error.description})"
                ) from None
            ids.append(str(message["message_id"]))
        return Receipt(ids[0], part_ids=tuple(ids))

    async def _edit(self, outbound: Outbound) -> Receipt:
        if not outbound.target:
            raise Rejected("an edit needs the target message id")
        if utf16_len(outbound.text) > MAX_TEXT:
            raise Rejected(f"an edited text may hold at most {MAX_TEXT} UTF-16 units")
        params = {"message_id": int(outbound.target), "text": outbound.text}
        try:
            await self._call_paced(outbound.address, "editMessageText", params)
        except TelegramError as error:
            if error.code != 400 or "message is not modified" not in error.description:
                raise
            # the message already says exactly this: the edit is in place
        return Receipt(outbound.target, part_ids=(outbound.target,))

    async def _react(self, outbound: Outbound) -> Receipt:
        if not outbound.target:
            raise Rejected("a reaction needs the target message id")
        # Telegram's reaction set spells ❤ without the emoji variation selector
        emoji = outbound.text.strip().replace("\ufe0f", "")
        params = {
            "chat_id": self._chat(outbound.address),
            "message_id": int(outbound.target),
            "reaction": [{"type": "emoji", "emoji": emoji}] if emoji else [],
        }
        await self._with_migration(outbound.address, "setMessageReaction", params)
        return Receipt(outbound.target, part_ids=(outbound.target,))

    async def _call_paced(
        self, address: Address, method: str, params: dict[str, Any], absorb_429: bool = False
    ) -> Any:
        """Wait for a pacing turn, then call; with `absorb_429`, wait out Telegram's 429s too."""
        waited = 0.0
        while True:
            chat = self._chat(address)
            try:
                async with self._pacer.turn(chat, is_group=chat.startswith("-")):
                    return await self._with_migration(address, method, params)
            except TelegramError as error:
                retry_after = error.retry_after or 1.0
                if (
                    not absorb_429
                    or error.code != 429
                    or waited + retry_after > MAX_PART_RETRY_WAIT
                ):
                    raise
                waited += retry_after
                await asyncio.sleep(retry_after)

    async def _with_migration(self, address: Address, method: str, params: dict[str, Any]) -> Any:
        """Call with `chat_id` set; follow a group upgraded to a supergroup once."""
        chat = self._chat(address)
        try:
            return await self._api.call(method, {**params, "chat_id": chat})
        except TelegramError as error:
            if error.migrate_to_chat_id is None:
                raise
            new_chat = str(error.migrate_to_chat_id)
            self._migrated[address.chat] = new_chat
            if self._ctx is not None:
                await self._ctx.set_state("migrations", json.dumps(self._migrated))
            self._log().info("group %s became supergroup %s; sending there", address.chat, new_chat)
            return await self._api.call(method, {**params, "chat_id": new_chat})

    def _chat(self, address: Address) -> str:
        return self._migrated.get(address.chat, address.chat)

    def _log(self) -> Any:
        if self._ctx is not None:
            return self._ctx.log
        import logging

        return logging.getLogger("backchannel.telegram")


def _delivery_error(error: TelegramError) -> DeliveryError:
    """Map a failed Bot API call to the delivery outcome it means."""
    if error.outcome == "unreachable":
        return RateLimited(5.0, f"could not connect to Telegram for {error.method}")
    if error.outcome != "error":
        return Uncertain(str(error))
    if error.code == 429:
        return RateLimited(error.retry_after or 1.0, f"Telegram: {error.description}")
    if error.code is not None and error.code >= 500:
        return Uncertain(str(error))
    return Rejected(error.description)


class _NumberReader:
    """Reads numeric settings, raising ConfigError that names the key."""

    def __init__(self, settings: Mapping[str, Any]):
        self._settings = settings

    def int(self, key: str, default: int, low: int) -> int:
        value = self._settings.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"expected an integer >= {low}, got {value!r}", key=key)
        return value

    def float(self, key: str, default: float) -> float:
        value = self._settings.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"expected a positive number of seconds, got {value!r}", key=key)
        return float(value)

"""The stable Python API of the owner duplex (used by the CLI, the hook and the MCP server).

- `resolve_identity(...)` -> `SessionIdentity`: which session is calling.
- `await notify(config, text, needs_answer=..., reply_to=..., identity=...)` -> `NotifyResult`.
- `inbox(session_id)` -> `list[InboxItem]`: owner messages waiting for a session.
- `mark_delivered(item)`: the session has the message (stamps the store, drops the marker).
- `await request_permission(config, identity, request_id, tool_name, description)` -> prompt id.

Formatting and recording happen here, in one code path, whoever sends: the
platform send itself is handed to a running ``backchannel serve`` when one
answers on the control socket, else done directly (see `deliver_to_owner`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import frozen
from backchannel.app import build_adapter, open_config_store
from backchannel.config import Config
from backchannel.errors import BackchannelError, ConfigError, Rejected
from backchannel.model import Address, Outbound
from backchannel.outbound import Deliverer
from backchannel.secrets import register_secret
from backchannel.store import SQLiteStore

from . import lines
from .identity import SessionIdentity, resolve_identity
from .ids import LOOKALIKES
from .inbox import InboxItem, list_markers, stamp_attempt, stamp_delivered
from .records import OwnerMessage, OwnerRecords
from .settings import OwnerSettings

__all__ = [
    "InboxItem",
    "NotifyResult",
    "OwnerError",
    "SessionIdentity",
    "deliver_in_serve",
    "deliver_to_owner",
    "inbox",
    "mark_attempt",
    "mark_delivered",
    "notify",
    "open_sqlite_store",
    "request_permission",
    "resolve_identity",
    "tell_owner_parked",
]


class OwnerError(BackchannelError):
    """A notify or permission request that could not be done (one line for people)."""


@frozen
class NotifyResult:
    """What became of one notify: the id the owner sees, and the send's outcome."""

    id: str
    status: str
    mark: str
    session_id: str
    line: str
    platform_message_id: str | None = None
    #: True when this send was edited into the burst's earlier message (same id)
    collapsed: bool = False
    reason: str | None = None
    #: "serve" (handed to a running serve) or "direct"
    via: str = "direct"


@frozen
class Delivery:
    status: str
    platform_message_id: str | None
    reason: str | None
    via: str


async def notify(
    config: Config,
    text: str,
    *,
    needs_answer: bool = False,
    reply_to: str | None = None,
    identity: SessionIdentity | None = None,
) -> NotifyResult:
    """Send the owner a line from the calling session; return the id the owner sees.

    A plain (fyi) send within `burst_window` of this session's previous fyi
    edits that message instead, appending the line, and returns its id.
    Replies and needs-answer sends are never collapsed. Bounded by the
    ``[owner] timeout``; raises OwnerError with one line on failure.
    """
    settings = OwnerSettings.from_config(config)
    body = text.strip()
    if not body:
        raise OwnerError("nothing to send: the text is empty")
    who = identity or resolve_identity()
    try:
        return await asyncio.wait_for(
            _notify(config, settings, body, who, needs_answer, reply_to), settings.timeout
        )
    except TimeoutError:
        raise OwnerError(
            f"notify gave up after {settings.timeout:g}s (owner.timeout): the channel did not"
            " answer; the message may or may not have arrived"
        ) from None


async def request_permission(
    config: Config,
    identity: SessionIdentity,
    request_id: str,
    tool_name: str,
    description: str,
) -> str:
    """Ask the owner to allow a tool call; return the prompt id they answer with.

    The owner answers ``yes <id>`` or ``no <id>``; serve puts the answer in the
    session's inbox as an item of kind "permission" with meta
    ``{"request_id", "behavior": "allow" | "deny"}``.
    """
    settings = OwnerSettings.from_config(config)
    try:
        return await asyncio.wait_for(
            _request_permission(config, settings, identity, request_id, tool_name, description),
            settings.timeout,
        )
    except TimeoutError:
        raise OwnerError(
            f"the permission prompt gave up after {settings.timeout:g}s (owner.timeout)"
        ) from None


def inbox(session_id: str) -> list[InboxItem]:
    """Return the owner messages waiting for `session_id`, oldest first (reads markers only)."""
    return list_markers(session_id)


def mark_attempt(item: InboxItem) -> int | None:
    """Count a delivery attempt before showing the item; return attempts (None: not waiting)."""
    return stamp_attempt(item)


def mark_delivered(item: InboxItem) -> bool:
    """Record that the session received `item` and drop its marker; False if already done."""
    return stamp_delivered(item)


# one code path for formatting and recording ------------------------------------------


async def _notify(
    config: Config,
    settings: OwnerSettings,
    text: str,
    identity: SessionIdentity,
    needs_answer: bool,
    reply_to: str | None,
) -> NotifyResult:
    store = open_sqlite_store(config)
    try:
        records = OwnerRecords(store.db)
        now = time.time()
        mark = records.mark_for(identity, now)
        parent: OwnerMessage | None = None
        if reply_to is not None:
            # as the router reads an id the owner typed: Crockford's look-alikes (i l o)
            parent = records.get(reply_to.strip().lstrip("#").lower().translate(LOOKALIKES))
            if parent is None:
                raise OwnerError(
                    f"there is no message #{reply_to} to reply to (see `backchannel notify --inbox`)"
                )
        else:
            previous = records.last_outbound(identity.session_id)
            if (
                not needs_answer
                and previous is not None
                and previous.kind == "fyi"
                and previous.status == "sent"
                and previous.platform_message_id is not None
                and now - previous.updated_at < settings.burst_window
            ):
                appended = await _append_to_burst(
                    config, settings, store, records, previous, mark, identity, text, now
                )
                if appended.status != "failed":
                    return appended
                # the platform refused the edit (too old, too long): send a new message
        kind = "reply" if parent is not None else "needs_answer" if needs_answer else "fyi"
        row = records.insert_message(
            now,
            session_id=identity.session_id,
            direction="out",
            kind=kind,
            account=settings.account,
            chat=settings.chat,
            parent_id=parent.id if parent else None,
            text="",
            status="pending",
        )
        if parent is not None:
            line = lines.reply_line(mark, identity.name, parent.id, row.id, text)
        else:
            line = lines.message_line(mark, identity.name, identity.where, row.id, text)
        records.update(row.id, now, text=line)
        native_parent = (
            parent.platform_message_id
            if parent is not None and parent.chat == settings.chat
            else None
        )
        delivery = await deliver_to_owner(
            config,
            settings,
            store,
            Outbound(
                Address(settings.account, settings.chat),
                line,
                reply_to=native_parent,
                quiet=kind == "fyi",
            ),
        )
        records.update(
            row.id,
            time.time(),
            status=delivery.status,
            platform_message_id=delivery.platform_message_id,
            reason=delivery.reason,
        )
        return NotifyResult(
            row.id,
            delivery.status,
            mark,
            identity.session_id,
            line,
            delivery.platform_message_id,
            False,
            delivery.reason,
            delivery.via,
        )
    finally:
        await store.close()


async def _append_to_burst(
    config: Config,
    settings: OwnerSettings,
    store: SQLiteStore,
    records: OwnerRecords,
    previous: OwnerMessage,
    mark: str,
    identity: SessionIdentity,
    text: str,
    now: float,
) -> NotifyResult:
    line = lines.message_line(mark, identity.name, identity.where, previous.id, text)
    combined = f"{previous.text}\n{line}"
    delivery = await deliver_to_owner(
        config,
        settings,
        store,
        Outbound(
            Address(previous.account, previous.chat),
            combined,
            kind="edit",
            target=previous.platform_message_id,
        ),
    )
    if delivery.status == "sent":
        records.update(previous.id, time.time(), text=combined)
    return NotifyResult(
        previous.id,
        delivery.status,
        mark,
        identity.session_id,
        line,
        previous.platform_message_id,
        True,
        delivery.reason,
        delivery.via,
    )


async def _request_permission(
    config: Config,
    settings: OwnerSettings,
    identity: SessionIdentity,
    request_id: str,
    tool_name: str,
    description: str,
) -> str:
    store = open_sqlite_store(config)
    try:
        records = OwnerRecords(store.db)
        now = time.time()
        mark = records.mark_for(identity, now)
        row = records.insert_message(
            now,
            session_id=identity.session_id,
            direction="out",
            kind="permission",
            account=settings.account,
            chat=settings.chat,
            text="",
            status="pending",
            meta={
                "request_id": request_id,
                "tool_name": tool_name,
                "expires_at": now + settings.permission_ttl,
            },
        )
        line = lines.permission_line(mark, identity.name, tool_name, description, row.id)
        records.update(row.id, now, text=line)
        delivery = await deliver_to_owner(
            config,
            settings,
            store,
            Outbound(Address(settings.account, settings.chat), line),
        )
        records.update(
            row.id,
            time.time(),
            status=delivery.status,
            platform_message_id=delivery.platform_message_id,
            reason=delivery.reason,
        )
        if delivery.status == "failed":
            raise OwnerError(f"the permission prompt was not delivered: {delivery.reason}")
        return row.id
    finally:
        await store.close()


# the hand-off ------------------------------------------------------------------------


def open_sqlite_store(config: Config) -> SQLiteStore:
    """Open the config's store; the owner tables are SQLite tables (PostgreSQL: not yet)."""
    if config.store.url:
        raise OwnerError(
            "the owner plugin keeps its tables in the SQLite store; [store] url (PostgreSQL)"
            " is not supported by it yet: use [store] path"
        )
    store = open_config_store(config)
    assert isinstance(store, SQLiteStore)
    return store


async def deliver_to_owner(
    config: Config, settings: OwnerSettings, store: SQLiteStore, outbound: Outbound
) -> Delivery:
    """Send one outbound to the owner: through a running serve when one answers, else directly.

    A running `serve` owns the account's connection, so it is asked first over
    the control socket (op ``owner.deliver``); when none answers the send goes
    out directly through the account's adapter. Either way it is recorded in the
    same store (record before send, outcome after).
    """
    from backchannel.control import (
        ControlError,
        ControlLost,
        ControlRefused,
        ControlUnavailable,
        call,
    )

    try:
        result = await call(
            config,
            DELIVER_OP,
            timeout=settings.timeout,
            account=outbound.address.account,
            chat=outbound.address.chat,
            text=outbound.text,
            kind=outbound.kind,
            reply_to=outbound.reply_to,
            edit_target=outbound.target,
            quiet=outbound.quiet,
        )
    except ControlRefused as error:
        # not this user's serve listening: nothing was sent to it, nor is sent around it
        return Delivery("failed", None, str(error), "serve")
    except ControlUnavailable:
        return await _deliver_directly(config, settings, store, outbound)
    except ControlError as error:
        return Delivery("failed", None, f"serve refused the send: {error}", "serve")
    except TimeoutError:
        return Delivery(
            "uncertain", None, f"serve did not answer within {settings.timeout:g}s", "serve"
        )
    except ControlLost as error:
        # serve took the send and stopped before answering: never sent again directly
        return Delivery("uncertain", None, str(error), "serve")
    return Delivery(
        str(result.get("status") or "uncertain"),
        result.get("platform_message_id"),
        result.get("reason"),
        "serve",
    )


DELIVER_OP = "owner.deliver"


async def deliver_in_serve(board: Any, args: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``owner.deliver`` control op: send one outbound through this serve's account."""
    account = board.accounts.get(str(args["account"]))
    if account is None:
        raise OwnerError(f"this serve has no account {args['account']!r}")
    kind = str(args.get("kind") or "message")
    if kind not in ("message", "edit"):
        raise OwnerError(f"owner.deliver sends messages and edits, not {kind!r}")
    address = Address(account.name, str(args["chat"]))
    outbound = Outbound(
        address,
        str(args["text"]),
        kind=kind,  # type: ignore[arg-type]
        reply_to=_optional(args.get("reply_to")),
        target=_optional(args.get("edit_target")),
        quiet=bool(args.get("quiet")),
    )
    conversation = await board.store.ensure_conversation(address)
    try:
        result = await account.deliverer.deliver(conversation, outbound)
    except Rejected as error:  # longer than one send holds: nothing recorded
        return {"status": "failed", "platform_message_id": None, "reason": error.reason}
    receipt = result.receipt
    return {
        "status": result.status,
        "platform_message_id": receipt.platform_message_id if receipt is not None else None,
        "reason": result.entry.reason,
    }


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


async def _deliver_directly(
    config: Config, settings: OwnerSettings, store: SQLiteStore, outbound: Outbound
) -> Delivery:
    account = config.accounts[settings.account]
    for secret in account.secrets:
        register_secret(secret)
    try:
        adapter = build_adapter(config, account)
    except ConfigError as error:
        # typically a ${VAR} this environment (an agent's shell) does not have: serve has it
        raise OwnerError(
            f"no serve answers on the store {config.store.path}, and account"
            f" {settings.account!r} cannot send from here: {error}"
            " (start `backchannel serve`, or export the account's secrets)"
        ) from None
    try:
        conversation = await store.ensure_conversation(outbound.address)
        result = await Deliverer(store, adapter).deliver(conversation, outbound)
    except Rejected as error:  # longer than one send holds: nothing recorded
        return Delivery("failed", None, error.reason, "direct")
    finally:
        await adapter.stop()
    receipt = result.receipt
    return Delivery(
        result.status,
        receipt.platform_message_id if receipt is not None else None,
        result.entry.reason,
        "direct",
    )


def tell_owner_parked(parked: InboxItem | Sequence[InboxItem]) -> None:
    """Tell the owner that each item was offered 3 times and never confirmed.

    Each item is told through its own config and store (one inbox folder holds the
    markers of every store that delivers to it). Bounded as a whole by the
    shortest `owner.timeout`, however many there are: the hook that parks them must
    finish well within the coding tool's own hook timeout.
    """
    from backchannel.config import load_config

    items = [parked] if isinstance(parked, InboxItem) else list(parked)
    if not items:
        return
    groups: dict[str | None, list[InboxItem]] = {}
    for item in items:
        groups.setdefault(item.config, []).append(item)
    plans = []
    for path, group in groups.items():
        config = load_config(path, strict_env=False)  # serve has the secrets
        plans.append((config, OwnerSettings.from_config(config), group))
    timeout = min(settings.timeout for _, settings, _ in plans)
    told: list[Delivery] = []

    async def send() -> None:
        for config, settings, group in plans:
            store = open_sqlite_store(config)
            try:
                records = OwnerRecords(store.db)
                for item in group:
                    mark, name = records.session(item.session_id)
                    told.append(
                        await deliver_to_owner(
                            config,
                            settings,
                            store,
                            Outbound(
                                Address(settings.account, settings.chat),
                                lines.parked_line(mark, name, item.id),
                            ),
                        )
                    )
            finally:
                await store.close()

    async def bounded() -> None:
        await asyncio.wait_for(send(), timeout)

    try:
        asyncio.run(bounded())
    except TimeoutError:
        raise OwnerError(
            f"gave up after {timeout:g}s (owner.timeout) with"
            f" {len(items) - len(told)} of {len(items)} notice(s) not sent"
        ) from None
    failed = [delivery for delivery in told if delivery.status != "sent"]
    if failed:
        raise OwnerError(f"the notice was {failed[0].status}: {failed[0].reason}")

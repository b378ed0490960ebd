"""Several `serve --worker NAME` processes sharing one PostgreSQL store.

- **Account leases.** An account whose platform allows one receiver at a time
  (Telegram polling, Slack Socket Mode, Discord gateway, tiny.place mailbox, the
  web chat's sockets) runs on exactly one worker: the one holding its lease row.
  Leases last `lease_ttl` seconds and are renewed by every heartbeat (each
  `heartbeat` seconds); a dead worker's lease lapses, and the next heartbeat of
  a live worker takes it over: takeover within ``lease_ttl + heartbeat`` seconds
  (10 + 3 = 13 s by default). An adapter says it can be served by every worker
  behind a load balancer (Telegram webhook, Slack Events API) with
  ``served_by_every_worker = True``.
- **Run claims.** Before a worker runs a conversation's agent it claims the
  conversation in the database; a live claim held elsewhere means "that worker
  is on it, and will do the follow-up run when it is done". Claims are renewed
  by heartbeats, so a dead worker's claims lapse like its leases.
- **Sends** go through the adapter of the worker running the conversation.
  Conversations of a leased account run only on the lease holder, so their sends
  use the connection it owns; webhook accounts' sends are plain API calls any
  worker makes. A send into a leased account from elsewhere (a run's
  `send_to_conversation` or `ask_agent`, an operator's `backchannel send`) is
  recorded where it is asked for and **handed to the lease holder**
  (`send_elsewhere`): the holder takes it, sends it through its connection and
  records the outcome, which the asker awaits. Not taken within
  `take_within` seconds (no live holder), it is withdrawn: not sent.
- **Recovery.** A worker whose heartbeat is older than `lease_ttl` and that did
  not stop cleanly is recovered by the first live worker to notice: its pending
  sends become uncertain and its running runs interrupted, once.
- **Wake-ups.** A worker that releases leases (a clean stop, a rolling restart)
  sends a NOTIFY so the others take over at once; each worker LISTENs on a
  dedicated connection, and every heartbeat also polls (the fallback when
  notifications are lost): leases to take, unanswered conversations it may run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

import attrs

from .logcount import CountedLog

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .model import Conversation, Outbound
    from .outbound import Deliverer, DeliveryResult
    from .store.base import OutboxEntry
    from .store.postgres import PostgresStore
    from .switchboard import Switchboard

__all__ = [
    "DEFAULT_HEARTBEAT",
    "DEFAULT_LEASE_TTL",
    "WorkerCoordinator",
    "send_elsewhere",
    "served_by_every_worker",
]

log = logging.getLogger("backchannel.workers")

DEFAULT_LEASE_TTL = 10.0
DEFAULT_HEARTBEAT = 3.0


def served_by_every_worker(adapter: Any) -> bool:
    """True when every worker may receive for this adapter (webhooks behind a load balancer)."""
    return bool(getattr(adapter, "served_by_every_worker", False))


def handover_bound(lease_ttl: float, heartbeat: float) -> float:
    """How long a handed-over send waits for the account's holder to take it: a takeover
    (a dead holder's lease lapsing, a live worker taking it) fits within it."""
    return lease_ttl + heartbeat + 5.0


DEFAULT_TAKE_WITHIN = handover_bound(DEFAULT_LEASE_TTL, DEFAULT_HEARTBEAT)
#: how many handed-over sends a worker has taken and not finished at once (one per
#: conversation): a holder that dies leaves no more than these uncertain, one per
#: conversation at most (the rest wait for the next holder)
SENDS_IN_FLIGHT = 8
#: how long the asker waits for the outcome of a send its holder took (its retries and
#: rate-limit waits are bounded well within this; a dead holder's is recovered sooner)
OUTCOME_WITHIN = 900.0


async def send_elsewhere(
    store: PostgresStore,
    deliverer: Deliverer,
    conversation: Conversation,
    outbound: Outbound,
    *,
    run_id: int | None = None,
    seen_seq: int | None = None,
    recorded: Callable[[OutboxEntry], Awaitable[None]] | None = None,
    take_within: float = DEFAULT_TAKE_WITHIN,
) -> DeliveryResult:
    """Send `outbound` through an account whose connection another worker holds.

    Recorded here as any send is (the run's claim fences it, `recorded` runs),
    then handed to the account's lease holder, which sends it and records the
    outcome; this returns that outcome. Not taken within `take_within` seconds
    while no live holder keeps it waiting (`keep_handoffs_waiting`), it is
    withdrawn and reported not sent. Cancelled while waiting, it is
    withdrawn if no one has taken it yet.
    """
    from .outbound import DeliveryResult

    account = conversation.address.account
    if recorded is None:
        # recorded and handed over in one transaction: a crash between cannot strand it
        entry = await deliverer.record(
            conversation,
            outbound,
            run_id,
            seen_seq,
            hand_to=(account, outbound.quiet, take_within, True),
        )
    else:
        # what `recorded` writes (an ask's row) must be there before the holder can send:
        # handed over with the record but not ready, and released once it is written. A
        # crash between leaves a hand-over no holder takes, failed at its deadline (or
        # by this worker's recovery), never a pending row no one would ever settle
        entry = await deliverer.record(
            conversation,
            outbound,
            run_id,
            seen_seq,
            recorded,
            hand_to=(account, outbound.quiet, take_within, False),
        )
    if isinstance(entry, DeliveryResult):
        return entry
    if recorded is not None:
        await store.release_handoff(entry.id)
    started = time.monotonic()
    delay = 0.02
    try:
        while True:
            entry, taken_by = await store.handoff_state(entry.id)
            if entry.status != "pending":
                return DeliveryResult(entry)
            waited = time.monotonic() - started
            if taken_by is None and waited > take_within:
                # withdrawn once past its deadline, which a live holder busy with a send of
                # this conversation (or with all its places) keeps moving, or, whatever the
                # deadline, after OUTCOME_WITHIN; None: taken just now, or kept waiting
                withdrawn = await store.withdraw_handoff(
                    entry.id,
                    f"not sent: no worker holding account {account!r} took the send within"
                    f" {take_within:g}s (is a worker serving it running?)",
                    only_late=waited <= OUTCOME_WITHIN,
                )
                if withdrawn is not None:
                    return DeliveryResult(withdrawn)
            elif waited > OUTCOME_WITHIN:
                reason = f"worker {taken_by} took it and has not said how it went"
                return DeliveryResult(attrs.evolve(entry, status="uncertain", reason=reason))
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.5)
    except asyncio.CancelledError:
        # a stop or a run's timeout: a send no one has taken is not sent after all
        with contextlib.suppress(Exception):
            await asyncio.shield(
                store.withdraw_handoff(entry.id, "not sent: withdrawn (the asker stopped)")
            )
        raise


@attrs.define
class Budget:
    """What is left of one heartbeat's time (see WorkerCoordinator._beat)."""

    until: float
    #: something was cut short already (one line a beat)
    cut: bool = False


class WorkerCoordinator:
    """One worker's side of leases, claims, heartbeats and wake-ups."""

    def __init__(
        self,
        board: Switchboard,
        store: PostgresStore,
        *,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        heartbeat: float = DEFAULT_HEARTBEAT,
    ):
        if heartbeat * 2 > lease_ttl:
            raise ValueError(
                f"the heartbeat ({heartbeat:g}s) must be at most half the lease ttl"
                f" ({lease_ttl:g}s), or live workers would lose their leases"
            )
        self.board = board
        self.store = store
        self.name = store._me()
        self.lease_ttl = lease_ttl
        self.heartbeat = heartbeat
        #: how long a send handed from here waits for an account's holder to take it
        self.take_within = handover_bound(lease_ttl, heartbeat)
        #: exclusive accounts whose adapter runs here now
        self.owned: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.stopping = False
        #: taking sends handed to this worker's accounts, and the sends taken in flight
        self._taking: asyncio.Task[None] | None = None
        self._take_again = False
        self._sending: set[asyncio.Task[None]] = set()
        #: when this worker's last heartbeat went through (monotonic), and until when it
        #: takes no other worker for dead (see _beat)
        self._beat_at: float | None = None
        self._back_until = 0.0
        #: a database away fails every beat and wake-up: one line, then one a minute
        self._beats_failing = CountedLog(log)
        self._wakeups_failing = CountedLog(log, level=logging.INFO)
        self._failing_since: float | None = None
        #: set once a stop has let the runs finish: no more sends are taken (until then a
        #: stopping worker still holds its leases, and takes what is handed to them)
        self._closing = False

    # which accounts ----------------------------------------------------------
    def exclusive(self) -> list[str]:
        return [
            name
            for name, account in self.board.accounts.items()
            if not served_by_every_worker(account.adapter)
        ]

    def shared(self) -> list[str]:
        return [
            name
            for name, account in self.board.accounts.items()
            if served_by_every_worker(account.adapter)
        ]

    def may_run(self, account: str) -> bool:
        """True when this worker may run conversations of `account` (and send on it)."""
        wiring = self.board.accounts.get(account)
        if wiring is None:
            return False
        return served_by_every_worker(wiring.adapter) or account in self.owned

    # lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        """Register, recover dead workers, take free leases; then heartbeat and listen."""
        await self.store.register_worker(socket.gethostname(), os.getpid())
        await self._beat()
        self._tasks = [
            asyncio.create_task(self._heartbeats(), name=f"worker {self.name} heartbeat"),
            asyncio.create_task(self._listen(), name=f"worker {self.name} listen"),
        ]

    async def drain_sends(self, timeout: float) -> None:
        """At a stop, after the runs and before the adapters stop: take no more handed-over
        sends, let the ones taken finish (bounded by `timeout`), then cancel the rest
        (recorded uncertain, or failed when not yet sent)."""
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            # again after each wait: a take in progress starts its sends when it is done
            pending = {task for task in (self._taking, *self._sending) if task and not task.done()}
            if not pending:
                return
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait(pending, timeout=left)
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=5)

    async def stop(self) -> None:
        """Stop the loops and release every lease and claim (the adapters are stopped first)."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # bounded: a connection stuck in the network must not hold a stop up
            _, stuck = await asyncio.wait(self._tasks, timeout=5)
            for task in stuck:
                log.warning("worker %s: %s did not stop within 5 s", self.name, task.get_name())
        self._tasks = []
        try:
            await self.store.stop_worker()
        except Exception:
            log.exception(
                "worker %s could not release its leases (they lapse on their own)", self.name
            )

    # run claims (the scheduler's hooks) --------------------------------------
    async def claim(self, conversation_id: int) -> bool:
        return await self.store.claim_run(conversation_id, self.lease_ttl)

    async def release(self, conversation_id: int) -> None:
        await self.store.release_run(conversation_id)

    # the loops ---------------------------------------------------------------
    async def _heartbeats(self) -> None:
        while True:  # until stop() cancels it: claims of runs finishing at a stop stay renewed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.heartbeat)
            self._wake.clear()
            try:
                await self._beat()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                self._beats_failing.note(
                    "worker %s heartbeat failed (will retry): %s", self.name, error
                )
                continue
            if self._failing_since is not None:
                log.warning(
                    "worker %s heartbeats again, after %.0fs of failing",
                    self.name,
                    time.monotonic() - self._failing_since,
                )
                self._failing_since = None

    async def _beat(self) -> None:
        held = await self.store.heartbeat(self.lease_ttl)
        at = time.monotonic()
        # (from the last beat's end to this one's: one that waited out the outage in the
        # pool's queue began before it)
        if self._beat_at is not None and at - self._beat_at > self.lease_ttl:
            # this worker could not reach the database for longer than a lease (an outage,
            # a stall): its peers may be coming back from the same outage, alive but not
            # heartbeating yet. For one lease time it takes none of them for dead, nor
            # their accounts (before, the first worker back "recovered" a live peer)
            self._back_until = at + self.lease_ttl
            log.warning(
                "worker %s reached the database again after %.0fs; waiting %gs before"
                " taking any other worker for dead",
                self.name,
                at - self._beat_at,
                self.lease_ttl,
            )
        self._beat_at = at
        for account in sorted(self.owned - held):
            log.warning(
                "worker %s lost the lease of account %s (missed heartbeats): stopping it",
                self.name,
                account,
            )
            await self._stop_account(account)
        # the rest of the beat shares one budget, so the next heartbeat comes well within
        # the lease whatever waits on a lock (a table locked, a stalled peer's rows)
        budget = Budget(at + max(self.lease_ttl / 2 - self.heartbeat, self.lease_ttl / 10))
        if at >= self._back_until:
            dead = await self._bounded(budget, "recovering dead workers", self._recover, {})
            for name, recovered in dead.items():
                log.warning(
                    "worker %s stopped heartbeating: %d pending send(s) marked uncertain,"
                    " its running runs interrupted",
                    name,
                    len(recovered),
                )
            for account in self.exclusive():
                if account in self.owned or self.stopping:
                    continue
                previous = await self._bounded(
                    budget, f"taking account {account}", self._acquire(account), None
                )
                if previous is None:
                    continue
                if previous:
                    log.warning(
                        "worker %s took over account %s from %s", self.name, account, previous
                    )
                await self._start_account(account)
        # hand-overs waiting for a place here, or behind a send of their conversation, wait
        # as long as this holder lives: their deadline is for a holder that is gone
        started = [name for name in self.owned if self.board.accounts[name].started]
        await self._bounded(budget, "keeping hand-overs", self._keep_waiting(started), None)
        await self._bounded(budget, "looking for owed runs", self._poke_unanswered, None)
        self.take_sends()  # the fallback for a wake-up that was lost

    def _recover(self) -> Awaitable[dict[str, list[OutboxEntry]]]:
        return self.store.recover_dead_workers(self.lease_ttl)

    def _acquire(self, account: str) -> Callable[[], Awaitable[str | None]]:
        return lambda: self.store.acquire_lease(account, self.lease_ttl)

    def _keep_waiting(self, started: list[str]) -> Callable[[], Awaitable[None]]:
        return lambda: self.store.keep_handoffs_waiting(started, self.take_within)

    async def _bounded(
        self, budget: Budget, what: str, work: Callable[[], Awaitable[Any]], empty: Any
    ) -> Any:
        """`work()` within what is left of the beat's `budget`, else cut short (a table
        locked, a peer's rows another transaction holds, must not hold up the next
        heartbeat: its leases would lapse, and live workers would take each other for
        dead). Tried again at the next beat; `empty` meanwhile."""
        left = budget.until - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            async with asyncio.timeout(left):
                return await work()
        except TimeoutError:
            if not budget.cut:
                log.warning(
                    "worker %s: its heartbeat ran out of time at %s (the database slow, or"
                    " a table locked); the rest is tried again at the next beat",
                    self.name,
                    what,
                )
            budget.cut = True
            return empty

    async def _start_account(self, name: str) -> None:
        account = self.board.accounts[name]
        try:
            await account.adapter.start(account.context)
        except Exception:
            log.exception("account %s failed to start on worker %s", name, self.name)
            await self.store.release_leases([name])
            return
        account.started = True
        self.owned.add(name)
        await self.board._remember_me(account)
        wake = self.board.on_wake.get("asks")
        if wake is not None:  # reports and notices owed to its conversations are made here now
            wake()
        self.take_sends()  # sends handed to it while it had no live holder

    async def _stop_account(self, name: str) -> None:
        self.owned.discard(name)
        account = self.board.accounts[name]
        if account.started:
            account.started = False
            try:
                await account.adapter.stop()
            except Exception:
                log.exception("account %s failed to stop cleanly", name)

    async def _poke_unanswered(self) -> None:
        """The polling fallback: run what is owed here and nobody is running.

        Only conversations quiet for longer than their debounce bound plus the lease
        time: newer ones are in the hands of the worker that received them (its debounce
        decides when they run), and a dead worker's become old enough by the time its
        claims lapse.
        """
        if self.stopping:
            return
        wall = time.time()
        for conversation in await self.store.unhandled():
            account = conversation.address.account
            if not self.may_run(account):
                continue
            grace = self.board.accounts[account].binding.max_wait + self.lease_ttl
            if conversation.active_at > wall - grace:
                continue
            self.board.scheduler.poke(conversation.id, account)

    async def _listen(self) -> None:
        """LISTEN for wake-ups; on any failure fall back to the heartbeat's polling and retry."""
        import psycopg

        from .store.postgres import WAKE_CHANNEL

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.store.url, autocommit=True, connect_timeout=10
                ) as connection:
                    await connection.execute(f"LISTEN {WAKE_CHANNEL}")
                    while True:  # short waits: a stop cancels between them, not inside one
                        async for notification in connection.notifies(timeout=self.heartbeat):
                            self._on_notification(notification.payload)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._wakeups_failing.note(
                    "worker %s: wake-ups unavailable (%s); polling meanwhile", self.name, error
                )
            await asyncio.sleep(self.heartbeat)

    # sends handed over to this worker's accounts ------------------------------
    def take_sends(self) -> None:
        """Take and send what other processes handed to the accounts held here (once at
        a time: a call while taking makes the taking look again when it is done)."""
        if self._closing:
            return
        if self._taking is not None and not self._taking.done():
            self._take_again = True
            return
        self._taking = asyncio.create_task(self._take_sends(), name=f"worker {self.name} sends")

    async def _take_sends(self) -> None:
        while not self._closing:
            self._take_again = False
            room = SENDS_IN_FLIGHT - len(self._sending)
            if room <= 0:
                return  # a send that finishes looks again
            held = [name for name in self.owned if self.board.accounts[name].started]
            try:
                taken = await self.store.take_handoffs(held, room)
            except Exception as error:
                log.warning("worker %s could not take handed-over sends: %s", self.name, error)
                return  # the next heartbeat looks again
            for entry, quiet in taken:
                task = asyncio.create_task(self._send_taken(entry, quiet))
                self._sending.add(task)
                task.add_done_callback(self._sent)
            if not taken and not self._take_again:
                return

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self.take_sends()  # room for one more

    async def _send_taken(self, entry: OutboxEntry, quiet: bool) -> None:
        from .model import Outbound

        try:
            conversation = await self.store.conversation(entry.conversation_id)
            account = self.board.accounts[conversation.address.account]
            outbound = Outbound(
                conversation.address,
                entry.text,
                kind=entry.kind,  # type: ignore[arg-type]
                reply_to=entry.reply_to,
                target=entry.target,
                quiet=quiet,
                origin=entry.origin,
            )
        except (Exception, asyncio.CancelledError) as error:
            # nothing went out yet: not sent (a stop's cancel included)
            stopped = isinstance(error, asyncio.CancelledError)
            if not stopped:
                log.exception("worker %s: a handed-over send could not be prepared", self.name)
            why = "the worker holding the account stopped first" if stopped else repr(error)
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self.store.mark_failed(entry.id, f"not sent: {why}", never_sent=True)
                )
            if stopped:
                raise
            return
        try:
            result = await account.deliverer.attempt(conversation, outbound, entry)
        except Exception:
            # the store failed while recording the outcome. Left pending, it would hold back
            # its conversation's next hand-overs (one out at a time) until this worker's
            # recovery: recorded as uncertain (it may have gone out), retried while the
            # database is away (a failover takes seconds)
            log.exception("worker %s: a handed-over send failed to record", self.name)
            await self._doubt(entry.id)
            return
        log.info(
            "worker %s sent #%s handed over for %s: %s",
            self.name,
            entry.id,
            conversation.address.key,
            result.status,
        )

    async def _doubt(self, outbox_id: int) -> None:
        """Record a taken send whose outcome could not be recorded as uncertain, unless an
        outcome was recorded after all; retried for about four minutes."""
        for pause in (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0):
            await asyncio.sleep(pause)
            try:
                now, _taker = await self.store.handoff_state(outbox_id)
                if now.status == "pending":
                    await self.store.mark_uncertain(
                        outbox_id, "the outcome could not be recorded: it may have been sent"
                    )
                return
            except Exception as error:
                log.warning(
                    "worker %s: send #%s still cannot be recorded (%s); trying again",
                    self.name,
                    outbox_id,
                    error,
                )
        log.error("worker %s: gave up recording send #%s (a restart does)", self.name, outbox_id)

    def _on_notification(self, payload: str) -> None:
        if payload == "lease":  # a worker let leases go: take them now, not at the next beat
            self._wake.set()
        elif payload == "sends":  # another process handed a send over: maybe ours
            self.take_sends()
        elif (wake := self.board.on_wake.get(payload)) is not None:
            wake()

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
  worker makes.
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

if TYPE_CHECKING:
    from .store.postgres import PostgresStore
    from .switchboard import Switchboard

__all__ = ["DEFAULT_HEARTBEAT", "DEFAULT_LEASE_TTL", "WorkerCoordinator", "served_by_every_worker"]

log = logging.getLogger("backchannel.workers")

DEFAULT_LEASE_TTL = 10.0
DEFAULT_HEARTBEAT = 3.0


def served_by_every_worker(adapter: Any) -> bool:
    """True when every worker may receive for this adapter (webhooks behind a load balancer)."""
    return bool(getattr(adapter, "served_by_every_worker", False))


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
        #: exclusive accounts whose adapter runs here now
        self.owned: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.stopping = False

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
                log.warning("worker %s heartbeat failed (will retry): %s", self.name, error)

    async def _beat(self) -> None:
        held = await self.store.heartbeat(self.lease_ttl)
        for account in sorted(self.owned - held):
            log.warning(
                "worker %s lost the lease of account %s (missed heartbeats): stopping it",
                self.name,
                account,
            )
            await self._stop_account(account)
        for name, recovered in (await self.store.recover_dead_workers(self.lease_ttl)).items():
            log.warning(
                "worker %s stopped heartbeating: %d pending send(s) marked uncertain,"
                " its running runs interrupted",
                name,
                len(recovered),
            )
        for account in self.exclusive():
            if account in self.owned or self.stopping:
                continue
            previous = await self.store.acquire_lease(account, self.lease_ttl)
            if previous is None:
                continue
            if previous:
                log.warning("worker %s took over account %s from %s", self.name, account, previous)
            await self._start_account(account)
        await self._poke_unanswered()

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
                log.info(
                    "worker %s: wake-ups unavailable (%s); polling meanwhile", self.name, error
                )
            await asyncio.sleep(self.heartbeat)

    def _on_notification(self, payload: str) -> None:
        if payload == "lease":  # a worker let leases go: take them now, not at the next beat
            self._wake.set()
        elif (wake := self.board.on_wake.get(payload)) is not None:
            wake()

"""The scheduler: when each conversation's agent runs.

At most one run per conversation at a time; a debounce window (last message
wins, bounded by a maximum wait) turns a burst into one run; messages that
arrive during a run lead to one follow-up run unless the agent took them with
`run.new_messages()`; a global limit bounds concurrent runs. Runs that raise,
hang past their timeout, or cannot even be built are recorded, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from attrs import define, field

from .errors import log_failure
from .logcount import CountedLog
from .model import Address, Conversation
from .policy import BOT_TURNS
from .runs import BotTurnsSpent
from .store import Store

__all__ = ["Busy", "RunClaims", "Scheduler"]

log = logging.getLogger("backchannel.scheduler")
#: pauses before each try at recording a run's end (the database away for a moment)
FINISH_RUN_PAUSES = (0.0, 0.5, 2.0, 5.0)


class RunClaims(Protocol):
    """Claims of conversations in a store shared by several workers (one run at a time)."""

    async def claim(self, conversation_id: int) -> bool: ...

    async def release(self, conversation_id: int) -> None: ...


class Busy:
    """Counts work in flight (queued ingests, armed timers, runs) so callers can await idle."""

    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self._count += 1
        self._idle.clear()

    def leave(self) -> None:
        self._count -= 1
        if self._count == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Return once nothing is in flight (re-checked after one loop turn)."""
        while True:
            await self._idle.wait()
            await asyncio.sleep(0)
            if self._idle.is_set():
                return


@define
class _Slot:
    """Scheduling state of one conversation (memory only; the store has the truth)."""

    #: the account the conversation belongs to (set by poke)
    account: str = ""
    running: bool = False
    #: asked for again while running: only then can a follow-up run be owed
    poked_while_running: bool = False
    #: when the armed timer should really start the run (later messages push it back)
    due: float = 0.0
    #: consecutive runs the store could not record (drives the retry backoff)
    failures: int = 0
    timer: asyncio.TimerHandle | None = None
    first_poke: float | None = None
    notes: list[str] = field(factory=list)
    #: poked with `again` during a run: run once more afterwards, triggers or not
    again: bool = False


def _bot_turns(account: Any, chat: str) -> int:
    """The bot_turns limit of a conversation in `chat` (0: none): the binding's, else the
    channel's default (none where every peer is an agent: there no person is the norm)."""
    limit: int | None = account.binding.policy.bot_turns_in(chat)
    if limit is not None:
        return limit
    return 0 if account.adapter.capabilities.agent_peers else BOT_TURNS


def _backoff(failures: int) -> float:
    """Seconds to wait before retrying after `failures` consecutive failures."""
    return 0.0 if failures == 0 else min(0.5 * 2 ** (failures - 1), 60.0)


class Scheduler:
    """Runs each conversation's agent when its messages call for it."""

    def __init__(
        self,
        store: Store,
        accounts: Mapping[str, Any],
        busy: Busy,
        counters: dict[str, int],
        *,
        max_concurrent_runs: int = 8,
    ):
        self.store = store
        #: account name -> the switchboard's wiring (adapter, binding, builder)
        self.accounts = accounts
        self.busy = busy
        self.counters = counters
        self._max_runs = max_concurrent_runs
        self._runs = 0
        #: conversations whose run is due but waits for one of the `max_runs` places; a
        #: queue, not a task apiece: a burst over 10,000 conversations must not hold
        #: 10,000 waiting tasks (and the memory they leave behind)
        self._ready: deque[int] = deque()
        self._slots: dict[int, _Slot] = {}
        #: the most slots held at once since `_slots` was last copied (see _forget)
        self._slots_peak = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        #: checked before each run: a gate that returns True took the conversation's new
        #: messages itself (an ask's correlated answer), so no agent run happens for them
        self.gates: list[Callable[[Conversation], Awaitable[bool]]] = []
        #: with several workers on one store: a conversation runs where it is claimed
        self.claims: RunClaims | None = None
        #: a runaway bot is stopped at each of its messages: the first line, then counted
        self._bot_turns_log = CountedLog(log)

    def add_note(self, conversation_id: int, note: str) -> None:
        """Add a line to the framing of this conversation's next run."""
        self._slot(conversation_id).notes.append(note)

    def stop(self) -> None:
        """Start no new runs; disarm pending debounce timers."""
        self._stopping = True
        while self._ready:  # never started: the store still owes them (runs after a restart)
            self._slot(self._ready.popleft()).running = False
            self.busy.leave()
        for slot in self._slots.values():
            if slot.timer is not None:
                slot.timer.cancel()
                slot.timer = None
                self.busy.leave()

    async def drain(self, timeout: float) -> None:
        """Let in-flight runs finish within `timeout`, then cancel what is left."""
        pending = [t for t in self._tasks if not t.done()]
        if not pending:
            return
        _, still = await asyncio.wait(pending, timeout=timeout)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=2)

    def poke(
        self, conversation_id: int, account: str, *, pause: float = 0.0, again: bool = False
    ) -> None:
        """Ask for a run of this conversation (debounced; one at a time).

        `pause` delays it at least that long (a backoff after failures). A poke
        during a run is dropped (the run's end looks for unhandled messages)
        unless `again`: work a gate owes the conversation (an answer to report).
        """
        if self._stopping:
            return
        slot = self._slot(conversation_id)
        slot.account = account
        if slot.running:
            slot.poked_while_running = True
            slot.again = slot.again or again
            return
        binding = self.accounts[account].binding
        loop = asyncio.get_running_loop()
        now = loop.time()
        if slot.first_poke is None:
            slot.first_poke = now
        delay = min(binding.debounce, max(slot.first_poke + binding.max_wait - now, 0.0))
        slot.due = now + max(delay, pause)
        if slot.timer is None:
            self.busy.enter()
            slot.timer = loop.call_at(slot.due, self._fire, conversation_id)
        # else: the armed timer fires at its old time and re-arms itself for `due` (one
        # timer per quiet period instead of a cancel and a new timer per message)

    def _fire(self, conversation_id: int) -> None:
        slot = self._slot(conversation_id)
        loop = asyncio.get_running_loop()
        if not self._stopping and slot.due > loop.time():
            slot.timer = loop.call_at(slot.due, self._fire, conversation_id)
            return
        slot.timer = None
        slot.first_poke = None
        if self._stopping:
            self.busy.leave()
            return
        slot.running = True
        self._ready.append(conversation_id)
        self._start_ready()

    def _start_ready(self) -> None:
        """Start due runs while fewer than `max_concurrent_runs` are running."""
        while self._ready and self._runs < self._max_runs and not self._stopping:
            self._runs += 1
            task = asyncio.create_task(self._run_conversation(self._ready.popleft()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run_conversation(self, conversation_id: int) -> None:
        slot = self._slot(conversation_id)
        account_name = slot.account
        account = self.accounts[account_name]
        failed = False
        claimed = False
        try:
            # another worker running it will do the follow-up run itself
            claimed = self.claims is None or await self.claims.claim(conversation_id)
            if claimed:
                await self._run_once(account, conversation_id, slot)
        except Exception:
            # the store refused to record the run (disk full, locked): count it, and retry
            # after a growing pause rather than at once, or this loop would spin
            failed = True
            self.counters["run_errors"] += 1
            log.exception("the run of conversation %s could not be recorded", conversation_id)
        finally:
            slot.running = False
            slot.failures = slot.failures + 1 if failed else 0
            poked, slot.poked_while_running = slot.poked_while_running, False
            try:
                if claimed and self.claims is not None:
                    await self.claims.release(conversation_id)
                if self._stopping:
                    pass
                elif not poked and not failed and self.claims is None:
                    # the run covered every trigger it was started for and none came since:
                    # nothing can be owed, no need to read the conversation back (with
                    # several workers another one may have taken triggers meanwhile)
                    if slot.timer is None and not slot.notes:
                        self._forget(conversation_id)
                elif claimed or failed:
                    conversation = await self.store.conversation(conversation_id)
                    again, slot.again = slot.again, False
                    if conversation.trigger_seq > conversation.handled_seq or again:
                        self.poke(conversation_id, account_name, pause=_backoff(slot.failures))
                    elif slot.timer is None and not slot.notes:
                        self._forget(conversation_id)
                elif slot.timer is None and not slot.notes:
                    self._forget(conversation_id)
            except Exception:
                log.exception("could not check conversation %s for follow-up", conversation_id)
            finally:
                self.busy.leave()
                # the place is given up last: never more run tasks than max_concurrent_runs
                self._runs -= 1
                self._start_ready()

    def _forget(self, conversation_id: int) -> None:
        """Drop an idle conversation's slot: memory stays bounded by active conversations."""
        self._slots.pop(conversation_id, None)
        # a dict keeps the table of its peak size: after a burst over many conversations,
        # copy it once most of them are idle again
        if self._slots_peak > 256 and len(self._slots) * 4 < self._slots_peak:
            self._slots = dict(self._slots)
            self._slots_peak = len(self._slots)

    async def _run_once(self, account: Any, conversation_id: int, slot: _Slot) -> None:
        conversation = await self.store.conversation(conversation_id)
        upto = conversation.last_seq
        for gate in self.gates:  # work owed besides triggers (an ask's answer to report)
            if await gate(conversation):
                await self.store.mark_handled(conversation_id, upto)
                return
        if conversation.trigger_seq <= conversation.handled_seq:
            # answered since it was poked: by another worker's run while this one waited for
            # the claim, or by a run while the adapters started (a restart pokes what was
            # owed before it). A run now would offer an answered message as its trigger.
            return
        notes, slot.notes = slot.notes, []
        try:
            run = await account.builder.build(
                conversation_id,
                conversation.trigger_seq,
                upto_seq=upto,
                notes=notes,
                conversation=conversation,
                bot_turns=_bot_turns(account, conversation.address.chat),
            )
        except BotTurnsSpent as spent:
            # two bots answering each other: recorded as a stopped run (shown by `runs` and
            # `show`), its messages count as handled, and the notes wait for the next run
            slot.notes[:0] = notes
            self._bot_turns_log.note("conversation %s: %s", conversation.address.key, spent)
            self.counters["bot_turns_spent"] += 1
            run_id = await self.store.begin_run(conversation_id, conversation.trigger_seq, upto)
            await self.store.finish_run(run_id, "stopped", str(spent), upto, handled_seq=upto)
            return
        except Exception as failure:
            # e.g. a plugin's framing or register_tools hook raised: record it and count the
            # messages as handled, or the follow-up check would retry the same failure forever
            log_failure(log, failure, "could not build a run for %s", conversation.address.key)
            self.counters["run_errors"] += 1
            run_id = await self.store.begin_run(conversation_id, conversation.trigger_seq, upto)
            await self.store.finish_run(
                run_id,
                "error",
                f"building the run failed: {type(failure).__name__}: {failure}",
                upto,
                handled_seq=upto,
            )
            return
        run_id = await self.store.begin_run(conversation_id, conversation.trigger_seq, upto)
        run.session.run_id = run_id
        self.counters["runs"] += 1
        typing = self._start_typing(account, conversation.address)
        status, error = "ok", None
        try:
            # in this task, not a new one (as wait_for would make): an agent that answers
            # without waiting costs no task, and no typing indicator goes out for it
            async with asyncio.timeout(account.binding.run_timeout):
                await account.binding.agent(run)
        except TimeoutError:
            status, error = "timeout", f"the agent ran past {account.binding.run_timeout:g}s"
        except asyncio.CancelledError:
            status, error = "cancelled", "the switchboard stopped during the run"
            raise
        except Exception as failure:
            status, error = "error", f"{type(failure).__name__}: {failure}"
            log_failure(log, failure, "agent failed in conversation %s", conversation.address.key)
        finally:
            if typing is not None:
                typing.cancel()
            if status != "ok":
                self.counters["run_errors"] += 1
            seen = max(upto, run.session.seen_seq)
            handled = None if status == "cancelled" else seen
            # a database away for a moment (a restart) must not leave the run "running"
            # for good: tried again a few times, but not while a stop waits for it
            pauses = (0.0,) if status == "cancelled" else FINISH_RUN_PAUSES
            for tries, pause in enumerate(pauses, 1):
                if pause:
                    await asyncio.sleep(pause)
                try:
                    await self.store.finish_run(run_id, status, error, seen, handled_seq=handled)
                    break
                except Exception as failure:
                    if tries == len(pauses):
                        raise
                    log.warning(
                        "run %s could not be recorded as finished (%s); trying again",
                        run_id,
                        failure,
                    )
            if status in ("error", "timeout"):
                await self._tell_run_failed(account, conversation.address, error or status)

    async def _tell_run_failed(self, account: Any, address: Address, reason: str) -> None:
        """Let a channel that can show it say the agent could not answer (adapter.run_failed)."""
        run_failed = getattr(account.adapter, "run_failed", None)
        if run_failed is None:
            return
        try:
            await run_failed(address, reason)
        except Exception as failure:  # a notice must never turn into a second failure
            log.warning("could not tell %s that its run failed: %s", address.key, failure)

    def _start_typing(self, account: Any, address: Address) -> asyncio.Task[None] | None:
        adapter = account.adapter
        if not adapter.capabilities.typing or not hasattr(adapter, "typing"):
            return None

        async def keep_typing() -> None:
            while True:
                try:
                    await adapter.typing(address)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    log.debug("typing indicator failed on %s: %s", address.key, error)
                await asyncio.sleep(4.0)

        return asyncio.create_task(keep_typing())

    def _slot(self, conversation_id: int) -> _Slot:
        slot = self._slots.get(conversation_id)
        if slot is None:
            slot = self._slots[conversation_id] = _Slot()
            if len(self._slots) > self._slots_peak:
                self._slots_peak = len(self._slots)
        return slot

"""The switchboard: accounts, the ingest pipeline with group commit, lifecycle.

::

    adapter ──raw──▶ ingest: normalize ─▶ policy ─▶ queue ─▶ one transaction per batch
                                                              │ committed: ingest returns
                                                              ▼
                                          scheduler.poke(conversation) ─▶ run (scheduler.py)
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from attrs import define, evolve, field

from .adapter import Adapter, AdapterContext, IngestResult, RouteTable
from .config import KEPT_WINDOWS
from .errors import ConfigError, NormalizeError, Rejected, StoreError
from .ingest import GroupCommit, RefusedData
from .model import Address, Conversation, Event, Message, Sender, from_json, to_json
from .outbound import Deliverer, DeliveryResult, channel_tools
from .plugins import get_plugin_manager
from .policy import Policy
from .runs import RESTART_NOTE, Agent, Run, RunBuilder, RunSession, WindowSettings
from .scheduler import Busy, Scheduler
from .secrets import register_secret
from .storable import storable_event
from .store import AppendResult, Inbound, OutboxEntry, Store
from .store.cache import LRUCache
from .tools import Tool
from .wire import BadPayload, dump_for_dead_letter, encodable, parse_json, repair_text

if TYPE_CHECKING:
    from .model import Outbound, OutboundKind
    from .server import HttpServer
    from .workers import WorkerCoordinator

__all__ = ["Binding", "InboundRouter", "RouteVerdict", "Service", "Switchboard"]

log = logging.getLogger("backchannel.switchboard")

_IGNORED = IngestResult("ignored")
#: characters of a dead letter's reason kept (normalizers quote the offending value)
MAX_REASON = 300

#: what an inbound router decided: None (ordinary message: bindings apply), "routed" (the
#: plugin took it: stored, never starts a run), "held" (refused: stored held, never shown)
RouteVerdict = Literal["routed", "held"] | None
#: sees each new inbound message of its account before the policy, inside ingest (before the
#: ack); it must be idempotent: a redelivered event is offered again
InboundRouter = Callable[[Event], Awaitable[RouteVerdict]]


def _taken(event: Event, verdict: RouteVerdict) -> Event:
    """`event` marked as taken by a plugin's router (meta ``routed``): it reached its reader
    another way (the owner plugin's inbox), so nothing else hands it on again."""
    return evolve(event, meta={**event.meta, "routed": True}) if verdict == "routed" else event


class Service(Protocol):
    """Plugin work that lives as long as a started switchboard (timers, caches)."""

    async def start(self, board: Switchboard) -> None: ...

    async def stop(self) -> None: ...


@define(init=False)
class Binding:
    """Which agent handles an account's conversations, and how."""

    agent: Agent
    policy: Policy = field(factory=Policy)
    window: WindowSettings = field(factory=WindowSettings)
    #: seconds of quiet before a run starts (last message wins) ...
    debounce: float = 0.0
    #: ... but never more than this after the first waiting message
    max_wait: float = 3.0
    run_timeout: float = 300.0
    name: str = "default"

    def __init__(
        self,
        agent: Agent,
        policy: Policy | None = None,
        window: WindowSettings | None = None,
        *,
        respond: str | None = None,
        access: str | None = None,
        allow: Iterable[str] = (),
        owner: str | None = None,
        bot_turns: int | None = None,
        debounce: float = 0.0,
        max_wait: float = 3.0,
        run_timeout: float = 300.0,
        name: str = "default",
    ):
        if policy is None:
            policy = Policy(
                access=access or "anyone",  # type: ignore[arg-type]
                allow=tuple(allow),
                owner=owner,
                respond=respond or "mention",  # type: ignore[arg-type]
                bot_turns=bot_turns,
            )
        self.__attrs_init__(
            agent, policy, window or WindowSettings(), debounce, max_wait, run_timeout, name
        )


@define
class _Account:
    name: str
    adapter: Adapter
    binding: Binding
    context: AccountContext
    deliverer: Deliverer
    builder: RunBuilder
    started: bool = False


class Switchboard:
    """Wires adapters, the store, policies and agents together."""

    def __init__(
        self,
        store: Store,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        public_url: str | None = None,
        max_concurrent_runs: int = 8,
        max_batch: int = 2000,
        stop_timeout: float = 10.0,
    ):
        self.store = store
        self.routes = RouteTable(public_url or f"http://{host}:{port or 0}")
        self._explicit_public_url = public_url is not None
        self.server: HttpServer | None = None
        if port is not None:
            from .server import HttpServer  # aiohttp's server: only a board that serves pays

            self.server = HttpServer(self.routes, host=host, port=port, health=self.health)
        self.url: str | None = None
        self.accounts: dict[str, _Account] = {}
        self.counters: dict[str, int] = {
            "ingested": 0,
            "stored": 0,
            "duplicate": 0,
            "ignored": 0,
            "held": 0,
            "malformed": 0,
            "runs": 0,
            "run_errors": 0,
            #: runs not started because the agent had answered bots bot_turns times in a row
            "bot_turns_spent": 0,
        }
        self._stop_timeout = stop_timeout
        self._group_commit = GroupCommit(store, max_batch=max_batch, on_commit=self._committed)
        self._busy = Busy()
        self.scheduler = Scheduler(
            store, self.accounts, self._busy, self.counters, max_concurrent_runs=max_concurrent_runs
        )
        self._started = False
        self._stopping = False
        #: who the agent was on each account when it last started (for previews without start)
        self._known_me: dict[str, Sender] = {}
        #: the lines runs made from unchanged rows, one bound for every account's builder: as
        #: many conversations as the store keeps windows for
        self._kept_lines: LRUCache[int, Any] = LRUCache(
            max(getattr(store, "kept_windows", KEPT_WINDOWS), 1)
        )
        #: more tools for runs: provider(account, session, conversation) -> tools (orchestration)
        self.run_tools: list[Callable[[str, RunSession, Conversation], Sequence[Tool]]] = []
        #: conversations whose every new message is looked at (a session with an open ask:
        #: its answer may not call for a run itself), not only triggering ones
        self.watched: set[int] = set()
        #: True once the orchestration tools (orchestration.attach) or an ask coordinator
        #: are attached: only then can a run have asked another agent or sent into another
        #: conversation, so only then do runs look for what a cut-short run did so
        self.asking = False
        #: set (before start) when this is one of several workers sharing a PostgreSQL store
        self.workers: WorkerCoordinator | None = None
        #: accounts whose sends go to the worker holding their lease, for a process that is
        #: no worker (an operator's `send`, an MCP client, on a PostgreSQL store)
        self.handed_over: set[str] = set()
        #: what a wake-up from another worker names -> what it wakes here ("asks": the ask
        #: coordinator's sweep, for an answer this worker must report)
        self.on_wake: dict[str, Callable[[], None]] = {}
        self._routers: dict[str, list[InboundRouter]] = {}
        self._services: list[Service] = []
        self._started_services: list[Service] = []

    def add_inbound_router(self, account: str, router: InboundRouter) -> None:
        """Let `router` see `account`'s new messages before the binding's policy (see RouteVerdict)."""
        if account not in self.accounts:
            raise ConfigError(f"unknown account {account!r}")
        self._routers.setdefault(account, []).append(router)

    def add_service(self, service: Service) -> None:
        """Start `service` after the adapters (in `start`), stop it before them (in `stop`)."""
        self._services.append(service)

    # setup -----------------------------------------------------------------
    def add_account(
        self,
        adapter: Adapter,
        binding: Binding,
        *,
        name: str | None = None,
        secrets: Iterable[str] = (),
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """Attach an adapter (one account) with the binding that handles its conversations."""
        account = name or getattr(adapter, "account", None)
        if not account:
            raise ConfigError("an account needs a name (adapter.account or name=...)")
        if account in self.accounts:
            raise ConfigError(f"account {account!r} is added twice")
        for secret in secrets:
            register_secret(secret)
        context = AccountContext(self, account, config or {})
        deliverer = Deliverer(self.store, adapter, me=lambda: self._known_me.get(account))
        pm = get_plugin_manager()

        def tools(session: RunSession, conversation: Conversation) -> list[Tool]:
            offered = channel_tools(deliverer, session, conversation)
            extra: list[Tool] = []

            def register(tool: Any) -> None:
                extra.append(tool if isinstance(tool, Tool) else Tool.from_function(tool))

            hook = pm.hook.register_tools
            if hook.get_hookimpls():  # calling pluggy with no implementation costs 1.5 µs a run
                hook(register=register, conversation=conversation)
            for provide in self.run_tools:
                extra.extend(provide(account, session, conversation))
            return offered + extra

        def framing(conversation: Conversation, channel: str, default: str) -> str | None:
            hook = pm.hook.framing
            if not hook.get_hookimpls():
                return None
            result = hook(conversation=conversation, channel=channel, default=default)
            return result if isinstance(result, str) else None

        builder = RunBuilder(
            self.store,
            channel=adapter.channel,
            channel_name=adapter.capabilities.display_name or adapter.channel.title(),
            me=lambda: adapter.me or self._known_me.get(account),
            window=binding.window,
            tools=tools,
            framing_hook=framing,
            kept_lines=self._kept_lines,
            asking=lambda: self.asking,
        )
        self.accounts[account] = _Account(account, adapter, binding, context, deliverer, builder)

    # lifecycle -------------------------------------------------------------
    async def start(self) -> None:
        """Recover the store, serve HTTP, start adapters, and re-run unanswered conversations."""
        if self._started:
            return
        self._started = True
        interrupted = await self.store.recover()
        for entry in interrupted:
            log.warning(
                "send #%s in conversation %s was interrupted by a restart: marked uncertain",
                entry.message_seq or entry.id,
                entry.conversation_id,
            )
        # what was owed before this start: asked now, so messages that arrive while the
        # adapters start are not mistaken for ones a restart interrupted
        owed = [c for c in await self.store.unhandled() if c.address.account in self.accounts]
        workers = self.workers
        if workers is not None:
            # leased accounts start when their lease is taken, and only their holder runs them
            self.scheduler.claims = workers
            owed = [c for c in owed if workers.may_run(c.address.account)]
        for conversation in owed:
            # noted before the adapters start: a run that starts meanwhile (a message caught
            # up or arriving now) is told of the restart too
            self.scheduler.add_note(conversation.id, RESTART_NOTE)
        if self.server is not None:
            self.url = await self.server.start()
            if not self._explicit_public_url:
                self.routes.public_url = self.url
        for account in self.accounts.values():
            if workers is not None and not workers.may_run(account.name):
                continue
            try:
                await account.adapter.start(account.context)
            except Exception:
                log.error("account %s failed to start; stopping what started", account.name)
                await self.stop()
                raise
            account.started = True
            await self._remember_me(account)
        for conversation in owed:
            # a conversation answered while the adapters started is not run again (its
            # run took the note); the scheduler checks once more when the run is due
            self.scheduler.poke(conversation.id, conversation.address.account)
        for service in self._services:
            await service.start(self)
            self._started_services.append(service)
        if workers is not None:
            await workers.start()

    async def start_accounts(self, names: Iterable[str]) -> None:
        """Start only these accounts' adapters: no recovery, no scheduling, no HTTP server.

        For operator commands (`backchannel send`) that must not touch another
        process's in-flight work: `start()` would mark its pending sends
        uncertain and run agents on unanswered conversations.
        """
        for name in names:
            account = self.accounts.get(name)
            if account is None:
                raise ConfigError(f"unknown account {name!r}")
            if not account.started:
                await account.adapter.start(account.context)
                account.started = True
                await self._remember_me(account)

    async def _remember_me(self, account: _Account) -> None:
        me = account.adapter.me
        if me is not None:
            await self.store.set_state(account.name, "me", json.dumps(to_json(me)))

    async def stop(self, timeout: float | None = None) -> None:
        """Let in-flight runs finish (bounded), stop adapters, flush, close the store."""
        if self._stopping:
            return
        self._stopping = True
        timeout = self._stop_timeout if timeout is None else timeout
        if self.workers is not None:
            self.workers.stopping = True  # take no new lease while stopping
        while self._started_services:
            service = self._started_services.pop()
            try:
                await service.stop()
            except Exception:
                log.exception("service %r failed to stop cleanly", service)
        # runs in flight finish first (bounded), while the adapters can still send what they
        # say: an adapter stopped first would close the connection their sends go through
        self.scheduler.stop()
        await self.scheduler.drain(timeout)
        if self.workers is not None:  # sends handed to this worker, while it can still send
            await self.workers.drain_sends(timeout)
        for account in self.accounts.values():
            if account.started:
                try:
                    await account.adapter.stop()
                except Exception:
                    log.exception("account %s failed to stop cleanly", account.name)
        await self._group_commit.drain(timeout)
        # sends delivered whose recording went on in the background (a store away for a
        # while): tried again now, bounded, or a restart would make them uncertain
        await asyncio.gather(*(account.deliverer.finish() for account in self.accounts.values()))
        if self.server is not None:
            await self.server.stop()
        if self.workers is not None:
            await self.workers.stop()
        await self.store.close()

    async def __aenter__(self) -> Switchboard:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_idle(self, timeout: float = 30.0) -> None:
        """Return when nothing is queued, debouncing or running."""
        try:
            async with asyncio.timeout(timeout):  # in this task: wait_for would make another
                await self._busy.wait_idle()
        except TimeoutError:
            raise TimeoutError(f"the switchboard was still busy after {timeout}s") from None

    # ingest ----------------------------------------------------------------
    async def ingest(
        self,
        account: str,
        raw: Mapping[str, Any],
        *,
        state: Mapping[str, str | None] | None = None,
    ) -> IngestResult:
        """Normalize, store and schedule one raw payload; return after its commit."""
        entry = self.accounts.get(account)
        if entry is None:
            raise ConfigError(f"unknown account {account!r}")
        if state:
            state = _storable_state(state)
        counters = self.counters
        counters["ingested"] += 1
        try:
            event = entry.adapter.normalize(raw)
        except NormalizeError as error:
            return await self._malformed(account, raw, str(error), state)
        except Exception as error:  # an adapter bug must not stop the pipeline
            log.exception("account %s: normalize raised %s", account, type(error).__name__)
            return await self._malformed(account, raw, f"normalize raised {error!r}", state)
        if event is None:
            counters["ignored"] += 1
            if state:
                for key, value in state.items():
                    await self.store.set_state(account, key, value)
            return _IGNORED
        try:
            checked = storable_event(event, account)
        except Exception as error:  # an Event no check foresaw: a dead letter, not a stall
            checked = f"the event cannot be checked: {type(error).__name__}"
        if isinstance(checked, str):
            return await self._malformed(account, raw, checked, state)
        event = checked
        policy = entry.binding.policy
        verdict = await self._route(account, event) if account in self._routers else None
        if verdict is None:
            held, triggers = not policy.may_reach(event), policy.triggers(event)
        else:
            held, triggers = verdict == "held", False
            event = _taken(event, verdict)
        try:
            (appended,) = await self._commit([Inbound(event, held, triggers, state)])
        except RefusedData as error:
            return await self._malformed(account, raw, str(error), state)
        return self._settle(account, event, held, appended)

    async def ingest_many(
        self,
        account: str,
        raws: Sequence[Mapping[str, Any]],
        *,
        state: Mapping[str, str | None] | None = None,
    ) -> list[IngestResult]:
        """Ingest payloads that arrived together (a poll's batch); return after their commit.

        `state` is written in the same transaction as the last of them.
        """
        entry = self.accounts.get(account)
        if entry is None:
            raise ConfigError(f"unknown account {account!r}")
        state = _storable_state(state)
        policy = entry.binding.policy
        results: list[IngestResult] = [_IGNORED] * len(raws)
        waiting: list[tuple[int, Event, bool]] = []
        inbounds: list[Inbound] = []
        self.counters["ingested"] += len(raws)
        for index, raw in enumerate(raws):
            try:
                event = entry.adapter.normalize(raw)
            except NormalizeError as error:
                results[index] = await self._malformed(account, raw, str(error))
                continue
            except Exception as error:  # an adapter bug must not stop the pipeline
                log.exception("account %s: normalize raised %s", account, type(error).__name__)
                results[index] = await self._malformed(account, raw, f"normalize raised {error!r}")
                continue
            if event is None:
                self.counters["ignored"] += 1
                continue
            try:
                checked = storable_event(event, account)
            except Exception as error:  # an Event no check foresaw: a dead letter, not a stall
                checked = f"the event cannot be checked: {type(error).__name__}"
            if isinstance(checked, str):
                results[index] = await self._malformed(account, raw, checked)
                continue
            event = checked
            verdict = await self._route(account, event) if account in self._routers else None
            if verdict is None:
                held, triggers = not policy.may_reach(event), policy.triggers(event)
            else:
                held, triggers = verdict == "held", False
                event = _taken(event, verdict)
            waiting.append((index, event, held))
            inbounds.append(Inbound(event, held=held, triggers=triggers))
        if state:
            if inbounds:
                last = inbounds[-1]
                inbounds[-1] = Inbound(last.event, last.held, last.triggers, state)
            else:
                for key, value in state.items():
                    await self.store.set_state(account, key, value)
        if not inbounds:
            return results
        try:
            appended_all = await self._commit(inbounds)
        except RefusedData:
            if len(inbounds) == 1:
                (index, _event, _held) = waiting[0]
                results[index] = await self._malformed(
                    account, raws[index], "the store cannot hold this event", state
                )
                return results
            return await self._commit_one_by_one(account, raws, results, waiting, inbounds, state)
        for (index, event, held), appended in zip(waiting, appended_all, strict=True):
            results[index] = self._settle(account, event, held, appended)
        return results

    async def _commit_one_by_one(
        self,
        account: str,
        raws: Sequence[Mapping[str, Any]],
        results: list[IngestResult],
        waiting: list[tuple[int, Event, bool]],
        inbounds: list[Inbound],
        state: Mapping[str, str | None] | None,
    ) -> list[IngestResult]:
        """Commit a refused batch event by event: the ones the store cannot hold become
        dead letters, the others are stored, and the batch's state moves on either way."""
        log.warning("account %s: the store refused a batch; committing it event by event", account)
        for (index, event, held), inbound in zip(waiting, inbounds, strict=True):
            inbound = Inbound(inbound.event, inbound.held, inbound.triggers)
            try:
                (appended,) = await self._commit([inbound])
            except RefusedData as error:
                results[index] = await self._malformed(account, raws[index], str(error))
                continue
            results[index] = self._settle(account, event, held, appended)
        if state:
            for key, value in state.items():
                await self.store.set_state(account, key, value)
        return results

    async def _route(self, account: str, event: Event) -> RouteVerdict:
        """Ask the account's inbound routers about a new message or an edit; the first
        verdict wins."""
        routers = self._routers.get(account)
        if not routers or event.kind not in ("message", "edit"):
            return None
        for router in routers:
            # a router that raises fails the ingest like a store error: nothing is acked, the
            # adapter reads the event again; falling back to the bindings could hand a
            # message meant for the plugin (an owner's reply) to the wrong reader
            verdict = await router(event)
            if verdict is not None:
                return verdict
        return None

    async def _commit(self, inbounds: list[Inbound]) -> list[AppendResult]:
        self._busy.enter()
        try:
            return await self._group_commit.commit(inbounds)
        finally:
            self._busy.leave()

    def _committed(self, inbound: Inbound, appended: AppendResult) -> None:
        """Count a committed event and schedule its conversation (called by the flusher)."""
        if appended.status == "duplicate":
            self.counters["duplicate"] += 1
            return
        self.counters["held" if inbound.held else "stored"] += 1
        if appended.triggers or (
            appended.conversation_id in self.watched and appended.status == "stored"
        ):
            self.scheduler.poke(appended.conversation_id, inbound.event.address.account)

    @staticmethod
    def _settle(account: str, event: Event, held: bool, appended: AppendResult) -> IngestResult:
        """Say what became of one committed event."""
        if appended.status == "duplicate":
            return IngestResult("duplicate", event, appended.conversation_id, appended.seq)
        return IngestResult(
            "held" if held else "stored", event, appended.conversation_id, appended.seq
        )

    async def _malformed(
        self,
        account: str,
        raw: Mapping[str, Any],
        reason: str,
        state: Mapping[str, str | None] | None = None,
    ) -> IngestResult:
        self.counters["malformed"] += 1
        reason = repair_text(reason)
        if len(reason) > MAX_REASON:  # a reason may quote the payload: one readable line
            reason = reason[:MAX_REASON] + "…"
        log.warning("account %s: malformed payload dropped: %s", account, reason)
        adapter = self.accounts[account].adapter
        payload = dump_for_dead_letter(raw, getattr(adapter, "secret_fields", ()))
        # adapter state moves on whatever became of the payload, in the letter's transaction:
        # a cursor past the payload never moves without it
        await self.store.add_dead_letter(account, "malformed", reason, payload, state=state)
        return IngestResult("malformed", reason=reason)

    # operator tools --------------------------------------------------------
    async def build_run(self, conversation_id: int) -> Run:
        """Return the Run an agent would receive now for this conversation (nothing is sent)."""
        conversation = await self.store.conversation(conversation_id)
        account = self.accounts.get(conversation.address.account)
        if account is None:
            raise ConfigError(
                f"conversation {conversation_id} belongs to unknown account"
                f" {conversation.address.account!r}"
            )
        await self._recall_me(account)
        return await account.builder.build(conversation_id, conversation.trigger_seq)

    async def _recall_me(self, account: _Account) -> None:
        """Read who the agent was on `account` when it last started, if not started here."""
        if account.adapter.me is None and account.name not in self._known_me:
            stored = await self.store.get_state(account.name, "me")
            if stored:
                self._known_me[account.name] = from_json(json.loads(stored), Sender)

    async def send(self, address: Address, text: str) -> str:
        """Send `text` as an operator, recorded in the transcript; return the outcome."""
        outcome = await self.send_outcome(await self.conversation_for(address), text)
        return str(outcome["result"])

    async def conversation_for(self, address: Address) -> Conversation:
        """Return the conversation at `address` of an account this board serves.

        A new one is made only for an address the channel accepts (adapters
        may offer ``check_address``): a mistyped chat never becomes a
        conversation that stays listed forever.
        """
        account = self.accounts.get(address.account)
        if account is None:
            known = ", ".join(sorted(self.accounts)) or "none"
            raise ConfigError(f"no account called {address.account!r} (serving: {known})")
        conversation = await self.store.find_conversation(address)
        if conversation is not None:
            return conversation
        if self.held_elsewhere(account.name):
            # the adapter is not started here: it could not check the address, and a
            # refused one would stay listed as a conversation
            raise Rejected(
                f"cannot send to {address.key}: there is no conversation there yet, and"
                f" account {account.name!r} is connected on another worker, which alone can"
                " check a new address. Send from an agent there, or to a conversation it"
                " already has (see `backchannel conversations`)"
            )
        check_address = getattr(account.adapter, "check_address", None)
        if check_address is not None:
            try:
                await check_address(address)
            except Rejected as error:
                raise Rejected(
                    f"cannot send to {address.key}: {error.reason}"
                    " (see `backchannel conversations` for the keys of existing ones)"
                ) from None
        return await self.store.ensure_conversation(address)

    async def send_outcome(
        self,
        conversation: Conversation,
        text: str,
        *,
        reply_to_seq: int | None = None,
        quiet: bool = False,
        origin: str | None = None,
        recorded: Callable[[OutboxEntry], Awaitable[None]] | None = None,
    ) -> dict[str, Any]:
        """Send `text` as an operator into a stored conversation; return the recorded outcome.

        The outcome is what the outbox recorded: ``state`` sent / failed /
        uncertain, the transcript ``seq``, the ``platform_message_id``, a
        ``reason`` when not sent, and ``result``, the sentence a model reads.
        `origin` is the key of the conversation a cross-conversation send came
        from (recorded on the outbox and transcript rows). `recorded` is
        awaited once the send is recorded as pending, before it goes out: what
        must not be sent twice marks itself done there (`Deliverer.deliver`).
        """
        from .model import Outbound

        account = self._account_of(conversation)
        reply_to = None
        if reply_to_seq is not None:
            reply_to = await self._platform_id(conversation, reply_to_seq)
        result = await self.deliver_through(
            account,
            conversation,
            Outbound(conversation.address, text, reply_to=reply_to, quiet=quiet, origin=origin),
            recorded=recorded,
        )
        return _outcome(conversation, result)

    def held_elsewhere(self, account: str) -> bool:
        """True when `account`'s connection is another worker's: its sends are handed over
        (`deliver_through`), and what only its adapter can do (check an address, read a
        contact list) cannot be done here."""
        if account in self.handed_over:
            return True
        return self.workers is not None and not self.workers.may_run(account)

    async def deliver_through(
        self,
        account: _Account,
        conversation: Conversation,
        outbound: Outbound,
        *,
        run_id: int | None = None,
        seen_seq: int | None = None,
        recorded: Callable[[OutboxEntry], Awaitable[None]] | None = None,
    ) -> DeliveryResult:
        """Send `outbound` into `conversation` through `account` (see Deliverer.deliver).

        With several workers, an account whose connection another worker holds is
        not sent through here: the send is recorded here and handed to that worker
        (`backchannel.workers.send_elsewhere`), and its outcome returned.
        """
        if self.held_elsewhere(account.name):
            from .workers import DEFAULT_TAKE_WITHIN, send_elsewhere

            await self._recall_me(account)  # recorded as sent by the agent, not "me"
            return await send_elsewhere(
                self.store,  # type: ignore[arg-type]  # a PostgresStore: only it has leases
                account.deliverer,
                conversation,
                outbound,
                run_id=run_id,
                seen_seq=seen_seq,
                recorded=recorded,
                take_within=(
                    self.workers.take_within if self.workers is not None else DEFAULT_TAKE_WITHIN
                ),
            )
        return await account.deliverer.deliver(
            conversation, outbound, run_id=run_id, seen_seq=seen_seq, recorded=recorded
        )

    async def edit_outcome(self, conversation: Conversation, seq: int, text: str) -> dict[str, Any]:
        """Edit our own message `seq` of a stored conversation; return the recorded outcome."""
        message = await self.store.message(conversation.id, seq)
        if message is None or message.direction != "out":
            raise StoreError(f"#{seq} of {conversation.address.key} is not a message we sent")
        return await self._act_on(conversation, seq, text, "edit")

    async def react_outcome(
        self, conversation: Conversation, seq: int, emoji: str
    ) -> dict[str, Any]:
        """React with `emoji` to message `seq` of a stored conversation; return the outcome."""
        return await self._act_on(conversation, seq, emoji, "reaction")

    async def _act_on(
        self, conversation: Conversation, seq: int, text: str, kind: OutboundKind
    ) -> dict[str, Any]:
        """Edit or react to message `seq` through the outbox; the outcome names that message."""
        from .model import Outbound

        account = self._account_of(conversation)
        target = await self._platform_id(conversation, seq)
        result = await self.deliver_through(
            account, conversation, Outbound(conversation.address, text, kind=kind, target=target)
        )
        outcome = _outcome(conversation, result)
        outcome["seq"] = seq
        outcome["platform_message_id"] = target
        return outcome

    def _account_of(self, conversation: Conversation) -> _Account:
        """The account an operator's send, edit or reaction in `conversation` goes through."""
        account = self.accounts.get(conversation.address.account)
        if account is None:
            raise ConfigError(f"unknown account {conversation.address.account!r}")
        return account

    async def _platform_id(self, conversation: Conversation, seq: int) -> str:
        message = await self.store.message(conversation.id, seq)
        if message is None:
            raise StoreError(f"there is no message #{seq} in {conversation.address.key}")
        if message.platform_message_id is None:
            raise StoreError(f"message #{seq} has no platform id (it was not delivered)")
        return message.platform_message_id

    async def health(self) -> dict[str, Any]:
        return {"accounts": sorted(self.accounts), "counters": dict(self.counters)}


def _outcome(conversation: Conversation, result: DeliveryResult) -> dict[str, Any]:
    entry = result.entry
    return {
        "conversation": conversation.address.key,
        "conversation_id": conversation.id,
        "state": entry.status,
        "seq": entry.message_seq,
        "platform_message_id": entry.platform_ids[0] if entry.platform_ids else None,
        "reason": entry.reason,
        "result": result.describe(),
    }


class AccountContext(AdapterContext):
    """The AdapterContext the switchboard gives each account."""

    def __init__(self, board: Switchboard, account: str, config: Mapping[str, Any]):
        self.board = board
        self.account = account
        self.config = config
        self.routes = board.routes
        self.log = logging.LoggerAdapter(
            logging.getLogger(f"backchannel.account.{account}"), {"account": account}
        )

    def ingest(
        self, raw: Mapping[str, Any], *, state: Mapping[str, str | None] | None = None
    ) -> Coroutine[Any, Any, IngestResult]:
        # hands over the board's coroutine itself: no frame of its own on every ingest
        return self.board.ingest(self.account, raw, state=state)

    async def ingest_many(
        self,
        raws: Sequence[Mapping[str, Any]],
        *,
        state: Mapping[str, str | None] | None = None,
    ) -> list[IngestResult]:
        return await self.board.ingest_many(self.account, raws, state=state)

    async def is_known(self, event_id: str) -> bool:
        if not encodable(event_id):
            return False  # an id the store cannot hold was never stored
        return await self.board.store.is_known(self.account, event_id)

    async def dead_letter(self, ref: str, reason: str, payload: str) -> None:
        adapter = self.board.accounts[self.account].adapter
        kept = repair_text(payload)
        if kept[:1] in ("{", "["):
            try:
                kept = dump_for_dead_letter(parse_json(kept), getattr(adapter, "secret_fields", ()))
            except BadPayload:
                pass  # not JSON after all: kept as text (registered secrets are still redacted)
        await self.board.store.add_dead_letter(
            self.account, repair_text(ref), repair_text(reason), kept
        )

    async def note_message_id(self, outbox_id: int | None, platform_message_id: str) -> None:
        if outbox_id is not None:
            await self.board.store.note_platform_id(outbox_id, repair_text(platform_message_id))

    async def get_state(self, key: str) -> str | None:
        if not encodable(key):
            return None
        return await self.board.store.get_state(self.account, key)

    async def set_state(self, key: str, value: str | None) -> None:
        kept = _storable_state({key: value}) or {}
        for kept_key, kept_value in kept.items():
            await self.board.store.set_state(self.account, kept_key, kept_value)

    async def transcript(
        self, address: Address, limit: int = 200, *, held: bool = False
    ) -> list[Message]:
        if not all(encodable(part) for part in (address.chat, address.thread or "")):
            return []
        store = self.board.store
        conversation = await store.find_conversation(address)
        if conversation is None:
            return []
        if held:
            return await store.transcript(conversation.id, limit)
        return await store.window(conversation.id, limit)


def _storable_state(state: Mapping[str, str | None] | None) -> Mapping[str, str | None] | None:
    """Return adapter state without entries the store cannot hold (each logged once here)."""
    if not state:
        return state
    kept: dict[str, str | None] = {}
    for key, value in state.items():
        if encodable(str(key)) and (value is None or encodable(str(value))):
            kept[key] = value
        else:
            log.warning(
                "adapter state %s cannot be stored (half a surrogate pair, or a NUL): skipped",
                ascii(key)[:80],
            )
    return kept

"""`ContractContext`: an AdapterContext over a real store, with hooks tests can hold and watch."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..adapter import AdapterContext, IngestResult, RouteTable
from ..errors import NormalizeError
from ..model import Address, Event, Message
from ..secrets import register_secret
from ..storable import storable_event
from ..store import Inbound, Store
from ..wire import encodable
from .watch import Watch

__all__ = ["ContractContext"]


class ContractContext(AdapterContext):
    """An AdapterContext that commits to a real store, without the rest of the switchboard.

    - ``hold()`` makes every following ingest wait before its commit until
      ``release()``; ``wait_started(event_id)`` returns once an ingest for that
      event is waiting or done. Together they prove "ack after commit".
    - ``wait_ingested(event_id, times)`` returns once the adapter has handed
      that event over `times` times (redeliveries included).
    """

    def __init__(
        self,
        store: Store,
        account: str = "test",
        config: Mapping[str, Any] | None = None,
        routes: RouteTable | None = None,
        secrets: tuple[str, ...] = (),
    ):
        self.store = store
        self.account = account
        self.config = dict(config or {})
        self.routes = routes or RouteTable()
        logger = logging.getLogger(f"backchannel.test.{account}")
        for secret in secrets:
            register_secret(secret)  # the same redaction production uses
        self.log = logging.LoggerAdapter(logger, {"account": account})
        self.adapter: Any = None
        self.events: list[Event] = []
        self.results: list[IngestResult] = []
        self.malformed: list[str] = []
        self._calls: Counter[str] = Counter()
        self._gate = asyncio.Event()
        self._gate.set()
        self._watch = Watch("ContractContext")

    def bind(self, adapter: Any) -> ContractContext:
        """Use `adapter.normalize` for ingests; return self."""
        self.adapter = adapter
        return self

    def hold(self) -> None:
        """Make following ingests wait before committing, until `release()`."""
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    async def ingest(
        self, raw: Mapping[str, Any], *, state: Mapping[str, str | None] | None = None
    ) -> IngestResult:
        if self.adapter is None:
            raise RuntimeError("ContractContext.bind(adapter) was not called")
        try:
            event = self.adapter.normalize(raw)
        except NormalizeError as error:
            self.malformed.append(str(error))
            await self._note(None)
            return IngestResult("malformed", reason=str(error))
        except Exception as error:  # as the switchboard does: a dead letter, not a stall
            reason = f"normalize raised {error!r}"
            self.malformed.append(reason)
            await self._note(None)
            return IngestResult("malformed", reason=reason)
        if event is None:
            if state:
                for key, value in state.items():
                    await self.store.set_state(self.account, key, value)
            await self._note(None)
            return IngestResult("ignored")
        checked = self._checked(event)
        if isinstance(checked, str):  # as the switchboard does: repaired, or a dead letter
            self.malformed.append(checked)
            await self._note(None)
            return IngestResult("malformed", reason=checked)
        event = checked
        self._calls[event.event_id] += 1
        await self._note(event.event_id)
        await self._gate.wait()
        (appended,) = await self.store.append_inbound([Inbound(event, triggers=True, state=state)])
        status = "duplicate" if appended.status == "duplicate" else "stored"
        result = IngestResult(status, event, appended.conversation_id, appended.seq)
        self.events.append(event)
        self.results.append(result)
        await self._note(event.event_id)
        return result

    async def ingest_many(
        self,
        raws: Sequence[Mapping[str, Any]],
        *,
        state: Mapping[str, str | None] | None = None,
    ) -> list[IngestResult]:
        """Ingest a batch in ONE store transaction, `state` with it, as the switchboard does."""
        if self.adapter is None:
            raise RuntimeError("ContractContext.bind(adapter) was not called")
        results: list[IngestResult] = [IngestResult("ignored")] * len(raws)
        events: list[tuple[int, Event]] = []
        for index, raw in enumerate(raws):
            try:
                event = self.adapter.normalize(raw)
            except NormalizeError as error:
                self.malformed.append(str(error))
                results[index] = IngestResult("malformed", reason=str(error))
                continue
            if event is None:
                continue
            checked = self._checked(event)
            if isinstance(checked, str):
                self.malformed.append(checked)
                results[index] = IngestResult("malformed", reason=checked)
                continue
            self._calls[checked.event_id] += 1
            events.append((index, checked))
        self._watch.changed()
        await self._gate.wait()
        inbounds = [Inbound(event, triggers=True) for _, event in events]
        if inbounds and state:
            inbounds[-1] = Inbound(inbounds[-1].event, False, True, state)
        elif state:
            for key, value in state.items():
                await self.store.set_state(self.account, key, value)
        appended = await self.store.append_inbound(inbounds) if inbounds else []
        for (index, event), result in zip(events, appended, strict=True):
            status = "duplicate" if result.status == "duplicate" else "stored"
            results[index] = IngestResult(status, event, result.conversation_id, result.seq)
            self.events.append(event)
            self.results.append(results[index])
        self._watch.changed()
        return results

    def _checked(self, event: Event) -> Event | str:
        """The switchboard's storability check (`storable_event`), for this context's account."""
        return storable_event(event, self.account)

    async def _note(self, event_id: str | None) -> None:
        self._watch.changed()

    def calls(self, event_id: str) -> int:
        """How many times the adapter handed over this event."""
        return self._calls[event_id]

    async def wait_started(self, event_id: str, timeout: float = 10.0) -> None:
        """Return once an ingest of `event_id` has begun."""
        await self._wait(lambda: self._calls[event_id] >= 1, timeout, f"ingest of {event_id}")

    async def wait_ingested(self, event_id: str, times: int = 1, timeout: float = 10.0) -> None:
        """Return once `event_id` has been handed over and committed `times` times."""

        def done() -> bool:
            return sum(1 for r in self.results if r.event and r.event.event_id == event_id) >= times

        await self._wait(done, timeout, f"{times} ingest(s) of {event_id}")

    async def wait_for(
        self, predicate: Any, timeout: float = 10.0, what: str = "condition"
    ) -> None:
        """Return once `predicate()` is true, re-checked after every ingest."""
        await self._wait(predicate, timeout, what)

    async def _wait(self, predicate: Any, timeout: float, what: str) -> None:
        await self._watch.wait_for(predicate, timeout, what)

    async def is_known(self, event_id: str) -> bool:
        if not encodable(event_id):
            return False  # as the switchboard's: an id the store cannot hold was never stored
        return await self.store.is_known(self.account, event_id)

    async def dead_letter(self, ref: str, reason: str, payload: str) -> None:
        await self.store.add_dead_letter(self.account, ref, reason, payload)

    async def note_message_id(self, outbox_id: int | None, platform_message_id: str) -> None:
        if outbox_id is not None:
            await self.store.note_platform_id(outbox_id, platform_message_id)

    async def get_state(self, key: str) -> str | None:
        return await self.store.get_state(self.account, key)

    async def set_state(self, key: str, value: str | None) -> None:
        await self.store.set_state(self.account, key, value)

    async def transcript(
        self, address: Address, limit: int = 200, *, held: bool = False
    ) -> list[Message]:
        conversation = await self.store.find_conversation(address)
        if conversation is None:
            return []
        if held:
            return await self.store.transcript(conversation.id, limit)
        return await self.store.window(conversation.id, limit)

    async def rows(self) -> int:
        """Total transcript rows stored for this account."""
        total = 0
        for conversation in await self.store.conversations(self.account, limit=10_000):
            total += conversation.last_seq
        return total

    def dump(self) -> str:
        return json.dumps([e.event_id for e in self.events])

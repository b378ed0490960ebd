"""`ContractHarness`: what a plugin hands the conformance kit (importable without pytest)."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from ..adapter import Adapter
from ..model import Address

__all__ = ["ContractHarness"]


class ContractHarness(ABC):
    """What a plugin hands the contract suite: its started adapter and its fake platform."""

    adapter: Adapter
    #: a conversation the bot may send to on the fake platform
    address: Address

    @abstractmethod
    async def deliver_user_message(self, text: str) -> str:
        """Make the fake platform deliver a new user message; return the event_id normalize gives.

        Must not wait for the adapter to ingest or ack it.
        """

    @abstractmethod
    async def deliver_again(self, event_id: str) -> None:
        """Make the platform deliver an already delivered event once more."""

    @abstractmethod
    def is_acked(self, event_id: str) -> bool:
        """Return True once the platform has seen the adapter acknowledge this event."""

    @abstractmethod
    def user_message_payload(self, text: str) -> Mapping[str, Any]:
        """A raw payload of a user message, exactly as the adapter hands it to ctx.ingest."""

    @abstractmethod
    def own_message_payload(self, text: str) -> Mapping[str, Any]:
        """A raw payload of a message the bot itself sent (an echo)."""

    @abstractmethod
    def malformed_payloads(self) -> Sequence[Mapping[str, Any]]:
        """Raw payloads that are broken in ways the platform could really produce."""

    def unnamed_sender_payloads(self) -> Sequence[Mapping[str, Any]]:
        """Raw payloads whose sender the platform does not name (a delete, an authorless
        post); each must normalize to an Event whose sender is `Sender.unknown()`.
        Channels where every payload names its sender keep this default: none."""
        return ()

    def thread_message_payload(self, text: str) -> Mapping[str, Any] | None:
        """A raw payload of a user message in a thread, as the adapter hands it to ctx.ingest.

        The one thread rule (docs/concepts.md, "Addresses"): its event is
        addressed ``Address(account, chat=<the parent chat>, thread=<thread
        id>)`` with conversation kind "thread". The parent is `thread_parent`.
        Keep this default (None) when the channel has no threads.
        """
        return None

    @property
    def thread_parent(self) -> str:
        """The chat the thread of `thread_message_payload` lives in; default: `address.chat`."""
        return self.address.chat

    @abstractmethod
    def sent_texts(self) -> list[str]:
        """Texts the platform received from the bot at `address`, oldest first."""

    @abstractmethod
    def fail_next_send(self, fault: str, retry_after: float = 2.0) -> None:
        """Make the platform answer the next send with `fault`.

        fault: "rate_limited" (the platform's 429 with retry_after), "timeout"
        (no answer until the client gives up) or "rejected" (a definite no).
        """

    async def wait_acked(self, event_id: str, timeout: float = 10.0) -> None:
        """Return once `is_acked(event_id)`; override to await the fake's own signal."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.is_acked(event_id):
            if loop.time() > deadline:
                raise AssertionError(f"event {event_id} was not acked within {timeout}s")
            await asyncio.sleep(0.01)

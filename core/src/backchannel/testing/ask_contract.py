"""`AskStoreContract`: the pending-ask checks every store backend passes (part of StoreContract)."""

from __future__ import annotations

from ..model import Address, Outbound, Receipt, Sender
from ..store import Inbound, Store

__all__ = ["AskStoreContract"]

ME = Sender("me", "Agent", is_bot=True)
PEER = Sender("peer-b", "Agent B", is_bot=True)


async def _question(store: Store, session: int, text: str, platform_id: str) -> tuple[int, int]:
    """Record and mark sent one question in `session`; return (outbox id, seq)."""
    conversation = await store.conversation(session)
    entry = await store.record_outbound(session, Outbound(conversation.address, text), ME)
    await store.mark_sent(entry.id, Receipt(platform_id))
    assert entry.message_seq is not None
    return entry.id, entry.message_seq


async def _answer(
    store: Store, event_id: str, text: str, *, reply_to: str | None = None, thread: str = "s1"
) -> int:
    from .store_contract import make_event  # store_contract includes this module

    [result] = await store.append_inbound(
        [
            Inbound(
                make_event(
                    event_id,
                    text,
                    account="tp",
                    chat="peer-b",
                    sender=PEER,
                    thread=thread,
                    reply_to=reply_to,
                ),
                triggers=True,
            )
        ]
    )
    assert result.seq is not None
    return result.seq


class AskStoreContract:
    """Asks: recorded before the send, answers matched one-to-one, expiry edge-triggered."""

    async def _asks(self, store: Store, count: int) -> tuple[int, list[tuple[int, int]]]:
        origin = await store.ensure_conversation(Address("web", "owner"))
        session = await store.ensure_conversation(Address("tp", "peer-b", "s1"), kind="thread")
        made = []
        for index in range(count):
            outbox_id, seq = await _question(store, session.id, f"q{index}", f"m{index}")
            ask = await store.record_ask(
                origin_conversation_id=origin.id,
                origin_seq=index + 1,
                peer_conversation_id=session.id,
                question=f"q{index}",
                deadline=1e12,
                message_seq=seq,
                outbox_id=outbox_id,
            )
            made.append((ask.id, seq))
        return session.id, made

    async def test_a_reply_target_answers_its_own_ask_whatever_the_order(
        self, store: Store
    ) -> None:
        session, [(first, _), (second, _)] = await self._asks(store, 2)
        seq = await _answer(store, "r2", "second answer", reply_to="m1")
        matched = await store.correlate_reply(session, seq)
        assert matched is not None and matched.id == second and matched.answer_seq == seq
        seq = await _answer(store, "r1", "first answer", reply_to="m0")
        matched = await store.correlate_reply(session, seq)
        assert matched is not None and matched.id == first
        assert [a.id for a in await store.asks(awaiting_report=True)] == [first, second]

    async def test_without_a_reply_target_each_answer_takes_the_oldest_open_ask_once(
        self, store: Store
    ) -> None:
        session, [(first, _), (second, _)] = await self._asks(store, 2)
        one = await _answer(store, "r1", "one")
        two = await _answer(store, "r2", "two")
        three = await _answer(store, "r3", "three")
        assert (await store.correlate_reply(session, one)).id == first  # type: ignore[union-attr]
        # matching again (after a restart) returns the same ask, not the next one
        assert (await store.correlate_reply(session, one)).id == first  # type: ignore[union-attr]
        assert (await store.correlate_reply(session, two)).id == second  # type: ignore[union-attr]
        assert await store.correlate_reply(session, three) is None

    async def test_a_follow_up_to_an_answered_question_is_not_taken_for_another_answer(
        self, store: Store
    ) -> None:
        """The peer answers q0, then writes more in reply to q0: that follow-up is its own
        message, not the answer to q1 (which would then report it as q1's answer, and lose
        the real one)."""
        session, [(first, _), (second, _)] = await self._asks(store, 2)
        answer = await _answer(store, "r1", "q0's answer", reply_to="m0")
        assert (await store.correlate_reply(session, answer)).id == first  # type: ignore[union-attr]
        follow_up = await _answer(store, "r2", "also, about q0", reply_to="m0")
        assert await store.correlate_reply(session, follow_up) is None
        real = await _answer(store, "r3", "q1's answer", reply_to="m1")
        assert (await store.correlate_reply(session, real)).id == second  # type: ignore[union-attr]

    async def test_a_reply_to_a_message_we_cannot_place_never_answers_a_known_question(
        self, store: Store
    ) -> None:
        # two open asks whose questions both have known ids: a reply naming an id we do not
        # know is no one's answer (guessing the oldest could report it as another's)
        session, [(first, _), (second, _)] = await self._asks(store, 2)
        seq = await _answer(store, "r-lost", "answer to a lost question", reply_to="m-unknown")
        assert await store.correlate_reply(session, seq) is None
        assert [a.id for a in await store.asks(states=("pending",))] == [first, second]
        # a reply naming a question we know still answers it, and one naming none the oldest
        known = await _answer(store, "r2", "second's answer", reply_to="m1")
        assert (await store.correlate_reply(session, known)).id == second  # type: ignore[union-attr]
        plain = await _answer(store, "r1", "an answer")
        assert (await store.correlate_reply(session, plain)).id == first  # type: ignore[union-attr]

    async def test_a_reply_naming_an_unknown_id_answers_a_question_whose_id_is_unknown(
        self, store: Store
    ) -> None:
        # questions whose sends died mid-flight (recovered as uncertain, their platform ids
        # never learnt) are the only asks a reply naming an unknown id can answer, oldest
        # first; the question whose id is known is left to the reply that names it
        session, [(first, _)] = await self._asks(store, 1)
        origin = await store.ensure_conversation(Address("web", "owner"))
        conversation = await store.conversation(session)
        lost = []
        for n in range(2):
            entry = await store.record_outbound(
                session, Outbound(conversation.address, f"q-lost{n}"), ME
            )
            await store.mark_uncertain(entry.id, "killed mid-send")  # no platform id
            ask = await store.record_ask(
                origin_conversation_id=origin.id,
                origin_seq=9 + n,
                peer_conversation_id=session,
                question=f"q-lost{n}",
                deadline=1e12,
                message_seq=entry.message_seq,
                outbox_id=entry.id,
            )
            lost.append(ask.id)
        for n in range(2):
            seq = await _answer(store, f"r-x{n}", f"answer {n}", reply_to=f"m-never-seen{n}")
            matched = await store.correlate_reply(session, seq)
            assert matched is not None and matched.id == lost[n]
        assert [a.id for a in await store.asks(states=("pending",)) if a.answer_seq is None] == [
            first
        ]

    async def test_an_answer_is_reported_once_and_expiry_is_edge_triggered(
        self, store: Store
    ) -> None:
        session, [(first, _), (second, _)] = await self._asks(store, 2)
        assert await store.expire_asks(1e13) == await store.expire_asks(1e13)
        [expired_first, _] = await store.expire_asks(1e13)
        assert (expired_first.id, expired_first.state) == (first, "expired")
        assert await store.mark_expiry_reported(first) is True
        assert await store.mark_expiry_reported(first) is False  # one notice wins
        assert [a.id for a in await store.expire_asks(1e13)] == [second]
        # a late answer still matches an expired ask, and answering closes it
        seq = await _answer(store, "late", "late answer")
        assert (await store.correlate_reply(session, seq)).id == first  # type: ignore[union-attr]
        assert [a.id for a in await store.asks(awaiting_report=True)] == [first]
        assert await store.claim_report(first) is True
        assert await store.claim_report(first) is False  # one reporter wins
        [answered] = [a for a in await store.asks() if a.id == first]
        assert answered.state == "answered" and answered.reported_at is not None
        assert await store.asks(awaiting_report=True) == []
        assert [a.id for a in await store.asks(states=("expired",))] == [second]

    async def test_an_answered_ask_is_not_marked_back_by_a_late_outcome(self, store: Store) -> None:
        """The answer came while the question's send was still out (a slow PUT that then
        ends uncertain), or just before a lapse: the ask stays matched to its answer."""
        session, [(first, _), (second, _)] = await self._asks(store, 2)
        seq = await _answer(store, "r1", "the answer", reply_to="m0")
        assert (await store.correlate_reply(session, seq)).id == first  # type: ignore[union-attr]
        kept = await store.mark_ask(first, "uncertain", "timed out", unanswered=True)
        assert (kept.id, kept.state, kept.answer_seq) == (first, "pending", seq)
        assert [a.id for a in await store.asks(awaiting_report=True)] == [first]
        marked = await store.mark_ask(second, "uncertain", "timed out", unanswered=True)
        assert marked.state == "uncertain" and marked.reason == "timed out"

    async def test_newest_first_limits_to_the_newest_asks(self, store: Store) -> None:
        _session, made = await self._asks(store, 4)
        ids = [ask_id for ask_id, _ in made]
        assert [a.id for a in await store.asks(limit=2)] == ids[:2]
        assert [a.id for a in await store.asks(limit=2, newest_first=True)] == ids[:1:-1]
        await store.mark_ask(ids[3], "failed")
        newest_open = await store.asks(states=("pending",), limit=2, newest_first=True)
        assert [a.id for a in newest_open] == [ids[2], ids[1]]

    async def test_peer_conversations_are_newest_first_and_filtered_by_activity(
        self, store: Store
    ) -> None:
        master = await store.ensure_conversation(Address("tp", "peer-b", "master"))
        await self._asks(store, 1)
        found = await store.peer_conversations("tp", "peer-b")
        assert [c.address.thread for c in found] == ["s1", "master"]
        assert master.id in [c.id for c in found]
        assert await store.peer_conversations("tp", "peer-b", active_since=1e13) == []
        assert await store.peer_conversations("tp", "someone-else") == []

"""`StoreContract`: the checks every store backend passes. Subclass and provide a `store` fixture."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from ..errors import UnknownConversation
from ..model import Address, Conversation, Event, Outbound, Receipt, Sender
from ..store import Ask, Inbound, OutboxEntry, Store
from ..store.base import find_by_reference
from .ask_contract import AskStoreContract

__all__ = ["StoreContract", "make_event"]

ALICE = Sender("alice", "Alice", "alice")
BOB = Sender("bob", "Bob")
ME = Sender("me", "Agent", is_bot=True)


def make_event(
    event_id: str,
    text: str = "hi",
    *,
    chat: str = "c1",
    account: str = "acct",
    sender: Sender = ALICE,
    kind: str = "message",
    message_id: str | None = None,
    **extra: Any,
) -> Event:
    """Build a test Event; the platform message id defaults to `event_id`."""
    return Event(
        address=Address(account, chat, extra.pop("thread", None)),
        event_id=event_id,
        sender=sender,
        kind=kind,  # type: ignore[arg-type]
        text=text,
        platform_message_id=message_id or event_id,
        **extra,
    )


async def question_and_answer(
    store: Store, answer: str, **outbound: Any
) -> tuple[Conversation, OutboxEntry]:
    """A conversation whose one message ("question", id e1) has our `answer` recorded."""
    (first,) = await store.append_inbound([Inbound(make_event("e1", "question"))])
    conversation = await store.conversation(first.conversation_id)
    entry = await store.record_outbound(
        conversation.id, Outbound(conversation.address, answer, **outbound), ME
    )
    return conversation, entry


async def asked(
    store: Store,
    origin: Conversation,
    session: Conversation,
    question: str,
    *,
    seq: int = 1,
    deadline: float | None = None,
    hand_to: tuple[str, bool, float, bool] | None = None,
) -> tuple[OutboxEntry, Ask]:
    """`origin`'s ask of `session`: its question recorded (handed over with `hand_to`),
    then its ask, as `ask_agent` writes them; nothing is sent."""
    entry = await store.record_outbound(
        session.id, Outbound(session.address, question), ME, hand_to=hand_to
    )
    ask = await store.record_ask(
        origin_conversation_id=origin.id,
        origin_seq=seq,
        peer_conversation_id=session.id,
        question=question,
        deadline=time.time() + 60 if deadline is None else deadline,
        message_seq=entry.message_seq,
        outbox_id=entry.id,
    )
    return entry, ask


class StoreContract(AskStoreContract):
    """Behaviour every `Store` implementation must show (asks included)."""

    async def test_seq_is_assigned_per_conversation_from_one(self, store: Store) -> None:
        results = await store.append_inbound(
            [
                Inbound(make_event("e1", chat="a")),
                Inbound(make_event("e2", chat="b")),
                Inbound(make_event("e3", chat="a")),
            ]
        )
        assert [(r.status, r.seq) for r in results] == [("stored", 1), ("stored", 1), ("stored", 2)]
        assert (
            results[0].conversation_id == results[2].conversation_id != results[1].conversation_id
        )

    async def test_redelivered_event_adds_no_row(self, store: Store) -> None:
        first = await store.append_inbound([Inbound(make_event("e1", "one"))])
        again = await store.append_inbound(
            [Inbound(make_event("e1", "one, again")), Inbound(make_event("e1"))]
        )
        assert [r.status for r in again] == ["duplicate", "duplicate"]
        assert again[0].seq == first[0].seq
        window = await store.window(first[0].conversation_id, 10)
        assert [m.text for m in window] == ["one"]

    async def test_same_event_id_on_two_accounts_is_two_events(self, store: Store) -> None:
        results = await store.append_inbound(
            [Inbound(make_event("e1", account="x")), Inbound(make_event("e1", account="y"))]
        )
        assert [r.status for r in results] == ["stored", "stored"]

    async def test_seq_never_comes_from_the_wire(self, store: Store) -> None:
        await store.append_inbound([Inbound(make_event("900", message_id="900"))])
        results = await store.append_inbound([Inbound(make_event("5", message_id="5"))])
        assert results[0].seq == 2

    async def test_edit_changes_visible_text_and_keeps_earlier_text(self, store: Store) -> None:
        (stored,) = await store.append_inbound([Inbound(make_event("e1", "helo"))])
        (edit,) = await store.append_inbound(
            [Inbound(make_event("e1-edit", "hello", kind="edit", message_id="e1"))]
        )
        assert edit.status == "applied" and edit.seq == stored.seq
        message = await store.message(stored.conversation_id, 1)
        assert message is not None
        assert message.text == "hello" and message.edited_at is not None
        assert [text for _, text, _ in await store.revisions(stored.conversation_id, 1)] == ["helo"]
        conversation = await store.conversation(stored.conversation_id)
        assert conversation.last_seq == 1

    async def test_an_edit_keeps_files_unless_it_says_its_list_is_complete(
        self, store: Store
    ) -> None:
        """An edit event with no files leaves the stored ones, unless it carries the whole
        list (ATTACHMENTS_COMPLETE): then the files were removed. One with files sets them."""
        from ..model import ATTACHMENTS_COMPLETE, Attachment

        photo = Attachment(kind="image", name="secret.png")
        (stored,) = await store.append_inbound(
            [Inbound(make_event("e1", "look", attachments=(photo,)))]
        )
        conversation_id = stored.conversation_id

        async def files() -> list[str | None]:
            message = await store.message(conversation_id, 1)
            assert message is not None
            return [a.name for a in message.attachments]

        await store.append_inbound(
            [Inbound(make_event("x1", "look!", kind="edit", message_id="e1"))]
        )
        assert await files() == ["secret.png"]
        other = Attachment(kind="file", name="notes.txt")
        await store.append_inbound(
            [Inbound(make_event("x2", "v3", kind="edit", message_id="e1", attachments=(other,)))]
        )
        assert await files() == ["notes.txt"]
        complete = {ATTACHMENTS_COMPLETE: True}
        await store.append_inbound(
            [Inbound(make_event("x3", "no files", kind="edit", message_id="e1", meta=complete))]
        )
        assert await files() == []
        message = await store.message(conversation_id, 1)
        assert message is not None and message.text == "no files"

    async def test_delete_marks_the_message_and_keeps_its_text(self, store: Store) -> None:
        (stored,) = await store.append_inbound([Inbound(make_event("e1", "oops"))])
        await store.append_inbound([Inbound(make_event("d1", kind="delete", message_id="e1"))])
        message = await store.message(stored.conversation_id, 1)
        assert message is not None and message.deleted_at is not None and message.text == "oops"

    async def test_reaction_is_attached_to_its_target(self, store: Store) -> None:
        (stored,) = await store.append_inbound([Inbound(make_event("e1", "nice"))])
        await store.append_inbound(
            [Inbound(make_event("r1", "👍", kind="reaction", message_id="e1", sender=BOB))]
        )
        message = await store.message(stored.conversation_id, 1)
        assert message is not None and message.reactions == (("Bob", "👍"),)

    async def test_the_transcript_shows_held_rows_the_window_skips(self, store: Store) -> None:
        results = await store.append_inbound(
            [
                Inbound(make_event("e1", "one")),
                Inbound(make_event("e2", "held back"), held=True),
                Inbound(make_event("e3", "three")),
            ]
        )
        conversation_id = results[0].conversation_id
        shown = await store.transcript(conversation_id, 10)
        assert [(m.seq, m.text, m.held) for m in shown] == [
            (1, "one", False),
            (2, "held back", True),
            (3, "three", False),
        ]
        assert [m.seq for m in await store.transcript(conversation_id, 2)] == [2, 3]
        assert [m.seq for m in await store.window(conversation_id, 10)] == [1, 3]

    async def test_a_reaction_is_taken_back_by_its_senders_id_whatever_name_it_shows(
        self, store: Store
    ) -> None:
        (stored,) = await store.append_inbound([Inbound(make_event("e1", "nice"))])
        react = [
            Inbound(make_event("r1", "👍", kind="reaction", message_id="e1", sender=BOB)),
            Inbound(make_event("r2", "🎉", kind="reaction", message_id="e1", sender=ALICE)),
            Inbound(make_event("r3", "👍", kind="reaction", message_id="e1", sender=BOB)),
        ]
        await store.append_inbound(react)
        message = await store.message(stored.conversation_id, 1)
        assert message is not None
        assert message.reactions == (("Bob", "👍"), ("Alice", "🎉"))  # no second 👍 by Bob
        # a removal naming only the id (Discord's), and a set replaced whole (Telegram's)
        bare_bob = Sender("bob")
        await store.append_inbound(
            [
                Inbound(
                    make_event(
                        "r4",
                        "👍",
                        kind="reaction",
                        message_id="e1",
                        sender=bare_bob,
                        meta={"removed": True},
                    )
                ),
                Inbound(
                    make_event(
                        "r5",
                        "👀",
                        kind="reaction",
                        message_id="e1",
                        sender=ALICE,
                        meta={"old_reaction": ["🎉"], "new_reaction": ["👀", "🔥"]},
                    )
                ),
            ]
        )
        message = await store.message(stored.conversation_id, 1)
        assert message is not None and message.reactions == (("Alice", "👀"), ("Alice", "🔥"))

    async def test_a_change_that_names_no_thread_finds_its_target_in_one(
        self, store: Store
    ) -> None:
        # a Slack reaction (or a Telegram one in a forum topic) says its chat, not its thread
        (in_thread,) = await store.append_inbound(
            [Inbound(make_event("t1", "in the thread", thread="th1"), triggers=True)]
        )
        await store.append_inbound(
            [Inbound(make_event("r1", "👍", kind="reaction", message_id="t1", sender=BOB))]
        )
        message = await store.message(in_thread.conversation_id, 1)
        assert message is not None and message.reactions == (("Bob", "👍"),)
        # no conversation was made for the chat itself
        assert await store.find_conversation(Address("acct", "c1")) is None
        # the same within one batch, and for an edit; the thread keeps its kind
        results = await store.append_inbound(
            [
                Inbound(make_event("t2", "second", thread="th2", conversation_kind="thread")),
                Inbound(
                    make_event(
                        "r2",
                        "🎉",
                        kind="reaction",
                        message_id="t2",
                        sender=BOB,
                        conversation_title="The whole chat",
                    )
                ),
                Inbound(make_event("x2", "second, edited", kind="edit", message_id="t2")),
            ]
        )
        assert [r.status for r in results] == ["stored", "applied", "applied"]
        assert results[1].conversation_id == results[0].conversation_id
        thread = await store.conversation(results[0].conversation_id)
        # as its own message made it: the reaction, addressed to the chat, says nothing of it
        assert (thread.kind, thread.title) == ("thread", None)
        edited = await store.message(thread.id, 1)
        assert edited is not None and edited.text == "second, edited"
        assert edited.reactions == (("Bob", "🎉"),)
        # a target in the chat itself stays there; two chats do not mix
        (top,) = await store.append_inbound([Inbound(make_event("m1", "top level"))])
        await store.append_inbound(
            [Inbound(make_event("r3", "👀", kind="reaction", message_id="m1", sender=BOB))]
        )
        shown = await store.message(top.conversation_id, 1)
        assert shown is not None and shown.reactions == (("Bob", "👀"),)
        (elsewhere,) = await store.append_inbound(
            [Inbound(make_event("r4", "👀", kind="reaction", message_id="t1", chat="c2"))]
        )
        assert elsewhere.status == "recorded"

    async def test_change_to_unknown_message_is_recorded_for_dedupe(self, store: Store) -> None:
        (result,) = await store.append_inbound(
            [Inbound(make_event("d9", kind="delete", message_id="nope"))]
        )
        assert result.status == "recorded"
        assert await store.is_known("acct", "d9")

    async def test_held_messages_are_stored_counted_and_kept_out_of_windows(
        self, store: Store
    ) -> None:
        results = await store.append_inbound(
            [
                Inbound(make_event("e1", "visible"), triggers=True),
                Inbound(make_event("e2", "held", sender=BOB), held=True, triggers=True),
            ]
        )
        conversation = await store.conversation(results[0].conversation_id)
        assert conversation.held_count == 1 and conversation.last_seq == 2
        assert conversation.trigger_seq == 1  # a held message never triggers
        assert [m.text for m in await store.window(conversation.id, 10)] == ["visible"]
        assert [m.text for m in await store.messages_after(conversation.id, 0)] == ["visible"]

    async def test_window_returns_the_last_n_oldest_first(self, store: Store) -> None:
        await store.append_inbound([Inbound(make_event(f"e{n}", f"t{n}")) for n in range(1, 31)])
        conversation = (await store.conversations())[0]
        window = await store.window(conversation.id, 5)
        assert [m.seq for m in window] == [26, 27, 28, 29, 30]
        assert [m.seq for m in await store.window(conversation.id, 3, upto_seq=10)] == [8, 9, 10]
        assert [m.seq for m in await store.history(conversation.id, 8, 2)] == [6, 7]

    async def test_outbound_is_recorded_pending_before_it_is_sent(self, store: Store) -> None:
        (stored,) = await store.append_inbound([Inbound(make_event("e1"))])
        conversation = await store.conversation(stored.conversation_id)
        entry = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "reply", reply_to="e1"), ME
        )
        assert entry.status == "pending" and entry.message_seq == 2
        message = await store.message(conversation.id, 2)
        assert message is not None and message.direction == "out" and message.status == "pending"
        assert message.reply_to_seq == 1
        sent = await store.mark_sent(entry.id, Receipt("p-1", ("p-1", "p-2")))
        assert sent.status == "sent" and sent.platform_ids == ("p-1", "p-2")
        message = await store.message(conversation.id, 2)
        assert message is not None and message.platform_message_id == "p-1"
        assert message.status == "sent"

    async def test_failed_and_uncertain_outcomes_are_recorded(self, store: Store) -> None:
        conversation = await store.ensure_conversation(Address("acct", "c1"))
        failed = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "a"), ME
        )
        unsure = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "b"), ME
        )
        assert (await store.mark_failed(failed.id, "chat not found")).status == "failed"
        assert (await store.mark_uncertain(unsure.id, "timeout")).status == "uncertain"
        assert unsure.message_seq is not None
        message = await store.message(conversation.id, unsure.message_seq)
        assert message is not None and message.status == "uncertain"
        assert message.status_reason == "timeout"
        # an id the adapter chose itself is kept: a reply naming it is placed
        named = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "c"), ME
        )
        kept = await store.mark_uncertain(named.id, "reset", platform_message_id="p-chosen")
        assert kept.status == "uncertain" and kept.platform_ids == ("p-chosen",)
        [reply] = await store.append_inbound(
            [Inbound(make_event("r-c", "got it", chat="c1", reply_to="p-chosen"))]
        )
        assert reply.seq is not None
        answer = await store.message(conversation.id, reply.seq)
        assert answer is not None and answer.reply_to_seq == named.message_seq

    async def test_recover_turns_pending_into_uncertain(self, store: Store) -> None:
        conversation = await store.ensure_conversation(Address("acct", "c1"))
        entry = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "x"), ME
        )
        recovered = await store.recover()
        assert [e.id for e in recovered] == [entry.id]
        assert recovered[0].status == "uncertain"
        assert await store.outbox(status="pending") == []

    async def test_recover_fails_a_send_that_was_waiting_out_a_rate_limit(
        self, store: Store
    ) -> None:
        # nothing of it was in flight: never sent, so the next run answers again
        conversation = await store.ensure_conversation(Address("acct", "c1"))
        waited, resumed = [
            await store.record_outbound(conversation.id, Outbound(conversation.address, t), ME)
            for t in ("waited", "resumed")
        ]
        for entry in (waited, resumed):
            await store.note_waiting(entry.id, True)
        await store.note_waiting(resumed.id, False)  # its wait ended: it is being sent
        reasons = {e.id: e.reason for e in await store.outbox(status="pending")}
        assert reasons == {waited.id: "waiting out a rate limit", resumed.id: None}
        recovered = {e.id: e for e in await store.recover()}
        assert recovered[waited.id].status == "failed"
        assert "waited out a rate limit" in (recovered[waited.id].reason or "")
        assert recovered[resumed.id].status == "uncertain"

    async def test_a_send_never_tried_gives_back_what_an_ask_staked_on_it(
        self, store: Store
    ) -> None:
        # a report (or a question) that waited out a rate limit when the process died, or
        # was stopped in that wait: never sent, so the answer is owed again (the claim
        # stayed, and it was never reported) and a question's ask fails
        origin = await store.ensure_conversation(Address("acct", "origin"))
        session = await store.ensure_conversation(Address("acct", "peer", "s1"))
        question, answered = await asked(store, origin, session, "Q")
        await store.mark_sent(question.id, Receipt("pm-q"))
        (answer,) = await store.append_inbound(
            [Inbound(make_event("ans", "A", chat="peer", thread="s1", reply_to="pm-q"))]
        )
        assert await store.correlate_reply(session.id, answer.seq or 0) is not None
        report = await store.record_outbound(origin.id, Outbound(origin.address, "[A]"), ME)
        assert await store.claim_report(answered.id, report.id)
        await store.note_waiting(report.id, True)
        second, unsent = await asked(store, origin, session, "Q2", seq=2)
        stopped = await store.mark_failed(
            second.id, "stopped while waiting out a rate limit", never_sent=True
        )
        assert stopped.status == "failed"
        assert await store.asks(awaiting_report=True) == []
        await store.recover()  # the process had died in the report's wait
        assert [a.id for a in await store.asks(awaiting_report=True)] == [answered.id]
        again = await store.record_outbound(origin.id, Outbound(origin.address, "[A]"), ME)
        assert await store.claim_report(answered.id, again.id)  # claimed once more, once
        assert not await store.claim_report(answered.id, again.id)
        states = {a.id: a.state for a in await store.asks()}
        assert states == {answered.id: "answered", unsent.id: "failed"}
        # a send the platform refused is no give-back: reported, not owed again
        refused = await store.mark_failed(again.id, "chat not found")
        assert refused.status == "failed" and await store.asks(awaiting_report=True) == []
        # a send settled while it waited is said so: it must not be sent then
        assert not await store.note_waiting(again.id, False)

    async def test_a_held_sender_is_not_found_by_a_name_it_changed_to(self, store: Store) -> None:
        mallory = Sender("666", "Mallory")
        await store.append_inbound([Inbound(make_event("h1", "hello", chat="g"))])
        await store.append_inbound(
            [Inbound(make_event("h2", "spam", chat="g", sender=mallory), held=True)]
        )
        renamed = Sender("666", "Zorblax")
        await store.append_inbound(
            [Inbound(make_event("h3", "more spam", chat="g", sender=renamed), held=True)]
        )
        for name in ("Mallory", "Zorblax"):
            assert await store.search_conversations(query=name) == []
        # a visible sender's new name is found
        await store.append_inbound(
            [Inbound(make_event("h4", "hi", chat="g", sender=Sender(ALICE.id, "Alicia")))]
        )
        assert len(await store.search_conversations(query="Alicia")) == 1

    async def test_a_send_elsewhere_is_found_for_the_trigger_its_run_had_seen(
        self, store: Store
    ) -> None:
        here = await store.ensure_conversation(Address("acct", "here"))
        there = await store.ensure_conversation(Address("acct", "there"))
        run_id = await store.begin_run(here.id, 1, 1)
        assert await store.sent_elsewhere_after(here.id, 1) is None
        await store.record_outbound(here.id, Outbound(here.address, "own"), ME, run_id, 1)
        assert await store.sent_elsewhere_after(here.id, 1) is None  # its own: not elsewhere
        sent = await store.record_outbound(
            there.id, Outbound(there.address, "relayed", origin=here.address.key), ME, run_id, 1
        )
        found = await store.sent_elsewhere_after(here.id, 1)
        assert found is not None and found.id == sent.id
        assert await store.sent_elsewhere_after(here.id, 2) is None  # not seen by that run
        assert await store.sent_elsewhere_after(there.id, 1) is None
        await store.mark_failed(sent.id, "refused")
        assert await store.sent_elsewhere_after(here.id, 1) is None  # never went out

    async def test_a_question_whose_ask_was_never_recorded_acted_on_nothing(
        self, store: Store
    ) -> None:
        """ask_agent writes the question's outbox row, then its ask row, then sends: a run
        killed between the two rows sent nothing, so its trigger is still owed (before, it
        counted as sent elsewhere: the trigger was never answered, and with no ask row
        nothing ever expired or told the asker)."""
        here = await store.ensure_conversation(Address("acct", "here"))
        session = await store.ensure_conversation(Address("tp", "peer", "s1"), kind="thread")
        run_id = await store.begin_run(here.id, 1, 1)
        question = await store.record_outbound(
            session.id, Outbound(session.address, "what is 6x7?"), ME, run_id, 1
        )
        assert await store.sent_elsewhere_after(here.id, 1) is None
        await store.record_ask(
            origin_conversation_id=here.id,
            origin_seq=1,
            peer_conversation_id=session.id,
            question=question.text,
            deadline=9e9,
            message_seq=question.message_seq,
            outbox_id=question.id,
        )
        found = await store.sent_elsewhere_after(here.id, 1)
        assert found is not None and found.id == question.id

    async def test_outbox_rows_are_read_by_the_runs_that_made_them(self, store: Store) -> None:
        here = await store.ensure_conversation(Address("acct", "here"))
        there = await store.ensure_conversation(Address("acct", "there"))
        one, two = await store.begin_run(here.id, 1, 1), await store.begin_run(here.id, 2, 2)
        own = await store.record_outbound(here.id, Outbound(here.address, "a"), ME, one)
        elsewhere = await store.record_outbound(there.id, Outbound(there.address, "b"), ME, one)
        await store.record_outbound(here.id, Outbound(here.address, "c"), ME, two)
        await store.record_outbound(here.id, Outbound(here.address, "d"), ME)
        found = await store.outbox(run_ids=[one])
        assert [entry.id for entry in found] == [elsewhere.id, own.id]  # newest first
        assert len(await store.outbox(run_ids=[one, two])) == 3
        assert await store.outbox(run_ids=[]) == []

    async def test_reporter_runs_do_not_hide_a_send_elsewhere(self, store: Store) -> None:
        """After a kill, a restart may run an ask's reporters (trigger 0) in the conversation
        before its owed run: however many, the cut-short run's send elsewhere is found."""
        here = await store.ensure_conversation(Address("acct", "here"))
        there = await store.ensure_conversation(Address("acct", "there"))
        run_id = await store.begin_run(here.id, 1, 1)
        sent = await store.record_outbound(
            there.id, Outbound(there.address, "relayed", origin=here.address.key), ME, run_id, 1
        )
        for _ in range(6):
            reporter = await store.begin_run(here.id, 0, 1)
            await store.finish_run(reporter, "ok")
        found = await store.sent_elsewhere_after(here.id, 1)
        assert found is not None and found.id == sent.id

    async def test_an_id_noted_before_sending_survives_a_restart(self, store: Store) -> None:
        conversation = await store.ensure_conversation(Address("acct", "c1"))
        entry = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "q"), ME
        )
        await store.note_platform_id(entry.id, "p-before")
        [recovered] = await store.recover()  # the process died during the send
        assert recovered.status == "uncertain" and recovered.platform_ids == ("p-before",)
        [reply] = await store.append_inbound(
            [Inbound(make_event("r-q", "an answer", chat="c1", reply_to="p-before"))]
        )
        answer = await store.message(conversation.id, reply.seq or 0)
        assert answer is not None and answer.reply_to_seq == entry.message_seq
        # only a pending send's message is changed: not one settled, not an edit

        async def platform_id(seq: int | None) -> str | None:
            message = await store.message(conversation.id, seq or 0)
            assert message is not None
            return message.platform_message_id

        await store.note_platform_id(entry.id, "p-late")
        assert await platform_id(entry.message_seq) == "p-before"
        sent = await store.record_outbound(conversation.id, Outbound(conversation.address, "s"), ME)
        await store.mark_sent(sent.id, Receipt("p-sent"))
        await store.note_platform_id(sent.id, "p-other")
        assert await platform_id(sent.message_seq) == "p-sent"
        edit = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "s2", kind="edit", target="p-sent"), ME
        )
        await store.note_platform_id(edit.id, "p-edit")
        [newest, *_] = await store.outbox(conversation_id=conversation.id)
        assert newest.id == edit.id and newest.platform_ids == ()
        # a send the platform refused never arrived: the id noted for it names nothing
        refused = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "r"), ME
        )
        await store.note_platform_id(refused.id, "p-refused")
        failed = await store.mark_failed(refused.id, "not a contact")
        assert failed.platform_ids == ()
        assert await platform_id(refused.message_seq) is None

    async def test_outbound_edit_changes_own_message_when_sent(self, store: Store) -> None:
        conversation = await store.ensure_conversation(Address("acct", "c1"))
        entry = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "v1"), ME
        )
        await store.mark_sent(entry.id, Receipt("p-9"))
        edit = await store.record_outbound(
            conversation.id, Outbound(conversation.address, "v2", kind="edit", target="p-9"), ME
        )
        assert edit.message_seq is None
        await store.mark_sent(edit.id, Receipt("p-9"))
        message = await store.message(conversation.id, 1)
        assert message is not None and message.text == "v2" and message.edited_at is not None

    async def test_handled_seq_only_moves_forward(self, store: Store) -> None:
        (stored,) = await store.append_inbound([Inbound(make_event("e1"), triggers=True)])
        assert [c.id for c in await store.unhandled()] == [stored.conversation_id]
        await store.mark_handled(stored.conversation_id, 1)
        await store.mark_handled(stored.conversation_id, 0)
        conversation = await store.conversation(stored.conversation_id)
        assert conversation.handled_seq == 1
        assert await store.unhandled() == []

    async def test_answers_after_counts_what_runs_sent_after_seeing_the_trigger(
        self, store: Store
    ) -> None:
        [first] = await store.append_inbound([Inbound(make_event("a1", "first"), triggers=True)])
        conversation = await store.conversation(first.conversation_id)
        me = Sender("me", "Agent", is_bot=True)
        address = conversation.address
        running = await store.begin_run(conversation.id, 1, 1)
        await store.append_inbound([Inbound(make_event("a2", "second"), triggers=True)])
        early = await store.record_outbound(
            conversation.id, Outbound(address, "re first"), me, running, seen_seq=1
        )
        assert early.message_seq == 3
        # the run had seen #1, not #2, when it sent #3: it answers only #1
        assert await store.answers_after(conversation.id, 1) == {3}
        assert await store.answers_after(conversation.id, 2) == set()
        # it then takes #2 (new_messages) and sends again: that one answers #2, the
        # earlier one still does not
        late = await store.record_outbound(
            conversation.id, Outbound(address, "re second"), me, running, seen_seq=2
        )
        assert late.message_seq == 4
        assert await store.answers_after(conversation.id, 2) == {4}
        # a row recorded without seen_seq (before the column) goes by the run's upto_seq
        await store.record_outbound(conversation.id, Outbound(address, "old style"), me, running)
        assert await store.answers_after(conversation.id, 1) == {3, 4, 5}
        assert await store.answers_after(conversation.id, 2) == {4}
        # a reporter run (trigger 0) and a send from no run answer nothing
        reporter = await store.begin_run(conversation.id, 0, 5)
        await store.record_outbound(
            conversation.id, Outbound(address, "the answer"), me, reporter, seen_seq=5
        )
        await store.record_outbound(conversation.id, Outbound(address, "cli"), me)
        assert await store.answers_after(conversation.id, 2) == {4}
        [other] = await store.append_inbound(
            [Inbound(make_event("b1", "elsewhere", chat="c2"), triggers=True)]
        )
        assert await store.answers_after(other.conversation_id, 0) == set()

    async def test_runs_are_recorded_with_their_outcome(self, store: Store) -> None:
        conversation = await store.ensure_conversation(Address("acct", "c1"))
        run_id = await store.begin_run(conversation.id, 1, 1)
        await store.finish_run(run_id, "error", "ValueError: boom")
        (run,) = await store.runs(conversation.id)
        assert (run.status, run.error) == ("error", "ValueError: boom")
        assert run.finished_at is not None

    async def test_outbox_rows_name_the_run_that_made_them(self, store: Store) -> None:
        conversation = await store.ensure_conversation(Address("acct", "c1"))
        run_id = await store.begin_run(conversation.id, 1, 1)
        await store.record_outbound(
            conversation.id, Outbound(conversation.address, "from the run"), ME, run_id=run_id
        )
        await store.record_outbound(conversation.id, Outbound(conversation.address, "operator"), ME)
        rows = await store.outbox(conversation_id=conversation.id)
        assert [(row.text, row.run_id) for row in rows] == [
            ("operator", None),
            ("from the run", run_id),
        ]

    async def test_state_is_committed_with_the_event(self, store: Store) -> None:
        await store.append_inbound([Inbound(make_event("e1"), state={"offset": "41"})])
        assert await store.get_state("acct", "offset") == "41"
        await store.set_state("acct", "offset", None)
        assert await store.get_state("acct", "offset") is None

    async def test_participants_are_counted(self, store: Store) -> None:
        await store.append_inbound(
            [
                Inbound(make_event("e1")),
                Inbound(make_event("e2", sender=BOB)),
                Inbound(make_event("e3")),
            ]
        )
        conversation = (await store.conversations())[0]
        people = await store.participants(conversation.id)
        assert [(p.sender.id, p.message_count) for p in people] == [("alice", 2), ("bob", 1)]

    async def test_unknown_conversation_is_a_clear_error(self, store: Store) -> None:
        # its own kind: "not there" is not "could not ask" (a database away)
        with pytest.raises(UnknownConversation, match="no conversation with id 4242"):
            await store.conversation(4242)
        assert await find_by_reference(store, "4242") is None

    async def test_dead_letters_are_kept(self, store: Store) -> None:
        await store.add_dead_letter("acct", "malformed", "missing chat", "{}")
        (letter,) = await store.dead_letters("acct")
        assert letter["reason"] == "missing chat"
        assert letter["deliveries"] == 1 and letter["first_at"] == letter["at"]
        # the adapter state an ingest carries commits with its letter
        await store.set_state("acct", "gone", "x")
        await store.add_dead_letter(
            "acct", "r-1", "undecryptable", "{}", state={"cursor": "5", "gone": None}
        )
        assert await store.get_state("acct", "cursor") == "5"
        assert await store.get_state("acct", "gone") is None

    async def test_a_redelivered_dead_letter_is_counted_not_kept_twice(self, store: Store) -> None:
        await store.add_dead_letter("acct", "malformed", "missing chat", '{"u": 1}')
        await store.add_dead_letter("acct", "malformed", "missing chat", '{"u": 2}')
        [second, first] = await store.dead_letters("acct")
        await store.add_dead_letter("acct", "malformed", "missing chat, again", '{"u": 1}')
        await store.add_dead_letter("other", "malformed", "missing chat", '{"u": 1}')
        await store.add_dead_letter("acct", "r-9", "undecryptable", '{"u": 1}')
        letters = await store.dead_letters("acct")
        assert [(d["ref"], d["payload"], d["deliveries"]) for d in letters] == [
            ("r-9", '{"u": 1}', 1),  # another ref: another letter
            ("malformed", '{"u": 1}', 2),  # the repeat: one letter, counted, with a newer id
            ("malformed", '{"u": 2}', 1),
        ]
        again = letters[1]
        assert second["id"] < again["id"] < letters[0]["id"]
        assert again["reason"] == "missing chat, again"
        assert again["first_at"] == first["at"] and again["at"] >= first["at"]
        assert len(await store.dead_letters("other")) == 1
        # the newest id still counts every delivery (the fuzz kit counts by it)
        assert letters[0]["id"] - first["id"] == 4

    async def test_finishing_a_run_can_advance_handled_seq_with_it(self, store: Store) -> None:
        (stored,) = await store.append_inbound([Inbound(make_event("e1"), triggers=True)])
        run_id = await store.begin_run(stored.conversation_id, 1, 1)
        await store.finish_run(run_id, "ok", None, 1, handled_seq=1)
        assert (await store.conversation(stored.conversation_id)).handled_seq == 1

    async def test_a_batch_can_reply_to_edit_and_repeat_its_own_messages(
        self, store: Store
    ) -> None:
        results = await store.append_inbound(
            [
                Inbound(make_event("e1", "question")),
                Inbound(make_event("e2", "answer", sender=BOB, reply_to="e1")),
                Inbound(make_event("e1-edit", "question?", kind="edit", message_id="e1")),
                Inbound(make_event("e3", "more")),
                Inbound(make_event("e3", "more")),
            ]
        )
        assert [r.status for r in results] == ["stored", "stored", "applied", "stored", "duplicate"]
        assert results[4].seq == results[3].seq == 3
        conversation_id = results[0].conversation_id
        reply = await store.message(conversation_id, 2)
        assert reply is not None and reply.reply_to_seq == 1
        edited = await store.message(conversation_id, 1)
        assert edited is not None and edited.text == "question?"

    async def test_a_batch_repeating_a_change_events_id_as_a_message_keeps_one(
        self, store: Store
    ) -> None:
        """A platform (or a forger) reusing an edit's event id for a message in one batch:
        the message is that event again, a duplicate, not a failed batch read forever."""
        (stored,) = await store.append_inbound([Inbound(make_event("m1", "helo"))])
        results = await store.append_inbound(
            [
                Inbound(make_event("x1", "hello", kind="edit", message_id="m1")),
                Inbound(make_event("x1", "a message under the edit's id", message_id="m2")),
                Inbound(make_event("r1", "👍", kind="reaction", message_id="m1", sender=BOB)),
                Inbound(make_event("r1", "and another", message_id="m3")),
                Inbound(make_event("e4", "next")),
            ]
        )
        assert [r.status for r in results] == [
            "applied",
            "duplicate",
            "applied",
            "duplicate",
            "stored",
        ]
        window = await store.window(stored.conversation_id, 10)
        assert [(m.seq, m.text) for m in window] == [(1, "hello"), (2, "next")]

    async def test_a_held_senders_reaction_or_edit_changes_nothing(self, store: Store) -> None:
        (stored,) = await store.append_inbound([Inbound(make_event("e1", "hello"))])
        results = await store.append_inbound(
            [
                Inbound(
                    make_event("r1", "👎", kind="reaction", message_id="e1", sender=BOB), held=True
                ),
                Inbound(make_event("x1", "pwned", kind="edit", message_id="e1"), held=True),
            ]
        )
        assert [r.status for r in results] == ["recorded", "recorded"]
        message = await store.message(stored.conversation_id, 1)
        assert message is not None
        assert (message.text, message.reactions, message.edited_at) == ("hello", (), None)

    async def test_an_edit_before_its_original_makes_one_row(self, store: Store) -> None:
        (early,) = await store.append_inbound(
            [Inbound(make_event("e1-edit", "fixed typo", kind="edit", message_id="m1"))]
        )
        (late,) = await store.append_inbound(
            [Inbound(make_event("e1", "fixd typo", message_id="m1"))]
        )
        assert late.status == "applied" and late.seq == early.seq == 1
        window = await store.window(early.conversation_id, 10)
        assert [(m.seq, m.text) for m in window] == [(1, "fixed typo")]
        (again,) = await store.append_inbound([Inbound(make_event("e1", "fixd typo"))])
        assert again.status == "duplicate"
        (next_one,) = await store.append_inbound([Inbound(make_event("e2", "next"))])
        assert next_one.seq == 2

    async def test_an_original_arriving_after_its_edit_still_triggers_its_run(
        self, store: Store
    ) -> None:
        # webhooks deliver concurrently: the edit can land first, and an edit never triggers
        (early,) = await store.append_inbound(
            [Inbound(make_event("e1-edit", "fixed", kind="edit", message_id="m1"))]
        )
        conversation = await store.conversation(early.conversation_id)
        assert (early.triggers, conversation.trigger_seq) == (False, 0)
        (late,) = await store.append_inbound(
            [Inbound(make_event("e1", "fixd", message_id="m1"), triggers=True)]
        )
        assert (late.status, late.seq, late.triggers) == ("applied", 1, True)
        conversation = await store.conversation(early.conversation_id)
        assert conversation.trigger_seq == 1 > conversation.handled_seq
        (message,) = await store.window(early.conversation_id, 10)
        assert message.text == "fixed"
        # a message that would not have triggered (not for the agent) still does not
        await store.append_inbound(
            [Inbound(make_event("e3-edit", "x", kind="edit", message_id="m3"))]
        )
        (quiet,) = await store.append_inbound(
            [Inbound(make_event("e3", "x", message_id="m3"), triggers=False)]
        )
        assert (quiet.status, quiet.seq, quiet.triggers) == ("applied", 2, False)
        assert (await store.conversation(early.conversation_id)).trigger_seq == 1

    async def test_an_original_after_its_edit_does_not_trigger_what_a_run_already_read(
        self, store: Store
    ) -> None:
        (early,) = await store.append_inbound(
            [Inbound(make_event("e1-edit", "fixed", kind="edit", message_id="m1"))]
        )
        (later,) = await store.append_inbound([Inbound(make_event("e2", "next"), triggers=True)])
        await store.mark_handled(early.conversation_id, later.seq or 0)  # a run read both
        (late,) = await store.append_inbound(
            [Inbound(make_event("e1", "fixd", message_id="m1"), triggers=True)]
        )
        assert late.status == "applied"
        conversation = await store.conversation(early.conversation_id)
        assert conversation.trigger_seq == 2 == conversation.handled_seq

    async def test_a_message_whose_delete_came_first_arrives_deleted_and_unanswered(
        self, store: Store
    ) -> None:
        (early,) = await store.append_inbound(
            [Inbound(make_event("e1-del", "", kind="delete", message_id="m1", sent_at=1000.5))]
        )
        assert early.status == "recorded"
        (late,) = await store.append_inbound(
            [Inbound(make_event("e1", "sorry, wrong chat", message_id="m1"), triggers=True)]
        )
        assert (late.status, late.seq, late.triggers) == ("stored", 1, False)
        conversation = await store.conversation(late.conversation_id)
        assert conversation.trigger_seq == 0
        (message,) = await store.window(late.conversation_id, 10)
        assert (message.text, message.deleted_at) == ("sorry, wrong chat", 1000.5)
        # the delete is used once: the same id again (a platform reusing it) is a new message
        await store.append_inbound([Inbound(make_event("e2", "later", message_id="m2"))])
        (again,) = await store.append_inbound(
            [Inbound(make_event("e3", "again", message_id="m1"), triggers=True)]
        )
        assert (again.status, again.triggers) == ("stored", True)
        window = await store.window(late.conversation_id, 10)
        assert [m.deleted_at is None for m in window] == [False, True, True]
        # a delete redelivered before the message makes no second early delete
        for _ in range(2):
            await store.append_inbound(
                [Inbound(make_event("e4-del", "", kind="delete", message_id="m4"))]
            )
        (fourth,) = await store.append_inbound(
            [Inbound(make_event("e4", "gone", message_id="m4"), triggers=True)]
        )
        (fifth,) = await store.append_inbound(
            [Inbound(make_event("e5", "here", message_id="m5"), triggers=True)]
        )
        assert (fourth.triggers, fifth.triggers) == (False, True)
        window = await store.window(late.conversation_id, 10)
        assert [m.deleted_at is None for m in window] == [False, True, True, False, True]

    @pytest.mark.parametrize(
        "order", [("edit", "delete"), ("delete", "edit")], ids=["edit-delete", "delete-edit"]
    )
    async def test_a_message_edited_and_deleted_before_it_arrives_is_deleted_and_unanswered(
        self, store: Store, order: tuple[str, str]
    ) -> None:
        for kind in order:
            await store.append_inbound(
                [Inbound(make_event(f"m1-{kind}", "fixed", kind=kind, message_id="m1"))]
            )
        (late,) = await store.append_inbound(
            [Inbound(make_event("m1", "orig", message_id="m1"), triggers=True)]
        )
        assert late.triggers is False
        conversation = await store.conversation(late.conversation_id)
        assert conversation.trigger_seq == 0
        window = await store.window(late.conversation_id, 10)
        assert [m.deleted_at is not None for m in window] == [True]
        # nothing is left waiting: the next message triggers as any does
        (after,) = await store.append_inbound([Inbound(make_event("m2", "next"), triggers=True)])
        assert (after.status, after.seq, after.triggers) == ("stored", 2, True)

    async def test_an_edit_or_delete_of_a_later_part_of_our_message_makes_no_row(
        self, store: Store
    ) -> None:
        conversation, entry = await question_and_answer(store, "part one. part two.")
        await store.mark_sent(entry.id, Receipt("p1", part_ids=("p1", "p2")))
        for kind in ("edit", "delete"):
            (change,) = await store.append_inbound(
                [Inbound(make_event(f"p2-{kind}", "part two, fixed", kind=kind, message_id="p2"))]
            )
            assert change.status == "recorded"
        window = await store.window(conversation.id, 10)
        assert [(m.seq, m.text, m.deleted_at) for m in window] == [
            (1, "question", None),
            (2, "part one. part two.", None),
        ]
        (next_one,) = await store.append_inbound([Inbound(make_event("e2", "more"))])
        assert next_one.seq == 3

    async def test_reactions_that_came_before_their_message_arrive_with_it(
        self, store: Store
    ) -> None:
        bob_then_alice = [
            Inbound(make_event("r1", "👍", kind="reaction", message_id="m1", sender=BOB)),
            Inbound(make_event("r2", "🎉", kind="reaction", message_id="m1", sender=ALICE)),
            # Telegram's shape: Alice's whole set, before and after
            Inbound(
                make_event(
                    "r3",
                    "",
                    kind="reaction",
                    message_id="m1",
                    sender=ALICE,
                    meta={"old_reaction": ["🎉"], "new_reaction": ["👀"]},
                )
            ),
        ]
        early = await store.append_inbound(bob_then_alice)
        assert [r.status for r in early] == ["recorded"] * 3
        await store.append_inbound(bob_then_alice[:1])  # redelivered: waits once
        (late,) = await store.append_inbound(
            [Inbound(make_event("m1", "look at this", message_id="m1"), triggers=True)]
        )
        # a reaction starts no run, and does not stop the message's
        assert (late.status, late.seq, late.triggers) == ("stored", 1, True)
        message = await store.message(late.conversation_id, 1)
        assert message is not None
        assert message.reactions == (("Bob", "👍"), ("Alice", "👀"))
        # they are used once: a later reaction adds to them, a removal finds them
        await store.append_inbound(
            [
                Inbound(
                    make_event(
                        "r4",
                        "👍",
                        kind="reaction",
                        message_id="m1",
                        meta={"removed": True},
                        sender=Sender("bob"),
                    )
                )
            ]
        )
        message = await store.message(late.conversation_id, 1)
        assert message is not None and message.reactions == (("Alice", "👀"),)
        (after,) = await store.append_inbound([Inbound(make_event("m2", "next"), triggers=True)])
        assert (after.seq, after.triggers) == (2, True)
        shown = await store.message(late.conversation_id, 2)
        assert shown is not None and shown.reactions == ()

    @pytest.mark.parametrize("first", ["edit", "delete"])
    async def test_an_early_reaction_meets_an_early_edit_or_delete(
        self, store: Store, first: str
    ) -> None:
        await store.append_inbound(
            [
                Inbound(make_event("r1", "🔥", kind="reaction", message_id="m1", sender=BOB)),
                Inbound(make_event(f"m1-{first}", "fixed", kind=first, message_id="m1")),
            ]
        )
        (late,) = await store.append_inbound(
            [Inbound(make_event("m1", "orig", message_id="m1"), triggers=True)]
        )
        (message,) = await store.transcript(late.conversation_id, 10)
        assert message.reactions == (("Bob", "🔥"),)
        assert (message.text, message.deleted_at is not None) == (
            ("fixed", False) if first == "edit" else ("orig", True)
        )

    async def test_changes_naming_only_the_chat_wait_for_a_threads_message(
        self, store: Store
    ) -> None:
        # a Slack reaction (a Telegram one in a topic) names the chat, not the thread
        early = await store.append_inbound(
            [
                Inbound(make_event("r1", "👍", kind="reaction", message_id="t1", sender=BOB)),
                Inbound(make_event("d2", "", kind="delete", message_id="t2", sent_at=1000.5)),
            ]
        )
        assert [r.status for r in early] == ["recorded", "recorded"]
        # one at a time, and both in one batch with a message of the chat itself
        (first,) = await store.append_inbound(
            [Inbound(make_event("t1", "in the thread", thread="th1"), triggers=True)]
        )
        second, top = await store.append_inbound(
            [
                Inbound(make_event("t2", "oops", thread="th1"), triggers=True),
                Inbound(make_event("m3", "top level"), triggers=True),
            ]
        )
        assert (first.triggers, second.triggers, top.triggers) == (True, False, True)
        reacted = await store.message(first.conversation_id, first.seq or 0)
        assert reacted is not None and reacted.reactions == (("Bob", "👍"),)
        gone = await store.message(second.conversation_id, second.seq or 0)
        assert gone is not None and gone.deleted_at == 1000.5
        # nothing is left waiting in the chat: its next messages are as any
        (later,) = await store.append_inbound(
            [Inbound(make_event("t1-again", "x", thread="th2", message_id="t1"), triggers=True)]
        )
        again = await store.message(later.conversation_id, later.seq or 0)
        assert again is not None and (again.reactions, later.triggers) == ((), True)

    async def test_changes_naming_only_the_chat_meet_a_threads_edit_that_came_first(
        self, store: Store
    ) -> None:
        await store.append_inbound(
            [
                Inbound(make_event("r1", "👍", kind="reaction", message_id="t1", sender=BOB)),
                Inbound(make_event("d2", "", kind="delete", message_id="t2", sent_at=1000.5)),
            ]
        )
        for n in (1, 2):  # each thread message's edit came first, then the message
            await store.append_inbound(
                [
                    Inbound(
                        make_event(
                            f"t{n}-e", "fixed", kind="edit", message_id=f"t{n}", thread="th1"
                        )
                    )
                ]
            )
        first, second = [
            (
                await store.append_inbound(
                    [Inbound(make_event(f"t{n}", "orig", thread="th1"), triggers=True)]
                )
            )[0]
            for n in (1, 2)
        ]
        one = await store.message(first.conversation_id, first.seq or 0)
        assert one is not None and (one.text, one.reactions) == ("fixed", (("Bob", "👍"),))
        two = await store.message(second.conversation_id, second.seq or 0)
        assert two is not None and two.deleted_at == 1000.5 and second.triggers is False

    async def test_reactions_to_our_send_in_a_thread_or_to_its_parts_before_its_outcome_are_kept(
        self, store: Store
    ) -> None:
        await store.append_inbound(
            [
                Inbound(make_event("top", "top level")),
                Inbound(make_event("t0", "in the thread", thread="th1")),
            ]
        )
        thread = await store.find_conversation(Address("acct", "c1", "th1"))
        assert thread is not None
        entry = await store.record_outbound(
            thread.id, Outbound(thread.address, "a long answer"), ME
        )
        # a Slack reaction names the chat only; one to the second part of a split message
        await store.append_inbound(
            [
                Inbound(make_event("r1", "👍", kind="reaction", message_id="p-1", sender=BOB)),
                Inbound(make_event("r2", "🎉", kind="reaction", message_id="p-2")),
            ]
        )
        await store.mark_sent(entry.id, Receipt("p-1", ("p-1", "p-2")))
        ours = await store.message(thread.id, entry.message_seq or 0)
        assert ours is not None and ours.reactions == (("Bob", "👍"), ("Alice", "🎉"))
        (later,) = await store.append_inbound([Inbound(make_event("top2", "more"))])
        assert later.status == "stored"
        # after the outcome too: a reaction naming the chat finds the thread by any part
        (after,) = await store.append_inbound(
            [Inbound(make_event("r3", "🔥", kind="reaction", message_id="p-2", sender=BOB))]
        )
        assert (after.status, after.conversation_id) == ("applied", thread.id)
        ours = await store.message(thread.id, entry.message_seq or 0)
        assert ours is not None
        assert ours.reactions == (("Bob", "👍"), ("Alice", "🎉"), ("Bob", "🔥"))

    async def test_a_reaction_to_our_message_before_its_send_is_recorded_is_kept(
        self, store: Store
    ) -> None:
        # a webhook's reaction can be stored before the send's outcome is
        conversation, entry = await question_and_answer(store, "the answer")
        (early,) = await store.append_inbound(
            [Inbound(make_event("r1", "🙏", kind="reaction", message_id="out-1", sender=ALICE))]
        )
        assert early.status == "recorded"
        await store.mark_sent(entry.id, Receipt("out-1"))
        ours = await store.message(conversation.id, entry.message_seq or 0)
        assert ours is not None and ours.reactions == (("Alice", "🙏"),)
        # nothing is left waiting: the next reaction to it is applied, once
        await store.append_inbound(
            [Inbound(make_event("r2", "👍", kind="reaction", message_id="out-1", sender=BOB))]
        )
        ours = await store.message(conversation.id, entry.message_seq or 0)
        assert ours is not None and ours.reactions == (("Alice", "🙏"), ("Bob", "👍"))

    async def test_early_reactions_whose_message_never_comes_are_let_go_after_a_day(
        self, store: Store
    ) -> None:
        await store.append_inbound(
            [Inbound(make_event("r-old", "👍", kind="reaction", message_id="old", sent_at=1000.0))]
        )
        later = 1000.0 + 86_400.0 + 1
        # messages a day later let it go (now and then: within 16 of them)
        (one, *_) = await store.append_inbound(
            [Inbound(make_event(f"n{i}", "chat", sent_at=later)) for i in range(16)]
        )
        (came,) = await store.append_inbound(
            [Inbound(make_event("old", "from long ago", message_id="old"), triggers=True)]
        )
        message = await store.message(came.conversation_id, came.seq or 0)
        assert message is not None and message.reactions == ()
        # and so does a newer early change (a reaction, or a delete)
        await store.append_inbound(
            [
                Inbound(
                    make_event("r-old2", "👍", kind="reaction", message_id="old2", sent_at=later)
                ),
                Inbound(
                    make_event("d-new", "", kind="delete", message_id="new", sent_at=later + 86_401)
                ),
            ]
        )
        (came,) = await store.append_inbound(
            [Inbound(make_event("old2", "also old", message_id="old2"), triggers=True)]
        )
        message = await store.message(came.conversation_id, came.seq or 0)
        assert message is not None and message.reactions == ()
        assert one.conversation_id == came.conversation_id

    @pytest.mark.parametrize("deleted", [False, True], ids=["kept", "deleted"])
    async def test_a_message_and_its_changes_in_any_order_end_alike(
        self, store: Store, deleted: bool
    ) -> None:
        # every order a webhook's concurrent deliveries (or a retry) can hand over: one
        # row, the edit's words, every reaction in the order it came, deleted if it was,
        # and a run unless the delete came before the message
        names = ["message", "edit", "bob", "alice", *(["delete"] if deleted else [])]
        for number, order in enumerate(itertools.permutations(names)):
            chat = f"order-{number}"
            events = {
                "message": make_event(f"{chat}-m", "orig", chat=chat, message_id="m"),
                "edit": make_event(f"{chat}-m-e", "fixed", chat=chat, kind="edit", message_id="m"),
                "bob": make_event(
                    f"{chat}-m-r1", "👍", chat=chat, kind="reaction", message_id="m", sender=BOB
                ),
                "alice": make_event(
                    f"{chat}-m-r2", "🎉", chat=chat, kind="reaction", message_id="m"
                ),
                "delete": make_event(f"{chat}-m-d", "", chat=chat, kind="delete", message_id="m"),
            }
            results = {}
            for name in order:
                (results[name],) = await store.append_inbound(
                    [Inbound(events[name], triggers=name == "message")]
                )
            conversation_id = results["message"].conversation_id
            (row,) = await store.transcript(conversation_id, 10)
            who = {"bob": ("Bob", "👍"), "alice": ("Alice", "🎉")}
            expected = tuple(who[name] for name in order if name in who)
            at = order.index
            # (an edit between its message's early delete and the message is not kept)
            dropped = deleted and at("delete") < at("edit") < at("message")
            assert (row.text, row.reactions, row.deleted_at is not None) == (
                "orig" if dropped else "fixed",
                expected,
                deleted,
            ), order
            answered = not deleted or at("delete") > at("message")
            assert results["message"].triggers is answered, order
            conversation = await store.conversation(conversation_id)
            assert conversation.trigger_seq == (row.seq if answered else 0), order

    async def test_deletes_of_messages_that_never_come_are_let_go_after_a_day(
        self, store: Store
    ) -> None:
        (old,) = await store.append_inbound(
            [Inbound(make_event("old-del", "", kind="delete", message_id="old", sent_at=1000.0))]
        )
        # a day later another early delete lets the first go
        later = 1000.0 + 86_400.0 + 1
        await store.append_inbound(
            [Inbound(make_event("new-del", "", kind="delete", message_id="new", sent_at=later))]
        )
        (came,) = await store.append_inbound(
            [
                Inbound(
                    make_event("old", "from long ago", message_id="old", sent_at=later),
                    triggers=True,
                )
            ]
        )
        (message,) = await store.window(old.conversation_id, 10)
        assert (came.triggers, message.deleted_at) == (True, None)
        (gone,) = await store.append_inbound(
            [
                Inbound(
                    make_event("new", "taken back", message_id="new", sent_at=later + 5),
                    triggers=True,
                )
            ]
        )
        assert gone.triggers is False

    async def test_our_edit_whose_echo_landed_first_makes_one_revision(self, store: Store) -> None:
        conversation, sent = await question_and_answer(store, "first words")
        await store.mark_sent(sent.id, Receipt("p1"))
        edit = await store.record_outbound(
            conversation.id,
            Outbound(conversation.address, "better words", kind="edit", target="p1"),
            ME,
        )
        # the platform's echo of the edit (Telegram Business) comes before the edit's answer
        echo = make_event("echo", "better words", kind="edit", message_id="p1")
        await store.append_inbound([Inbound(echo)])
        await store.mark_sent(edit.id, Receipt("p1"))
        message = await store.message(conversation.id, sent.message_seq or 0)
        assert message is not None and message.text == "better words"
        revisions = await store.revisions(conversation.id, sent.message_seq or 0)
        assert [(kind, text) for kind, text, _at in revisions] == [("edit", "first words")]

    async def test_inbound_outbound_inbound_numbers_one_two_three(self, store: Store) -> None:
        _, entry = await question_and_answer(store, "answer")
        (third,) = await store.append_inbound([Inbound(make_event("e2", "thanks"))])
        assert (entry.message_seq, third.seq) == (2, 3)  # after the question's 1

    async def test_the_first_event_says_what_kind_an_operators_conversation_is(
        self, store: Store
    ) -> None:
        made = await store.ensure_conversation(Address("acct", "g1"))  # an operator's send
        assert made.kind == "direct"
        await store.append_inbound(
            [
                Inbound(
                    make_event("e1", chat="g1", conversation_kind="group", conversation_title="Ops")
                )
            ]
        )
        conversation = await store.conversation(made.id)
        assert (conversation.kind, conversation.title) == ("group", "Ops")
        again = await store.ensure_conversation(Address("acct", "g1"))
        assert again.kind == "group"  # asking for it again does not undo what the event said

    # orchestration: search, counts, origin ------------------------------------
    async def test_search_matches_text_title_and_names_never_held_rows(self, store: Store) -> None:
        carol = Sender("carol", "Carol Ünal", "cz")
        await store.append_inbound(
            [
                Inbound(make_event("a1", "the invoice for March", chat="a")),
                Inbound(
                    make_event("b1", "lunch?", chat="b", conversation_kind="group",
                               conversation_title="Billing Team")
                ),
                Inbound(make_event("c1", "hello", chat="c", sender=carol)),
                Inbound(make_event("d1", "secret invoice", chat="d", sender=BOB), held=True),
                Inbound(make_event("e1", "invoice", chat="e", account="elsewhere")),
            ]
        )  # fmt: skip

        async def keys(query: str | None, accounts: list[str] | None = None) -> list[str]:
            found = await store.search_conversations(accounts=accounts, query=query, limit=10)
            return sorted(c.address.key for c in found)

        assert await keys("invoice") == ["acct/a", "elsewhere/e"]
        assert await keys("INVOI", ["acct"]) == ["acct/a"]  # prefix, any case
        assert await keys("billing") == ["acct/b"]  # the title
        assert await keys("unal") == ["acct/c"]  # a name, accents ignored
        assert await keys("alice march") == ["acct/a"]  # words may match name and text
        assert await keys("secret") == []  # held rows are never indexed
        assert await keys("Bob") == []  # nor a sender whose only message was held
        assert await keys('") OR "* NEAR(') == []  # no FTS syntax gets through
        assert await keys("the_invoice") == ["acct/a"]  # "_" separates words, as FTS does
        assert await keys("") == []
        assert await keys(None, []) == []
        assert len(await store.search_conversations(accounts=["acct"], limit=10)) == 4

    async def test_search_follows_edits_and_renames(self, store: Store) -> None:
        await store.append_inbound(
            [Inbound(make_event("g1", "first words", chat="g", conversation_kind="group",
                                conversation_title="Old Name"))]
        )  # fmt: skip
        assert [c.address.key for c in await store.search_conversations(query="first")] == [
            "acct/g"
        ]  # searched (so indexed) before the edit
        await store.append_inbound(
            [
                Inbound(make_event("g1-e", "second thoughts", kind="edit", chat="g",
                                   message_id="g1", conversation_kind="group",
                                   conversation_title="New Name"))
            ]
        )  # fmt: skip
        found = await store.search_conversations(query="second new")
        assert [c.address.key for c in found] == ["acct/g"]
        assert await store.search_conversations(query="first") == []
        assert await store.search_conversations(query="old") == []

    async def test_search_finds_what_came_since_the_last_search(self, store: Store) -> None:
        # a store may index lazily (both built-in ones do): what a search has not yet seen,
        # new messages and edits of messages it never indexed, is found by the next one
        await store.append_inbound([Inbound(make_event("h1", "alpha", chat="h"))])
        assert await store.search_conversations(query="beta") == []
        await store.append_inbound(
            [
                Inbound(make_event("h2", "beta", chat="h")),
                Inbound(make_event("i1", "draft", chat="i")),
                Inbound(make_event("i1-e", "gamma", kind="edit", chat="i", message_id="i1")),
                Inbound(make_event("j1", "beta", chat="j", sender=BOB), held=True),
            ]
        )
        assert [c.address.key for c in await store.search_conversations(query="beta")] == ["acct/h"]
        assert [c.address.key for c in await store.search_conversations(query="gamma")] == [
            "acct/i"
        ]
        assert await store.search_conversations(query="draft") == []
        await store.append_inbound([Inbound(make_event("h3", "delta", chat="h"))])
        found = await store.search_conversations(query="alpha delta")
        assert [c.address.key for c in found] == ["acct/h"]

    async def test_search_orders_by_latest_activity_and_counts_visible(self, store: Store) -> None:
        await store.append_inbound(
            [
                Inbound(make_event("x1", "topic", chat="x", sent_at=100.0)),
                Inbound(make_event("y1", "topic", chat="y", sent_at=200.0)),
                Inbound(make_event("x2", "more", chat="x", sent_at=300.0)),
                Inbound(make_event("x3", "held", chat="x", sent_at=310.0, sender=BOB), held=True),
            ]
        )
        found = await store.search_conversations(query="topic")
        assert [(c.address.chat, c.active_at >= 300.0) for c in found] == [
            ("x", True),
            ("y", False),
        ]
        assert await store.count_visible(found[0].id) == 2
        assert await store.count_visible(found[0].id, before_seq=2) == 1
        assert await store.count_visible(found[0].id, before_seq=99) == 2

    async def test_outbound_origin_is_kept_on_outbox_and_transcript(self, store: Store) -> None:
        conversation, entry = await question_and_answer(store, "relayed", origin="web/tab1")
        assert entry.origin == "web/tab1"
        sent = await store.mark_sent(entry.id, Receipt("p-1", ("p-1", "p-2")))
        assert sent.origin == "web/tab1"
        message = await store.message(conversation.id, entry.message_seq or 0)
        assert message is not None and message.meta["origin"] == "web/tab1"
        assert list(message.meta["part_ids"]) == ["p-1", "p-2"]
        found = await store.search_conversations(query="relayed")
        assert [c.id for c in found] == [conversation.id]  # the agent's own words are found too

    async def test_a_reply_or_reaction_to_a_later_part_of_a_split_message_finds_it(
        self, store: Store
    ) -> None:
        conversation, entry = await question_and_answer(store, "a long answer")
        await store.mark_sent(entry.id, Receipt("p-1", ("p-1", "p-2", "p-3")))
        ours = entry.message_seq
        reply, reaction, gone, elsewhere = await store.append_inbound(
            [
                Inbound(make_event("e2", "about part two", reply_to="p-2")),
                Inbound(make_event("r1", "👍", kind="reaction", message_id="p-3", sender=BOB)),
                # a part deleted is not the whole message deleted
                Inbound(make_event("d1", kind="delete", message_id="p-2")),
                # another conversation's reply naming the same id is not a reply to ours
                Inbound(make_event("e3", "elsewhere", chat="c2", reply_to="p-2")),
            ]
        )
        replied = await store.message(conversation.id, reply.seq or 0)
        assert replied is not None and replied.reply_to_seq == ours
        message = await store.message(conversation.id, ours or 0)
        assert message is not None and message.reactions == (("Bob", "👍"),)
        assert message.deleted_at is None and gone.status == "recorded"
        assert reaction.status == "applied" and reaction.seq == ours
        other = await store.message(elsewhere.conversation_id, elsewhere.seq or 0)
        assert other is not None and other.reply_to_seq is None

    # big stores: bounded reads, the same answers ------------------------------
    async def test_participants_are_counted_over_the_latest_messages(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        if not hasattr(store, "participant_window"):
            pytest.skip("this store counts participants over the whole conversation")
        monkeypatch.setattr(store, "participant_window", 4)
        carol = Sender("carol", "Carol")
        mallory = Sender("666", "Mallory")
        (first,) = await store.append_inbound([Inbound(make_event("p0", chat="p"))])
        await store.append_inbound(
            [Inbound(make_event(f"p{n}", chat="p")) for n in range(1, 6)]  # Alice: #1-#6
            + [
                Inbound(make_event("p6", chat="p", sender=BOB)),  # 7
                Inbound(make_event("p7", chat="p", sender=mallory), held=True),  # 8, held
                Inbound(make_event("p8", chat="p", sender=carol)),  # 9
                Inbound(make_event("p9", chat="p", sender=BOB)),  # 10
            ]
        )
        conversation = await store.conversation(first.conversation_id)
        await store.record_outbound(conversation.id, Outbound(conversation.address, "out"), ME)
        people = await store.participants(conversation.id)
        # the latest 4 visible inbound messages: #6 (Alice), #7 and #10 (Bob), #9 (Carol);
        # the held one and our own are not counted, Alice's older five are out of the window
        assert [(p.sender.id, p.message_count, p.first_seq, p.last_seq) for p in people] == [
            ("bob", 2, 7, 10),
            ("alice", 1, 6, 6),
            ("carol", 1, 9, 9),
        ]
        monkeypatch.setattr(store, "participant_window", 1000)
        people = await store.participants(conversation.id)
        assert [(p.sender.id, p.message_count) for p in people] == [
            ("alice", 6),
            ("bob", 2),
            ("carol", 1),
        ]

    async def test_repeated_and_implied_words_find_what_one_finds(self, store: Store) -> None:
        await store.append_inbound(
            [
                Inbound(make_event("w1", "the theme", chat="w1")),
                Inbound(make_event("w2", "the end", chat="w2")),
                Inbound(make_event("w3", "other", chat="w3")),
            ]
        )

        async def chats(query: str) -> list[str]:
            return sorted(c.address.chat for c in await store.search_conversations(query=query))

        assert await chats("the") == ["w1", "w2"]
        assert await chats("the " * 1000) == ["w1", "w2"]
        assert await chats("THE the The") == ["w1", "w2"]
        assert await chats("the them") == ["w1"]  # "the" is implied by "them"
        assert await chats("them the") == ["w1"]
        # the first 8 distinct words count: a repeated one does not push out a later one
        assert await chats("the " * 20 + "end") == ["w2"]

    async def test_a_search_can_be_limited_to_chats(self, store: Store) -> None:
        await store.append_inbound(
            [
                Inbound(make_event(f"s{account}{chat}", "topic", chat=chat, account=account))
                for account in ("one", "two", "three")
                for chat in ("a", "b", "c")
            ]
        )
        search: Any = store.search_conversations
        if not getattr(store, "searches_chats", False):
            pytest.skip("this store does not limit a search to chats")

        async def keys(**kwargs: Any) -> list[str]:
            found = await search(limit=50, **kwargs)
            return sorted(c.address.key for c in found)

        limits = {"chats": {"one": {"a", "b"}}, "excluded_chats": {"two": {"b"}}}
        assert await keys(**limits) == [
            "one/a", "one/b", "three/a", "three/b", "three/c", "two/a", "two/c"
        ]  # fmt: skip
        assert await keys(accounts=["one", "two"], query="topic", **limits) == [
            "one/a", "one/b", "two/a", "two/c"
        ]  # fmt: skip
        assert await keys(accounts=["one"], chats={"one": set()}) == []
        assert await keys(accounts=["two"], excluded_chats={"two": set()}) == [
            "two/a", "two/b", "two/c"
        ]  # fmt: skip
        assert await keys(accounts=["three"], chats={"one": {"a"}}) == [
            "three/a", "three/b", "three/c"
        ]  # fmt: skip
        assert await keys(chats={"one": {"a", "b"}}, excluded_chats={"one": {"b"}}) == [
            "one/a", "three/a", "three/b", "three/c", "two/a", "two/b", "two/c"
        ]  # fmt: skip

    async def test_a_sender_first_seen_held_is_not_found_by_name(self, store: Store) -> None:
        # both stores index a name as SQLite's names_fts does: when the participant's first
        # message is visible (a sender let in later is found by what they write, not named)
        late = Sender("late", "Latecomer")
        await store.append_inbound(
            [Inbound(make_event("l1", "spam", chat="l", sender=late), held=True)]
        )
        await store.append_inbound([Inbound(make_event("l2", "welcome", chat="l", sender=late))])
        assert await store.search_conversations(query="Latecomer") == []
        assert len(await store.search_conversations(query="welcome")) == 1

    async def test_counting_and_paging_take_any_seq(self, store: Store) -> None:
        results = await store.append_inbound(
            [
                Inbound(make_event(f"k{n}", f"m{n}", chat="k", sender=BOB), held=n % 3 == 0)
                for n in range(1, 11)
            ]
        )
        conversation_id = results[0].conversation_id
        visible = [n for n in range(1, 11) if n % 3]
        for before in (-(2**63), -5, 0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 99, 2**62, 2**63):
            expected = len([n for n in visible if n < before])
            assert await store.count_visible(conversation_id, before) == expected, before
            page = await store.history(conversation_id, before, 3)
            assert [m.seq for m in page] == [n for n in visible if n < before][-3:], before
        assert await store.count_visible(4242, 5) == 0
        assert [m.seq for m in await store.window(conversation_id, 2, 2**63)] == [8, 10]
        assert await store.window(conversation_id, 2, -(2**63) - 1) == []
        assert [m.seq for m in await store.messages_after(conversation_id, -(2**63), 2)] == [1, 2]
        assert await store.messages_after(conversation_id, 2**63) == []

"""A report or expiry notice of an ask goes out once, even when the process dies right after.

The process is cut short in place (an exception no handler takes, raised the
moment the platform has the message, before any later line runs), and a new
switchboard and coordinator start on the same store file, as `serve` would
after a SIGKILL. What the platform received is counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from backchannel import Binding, Run, Switchboard
from backchannel.asks import AskCoordinator
from backchannel.asks.settings import AskSettings
from backchannel.model import Address, Outbound, Receipt, now
from backchannel.store import SQLiteStore
from backchannel.testing import FakeChannel


class Died(BaseException):
    """The process stopping where it stands (no `except Exception` takes it)."""


class _Deployment:
    """A switchboard and its ask coordinator on one store file, over one fake platform."""

    def __init__(self, path: Path, channel: FakeChannel, report: str, agent: Any):
        self.store = SQLiteStore(path)
        self.board = Switchboard(self.store)
        self.adapter = channel.adapter("fake")
        self.board.add_account(self.adapter, Binding(agent, debounce=3600, max_wait=3600))
        self.asks = AskCoordinator(self.board, AskSettings(report=report)).attach()  # type: ignore[arg-type]

    def die_after_the_next_send(self) -> None:
        send = self.adapter.send

        async def send_then_die(outbound: Outbound) -> Receipt:
            await send(outbound)
            raise Died

        self.adapter.send = send_then_die  # type: ignore[method-assign]

    async def close(self) -> None:
        # no graceful stop: what a killed process leaves behind is what the store holds
        await self.store.close()


async def _asked(store: SQLiteStore, *, deadline: float, answered: bool) -> tuple[Any, Any]:
    """An origin conversation that asked a peer session, answered or not."""
    origin = await store.ensure_conversation(Address("fake", "owner"))
    session = await store.ensure_conversation(Address("fake", "peer", "s1"), kind="thread")
    ask = await store.record_ask(
        origin_conversation_id=origin.id,
        origin_seq=None,
        peer_conversation_id=session.id,
        question="is it done?",
        deadline=deadline,
    )
    if answered:
        from backchannel.store import Inbound
        from backchannel.testing.store_contract import make_event

        event = make_event("a1", "yes, done", chat="peer", account="fake", thread="s1")
        [stored] = await store.append_inbound([Inbound(event)])
        assert stored.seq is not None
        assert await store.correlate_reply(session.id, stored.seq) is not None
    return origin, ask


async def _noop(run: Run) -> None:
    return None


async def test_an_expiry_notice_is_not_posted_again_after_dying_once_it_went_out(
    tmp_path: Path,
) -> None:
    channel, path = FakeChannel(), tmp_path / "bc.db"
    first = _Deployment(path, channel, "verbatim", _noop)
    await _asked(first.store, deadline=now() - 1, answered=False)
    first.die_after_the_next_send()
    with pytest.raises(Died):
        await first.asks.sweep()
    await first.close()
    assert len(channel.platform.texts("owner")) == 1

    again = _Deployment(path, channel, "verbatim", _noop)
    await again.asks.sweep()
    [ask] = await again.store.asks()
    assert ask.expiry_reported_at is not None
    assert len(channel.platform.texts("owner")) == 1  # not a second notice
    await again.close()


@pytest.mark.parametrize("report", ["verbatim", "run"])
async def test_a_report_is_not_made_again_after_dying_once_it_went_out(
    tmp_path: Path, report: str
) -> None:
    async def reporter(run: Run) -> None:
        await run.call("send_message", {"text": "the peer says it is done"})

    channel, path = FakeChannel(), tmp_path / "bc.db"
    first = _Deployment(path, channel, report, reporter)
    origin, _ = await _asked(first.store, deadline=now() + 3600, answered=True)
    [owed] = await first.store.asks(awaiting_report=True)
    first.die_after_the_next_send()
    with pytest.raises(Died):
        await first.asks._report(owed, origin)
    await first.close()
    assert len(channel.platform.texts("owner")) == 1

    again = _Deployment(path, channel, report, reporter)
    assert await again.store.asks(awaiting_report=True) == []  # nothing owed any more
    [ask] = await again.store.asks()
    assert ask.state == "answered"
    await again.asks.sweep()  # reports whatever is still owed: nothing
    assert len(channel.platform.texts("owner")) == 1
    await again.close()


@pytest.mark.parametrize("what", ["expiry notice", "report"])
async def test_two_processes_sweeping_one_store_post_once(tmp_path: Path, what: str) -> None:
    """Two processes on one store (workers serving the same account behind a load
    balancer, or a stalled worker and its successor) both find the notice or the report
    owed: one posts it; the other's send is not made."""

    async def reporter(run: Run) -> None:
        await run.call("send_message", {"text": "the peer says it is done"})

    channel, path = FakeChannel(), tmp_path / "bc.db"
    one = _Deployment(path, channel, "run", reporter)
    two = _Deployment(path, channel, "run", reporter)
    answered = what == "report"
    origin, _ = await _asked(
        one.store, deadline=now() + (3600 if answered else -1), answered=answered
    )
    if answered:
        [owed] = await one.store.asks(awaiting_report=True)
        # both found it owed before either reported (what a race between two looks like)
        await one.asks._report(owed, origin)
        await two.asks._report(owed, origin)
    else:
        found = [await d.store.expire_asks(now()) for d in (one, two)]
        assert [len(asks) for asks in found] == [1, 1]
        expire = two.store.expire_asks

        async def as_found_before(at: float) -> Any:
            return found[1]  # two found it due before one's notice was recorded

        two.store.expire_asks = as_found_before  # type: ignore[method-assign,assignment]
        await one.asks.sweep()
        await two.asks.sweep()
        two.store.expire_asks = expire  # type: ignore[method-assign]
    assert len(channel.platform.texts("owner")) == 1
    # the second's send was recorded, then not made: failed, saying why
    outbox = await two.store.outbox(conversation_id=origin.id)
    assert sorted((entry.status, entry.reason) for entry in outbox) == [
        ("failed", "not sent: reported already, by another worker"),
        ("sent", None),
    ]
    await one.close()
    await two.close()


async def test_an_uncertain_report_is_not_posted_again_verbatim(tmp_path: Path) -> None:
    """The reporter run's send ends uncertain (it may have arrived): the answer is not
    posted a second time as a fallback (uncertain is never sent again)."""

    async def reporter(run: Run) -> None:
        await run.call("send_message", {"text": "the peer says it is done"})

    channel, path = FakeChannel(), tmp_path / "bc.db"
    here = _Deployment(path, channel, "run", reporter)
    origin, _ = await _asked(here.store, deadline=now() + 3600, answered=True)
    [owed] = await here.store.asks(awaiting_report=True)
    channel.platform.fail_next_send("uncertain")
    await here.asks._report(owed, origin)
    assert [e.status for e in await here.store.outbox(conversation_id=origin.id)] == ["uncertain"]
    [ask] = await here.store.asks()
    assert ask.state == "answered"
    await here.close()


async def test_a_report_that_died_before_going_out_is_made_after_the_restart(
    tmp_path: Path,
) -> None:
    channel, path = FakeChannel(), tmp_path / "bc.db"
    first = _Deployment(path, channel, "verbatim", _noop)
    origin, _ = await _asked(first.store, deadline=now() + 3600, answered=True)
    [owed] = await first.store.asks(awaiting_report=True)

    async def die_before_recording(*args: Any, **kwargs: Any) -> Any:
        raise Died

    first.board.accounts["fake"].deliverer.deliver = die_before_recording  # type: ignore[method-assign]
    with pytest.raises(Died):
        await first.asks._report(owed, origin)
    await first.close()
    assert channel.platform.texts("owner") == []

    again = _Deployment(path, channel, "verbatim", _noop)
    [still] = await again.store.asks(awaiting_report=True)
    await again.asks._report(still, origin)
    assert len(channel.platform.texts("owner")) == 1
    await again.close()


async def test_an_ask_long_past_its_deadline_lapses_and_no_longer_swallows_messages(
    tmp_path: Path,
) -> None:
    from backchannel.asks.settings import DAY
    from backchannel.store import Inbound
    from backchannel.testing.store_contract import make_event

    channel = FakeChannel()
    here = _Deployment(tmp_path / "bc.db", channel, "verbatim", _noop)
    store = here.store
    _, ancient = await _asked(store, deadline=now() - 7 * DAY - 60, answered=False)
    origin = await store.conversation(ancient.origin_conversation_id)
    recent = await store.record_ask(
        origin_conversation_id=origin.id,
        origin_seq=None,
        peer_conversation_id=ancient.peer_conversation_id,
        question="and this one?",
        deadline=now() - 60,
    )
    next_due = await here.asks.sweep()
    states = {ask.id: ask.state for ask in await store.asks()}
    assert states == {ancient.id: "lapsed", recent.id: "expired"}
    # the sweep wakes up again when the recent one lapses
    assert next_due is not None and abs(next_due - (recent.deadline + 7 * DAY)) < 1
    # a notice went out for each, saying how long a late answer still counts
    notices = channel.platform.texts("owner")
    assert len(notices) == 2 and all("within 7 days" in text for text in notices)
    # the session's next message answers the recent ask, not the lapsed one; after that
    # nothing is open, and a further message is the session's own
    late = make_event("a2", "sorry, here it is", chat="peer", account="fake", thread="s1")
    [first] = await store.append_inbound([Inbound(late)])
    assert first.seq is not None
    matched = await store.correlate_reply(ancient.peer_conversation_id, first.seq)
    assert matched is not None and matched.id == recent.id
    later = make_event("a3", "new topic", chat="peer", account="fake", thread="s1")
    [second] = await store.append_inbound([Inbound(later)])
    assert second.seq is not None
    assert await store.correlate_reply(ancient.peer_conversation_id, second.seq) is None
    [still] = [ask for ask in await store.asks() if ask.id == ancient.id]
    assert (still.state, still.answer_seq) == ("lapsed", None)
    await here.close()


async def test_a_report_whose_mark_failed_is_marked_by_the_send_that_goes_out(
    tmp_path: Path,
) -> None:
    from backchannel.errors import StoreError

    async def reporter(run: Run) -> None:
        await run.call("send_message", {"text": "the peer says it is done"})

    channel = FakeChannel()
    here = _Deployment(tmp_path / "bc.db", channel, "run", reporter)
    store = here.store
    origin, _ = await _asked(store, deadline=now() + 3600, answered=True)
    [owed] = await store.asks(awaiting_report=True)
    claim_report = store.claim_report
    failures = [StoreError("disk full")]

    async def claim_once_failing(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await claim_report(*args, **kwargs)

    store.claim_report = claim_once_failing  # type: ignore[method-assign]
    await here.asks._report(owed, origin)
    # the reporter's send was not made (its mark failed); the verbatim one marked and went out
    [posted] = channel.platform.texts("owner")
    assert "yes, done" in posted
    [ask] = await store.asks()
    assert ask.state == "answered"
    await here.close()


async def test_an_ask_from_outside_is_marked_answered_after_a_restart_and_posts_nothing(
    tmp_path: Path,
) -> None:
    # an MCP client's ask (no origin conversation), its answer matched just before the
    # process died: the next start marks it answered; its expiry, like its answer, is
    # reported nowhere
    from backchannel.store import NO_ORIGIN, Inbound
    from backchannel.testing.store_contract import make_event

    channel, path = FakeChannel(), tmp_path / "bc.db"
    first = _Deployment(path, channel, "verbatim", _noop)
    session = await first.store.ensure_conversation(Address("fake", "peer", "s1"), kind="thread")
    answered, silent = [
        await first.store.record_ask(
            origin_conversation_id=NO_ORIGIN,
            origin_seq=None,
            peer_conversation_id=session.id,
            question=question,
            deadline=deadline,
        )
        for question, deadline in (("is it done?", now() + 3600), ("and the rest?", now() - 1))
    ]
    event = make_event("a1", "yes, done", chat="peer", account="fake", thread="s1")
    [stored] = await first.store.append_inbound([Inbound(event)])
    assert stored.seq is not None
    matched = await first.store.correlate_reply(session.id, stored.seq)
    assert matched is not None and matched.id == answered.id
    await first.close()  # died before the coordinator saw the match

    again = _Deployment(path, channel, "verbatim", _noop)
    await again.asks.start(again.board)
    await again.asks.sweep()
    await again.asks.stop()
    by_id = {ask.id: ask for ask in await again.store.asks()}
    assert by_id[answered.id].state == "answered" and by_id[answered.id].reported_at
    assert by_id[silent.id].state == "expired" and by_id[silent.id].expiry_reported_at
    assert channel.platform.sent == []  # no report, no notice, anywhere
    await again.close()

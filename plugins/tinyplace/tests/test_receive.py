"""The mailbox poller: sender gate, dedupe before decrypt, one decrypt, commit, then ack."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from backchannel.errors import StoreError
from backchannel.model import Address
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.cli import accept_contact
from backchannel_tinyplace.normalize import event_id_of
from backchannel_tinyplace.testing import FakeRelay, RelayPeer, v2_frame


class DecryptCounter:
    """Counts the adapter's calls into the SDK's SignalSession.decrypt (the real one runs)."""

    def __init__(self, adapter: TinyplaceAdapter) -> None:
        self.calls: list[str] = []
        signal = adapter._signal
        assert signal is not None
        real = signal.decrypt

        async def counted(sender: str, key: bytes, envelope: Any) -> bytes:
            self.calls.append(str(envelope.get("id")))
            return await real(sender, key, envelope)

        signal.decrypt = counted


async def texts(ctx: ContractContext, address: Address) -> list[str]:
    return [m.text for m in await ctx.transcript(address)]


async def test_unpaired_sender_is_neither_decrypted_nor_acked_until_accepted(
    account: TinyplaceAdapter,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    settings_for: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    counter = DecryptCounter(account)
    await peer.contacts.request(account.agent_id)  # pending: the relay takes its messages
    relay_id = await peer.send_text(account.agent_id, "let me in")
    caplog.set_level(logging.WARNING)
    await relay.wait_listed(account.agent_id, 3)

    assert counter.calls == []
    assert not relay.is_acked(account.agent_id, relay_id)
    assert [m["id"] for m in relay.mailbox(account.agent_id)] == [relay_id]
    assert contract_context.events == []
    pending = json.loads(await contract_context.get_state("pending_senders") or "{}")
    assert pending[peer.agent_id]["message_ids"] == [relay_id]
    assert f"backchannel tinyplace accept {peer.agent_id}" in caplog.text

    await accept_contact(
        {"identity": account.identity.seed.hex(), "relay_url": relay.url}, peer.agent_id
    )
    await relay.wait_acked(account.agent_id, relay_id)
    assert counter.calls == [relay_id]
    assert await texts(contract_context, Address("test", peer.agent_id, "master")) == ["let me in"]
    pending = json.loads(await contract_context.get_state("pending_senders") or "{}")
    assert peer.agent_id not in pending


async def test_a_stored_message_listed_again_is_acked_without_a_second_decrypt(
    account: TinyplaceAdapter, contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    counter = DecryptCounter(account)
    relay_id = await peer.send_text(account.agent_id, "once")
    await relay.wait_acked(account.agent_id, relay_id)
    relay.redeliver(account.agent_id, relay_id)
    relay.acked.clear()
    await relay.wait_acked(account.agent_id, relay_id)

    assert counter.calls == [relay_id]
    assert contract_context.results[-1].status == "duplicate"
    assert await texts(contract_context, Address("test", peer.agent_id, "master")) == ["once"]


async def test_duplicate_listing_stores_and_decrypts_once(
    account: TinyplaceAdapter, contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    counter = DecryptCounter(account)
    relay.duplicate_next_listing(account.agent_id)
    first = await peer.send_text(account.agent_id, "one")
    second = await peer.send_text(account.agent_id, "two")
    await relay.wait_acked(account.agent_id, second)
    assert counter.calls == [first, second]
    assert await texts(contract_context, Address("test", peer.agent_id, "master")) == ["one", "two"]


async def test_prekey_bundle_is_processed_before_ciphertext_listed_ahead_of_it(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    adapter = TinyplaceAdapter("test", settings_for())
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(contract_context.bind(adapter))
    await adapter.stop()  # keys are published; nothing polls while the peer writes
    ids = [await peer.send_text(adapter.agent_id, f"m{n}") for n in range(3)]
    box = relay.mailboxes[adapter.agent_id]
    assert [m["type"] for m in box] == ["PREKEY_BUNDLE", "CIPHERTEXT", "CIPHERTEXT"]
    box.reverse()  # the relay lists the session's opener last
    for message in box:  # and with equal timestamps, so only the type can order them
        message["timestamp"] = "2026-11-30T09:00:00.000Z"

    await adapter.start(contract_context)
    try:
        await relay.wait_for(lambda: all(relay.is_acked(adapter.agent_id, i) for i in ids))
    finally:
        await adapter.stop()
    stored = await texts(contract_context, Address("test", peer.agent_id, "master"))
    assert sorted(stored) == ["m0", "m1", "m2"]
    assert stored[0] == "m0"


async def test_undecryptable_envelope_is_dead_lettered_and_acked(
    account: TinyplaceAdapter,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    caplog.set_level(logging.ERROR)
    bad = relay.inject_undecryptable(account.agent_id, peer.agent_id)
    await relay.wait_acked(account.agent_id, bad)
    letters = await contract_context.store.dead_letters("test")
    assert [letter["ref"] for letter in letters] == [bad]
    assert json.loads(letters[0]["payload"])["id"] == bad
    assert f"message {bad} from {peer.agent_id} cannot be decrypted" in caplog.text
    assert contract_context.events == []
    # the session is unharmed: the next real message decrypts
    good = await peer.send_text(account.agent_id, "still here")
    await relay.wait_acked(account.agent_id, good)
    assert await texts(contract_context, Address("test", peer.agent_id, "master")) == ["still here"]


class FlakyContext(ContractContext):
    """A context whose store refuses the first commit."""

    failures = 1

    async def ingest(self, raw: Any, *, state: Any = None) -> Any:
        if self.failures and "plaintext" in raw:
            self.failures -= 1
            raise StoreError("disk full (injected)")
        return await super().ingest(raw, state=state)


async def test_failed_commit_leaves_message_and_ratchet_to_retry_next_poll(
    store: Any, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    ctx = FlakyContext(store, account="test")
    adapter = TinyplaceAdapter("test", settings_for())
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(ctx.bind(adapter))
    try:
        counter = DecryptCounter(adapter)
        first = await peer.send_text(adapter.agent_id, "first try fails")
        await relay.wait_acked(adapter.agent_id, first)
        second = await peer.send_text(adapter.agent_id, "and the ratchet is fine")
        await relay.wait_acked(adapter.agent_id, second)
    finally:
        await adapter.stop()
    # decrypted twice: the first decrypt's ratchet advance was never committed
    assert counter.calls == [first, first, second]
    assert await texts(ctx, Address("test", peer.agent_id, "master")) == [
        "first try fails",
        "and the ratchet is fine",
    ]


@pytest.mark.parametrize("fault", ["server_error", "hang", "reset"])
async def test_mailbox_faults_do_not_stop_the_poller(
    fault: str,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    settings_for: Any,
) -> None:
    adapter = TinyplaceAdapter("test", settings_for(request_timeout=0.5))
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(contract_context.bind(adapter))
    try:
        listed = relay.listings[adapter.agent_id]
        for _ in range(3):  # the SDK retries a GET twice: this fails one whole poll
            relay.fail_next(fault, method="GET", path="/messages")
        relay_id = await peer.send_text(adapter.agent_id, f"after {fault}")
        await relay.wait_acked(adapter.agent_id, relay_id, timeout=20)
    finally:
        await adapter.stop()
    failed = [r for r in relay.requests if r[0] == "GET" and r[1] == "/messages" and r[2] != 200]
    assert len(failed) >= 3 or fault != "server_error"
    assert relay.listings[adapter.agent_id] > listed
    window = await contract_context.transcript(Address("test", peer.agent_id, "master"))
    assert [m.text for m in window] == [f"after {fault}"]


async def test_failed_ack_is_retried_without_decrypting_again(
    account: TinyplaceAdapter, contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    counter = DecryptCounter(account)
    relay.fail_next("server_error", method="DELETE", path="/messages")
    relay_id = await peer.send_text(account.agent_id, "ack me twice")
    await relay.wait_acked(account.agent_id, relay_id)
    assert counter.calls == [relay_id]
    assert [r.status for r in contract_context.results] == ["stored", "duplicate"]


async def test_session_envelope_threads_by_wrapper_session_and_maps_roles(
    account: TinyplaceAdapter, contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    await peer.send_text(account.agent_id, "from the agent", session="s-42")
    last = await peer.send_text(account.agent_id, "from its human", session="s-42", role="user")
    await relay.wait_acked(account.agent_id, last)
    window = await contract_context.transcript(Address("test", peer.agent_id, "s-42"))
    assert [m.text for m in window] == ["from the agent", "from its human"]
    assert [m.sender.id for m in window] == [peer.agent_id, f"{peer.agent_id}#user"]
    assert window[0].sender.is_bot and not window[1].sender.is_bot
    assert [m.seq for m in window] == [1, 2]  # both envelopes say line 0
    event = contract_context.events[-1]
    assert event.conversation_kind == "thread"
    assert event.meta["provider"] == "claude"
    assert event.event_id == event_id_of(peer.agent_id, last)


async def test_a_v2_owner_prompt_is_the_peers_human_and_agent_words_the_peer(
    account: TinyplaceAdapter, contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)

    def frame(seq: int, role: str, kind: str, text: str) -> bytes:
        """A v2 frame as the harness wrappers write it (TS SDK `SessionEnvelopeV2`)."""
        payload = {"text": text, "source": "human"} if kind == "user_prompt" else {"text": text}
        return json.dumps(v2_frame(kind, payload, id=f"e{seq}", seq=seq, role=role)).encode()

    for seq, (role, kind, text) in enumerate(
        [("owner", "user_prompt", "please deploy"), ("agent", "agent_message", "deploying")]
    ):
        await peer.client.messages.send_encrypted(
            peer.session,
            peer.agent_id,
            account.agent_id,
            frame(seq, role, kind, text),
            message_id=f"msg_v2_{seq}",
        )
    await relay.wait_acked(account.agent_id, "msg_v2_1")
    window = await contract_context.transcript(Address("test", peer.agent_id, "w2"))
    assert [m.text for m in window] == ["please deploy", "deploying"]
    assert [m.sender.id for m in window] == [f"{peer.agent_id}#user", peer.agent_id]
    assert not window[0].sender.is_bot and window[1].sender.is_bot


async def test_empty_mailbox_answered_with_null_is_fine(account: TinyplaceAdapter) -> None:
    assert await account.poll_once() == 0


async def test_a_relisted_progress_event_is_acked_without_decrypt_or_dead_letter(
    account: TinyplaceAdapter, contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer
) -> None:
    relay.make_contacts(peer.agent_id, account.agent_id)
    counter = DecryptCounter(account)
    status = {
        "envelope_version": "tinyplace.harness.session.v2",
        "scope": {"wrapper_session_id": "s-1", "harness_session_id": "s-1"},
        "event": {"id": "e1", "kind": "status", "payload": {"state": "thinking"}},
    }
    opener = await peer.send_text(account.agent_id, "opens the session")
    await relay.wait_acked(account.agent_id, opener)
    status_id = "msg_status_1"
    body = json.dumps(status).encode()
    await peer.client.messages.send_encrypted(
        peer.session, peer.agent_id, account.agent_id, body, message_id=status_id
    )
    await relay.wait_acked(account.agent_id, status_id)
    relay.redeliver(account.agent_id, status_id)
    relay.acked.clear()
    await relay.wait_acked(account.agent_id, status_id)
    assert counter.calls == [opener, status_id]
    assert await contract_context.store.dead_letters("test") == []
    assert [r.status for r in contract_context.results] == ["stored"]


async def test_nothing_is_read_or_reported_until_contacts_are_known(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    adapter = TinyplaceAdapter("test", settings_for())
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    for _ in range(3):  # one whole poll's contacts fetch fails (the SDK retries a GET twice)
        relay.fail_next("server_error", method="GET", path="/contacts")
    await adapter.start(contract_context.bind(adapter))
    try:
        relay_id = await peer.send_text(adapter.agent_id, "patience")
        await relay.wait_acked(adapter.agent_id, relay_id)
    finally:
        await adapter.stop()
    assert await contract_context.get_state("pending_senders") is None
    assert [
        m.text for m in await contract_context.transcript(Address("test", peer.agent_id, "master"))
    ] == ["patience"]


async def test_one_time_prekeys_are_topped_up_after_first_messages_use_them(
    contract_context: ContractContext, relay: FakeRelay, settings_for: Any
) -> None:
    adapter = TinyplaceAdapter("test", settings_for(prekey_pool=4))
    await adapter.start(contract_context.bind(adapter))
    try:
        assert len(relay.one_time_prekeys[adapter.agent_id]) == 4
        last = ""
        for _ in range(3):
            async with RelayPeer(relay.url) as newcomer:
                relay.make_contacts(newcomer.agent_id, adapter.agent_id)
                last = await newcomer.send_text(adapter.agent_id, "hi, first time")
        assert len(relay.one_time_prekeys[adapter.agent_id]) == 1
        await relay.wait_acked(adapter.agent_id, last)
        await relay.wait_for(lambda: len(relay.one_time_prekeys[adapter.agent_id]) == 4)
    finally:
        await adapter.stop()
    ids = [k["keyId"] for k in relay.one_time_prekeys[adapter.agent_id]]
    assert len(set(ids)) == 4 and "pk_1" not in ids


async def test_a_listing_full_of_held_messages_is_reported(
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    settings_for: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter = TinyplaceAdapter("test", settings_for(poll_limit=2))
    await adapter.start(contract_context.bind(adapter))
    try:
        await peer.contacts.request(adapter.agent_id)
        for n in range(2):
            await peer.send_text(adapter.agent_id, f"held {n}")
        caplog.set_level(logging.WARNING)
        await relay.wait_listed(adapter.agent_id, 3)
    finally:
        await adapter.stop()
    assert caplog.text.count("the mailbox listing (poll_limit 2) is full") == 1


async def test_a_late_message_decrypts_from_a_skipped_key_kept_across_a_restart(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    settings = settings_for()
    first = TinyplaceAdapter("test", settings)
    relay.make_contacts(peer.agent_id, first.agent_id)
    await first.start(contract_context.bind(first))
    await first.stop()  # keys published; nothing polls while the peer writes
    ids = [await peer.send_text(first.agent_id, f"m{n}") for n in range(3)]
    box = relay.mailboxes[first.agent_id]
    late = next(m for m in box if m["id"] == ids[1])
    box.remove(late)  # the relay delivers m1 after m2

    await first.start(contract_context)
    await relay.wait_acked(first.agent_id, ids[2])
    await first.stop()
    second = TinyplaceAdapter("test", settings)  # a new process: only the store remembers
    await second.start(contract_context.bind(second))
    try:
        relay.mailboxes[second.agent_id].append(late)
        await relay.wait_acked(second.agent_id, ids[1])
    finally:
        await second.stop()
    window = await contract_context.transcript(Address("test", peer.agent_id, "master"))
    assert [m.text for m in window] == ["m0", "m2", "m1"]
    assert await contract_context.store.dead_letters("test") == []


async def test_a_relay_failing_poll_after_poll_is_said_once_without_a_traceback(
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    settings_for: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter = TinyplaceAdapter("test", settings_for(request_timeout=0.5))
    relay.make_contacts(peer.agent_id, adapter.agent_id)
    await adapter.start(contract_context.bind(adapter))
    caplog.set_level(logging.INFO)
    try:
        for _ in range(9):  # a proxy's page for three whole polls (the SDK tries a GET 3 times)
            relay.fail_next("garbled", method="GET", path="/messages")
        relay_id = await peer.send_text(adapter.agent_id, "after the proxy")
        await relay.wait_acked(adapter.agent_id, relay_id, timeout=20)
        # one listing more: the poll that acked it has finished (and said so)
        await relay.wait_listed(adapter.agent_id, relay.listings[adapter.agent_id] + 1)
    finally:
        await adapter.stop()
    said = [r for r in caplog.records if "mailbox poll" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.INFO], [
        r.getMessage() for r in said
    ]
    assert not [r for r in caplog.records if r.exc_info]


async def test_two_senders_using_one_relay_id_are_both_stored(
    contract_context: ContractContext, relay: FakeRelay, settings_for: Any
) -> None:
    """Ids are the sender's (the SDK's `msg_<ms>_<counter>`): two peers can send one in the
    same millisecond. The listing was deduplicated by id alone, so the second sender's
    message was skipped, and the ack (a DELETE by id) then removed it unread."""
    async with RelayPeer(relay.url) as a, RelayPeer(relay.url) as b:
        for sender in (a, b):
            await sender.publish_keys()
        adapter = TinyplaceAdapter(contract_context.account, settings_for(poll_interval=3600))
        await adapter.start(contract_context.bind(adapter))
        try:
            for sender in (a, b):
                relay.make_contacts(sender.agent_id, adapter.agent_id)
            caught: list[dict[str, Any]] = []

            async def keep(envelope: dict[str, Any]) -> None:
                caught.append(envelope)

            relay.tap(adapter.agent_id, keep)  # both are placed in the mailbox by hand
            same = "msg_1764500000000_1"
            await a.send_text(adapter.agent_id, "from A", message_id=same)
            await b.send_text(adapter.agent_id, "from B", message_id=same)
            relay.tap(adapter.agent_id, None)
            relay.mailboxes[adapter.agent_id].extend(caught)
            assert await adapter.poll_once() == 2
        finally:
            await adapter.stop()
    for sender, text in ((a, "from A"), (b, "from B")):
        assert await texts(contract_context, Address("test", sender.agent_id, "master")) == [text]


async def test_a_session_opening_replayed_under_a_new_id_is_refused_and_the_session_lives_on(
    account: TinyplaceAdapter,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
) -> None:
    """An opening (PREKEY_BUNDLE) made on our signed pre-key alone (the one-time pool
    drained: anyone may fetch our bundle) listed again under another id: the SDK opened
    the session again from it, its words were stored twice, and the live session was
    replaced, so the peer's next messages failed to decrypt and were lost."""
    from backchannel.model import Outbound

    relay.one_time_prekeys[account.agent_id].clear()
    relay.make_contacts(peer.agent_id, account.agent_id)
    first = await peer.send_text(account.agent_id, "first (opens the session)")
    await relay.wait_acked(account.agent_id, first)
    address = Address("test", peer.agent_id, "master")
    await account.send(Outbound(address, "our reply"))
    assert [text for _, text in await peer.receive()] == ["our reply"]
    second = await peer.send_text(account.agent_id, "second")
    await relay.wait_acked(account.agent_id, second)
    old = relay.stored[(account.agent_id, first)]
    assert old["type"] == "PREKEY_BUNDLE"
    replay = dict(old, id=old["id"] + "_again")
    relay.mailboxes[account.agent_id].append(replay)
    await relay.wait_acked(account.agent_id, replay["id"])
    third = await peer.send_text(account.agent_id, "third")
    await relay.wait_acked(account.agent_id, third)
    assert await texts(contract_context, address) == [
        "first (opens the session)",
        "second",
        "third",
    ]
    (letter,) = await contract_context.store.dead_letters("test")
    assert "session opening already taken" in letter["reason"]


async def test_a_message_stamped_before_the_opening_of_its_session_is_read_after_it(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    """The listing is put in the order of the sender's clock; a clock that stepped back
    stamped a CIPHERTEXT before the PREKEY_BUNDLE that opens its session: tried first, it
    had no session, and was dead-lettered and acked (lost)."""
    from datetime import datetime, timedelta

    adapter = TinyplaceAdapter(contract_context.account, settings_for(poll_interval=3600))
    await adapter.start(contract_context.bind(adapter))
    try:
        relay.make_contacts(peer.agent_id, adapter.agent_id)
        caught: list[dict[str, Any]] = []

        async def keep(envelope: dict[str, Any]) -> None:
            caught.append(envelope)

        relay.tap(adapter.agent_id, keep)  # placed in the mailbox by hand, below
        await peer.send_text(adapter.agent_id, "one (opens the session)")
        await peer.send_text(adapter.agent_id, "two")
        relay.tap(adapter.agent_id, None)
        opening, after = caught
        stamp = datetime.fromisoformat(opening["timestamp"].replace("Z", "+00:00"))
        stepped_back = stamp - timedelta(seconds=2)
        after["timestamp"] = stepped_back.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        relay.mailboxes[adapter.agent_id].extend([opening, after])
        assert await adapter.poll_once() == 2
    finally:
        await adapter.stop()
    address = Address("test", peer.agent_id, "master")
    assert await texts(contract_context, address) == ["one (opens the session)", "two"]
    assert await contract_context.store.dead_letters("test") == []
    assert relay.mailbox(adapter.agent_id) == []


async def test_a_message_too_long_to_decrypt_on_the_loop_is_a_dead_letter_and_the_next_is_read(
    account: TinyplaceAdapter,
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
) -> None:
    """The SDK's AES runs in pure Python on the event loop: a contact's 200,000-character
    message held every channel of the process for 14 s. A body longer than any of our own
    sends (4,000 characters stay under ~22 KB) is refused before it is decrypted."""
    from backchannel_tinyplace.mailbox import MAX_BODY_CHARS

    counter = DecryptCounter(account)
    relay.make_contacts(peer.agent_id, account.agent_id)
    opened = await peer.send_text(account.agent_id, "hi")
    await relay.wait_acked(account.agent_id, opened)
    longest = await peer.send_text(account.agent_id, "🙂" * 4000)  # our own sends' worst
    await relay.wait_acked(account.agent_id, longest)
    big = await peer.send_text(account.agent_id, "x" * 25_000)
    await relay.wait_acked(account.agent_id, big)
    after = await peer.send_text(account.agent_id, "still here")
    await relay.wait_acked(account.agent_id, after)
    address = Address("test", peer.agent_id, "master")
    assert await texts(contract_context, address) == ["hi", "🙂" * 4000, "still here"]
    assert big not in counter.calls
    (letter,) = await contract_context.store.dead_letters("test")
    assert f"at most {MAX_BODY_CHARS}" in letter["reason"]


async def test_an_envelope_nested_too_deep_to_parse_is_a_dead_letter_and_the_rest_is_read(
    contract_context: ContractContext, relay: FakeRelay, peer: RelayPeer, settings_for: Any
) -> None:
    """A relay that keeps envelopes as sent lists a peer's `signal` nested 5,000 deep: the
    SDK's parse of the whole listing raised RecursionError on every poll (a traceback
    each), and every message behind it waited for ever."""
    from aiohttp import web

    adapter = TinyplaceAdapter(contract_context.account, settings_for())
    real_list = relay._list
    deep = "[" * 5000 + "]" * 5000

    async def listing(request: web.Request, agent: str) -> web.Response:
        answer = await real_list(request, agent)
        assert isinstance(answer, web.Response) and answer.text is not None
        messages = json.loads(answer.text).get("messages") or []
        poisoned = any(m.get("id") == "msg_deep" for m in relay.mailbox(adapter.agent_id))
        head = {"id": "msg_deep", "from": peer.agent_id, "to": adapter.agent_id}
        # the shape is read from brackets outside strings: one here holds "]}" and a quote
        poison = json.dumps({**head, "type": "CIPHERTEXT", "body": "AAAA"})[:-1] + (
            ', "signal": {"x": "]} \\" [", "y": ' + deep + "}}"
        )
        rest = [json.dumps(m) for m in messages if m.get("id") != "msg_deep"]
        body = '{"messages": [' + ", ".join(([poison] if poisoned else []) + rest) + "]}"
        return web.Response(text=body, content_type="application/json")

    relay._list = listing  # type: ignore[method-assign]
    await adapter.start(contract_context.bind(adapter))
    try:
        relay.make_contacts(peer.agent_id, adapter.agent_id)
        relay.mailboxes[adapter.agent_id].append({"id": "msg_deep", "from": peer.agent_id})
        sent = await peer.send_text(adapter.agent_id, "behind it")
        await relay.wait_acked(adapter.agent_id, sent)
        assert relay.is_acked(adapter.agent_id, "msg_deep")
    finally:
        await adapter.stop()
    address = Address("test", peer.agent_id, "master")
    assert await texts(contract_context, address) == ["behind it"]
    (letter,) = await contract_context.store.dead_letters("test")
    assert letter["ref"] == "msg_deep" and "nested too deep" in letter["reason"]

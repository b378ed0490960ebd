"""The identity secret never shows up in logs, reprs, errors, URLs or the store."""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from backchannel.errors import BackchannelError, ConfigError
from backchannel.model import Address, Outbound
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter
from backchannel_tinyplace.identity import load_identity
from backchannel_tinyplace.testing import FakeRelay, RelayPeer
from nacl.signing import SigningKey
from tinyplace.crypto import BASE58_ALPHABET, decode_base58


async def test_identity_never_leaks_through_failures(
    contract_context: ContractContext,
    relay: FakeRelay,
    peer: RelayPeer,
    settings_for: Any,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    seed = os.urandom(32)
    settings = settings_for(seed)
    adapter = TinyplaceAdapter("test", settings)
    secrets = {seed.hex(), settings["identity"], seed.hex().upper()}
    await adapter.start(contract_context.bind(adapter))
    failures: list[str] = [repr(adapter), repr(adapter.identity)]
    try:
        address = Address("test", peer.agent_id, "master")
        for fault in ("rejected", "server_error", "reset", "rate_limited"):
            relay.fail_next(fault)
            with pytest.raises(BackchannelError) as caught:
                await adapter.send(Outbound(address, "x"))
            failures.append(str(caught.value))
        relay.make_contacts(peer.agent_id, adapter.agent_id)
        bad = relay.inject_undecryptable(adapter.agent_id, peer.agent_id)
        await relay.wait_acked(adapter.agent_id, bad)
        relay.fail_next("server_error", method="GET", path="/messages")
        await relay.wait_listed(adapter.agent_id, 2)
    finally:
        await adapter.stop()
    urls = [path for _, path, _ in relay.requests]
    everything = "\n".join([caplog.text, *failures, *urls])
    for secret in secrets:
        assert secret not in everything
    # the store keeps ratchet and pre-key state, never the identity key itself
    await contract_context.store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("backchannel.db*"))
    assert b"signal/session/" in stored or b"signal/prekeys" in stored
    for needle in (seed, seed.hex().encode(), base64.b64encode(seed)):
        assert needle not in stored


def test_a_bad_identity_is_named_but_never_echoed() -> None:
    secret = "not-a-key-" + os.urandom(8).hex()
    with pytest.raises(ConfigError) as caught:
        load_identity({"identity": secret}, "ops")
    assert secret not in str(caught.value)
    assert "accounts.ops.identity" in str(caught.value)


def test_every_accepted_identity_form_names_the_same_agent(tmp_path: Path) -> None:
    key = SigningKey.generate()
    seed, public = bytes(key), bytes(key.verify_key)

    def b58(data: bytes) -> str:
        number, text = int.from_bytes(data, "big"), ""
        while number:
            number, digit = divmod(number, 58)
            text = BASE58_ALPHABET[digit] + text
        return "1" * (len(data) - len(data.lstrip(b"\0"))) + text

    path = tmp_path / "id.json"
    path.write_text(json.dumps(list(seed + public)))
    forms = [
        seed.hex(),
        (seed + public).hex(),
        base64.b64encode(seed).decode(),
        b58(seed + public),
        str(path),
    ]
    relative = tmp_path / "agent.key"
    relative.write_text(seed.hex())
    forms.append(str(relative))
    ids = {load_identity({"identity": form}).agent_id for form in forms}
    ids.add(load_identity({"identity": list(seed + public)}).agent_id)
    ids.add(load_identity({"identity_file": str(path)}).agent_id)
    assert len(ids) == 1
    assert decode_base58(ids.pop()) == public


def test_a_base64_key_that_starts_with_a_slash_is_a_key_not_a_path() -> None:
    # base64 uses "/" as a digit: a seed whose first six bits are all ones encodes to "/..."
    seed = b"\xfc" + bytes(range(1, 32))
    text = base64.b64encode(seed).decode()
    assert text.startswith("/")
    assert load_identity({"identity": text}).seed == seed


def test_an_inline_key_is_redacted_whatever_it_starts_with(tmp_path: Path) -> None:
    """A base64 key may start with "/" (as a path does): written inline, it is still a secret."""
    from backchannel.secrets import redact

    seed = bytes([0xFC]) + os.urandom(31)  # base64 of 0xFC... starts with "/"
    inline = base64.b64encode(seed).decode()
    assert inline.startswith("/")
    adapter = TinyplaceAdapter("test", {"identity": inline, "relay_url": "http://127.0.0.1:9"})
    assert adapter.identity.seed == seed  # read as the key, not as a path
    assert inline not in redact(f"settings were identity={inline}")
    # a key file's path is a path, not a secret
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps(list(seed + bytes(SigningKey(seed).verify_key))))
    TinyplaceAdapter("file", {"identity": str(key_file), "relay_url": "http://127.0.0.1:9"})
    assert str(key_file) in redact(f"key at {key_file}")

"""The account's tiny.place identity: one Ed25519 key, from config, never logged.

The same 32-byte seed gives the request signer (Ed25519, whose public key is
the agent id, a base58 "cryptoId") and the Signal identity (its X25519 form,
which is what peers verify our pre-key bundle against).

Accepted forms of the `identity` setting (or the contents of the file it
names, or of `identity_file`): a Solana keypair file (JSON array of 64
numbers), a base58 secret key (64 bytes) or seed (32 bytes), 64 or 128 hex
digits, or base64 of 32 or 64 bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import field, frozen
from backchannel.errors import ConfigError
from nacl.signing import SigningKey
from tinyplace import LocalSigner
from tinyplace.crypto import decode_base58, derive_crypto_id
from tinyplace.signal.crypto import ed25519_seed_to_x25519_keypair
from tinyplace.signal.store import X25519KeyPair

__all__ = ["Identity", "generate_identity_file", "load_identity"]


@frozen
class Identity:
    """A loaded identity. Its repr shows the agent id only."""

    agent_id: str
    seed: bytes = field(repr=False)

    def signer(self) -> LocalSigner:
        """Return the SDK signer: per-request Ed25519 signatures (no reusable SIWS token)."""
        return LocalSigner.from_seed(self.seed, siws=False)

    def x25519(self) -> X25519KeyPair:
        """Return the Signal identity key pair (the X25519 form of the Ed25519 key)."""
        pair = ed25519_seed_to_x25519_keypair(self.seed)
        return X25519KeyPair(pair.public_key, pair.private_key)

    @property
    def secret_text(self) -> str:
        """The seed as hex, for log redaction only."""
        return self.seed.hex()


def load_identity(settings: Mapping[str, Any], account: str = "") -> Identity:
    """Read the identity from an account's settings; raise ConfigError saying what is wrong."""
    key = "identity" if settings.get("identity") else "identity_file"
    value = settings.get(key)
    if isinstance(value, list | tuple):  # a keypair array written inline in TOML
        value = json.dumps(list(value))
    if not value or not isinstance(value, str):
        raise ConfigError(
            "no tiny.place identity: set `identity` (a secret key, or the path of a key file;"
            " create one with `backchannel tinyplace keygen PATH`)",
            key=f"accounts.{account}.identity" if account else "identity",
        )
    text = value.strip()
    path = Path(os.path.expanduser(text))
    # a base64 key may start with "/": only a key that does not decode is read as a path
    inline_key = key == "identity" and inline_secret(settings) is not None
    if not inline_key and (key == "identity_file" or _looks_like_path(text) or _is_file(path)):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise ConfigError(
                f"cannot read the identity file {path}: {error.strerror}",
                key=f"accounts.{account}.{key}" if account else key,
            ) from None
    seed = _seed_from_text(text)
    if seed is None:
        raise ConfigError(
            "the identity is not a key backchannel can read (expected a Solana keypair JSON"
            " array, base58, hex or base64 of a 32-byte seed or 64-byte secret key)",
            key=f"accounts.{account}.{key}" if account else key,
        )
    return Identity(agent_id=derive_crypto_id(bytes(SigningKey(seed).verify_key)), seed=seed)


def inline_secret(settings: Mapping[str, Any]) -> str | None:
    """The `identity` setting's text when it is the key itself (not a key file's path).

    As `load_identity` decides: a text that decodes as a key and names no file, a
    base64 key starting with "/" included. For log redaction: a key written in the
    config must never be shown, whatever it starts with.
    """
    value = settings.get("identity")
    if isinstance(value, list | tuple):
        value = json.dumps(list(value))
    if not value or not isinstance(value, str):
        return None
    text = value.strip()
    if _is_file(Path(os.path.expanduser(text))) or _seed_from_text(text) is None:
        return None
    return text


def generate_identity_file(path: Path) -> Identity:
    """Write a new Solana-style keypair file (mode 0600) at `path`; return its identity."""
    signing_key = SigningKey.generate()
    secret = bytes(signing_key) + bytes(signing_key.verify_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(list(secret)))
    seed = bytes(signing_key)
    return Identity(agent_id=derive_crypto_id(bytes(signing_key.verify_key)), seed=seed)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a long key is not a usable file name
        return False


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "~", "./", "../")) or text.endswith(".json")


def _seed_from_text(text: str) -> bytes | None:
    for decode in (_from_json, _from_hex, _from_base58, _from_base64):
        raw = decode(text)
        if raw is None:
            continue
        if len(raw) == 32:
            return raw
        if len(raw) == 64 and bytes(SigningKey(raw[:32]).verify_key) == raw[32:]:
            return raw[:32]
    return None


def _from_json(text: str) -> bytes | None:
    if not text.startswith("["):
        return None
    try:
        numbers = json.loads(text)
        return bytes(numbers)
    except (ValueError, TypeError):
        return None


def _from_hex(text: str) -> bytes | None:
    text = text.removeprefix("hex:")
    if len(text) not in (64, 128):
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def _from_base58(text: str) -> bytes | None:
    try:
        raw = decode_base58(text)
    except ValueError:
        return None
    return raw if len(raw) in (32, 64) else None


def _from_base64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.removeprefix("base64:"), validate=True)
    except (binascii.Error, ValueError):
        return None

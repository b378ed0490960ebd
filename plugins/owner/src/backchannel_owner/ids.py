"""Message ids the owner types: 5 characters of Crockford base32 without i, l, o, u."""

from __future__ import annotations

import re
import secrets

__all__ = ["ALPHABET", "ID_LENGTH", "ID_PATTERN", "LOOKALIKES", "MAX_MINTS", "mint_id"]

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
ID_LENGTH = 5
#: a collision mints again, at most this many times in all
MAX_MINTS = 8
ID_PATTERN = re.compile(rf"\A[{ALPHABET}]{{{ID_LENGTH}}}\Z")
#: Crockford's reading of look-alikes typed on a phone (the alphabet has none of them)
LOOKALIKES = str.maketrans({"i": "1", "l": "1", "o": "0"})


def mint_id() -> str:
    """Return a fresh random id (uniqueness is the caller's insert: see records.insert_message)."""
    return "".join(secrets.choice(ALPHABET) for _ in range(ID_LENGTH))

"""One tiny.place account in its own process, SIGKILLed by the test while a send is out.

    python crash_sender.py RELAY_URL DB_PATH SEED_HEX PEER_ID

Starts the account, prints READY, and sends "first" to PEER_ID (master). The
test holds that PUT unanswered at the relay and kills this process meanwhile.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from backchannel.model import Address, Outbound
from backchannel.store import SQLiteStore
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter


async def main(relay_url: str, db: str, seed_hex: str, peer: str) -> int:
    store = SQLiteStore(Path(db))
    ctx = ContractContext(store, account="alice")
    settings = {"identity": seed_hex, "relay_url": relay_url, "request_timeout": 120.0}
    adapter = TinyplaceAdapter("alice", settings)
    await adapter.start(ctx.bind(adapter))
    print("READY", flush=True)
    await adapter.send(Outbound(Address("alice", peer, "master"), "first"))
    return 3  # never reached: the PUT is held until this process is killed


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5])))

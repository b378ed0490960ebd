"""One tiny.place account in its own process, for the SIGKILL test.

    python crash_receiver.py crash|resume RELAY_URL DB_PATH SEED_HEX

crash:  poll; after a message is decrypted and committed, SIGKILL this
        process instead of DELETEing it from the mailbox.
resume: poll until the mailbox is empty; print a JSON report (which relay ids
        were decrypted, the ingest outcomes) and exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from backchannel.store import SQLiteStore
from backchannel.testing import ContractContext
from backchannel_tinyplace import TinyplaceAdapter


async def main(mode: str, relay_url: str, db: str, seed_hex: str) -> int:
    store = SQLiteStore(Path(db))
    ctx = ContractContext(store, account="bob")
    settings = {"identity": seed_hex, "relay_url": relay_url, "poll_interval": 0.05}
    adapter = TinyplaceAdapter("bob", settings)
    await adapter.start(ctx.bind(adapter))
    # the poll task is created but has not run yet: hooks set here see every message
    reader = adapter._reader
    assert reader is not None
    if mode == "crash":

        async def die_before_delete(relay_id: str) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        reader.ack = die_before_delete  # type: ignore[method-assign]
    decrypted: list[str] = []
    session = adapter._signal
    assert session is not None
    real_decrypt = session.decrypt

    async def counted(sender: str, key: bytes, envelope: Any) -> bytes:
        decrypted.append(str(envelope.get("id")))
        return await real_decrypt(sender, key, envelope)

    session.decrypt = counted
    print("READY", flush=True)
    client = adapter._client
    assert client is not None
    for _ in range(600):  # bounded: 30 s
        await asyncio.sleep(0.05)
        if mode == "resume" and ctx.results:
            page = await client.messages.list(adapter.agent_id)
            if not page.get("messages"):
                break
    else:
        return 3
    await adapter.stop()
    await store.close()
    report = {"decrypted": decrypted, "results": [r.status for r in ctx.results]}
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5])))

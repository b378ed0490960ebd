"""Deployment A of the ask tests in its own process (for the SIGKILL test).

    python asks_child.py RELAY_URL DB_PATH SEED_HEX PORT

Builds the switchboard from `ask_rig.config_a` with the scripted OwnerAgent,
starts it, prints ``READY <web chat url>``, and serves until SIGTERM (a graceful
stop), SIGKILL, or 60 s.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from ask_rig import OwnerAgent, config_a
from backchannel.app import build_switchboard


async def main(relay_url: str, db: str, seed_hex: str, port: str) -> int:
    config = config_a(relay_url, bytes.fromhex(seed_hex), Path(db), port=int(port))
    board = await build_switchboard(config, agents={"assistant": OwnerAgent()})
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await board.start()
    print(f"READY {board.accounts['web'].adapter.url}", flush=True)  # type: ignore[attr-defined]
    try:
        await asyncio.wait_for(stop.wait(), 60)  # bounded: the test stops or kills it first
    finally:
        await board.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5])))

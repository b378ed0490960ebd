"""A backchannel process with one Telegram account, run until killed (by test_crash_safety).

SIGKILL is the crash; SIGTERM stops it cleanly.

Usage: python crash_worker.py API_BASE STORE_PATH [MODE], with the bot token in
$CRASH_TEST_TOKEN (never on the command line). MODE is polling (the default) or webhook
(served on a free port of 127.0.0.1, which the adapter gives Telegram with setWebhook).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from backchannel.agents.demo import demo_agent
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_telegram import TelegramAdapter


async def main(api_base: str, store_path: str, mode: str = "polling") -> None:
    token = os.environ["CRASH_TEST_TOKEN"]
    settings = {
        "token": token,
        "api_base": api_base,
        "poll_timeout": 2,
        "request_timeout": 2.0,
        "retry_initial": 0.05,
        "retry_max": 0.5,
        "pace_per_chat": 0,
        "pace_per_group": 0,
        "pace_overall": 0,
        "mode": mode,
    }
    board = Switchboard(SQLiteStore(store_path), port=0 if mode == "webhook" else None)
    board.add_account(TelegramAdapter("tg", settings), Binding(demo_agent), secrets=[token])
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await board.start()
    print("started", flush=True)
    await stopping.wait()
    await board.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))

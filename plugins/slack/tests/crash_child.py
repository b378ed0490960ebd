"""A backchannel process with one Slack account in Socket Mode, run until killed (by
test_crash). SIGKILL is the crash; SIGTERM stops it cleanly. Its agent replies to every
message of its conversation that no run answered yet, one reply each.

Usage: python crash_child.py API_BASE STORE_PATH, with the tokens in $CRASH_TEST_BOT_TOKEN
and $CRASH_TEST_APP_TOKEN (never on the command line).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from backchannel.runs import Run
from backchannel.store import SQLiteStore
from backchannel.switchboard import Binding, Switchboard
from backchannel_slack import SlackAdapter


async def main(api_base: str, store_path: str) -> None:
    bot_token = os.environ["CRASH_TEST_BOT_TOKEN"]
    app_token = os.environ["CRASH_TEST_APP_TOKEN"]
    store = SQLiteStore(store_path)

    async def answer_each(run: Run) -> None:
        if run.trigger is None:
            return
        window = await store.window(run.conversation.id, 200, upto_seq=run.trigger.seq)
        answered = {m.reply_to_seq for m in window if m.direction == "out"}
        for message in window:
            if (
                message.direction == "in"
                and message.seq > run.conversation.handled_seq
                and message.seq not in answered
            ):
                await run.call("reply", {"message_id": message.seq, "text": f"re: {message.text}"})

    settings = {
        "bot_token": bot_token,
        "app_token": app_token,
        "mode": "socket",
        "api_base": api_base,
        "timeout": 2.0,
        "lookup_timeout": 1.0,
        "ping_interval": 0.5,
    }
    board = Switchboard(store)
    board.add_account(
        SlackAdapter("sl", settings),
        Binding(answer_each, respond="always"),
        secrets=[bot_token, app_token],
    )
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await board.start()
    print("started", flush=True)
    await stopping.wait()
    await board.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

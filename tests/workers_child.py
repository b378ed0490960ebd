"""One `serve --worker` process for the multi-process worker tests, on real adapters.

Accounts: "tgpoll" (Telegram, polling: leased), "tghook" (Telegram, webhook: every
worker) and "slack" (Slack Events API: every worker), against the loopback fakes
the test runs. The agent answers each run's trigger with ``re <text>``, unless
the transcript already shows that answer (sent, or uncertain after a crash).

Usage: python workers_child.py STORE_URL WORKER SETTINGS_JSON_FILE; tokens and
secrets are in that file (never on the command line). Prints ``ready URL`` once
serving, stops cleanly on SIGTERM, and SIGKILL is the crash.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

from backchannel.runs import Run
from backchannel.store.postgres import PostgresStore
from backchannel.switchboard import Binding, Switchboard
from backchannel.workers import WorkerCoordinator
from backchannel_slack import SlackAdapter
from backchannel_telegram import TelegramAdapter


async def answer(run: Run) -> None:
    trigger = run.trigger
    if trigger is None:
        return
    text = f"re <{trigger.text}>"
    if any(text in message.get("content", "") for message in run.messages):
        return  # answered already (perhaps uncertain after a crash): never twice
    if run.tool("reply") is not None:
        await run.call("reply", {"message_id": trigger.seq, "text": text})
    else:
        await run.call("send_message", {"text": text})


async def main(url: str, worker: str, settings_file: str) -> None:
    with open(settings_file) as handle:
        settings = json.load(handle)
    store = PostgresStore(url, worker=worker)
    board = Switchboard(store, port=0, public_url=settings["public_url"])
    secrets = [settings["tgpoll"]["token"], settings["tghook"]["token"]]
    secrets += [settings["slack"]["bot_token"], settings["slack"]["signing_secret"]]
    board.add_account(
        TelegramAdapter("tgpoll", settings["tgpoll"]),
        Binding(answer, respond="always"),
        secrets=secrets,
    )
    board.add_account(
        TelegramAdapter("tghook", settings["tghook"]), Binding(answer, respond="always")
    )
    board.add_account(SlackAdapter("slack", settings["slack"]), Binding(answer, respond="always"))
    board.workers = WorkerCoordinator(
        board, store, lease_ttl=settings["lease_ttl"], heartbeat=settings["heartbeat"]
    )
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await board.start()
    print(f"ready {board.url}", flush=True)
    await stopping.wait()
    await board.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))

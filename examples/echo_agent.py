"""A ten-line custom agent: it replies to the latest message by echoing it back.

Use it with `backchannel serve -c examples/python-agent.toml`.
"""

from backchannel import Run


async def echo(run: Run) -> None:
    """Reply to the message that started this run with its own text."""
    if run.trigger is None:  # nothing new to answer (e.g. a restart caught up)
        return
    said = run.trigger.text.strip() or "(an empty message)"
    await run.call("reply", {"message_id": run.trigger.seq, "text": f"You said: {said}"})

"""A ten-line custom agent: it replies to the latest message by echoing it back.

Use it with `backchannel serve -c examples/python-agent.toml`.
"""

from backchannel import Run


async def echo(run: Run) -> None:
    """Reply to the message that started this run with its own text."""
    if run.trigger is None:  # nothing to answer: a restart caught up, or it has our reply
        return
    said = run.trigger.text.strip() or "(an empty message)"
    await run.call("reply", {"message_id": run.trigger.seq, "text": f"You said: {said}"})

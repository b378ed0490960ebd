"""The demo agent: no network, deterministic; it replies by describing the run it was given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import hints
from ..runs import Run

__all__ = ["demo_agent", "describe_run", "make_demo_agent"]

_KIND = {"direct": "direct chat", "group": "group chat", "thread": "thread"}


def describe_run(run: Run) -> str:
    """Return a few sentences saying what the agent was handed: messages, people, tools."""
    conversation = run.conversation
    own = sum(1 for m in run.messages if m["role"] == "assistant")
    count = len(run.messages) - own  # the others' messages; the agent's own are counted apart
    people = len(run.participants)
    where = _KIND.get(conversation.kind, "conversation")
    title = f' "{conversation.title}"' if conversation.title else ""
    sentences = [
        f"I can see {count} message{'s' if count != 1 else ''} from {people}"
        f" {'person' if people == 1 else 'people'} in this {where}{title}"
        f" on {run.channel_name or run.channel}" + (f", and {own} of mine." if own else "."),
    ]
    trigger = run.trigger
    if trigger is not None:
        quoted = trigger.text if len(trigger.text) <= 120 else trigger.text[:117] + "..."
        sentences.append(f'You ({trigger.sender.label}) wrote #{trigger.seq}: "{quoted}".')
    sentences.append(
        "I am the demo agent: no model runs here. I answered by calling the reply tool;"
        f" the tools I was offered are {', '.join(run.tool_names)}."
    )
    sentences.append(
        f"Run `{hints.command('preview', conversation.address.key)}` to see the exact instruction,"
        " messages and tool schemas an LLM agent would receive."
    )
    return " ".join(sentences)


async def demo_agent(run: Run) -> None:
    """Reply to the triggering message with a description of the run.

    With no trigger there is nothing new to answer (after a restart, the message
    may already have our reply): it stays silent, as examples/echo_agent.py does.
    """
    target = run.trigger
    if target is None:
        return
    text = describe_run(run)
    if target.direction == "in" and run.tool("reply") is not None:
        await run.call("reply", {"message_id": target.seq, "text": text})
    else:
        await run.call("send_message", {"text": text})


def make_demo_agent(settings: Mapping[str, Any]) -> Any:
    """Agent factory for kind "demo" (takes no settings)."""
    return demo_agent

"""A scripted agent (no model, no network) that works across conversations with the
orchestration tools. It shows the calls a model would make; `tests/test_orchestration_e2e.py`
drives it end to end.

- "what did <Name> say ... about <topic>?" -> list_conversations(query=<Name> <topic>),
  read_conversation(<the first match>), answer here with the matching lines.
- "tell <Name> <message>" -> list_conversations(query=<Name>), then
  send_to_conversation(<the first match>, <message>), and say here what happened.
- "ask <agent id> <question>" -> ask_agent(<agent id>, <question>), and say here what happened;
  the answer comes later in a reporter run (its only tool is send_message), relayed here.

Use it with `backchannel serve -c examples/orchestrator.toml`.
"""

from __future__ import annotations

import re

from backchannel import Run

ASK = re.compile(r"what did (\w+) say(?:.*?\babout (?:the )?(\w+))?", re.IGNORECASE)
TELL = re.compile(r"\Atell (\w+) (?:that )?(.+)\Z", re.IGNORECASE | re.DOTALL)
ASK_AGENT = re.compile(r"\Aask (\S+) (.+)\Z", re.IGNORECASE | re.DOTALL)
KEY = re.compile(r"^- (\S+) \(id \d+\)", re.MULTILINE)


async def orchestrator(run: Run) -> None:
    """Answer from other conversations, or pass a message on, as the owner asks."""
    if run.tool_names == ["send_message"]:  # a reporter run: the last message is the answer
        answer = run.messages[-1]["content"].split("\n", 1)[-1]
        await run.call("send_message", {"text": f"The answer came: {answer}"})
        return
    if run.trigger is None:
        return
    text = run.trigger.text.strip()
    if run.tool("list_conversations") is None:
        return  # not an orchestrating run (untrusted sender, or orchestrate = false)
    if match := ASK.search(text):
        await _answer_from_history(run, match.group(1), match.group(2))
    elif match := TELL.match(text):
        await _pass_on(run, match.group(1), match.group(2).strip())
    elif (match := ASK_AGENT.match(text)) and run.tool("ask_agent") is not None:
        outcome = await run.call("ask_agent", {"peer": match.group(1), "question": match.group(2)})
        await run.call("send_message", {"text": outcome})


async def _answer_from_history(run: Run, name: str, topic: str | None) -> None:
    listing = await run.call("list_conversations", {"query": f"{name} {topic or ''}".strip()})
    keys = [k for k in KEY.findall(listing) if k != run.conversation.address.key]
    if not keys:
        await run.call("send_message", {"text": f"I found no conversation with {name}."})
        return
    transcript = await run.call("read_conversation", {"conversation": keys[0]})
    said = [
        line.split(": ", 1)[1]
        for line in transcript.splitlines()
        if line.startswith("[#") and f"] {name}" in line and (not topic or topic in line.lower())
    ]
    answer = "; ".join(f'"{s}"' for s in said) or "nothing about that"
    await run.call("send_message", {"text": f"In {keys[0]}, {name} said: {answer}"})


async def _pass_on(run: Run, name: str, message: str) -> None:
    listing = await run.call("list_conversations", {"query": name})
    keys = [k for k in KEY.findall(listing) if k != run.conversation.address.key]
    if not keys:
        await run.call("send_message", {"text": f"I found no conversation with {name}."})
        return
    outcome = await run.call("send_to_conversation", {"conversation": keys[0], "text": message})
    await run.call("send_message", {"text": f"To {name} ({keys[0]}): {outcome}"})

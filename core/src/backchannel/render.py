"""How the CLI shows things to people: run previews, transcripts, config summaries."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from .model import Conversation, Message, to_json
from .runs import Run
from .terminal import terminal_safe


def render_preview(run: Run) -> str:
    """Return a Run as text for people: headed sections, roles, ids, tool signatures.

    Stored text is shown with its control characters escaped (`terminal_safe`);
    only the headings carry the styling added here.
    """
    conversation = run.conversation

    def bold(text: str) -> str:
        return heading(terminal_safe(text))

    trigger = run.trigger
    # names, titles and keys are anyone's to choose: one line each, or a line break in
    # one would start a line of their choosing
    who = terminal_safe(trigger.sender.label, one_line=True) if trigger is not None else ""
    title = terminal_safe(conversation.title or "", one_line=True)
    key = terminal_safe(conversation.address.key, one_line=True)
    if trigger is None:
        state = "no trigger: no message has asked for a run yet"
    elif conversation.trigger_seq > conversation.handled_seq:
        state = f"trigger #{trigger.seq} from {who}, not answered yet"
    else:
        state = (
            f"trigger #{trigger.seq} from {who}, already handled"
            f" (runs have covered up to #{conversation.handled_seq})"
        )
    safe = terminal_safe
    lines = [
        bold(f"Run preview: conversation {conversation.id} ({key})"),
        safe(
            f"{conversation.kind} conversation"
            + (f' "{title}"' if title else "")
            + f", {len(run.messages)} of {conversation.visible_count} messages in the window"
        ),
        safe(state),
        "",
        bold("== Instruction (system) =="),
        safe(run.instruction),
        "",
        bold(f"== Messages ({len(run.messages)}) =="),
    ]
    if not run.messages:
        lines.append("(none)")
    for message in run.messages:
        role = message["role"]
        content = message["content"].splitlines() or [""]
        lines.append(safe(f"{role:<10} {content[0]}"))
        lines.extend(safe(f"{'':<10} {line}") for line in content[1:])
    lines.append("")
    lines.append(bold(f"== Tools ({len(run.tools)}) =="))
    for tool in run.tools:
        lines.append(safe(signature(tool.name, tool.parameters)))
        if tool.description:
            lines.extend(safe(f"    {line}") for line in tool.description.splitlines())
        for name, schema in (tool.parameters.get("properties") or {}).items():
            if schema.get("description"):
                lines.append(safe(f"    {name}: {schema['description']}"))
    lines.append("")
    lines.append(
        "Nothing was run or sent. --format openai or --format anthropic prints the exact request."
    )
    return "\n".join(lines)


def signature(name: str, parameters: Any) -> str:
    required = set(parameters.get("required") or ())
    parts = []
    for arg, schema in (parameters.get("properties") or {}).items():
        text = f"{arg}: {schema_type(schema)}"
        if arg not in required:
            text += f" = {json.dumps(schema['default'])}" if "default" in schema else " = null"
        parts.append(text)
    return f"{name}({', '.join(parts)})"


def schema_type(schema: Any) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array":
        return f"array[{schema_type(schema.get('items') or {})}]"
    return str(kind)


def heading(text: str) -> str:
    return click.style(text, bold=True)


def conversation_title(conversation: Conversation) -> str:
    """The heading `show` prints, terminal-safe (stored text: see terminal.py)."""
    # one line: a title (a group's name, anyone's to choose) with a line break in it would
    # start a forged line at column 0
    title = f' "{terminal_safe(conversation.title, one_line=True)}"' if conversation.title else ""
    key = terminal_safe(conversation.address.key, one_line=True)
    return terminal_safe(f"conversation {conversation.id}: {key} ({conversation.kind}){title}")


def transcript_line(message: Message) -> str:
    """One message as `show` prints it, terminal-safe (stored text: see terminal.py)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(message.sent_at))
    marks = []
    if message.reply_to_seq is not None:
        marks.append(f"reply to #{message.reply_to_seq}")
    if message.deleted_at is not None:
        marks.append("deleted")
    elif message.edited_at is not None:
        marks.append("edited")
    if message.direction == "out":
        marks.append(
            message.status + (f": {message.status_reason}" if message.status_reason else "")
        )
        if message.meta and message.meta.get("origin"):
            marks.append(f"from conversation {message.meta['origin']}")
    arrow = "->" if message.direction == "out" else "  "
    # the sender's name and the marks are one line each (a name is anyone's to choose): only
    # the text's own lines start new lines, each indented under its head
    head = f"#{message.seq:<4} {when} {arrow} {terminal_safe(message.sender.label, one_line=True)}"
    if marks:
        head += f" ({terminal_safe('; '.join(marks), one_line=True)})"
    body = message.text.splitlines() or [""]
    lines = [f"{head}: {body[0]}"]
    lines.extend(f"      {line}" for line in body[1:])
    for attachment in message.attachments:
        name = terminal_safe(attachment.name or "", one_line=True)
        lines.append(f"      [attached {attachment.kind} {name}]".rstrip("] ") + "]")
    return terminal_safe("\n".join(lines))


def conversation_json(conversation: Conversation) -> dict[str, Any]:
    data: dict[str, Any] = to_json(conversation)
    data["key"] = conversation.address.key
    return data


def render_summary(summary: dict[str, Any]) -> str:
    server = summary["server"]
    store = summary["store"]
    lines = [
        (
            f"store     {store['url']} (PostgreSQL)"
            if store.get("url")
            else f"store     {store['path']} (synchronous {store['synchronous']})"
        )
        + (
            "\n          this config's own store, chosen by its path: set [store] path to choose"
            if store.get("default")
            else ""
        ),
        f"server    http://{server['host']}:{server['port']}"
        + (f" (public {server['public_url']})" if server["public_url"] else ""),
        "accounts",
    ]
    for name, table in summary["accounts"].items():
        settings = {k: v for k, v in table.items() if k != "channel"}
        lines.append(f"  {name:<14} {table['channel']:<10} {settings_text(settings)}".rstrip())
    lines.append("agents")
    for name, table in summary["agents"].items():
        settings = {k: v for k, v in table.items() if k != "kind"}
        lines.append(f"  {name:<14} {table['kind']:<10} {settings_text(settings)}".rstrip())
    lines.append("bindings")
    for index, b in enumerate(summary["bindings"]):
        accounts = ", ".join(b["accounts"]) if b["accounts"] is not None else "every account"
        chats = f" chats {', '.join(b['chats'])}" if b["chats"] is not None else ""
        rules = f"respond={b['respond']} access={b['access']}"
        if b["allow"]:
            rules += f" allow={','.join(b['allow'])}"
        if b["owner"] is not None:
            rules += f" owner={b['owner']}"
        if b.get("orchestrate"):
            rules += " orchestrate"
        lines.append(f"  [{index}] {b['agent']} <- {accounts}{chats}: {rules}")
        lines.append(
            f"      window {b['window']} messages / {b['window_chars']} chars,"
            f" debounce {b['debounce']:g}s, max wait {b['max_wait']:g}s,"
            f" run timeout {b['run_timeout']:g}s"
        )
    orchestration = summary.get("orchestration") or {}
    if orchestration and not orchestration.get("enabled", True):
        lines.append("orchestration  disabled (cross-conversation sends are refused)")
    return "\n".join(lines)


def settings_text(settings: dict[str, Any]) -> str:
    return " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in settings.items())

"""docs/mcp.md lists exactly the tools the code serves; the CLI entry point stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from backchannel_mcp.docs import END, START, render_tool_list

PAGE = Path(__file__).resolve().parents[3] / "docs" / "mcp.md"


def test_the_tool_list_in_docs_mcp_md_is_generated_from_the_code() -> None:
    text = PAGE.read_text()
    assert START in text and END in text
    documented = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert documented == render_tool_list(), (
        "docs/mcp.md is out of date: run python -m backchannel_mcp.docs docs/mcp.md"
    )


def test_loading_the_plugin_does_not_import_the_mcp_sdk() -> None:
    code = (
        "import sys, backchannel.cli as c; c.main.load_plugin_commands();"
        " assert 'mcp' in c.main.commands; print('mcp' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"

"""The docs hold together: every relative link points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name} links to missing files: {broken}"


def test_every_channel_and_topic_has_a_page() -> None:
    names = {p.stem for p in (ROOT / "docs" / "channels").glob("*.md")}
    assert names >= {"telegram", "slack", "discord", "tinyplace", "webchat"}
    for topic in (
        "concepts",
        "configuration",
        "agents",
        "cli",
        "writing-an-adapter",
        "plugin-hooks",
        "orchestration",
    ):
        assert (ROOT / "docs" / f"{topic}.md").exists(), topic


def test_every_command_docs_cli_describes_is_a_command_and_the_other_way_round() -> None:
    from backchannel.cli import main
    from click.testing import CliRunner

    described = set(re.findall(r"^## `([a-z-]+)", (ROOT / "docs" / "cli.md").read_text(), re.M))
    listed = CliRunner().invoke(main, ["--help"]).output.split("Commands:", 1)[1]
    commands = set(re.findall(r"^  ([a-z-]+) ", listed, re.M))
    plugin_commands = {"mcp", "notify", "owner", "tinyplace"}  # each plugin's own page
    assert described == commands - plugin_commands

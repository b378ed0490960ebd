"""Every validation regex anchors its end with \\Z (or is used with fullmatch), never `$`.

`$` also matches before a final newline, so ``^[a-z]+$`` accepts ``"tab\\n"``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src")), ROOT / "examples"]
REGEX_CALLS = {"compile", "match", "fullmatch", "search"}


def _dollar_anchored_patterns() -> list[str]:
    found: list[str] = []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in REGEX_CALLS
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "re"
                    and node.args
                ):
                    continue
                pattern = _literal_tail(node.args[0])
                if pattern is None:
                    continue
                if pattern.endswith("$") and not pattern.endswith("\\$"):
                    where = path.relative_to(ROOT)
                    found.append(f"{where}:{node.lineno}: {pattern!r}")
    return found


def _literal_tail(node: ast.expr) -> str | None:
    """The pattern's text, or for an f-string its last literal part."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        last = node.values[-1]
        if isinstance(last, ast.Constant) and isinstance(last.value, str):
            return last.value
    return None


def test_no_validation_regex_ends_with_a_dollar() -> None:
    assert _dollar_anchored_patterns() == [], "use \\Z or fullmatch instead of $"


def test_the_web_chat_id_pattern_refuses_a_trailing_newline() -> None:
    from backchannel_webchat.normalize import SAFE_ID

    assert SAFE_ID.match("tab") and not SAFE_ID.match("tab\n")

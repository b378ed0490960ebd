"""docs/writing-an-adapter.md runs as written.

Its code blocks are laid out as the adapter project the page describes, next
to a checkout of backchannel (``../backchannel/core``, as its pyproject.toml
says), installed with uv from that pyproject alone, and the conformance kit
is run there with pytest: a newcomer who copies the page gets the same.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from backchannel.testing import AdapterContract

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "writing-an-adapter.md"
EXAMPLE = ROOT / "examples" / "webhook_channel.py"

PYPROJECT_MARK = "# pyproject.toml of your adapter's project"
ADAPTER_MARK = '"""A complete small adapter'
TESTS_MARK = "# tests/test_hookchat.py"


def guide_project() -> dict[str, str]:
    """Return the project's files (path -> text) as the guide's code blocks give them."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", GUIDE.read_text(encoding="utf-8"), re.M | re.S)

    def block(language: str, mark: str) -> str:
        found = [body for lang, body in blocks if lang == language and body.startswith(mark)]
        assert len(found) == 1, f"the guide needs one {language} block starting {mark!r}"
        return found[0]

    return {
        "pyproject.toml": block("toml", PYPROJECT_MARK),
        "src/backchannel_hookchat/__init__.py": block("python", ADAPTER_MARK),
        "tests/test_hookchat.py": block("python", TESTS_MARK),
    }


def test_the_guides_adapter_module_is_the_example_file_word_for_word() -> None:
    adapter = guide_project()["src/backchannel_hookchat/__init__.py"]
    assert adapter == EXAMPLE.read_text(encoding="utf-8")


def test_the_guides_project_installs_and_passes_the_kit_as_written(tmp_path: Path) -> None:
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        pytest.fail("uv is needed to install the guide's project (make test bootstraps it)")
    # the layout the guide's pyproject.toml assumes: the project beside a backchannel checkout
    (tmp_path / "backchannel").symlink_to(ROOT, target_is_directory=True)
    project = tmp_path / "backchannel-hookchat"
    for name, text in guide_project().items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text, encoding="utf-8")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VIRTUAL_ENV", "UV_PROJECT", "PYTHONPATH", "PYTEST_"))
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [uv, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )

    installed = run("sync", "--extra", "test", "--quiet")
    assert installed.returncode == 0, installed.stderr[-3000:]
    tested = run("run", "--no-sync", "pytest", "-q", "-p", "no:cacheprovider")
    output = tested.stdout + tested.stderr
    assert tested.returncode == 0, output[-5000:]
    kit_tests = [name for name, _ in inspect.getmembers(AdapterContract) if name.startswith("test")]
    assert re.search(rf"\b{len(kit_tests)} passed\b", output), output[-2000:]

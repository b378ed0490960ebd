"""The test kit in a fresh project: without pytest-asyncio in auto mode it stops before any test
with one line saying what to add; with the documented setup it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from attrs import frozen

LOOP_SCOPE = 'asyncio_default_fixture_loop_scope = "function"\n'

KIT_USER = """
import pytest
from backchannel.store import SQLiteStore
from backchannel.testing import StoreContract


class TestMyStore(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path):
        opened = SQLiteStore(tmp_path / "my.db")
        yield opened
        await opened.close()
"""


def run_pytest(project: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run pytest on `project` as its own session, in this process (a fresh one is slow)."""
    ini = project / "pyproject.toml"
    options = ["-q", "-p", "no:cacheprovider", "--import-mode=importlib", "-c", str(ini)]
    code = pytest.main([*options, "--rootdir", str(project), *args, str(project)])
    out, err = capsys.readouterr()
    return Result(int(code), out, err)


@frozen
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "test_my_store.py").write_text(KIT_USER, encoding="utf-8")
    return tmp_path


def test_without_auto_mode_the_kit_says_what_to_add_before_any_test(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "pyproject.toml").write_text(
        "[project]\nname = 'mine'\n[tool.pytest.ini_options]\n" + LOOP_SCOPE, encoding="utf-8"
    )

    done = run_pytest(project, capsys)

    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert "backchannel's test kit (StoreContract) needs pytest-asyncio" in done.stderr
    assert "asyncio_mode is 'strict'" in done.stderr
    assert 'asyncio_mode = "auto"' in done.stderr
    assert "passed" not in done.stdout and "failed" not in done.stdout


def test_without_pytest_asyncio_the_kit_says_so(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\nasyncio_mode = "auto"\n')
    done = run_pytest(project, capsys, "-p", "no:asyncio")

    assert done.returncode == 4
    assert "pytest-asyncio is not installed" in done.stderr


def test_with_the_documented_setup_the_kit_runs(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nasyncio_mode = "auto"\n' + LOOP_SCOPE, encoding="utf-8"
    )

    done = run_pytest(project, capsys)

    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout

"""Root pytest configuration: the hypothesis profiles of the fuzz suites.

Normal runs use 1,000 examples per ingress, derandomized (the same examples
every run: no flakes in CI). ``pytest --fuzz-long`` draws 20,000 random ones
(``--fuzz-examples N`` picks another count).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = 1000
FUZZ_LONG_EXAMPLES = 20_000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzz")
    group.addoption(
        "--fuzz-long",
        action="store_true",
        help=f"fuzz every ingress with {FUZZ_LONG_EXAMPLES} random examples (default"
        f" {FUZZ_EXAMPLES}, derandomized)",
    )
    group.addoption("--fuzz-examples", type=int, default=None, help="examples per ingress")


def pytest_configure(config: pytest.Config) -> None:
    long = bool(config.getoption("--fuzz-long"))
    examples = config.getoption("--fuzz-examples") or (
        FUZZ_LONG_EXAMPLES if long else FUZZ_EXAMPLES
    )
    settings.register_profile(
        "backchannel-fuzz",
        max_examples=examples,
        deadline=None,
        derandomize=not long,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    settings.load_profile("backchannel-fuzz")

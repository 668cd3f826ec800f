"""Test-suite configuration: the golden-dump plugin, ``--tito-update-docs``, hypothesis profiles, markers,
the ``offline`` and ``tito`` fixtures.

``HYPOTHESIS_PROFILE=ci`` (set by ``.ci/run``) runs the full property budget
(500 examples per property); the default profile is a quick local run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import HealthCheck, settings

# pytest-xdist's workers run with COLUMNS=80; tito's consoles take their width from it once, at import.
# What the tests expect is laid out as without it (plain output's fixed width), however they are run.
os.environ.pop("COLUMNS", None)

from tests.support.cli import tito as run_tito

TESTS = Path(__file__).resolve().parent

# The golden-dump plugin (installed through the pytest11 entry point when tito
# is pip-installed; named here so the suite also runs from a plain checkout).
pytest_plugins = ["tito_cli.pytest_plugin"]

settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tito-update-docs",
        action="store_true",
        default=False,
        help="tests/docs/test_docs.py: write the real output of every shown console command into the "
        "documents (review the diff) instead of failing on a difference.",
    )


@pytest.fixture(scope="module")
def offline() -> Iterator[None]:
    """The Hugging Face libraries kept off the network for a module's tests (they load real tokenizers)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield


@pytest.fixture
def tito() -> Callable[..., Result]:
    """The ``tito`` command run in this process (``tests/support/cli.py``): ``tito("ls", log, expect=0)``."""
    return run_tito


#: Markers given by folder: everything under tests/e2e/ is slow, everything under tests/benchmarks/ a benchmark.
FOLDER_MARKERS = {"e2e": "slow", "benchmarks": "benchmark"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark by folder (:data:`FOLDER_MARKERS`), and every hypothesis test ``property``."""
    for item in items:
        folder = Path(item.path).resolve().relative_to(TESTS).parts[0]
        if folder in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[folder])
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker("property")

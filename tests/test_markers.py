"""The `slow` marker: tests that run the real models are left out of `make test-quick`, the rest stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# One collection in a fresh pytest (the suite's own conftest, as `make test-quick` sees it) that
# prints each test with whether it carries the `slow` mark that `-m "not slow"` leaves out: one
# start-up instead of one per -m.
PROBE = """
import sys, pytest

class Probe:
    def pytest_collection_finish(self, session):
        for item in session.items:
            print("slow" if item.get_closest_marker("slow") else "quick", item.nodeid)

sys.exit(pytest.main(sys.argv[1:], plugins=[Probe()]))
"""


def _collected(*paths: str) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "-q", "-p", "no:cacheprovider", "--collect-only", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    found: dict[str, list[str]] = {"slow": [], "quick": []}
    for line in done.stdout.splitlines():
        verdict, _, test = line.partition(" ")
        if verdict in found and "::" in test:
            found[verdict].append(test)
    return found


def test_real_model_tests_are_slow_and_the_rest_are_quick() -> None:
    # test_charset loads the real engine; test_outputs mixes tests that take `engine` with ones that do not.
    collected = _collected("tests/test_charset.py", "tests/test_outputs.py")
    slow, quick = collected["slow"], collected["quick"]
    assert slow and quick
    assert all(not test.startswith("tests/test_charset.py") for test in quick)
    assert "tests/test_outputs.py::test_real_result_validates_and_carries_what_sites_need" in slow
    assert any(test.startswith("tests/test_outputs.py") for test in quick)

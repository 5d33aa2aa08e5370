"""The `slow` marker: tests that run the real models are left out of `make test-quick`, the rest stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def _collected(marker: str, *paths: str) -> list[str]:
    done = subprocess.run(
        [*PYTEST, "--collect-only", "-m", marker, *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_real_model_tests_are_slow_and_the_rest_are_quick() -> None:
    # test_charset loads the real engine; test_outputs mixes tests that take `engine` with ones that do not.
    slow = _collected("slow", "tests/test_charset.py", "tests/test_outputs.py")
    quick = _collected("not slow", "tests/test_charset.py", "tests/test_outputs.py")
    assert slow and quick
    assert all(not test.startswith("tests/test_charset.py") for test in quick)
    assert "tests/test_outputs.py::test_real_result_validates_and_carries_what_sites_need" in slow
    assert any(test.startswith("tests/test_outputs.py") for test in quick)

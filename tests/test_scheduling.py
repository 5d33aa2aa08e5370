"""The parallel run's scheduler keeps the container module on one worker and splits the rest per test."""

from __future__ import annotations

from pathlib import Path

from tests.scheduling import WHOLE_MODULES, WholeModulesScheduling

REPO = Path(__file__).resolve().parent.parent


def test_a_whole_module_is_one_unit_and_other_tests_are_their_own() -> None:
    split = WholeModulesScheduling._split_scope
    (module,) = WHOLE_MODULES
    assert split(None, f"{module}::test_a") == split(None, f"{module}::test_b") == module  # type: ignore[arg-type]
    other = "tests/test_daemon.py::test_x[1]"
    assert split(None, other) == other  # type: ignore[arg-type]
    assert split(None, "tests/test_daemon.py::test_y") != split(None, other)  # type: ignore[arg-type]


def test_the_whole_modules_exist() -> None:
    assert all((REPO / module).is_file() for module in WHOLE_MODULES)

"""The parallel run (xdist): the container module stays on one worker, and any report can be sent back."""

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


def test_a_report_naming_a_file_that_is_not_utf8_can_be_sent_to_the_controller() -> None:
    from execnet.gateway_base import dumps_internal

    from tests.conftest import _utf8_safe

    name = b"scan-\xff.png".decode("utf-8", "surrogateescape")
    report = {"sections": [("Captured log call", f"read {name}")], "outcome": "passed", "duration": 0.5}
    safe = _utf8_safe(report)
    assert safe["sections"] == [("Captured log call", "read scan-\\udcff.png")]
    assert safe["outcome"] == "passed" and safe["duration"] == 0.5
    dumps_internal(safe)  # what xdist's channel does with it; the original raises DumpError

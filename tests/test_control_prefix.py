"""Job ids by unique prefix in the control layer: what `jobs` prints is what `job` accepts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance import journal as journal_module
from appliance.control import Control, InvalidArgumentError, NotFoundError
from appliance.journal import Journal

IDS = ["abcd1234" + "0" * 24, "abcd5678" + "0" * 24, "ffff0000" + "1" * 24]


class _Daemon:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Control]:
    ids = iter(IDS)
    monkeypatch.setattr(journal_module.uuid, "uuid4", lambda: uuid.UUID(next(ids)))
    with Journal(tmp_path / "journal.sqlite") as journal:
        for index in range(len(IDS)):
            journal.add(
                sha256=f"{index:064x}",
                source_folder="/in",
                relative_path=f"scan{index}.png",
                name=f"scan{index}.png",
                size=1,
                spool_path=f"/spool/{index}",
                profile="default",
                priority=0,
            )
        yield Control(_Daemon(journal))  # type: ignore[arg-type]


def test_a_unique_prefix_finds_its_job(control: Control) -> None:
    assert control.get_job("abcd1").job.id == IDS[0]
    assert control.get_job("FFFF0000").job.id == IDS[2]
    assert control.get_job(IDS[1]).job.id == IDS[1]
    assert control.resolve_job_id("abcd5678") == IDS[1]


def test_an_ambiguous_prefix_names_the_candidates(control: Control) -> None:
    with pytest.raises(InvalidArgumentError) as ambiguous:
        control.get_job("abcd")
    assert IDS[0] in str(ambiguous.value) and IDS[1] in str(ambiguous.value)
    assert "scan0.png" in str(ambiguous.value)
    assert IDS[2] not in str(ambiguous.value)


def test_short_and_unknown_prefixes(control: Control) -> None:
    with pytest.raises(InvalidArgumentError, match="too short"):
        control.get_job("abc")
    with pytest.raises(NotFoundError, match="no job id starts with '1234'"):
        control.get_job("1234")
    with pytest.raises(NotFoundError):
        control.get_job("no-such-job")
    with pytest.raises(InvalidArgumentError):
        control.reprocess(job_id="abcd")

"""One read per job: a worker and `ocr-appliance process` rasterize, hash and load each thing once.

The worker body runs in this process (its signal and parent-death setup stubbed out) so that the
rasterizer, the hash and the site dictionary can be counted where they run.
"""

from __future__ import annotations

import json
import multiprocessing
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from PIL import Image

import appliance.pipeline.process
import appliance.pipeline.read_job
import appliance.review
from appliance import cli, workers
from appliance.config import ProfileConfig, RasterizeConfig, RepairConfig
from appliance.errors import FailureReason
from appliance.pipeline.rasterize import Rasterizer
from appliance.pipeline.read_job import JobFile, JobReader, ReadOptions
from appliance.routing import Route
from appliance.workers import JobOutcome, JobRequest
from tests import rendering
from tests.fakes.engines import FixedTextEngine

PAGES = 3
MARKER = "SITE-DICTIONARY-MARKER"


class Counts:
    """How often each costly step ran."""

    def __init__(self) -> None:
        self.rasterizations = 0
        self.hashes = 0
        self.dictionary_reads = 0
        self.processors = 0


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Counts:
    found = Counts()
    pages = Rasterizer.pages

    def counted_pages(self: Rasterizer, *args: Any, **kwargs: Any) -> Iterator[Any]:
        found.rasterizations += 1
        return pages(self, *args, **kwargs)

    monkeypatch.setattr(Rasterizer, "pages", counted_pages)
    hash_file = appliance.pipeline.process.sha256_file

    def counted_hash(path: Path) -> str:
        found.hashes += 1
        return hash_file(path)

    monkeypatch.setattr(appliance.pipeline.process, "sha256_file", counted_hash)
    loads = json.loads

    def counted_loads(text: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(text, str) and MARKER in text:
            found.dictionary_reads += 1
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(appliance.review.json, "loads", counted_loads)
    processor = appliance.pipeline.read_job.DocumentProcessor

    def counted_processor(*args: Any, **kwargs: Any) -> Any:
        found.processors += 1
        return processor(*args, **kwargs)

    monkeypatch.setattr(appliance.pipeline.read_job, "DocumentProcessor", counted_processor)
    # Page images kept for review go under here, so the test sees them cleaned up.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return found


def _pdf(path: Path) -> Path:
    page = rendering.receipt().image.convert("RGB")
    page.save(path, save_all=True, append_images=[page.copy() for _ in range(PAGES - 1)], resolution=150)
    return path


def _dictionary(path: Path, value: str = "ACME") -> Path:
    path.write_text(json.dumps({"company": {MARKER: value}}), encoding="utf-8")
    return path


def _run_worker(
    monkeypatch: pytest.MonkeyPatch, factory: Callable[[], Any], requests: list[JobRequest]
) -> list[JobOutcome]:
    """The worker body over `requests`, in this process; the outcomes in order."""
    monkeypatch.setattr(workers, "die_with_parent", lambda: None)
    monkeypatch.setattr(workers.signal, "signal", lambda *_args: None)
    parent, child = multiprocessing.Pipe()
    for request in requests:
        parent.send(request)
    parent.send(None)
    outcomes: list[JobOutcome] = []

    def drain() -> None:  # so the worker never blocks on a full pipe
        try:
            while True:
                kind, payload = parent.recv()
                if kind == "outcome":
                    outcomes.append(payload)
        except EOFError:
            pass

    reader = threading.Thread(target=drain)
    reader.start()
    workers.worker_main(child, factory, RasterizeConfig(pdf_dpi=100))
    child.close()
    reader.join(30)
    return outcomes


def _request(tmp_path: Path, source: Path, job_id: str, dictionary: Path, **fields: Any) -> JobRequest:
    return JobRequest(
        job_id=job_id,
        input_path=str(source),
        source_path=str(source),
        output_dir=str(tmp_path / "out"),
        stem=f"{job_id}.pdf",
        formats=("json", "pdf"),
        profile=ProfileConfig(),
        repair=RepairConfig(),
        review_dir=str(tmp_path / "review"),
        audit_dir=str(tmp_path / "audit"),
        relative_path=f"{job_id}.pdf",
        site_dictionary_path=str(dictionary),
        **fields,
    )


def test_a_worker_rasterizes_each_job_once_and_builds_its_reader_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counts: Counts
) -> None:
    source = _pdf(tmp_path / "scan.pdf")
    dictionary = _dictionary(tmp_path / "site_dictionary.json")
    digest = "ab" * 32
    requests = [_request(tmp_path, source, f"job-{n}", dictionary, sha256=digest) for n in range(3)]
    engine = FixedTextEngine("INV0ICE 42", confidence=0.5)  # unsure: every job goes to review

    outcomes = _run_worker(monkeypatch, lambda: engine, requests)

    assert [outcome.failure for outcome in outcomes] == [None, None, None]
    # The route travels as the enum, not as a string that happens to match.
    assert all(type(outcome.route) is Route and outcome.route is Route.REVIEW for outcome in outcomes)
    # Reading, the searchable PDF and the review PNGs share one rasterization per job.
    assert counts.rasterizations == len(requests)
    assert counts.hashes == 0  # the journal's sha256 is used
    assert counts.processors == 1 and counts.dictionary_reads == 1
    folder = next((tmp_path / "review").glob("job-2*"))
    assert sorted(path.name for path in folder.glob("page-*.png")) == [
        f"page-{n:03d}.png" for n in range(1, PAGES + 1)
    ]
    result = json.loads(next(folder.glob("*.json")).read_text(encoding="utf-8"))
    assert result["source"]["sha256"] == digest
    with Image.open(folder / "page-001.png") as png:  # the image the boxes refer to
        assert png.size == (result["pages"][0]["width"], result["pages"][0]["height"])
    with pikepdf.open(next(folder.glob("*.pdf"))) as pdf:
        assert len(pdf.pages) == PAGES
    assert list((tmp_path / "scratch").iterdir()) == []  # the kept PNGs are gone once written


def test_a_failure_travels_as_its_reason_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counts: Counts
) -> None:
    source = tmp_path / "notes.pdf"
    source.write_bytes(b"not a scan at all")
    dictionary = _dictionary(tmp_path / "site_dictionary.json")

    (outcome,) = _run_worker(monkeypatch, FixedTextEngine, [_request(tmp_path, source, "job-x", dictionary)])

    assert outcome.failure is FailureReason.UNSUPPORTED_FORMAT


def test_the_site_dictionary_is_read_again_only_when_its_file_changes(tmp_path: Path, counts: Counts) -> None:
    image = tmp_path / "receipt.png"
    rendering.receipt().image.save(image)
    dictionary = _dictionary(tmp_path / "site_dictionary.json")
    reader = JobReader(FixedTextEngine("HELLO"), RasterizeConfig())
    options = ReadOptions(ProfileConfig(), RepairConfig(), site_dictionary=dictionary)

    for _ in range(3):
        with reader.read(JobFile(image), options):
            pass
    assert counts.dictionary_reads == 1
    _dictionary(dictionary, "ACME CORPORATION")  # a reviewer taught it something (another size)
    with reader.read(JobFile(image), options):
        pass

    assert counts.dictionary_reads == 2
    assert counts.processors == 1
    assert counts.hashes == 4  # a file no journal has seen is hashed while it is read


def test_process_command_rasterizes_a_pdf_once_for_its_searchable_pdf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counts: Counts, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _pdf(tmp_path / "scan.pdf")
    config = tmp_path / "config.yaml"
    config.write_text(f"version: 1\npaths: {{state_dir: {tmp_path / 'state'}}}\n", encoding="utf-8")
    monkeypatch.setattr("appliance.engines.factory.build_engine", lambda _config: FixedTextEngine())
    monkeypatch.setattr(cli, "_install_signal_handlers", lambda *_args: None)

    code = cli.main(
        ["process", str(source), "--out", str(tmp_path / "out"), "--config", str(config), "--format", "pdf"]
    )

    assert code == 0, capsys.readouterr().err
    assert counts.rasterizations == 1
    with pikepdf.open(tmp_path / "out" / "scan.pdf.pdf") as pdf:
        assert len(pdf.pages) == PAGES

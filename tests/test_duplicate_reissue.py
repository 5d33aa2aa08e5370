"""A duplicate's re-issued result names the new file and has every format its profile asks for now."""

from __future__ import annotations

import json
from pathlib import Path

import pikepdf
from lxml import etree

from appliance.config import AppConfig, OutputsConfig
from tests.polling import png_bytes, wait_for
from tests.test_daemon import Running, _config


def _with_formats(config: AppConfig, *formats: str) -> AppConfig:
    return config.model_copy(update={"outputs": OutputsConfig(formats=formats)})  # type: ignore[arg-type]


def test_reissued_result_names_the_new_file_and_adds_missing_formats(tmp_path: Path) -> None:
    data = png_bytes()
    base = _config(tmp_path)
    with Running(_with_formats(base, "json", "text")) as first_run:
        (first_run.folders.inbox / "first.png").write_bytes(data)
        assert wait_for(lambda: first_run.daemon.stats.done == 1)
    out = first_run.folders.out
    assert not (out / "first.png.md").exists()
    # The site now wants more formats; the same content arrives under another name.
    with Running(_with_formats(base, "json", "text", "markdown", "hocr", "alto", "pdf")) as second_run:
        (second_run.folders.inbox / "second.png").write_bytes(data)
        assert wait_for(lambda: second_run.daemon.stats.duplicates == 1)
        jobs = sorted(second_run.daemon.journal.jobs(), key=lambda job: job.created_at)
        first, second = jobs
        assert second.duplicate_of == first.id
        assert second.attempts == 0, "a duplicate is never sent to a worker"
        assert set(second.outputs) >= {"json", "text", "markdown", "hocr", "alto", "pdf"}

    earlier = json.loads((out / "first.png.json").read_text(encoding="utf-8"))
    result = json.loads((out / "second.png.json").read_text(encoding="utf-8"))
    assert result["source"]["name"] == "second.png"
    assert result["source"]["path"].endswith("second.png")
    assert result["source"]["sha256"] == earlier["source"]["sha256"]
    # The reading itself is the earlier one.
    assert result["pages"] == earlier["pages"] and result["text"] == earlier["text"]
    assert (out / "second.png.txt").read_text(encoding="utf-8") == "INVOICE 42\n"
    assert "INVOICE 42" in (out / "second.png.md").read_text(encoding="utf-8")
    hocr = etree.parse(str(out / "second.png.hocr"))
    assert hocr.findtext(".//{http://www.w3.org/1999/xhtml}title") == "second.png"
    assert b"second.png" in (out / "second.png.alto.xml").read_bytes()
    assert b"first.png" not in (out / "second.png.alto.xml").read_bytes()
    with pikepdf.open(out / "second.png.pdf") as pdf:
        assert len(pdf.pages) == 1
        with pdf.open_metadata() as meta:
            assert meta.get("dc:title") == "second.png"

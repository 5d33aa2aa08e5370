"""The `ocr-appliance` command as a user runs it: real process, real models, real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from appliance.errors import ExitCode
from appliance.outputs.json_result import validate_result
from tests import rendering
from tests.scoring import cer

CLI = [sys.executable, "-m", "appliance"]


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _write_config(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path


def test_process_reads_jpeg_pdf_and_multipage_tiff(tmp_path: Path) -> None:
    page = rendering.receipt()
    jpeg = tmp_path / "receipt.jpg"
    page.image.save(jpeg, quality=90)
    pdf = tmp_path / "receipt.pdf"
    page.image.save(pdf, resolution=150)
    tiff = tmp_path / "pages.tiff"
    chinese = rendering.chinese_page()
    chinese.image.save(tiff, save_all=True, append_images=[rendering.receipt().image])
    out = tmp_path / "out"

    result = _run("process", str(jpeg), str(pdf), str(tiff), "--out", str(out))

    assert result.returncode == ExitCode.OK, result.stderr
    for name, pages in (("receipt.jpg", 1), ("receipt.pdf", 1), ("pages.tiff", 2)):
        data = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
        validate_result(data)
        assert data["page_count"] == pages
        text = (out / f"{name}.txt").read_text(encoding="utf-8")
        assert cer(text.split("\f")[-1], page.text) < 0.05
    assert cer((out / "pages.tiff.txt").read_text(encoding="utf-8").split("\f")[0], chinese.text) < 0.05


def test_process_goes_on_after_a_bad_file_and_says_so(tmp_path: Path) -> None:
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"%PDF-1.7\n garbage")
    good = tmp_path / "blank.png"
    Image.new("RGB", (400, 300), "white").save(good)
    out = tmp_path / "out"

    result = _run("process", str(bad), str(good), str(tmp_path / "absent.png"), "--out", str(out))

    assert result.returncode == ExitCode.DOCUMENT_FAILED
    assert "broken.pdf: failed (corrupt)" in result.stderr
    assert "absent.png: failed (missing)" in result.stderr
    assert (out / "blank.png.json").exists()
    assert not (out / "broken.pdf.json").exists()


def test_process_format_option_limits_outputs(tmp_path: Path) -> None:
    image = tmp_path / "blank.png"
    Image.new("RGB", (400, 300), "white").save(image)
    result = _run("process", str(image), "--out", str(tmp_path / "out"), "--format", "text")
    assert result.returncode == ExitCode.OK, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["blank.png.txt"]


def test_config_check(tmp_path: Path) -> None:
    good = _write_config(tmp_path / "good.yaml", "rasterize: {pdf_dpi: 200}\n")
    bad = _write_config(tmp_path / "bad.yaml", "rasterize: {pdf_dpi: 200, max_pages: -1}\n")
    ok = _run("config", "check", str(good))
    assert ok.returncode == ExitCode.OK
    assert "valid" in ok.stdout
    failed = _run("config", "check", str(bad))
    assert failed.returncode == ExitCode.CONFIG_INVALID
    assert "rasterize.max_pages" in failed.stderr


def test_altered_model_exits_with_model_error(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for name in ("ppocrv5_det.onnx", "ppocrv5_cls.onnx", "ppocrv5_rec.onnx", "ppocr_keys_v5.txt"):
        (models / name).write_bytes(b"not the model")
    config = _write_config(
        tmp_path / "c.yaml", f"engine: {{ppocr_onnx: {{models: ppocrv5_mobile, model_dir: {models}}}}}\n"
    )
    image = tmp_path / "blank.png"
    Image.new("RGB", (100, 100), "white").save(image)
    result = _run("process", str(image), "--out", str(tmp_path / "out"), "--config", str(config))
    assert result.returncode == ExitCode.MODEL_INVALID
    assert "ppocrv5_det.onnx has sha256" in result.stderr


def test_models_verify_prints_providers() -> None:
    result = _run("models", "verify")
    assert result.returncode == ExitCode.OK, result.stderr
    description = json.loads(result.stdout)
    assert {m["role"]: m["provider"] for m in description["models"]}["rec"] == "CPUExecutionProvider"


def test_run_refuses_a_config_without_hot_folders(tmp_path: Path) -> None:
    config = _write_config(tmp_path / "c.yaml", "version: 1\n")
    result = _run("run", "--config", str(config))
    assert result.returncode == ExitCode.CONFIG_INVALID
    assert "hot_folders is empty" in result.stderr


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_run_processes_a_dropped_file_and_stops_cleanly(tmp_path: Path, stop_signal: signal.Signals) -> None:
    config = _write_config(
        tmp_path / "config.yaml",
        "hot_folders:\n  - {path: in, output_dir: out, archive_dir: archive, failed_dir: failed}\n"
        "intake: {settle_seconds: 0.5}\npaths: {state_dir: state}\n"
        # Its own control socket: tests running side by side must not meet at the installed path.
        f"api: {{socket: {tmp_path / 'api.sock'}}}\n",
    )
    daemon = subprocess.Popen(
        [*CLI, "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        inbox = tmp_path / "in"
        deadline = time.monotonic() + 60
        while not inbox.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        rendering.receipt().image.save(tmp_path / "receipt.png")
        (tmp_path / "receipt.png").rename(inbox / "receipt.png")
        result = tmp_path / "out" / "receipt.png.txt"
        while not result.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert result.exists(), "no result within 60 s"
        assert "TOTAL 40.17" in result.read_text(encoding="utf-8")
        # The worker writes the results; the daemon archives the original once it hears back.
        archived = lambda: list((tmp_path / "archive").glob("*/*/receipt.png"))  # noqa: E731
        while not archived() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(archived()) == 1
        assert not (inbox / "receipt.png").exists()
        daemon.send_signal(stop_signal)
        _, stderr = daemon.communicate(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.communicate()
    assert daemon.returncode == ExitCode.OK, stderr
    assert "stopped: 1 done, 0 failed" in stderr

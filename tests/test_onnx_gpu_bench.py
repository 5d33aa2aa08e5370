"""bench.onnx_gpu_shapes: worker processes share one queue of pages and a dead worker ends the run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import cv2
import onnxruntime as ort
import pytest

from tests import rendering
from tests.bench_runs import run_bench

REPO = Path(__file__).resolve().parent.parent


def _bench(folder: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return run_bench("onnx_gpu_shapes", *options, str(folder))


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    for index in range(3):
        cv2.imwrite(str(folder / f"{index}.png"), rendering.receipt().bgr())
    return tmp_path


@pytest.mark.parametrize(("workers", "threads"), [(2, 1), (1, 2)])
def test_workers_read_every_page_once_between_them(pages: Path, workers: int, threads: int) -> None:
    done = _bench(
        pages, "--variant", "fp32+provider=cpu", "--workers", str(workers), "--threads", str(threads)
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["workers"] == workers and len(report["load_ms"]) == workers
    assert report["threads"] == threads
    assert report["pages"] == 3  # each page read by one worker, none twice
    assert report["providers"] == ["CPUExecutionProvider"]
    assert {"det", "rec"} <= set(report["stage_mean_ms"])
    assert "gpu_mib_peak" in report


def test_workers_with_a_session_server_read_every_page_through_it(pages: Path) -> None:
    done = _bench(
        pages,
        "--variant",
        "fp32+provider=cpu+fixed_shapes=on+fixed_batch_size=2+det_limit_side_len=640",
        "--workers",
        "2",
        "--session-server",
        "--runners",
        "2",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["session_server_runners"] == 2
    assert report["pages"] == 3
    assert report["providers"] == ["CPUExecutionProvider"]


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime has the CUDA provider"
)
def test_a_worker_that_fails_to_load_ends_the_run_with_its_error(pages: Path) -> None:
    done = _bench(pages, "--variant", "fp32+provider=cuda")
    assert done.returncode != 0
    assert "no CUDA provider" in done.stderr
    assert "a worker process failed" in done.stderr

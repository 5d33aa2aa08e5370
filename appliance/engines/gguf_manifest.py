"""GGUF vision-language model sets: read GGUF headers, write and verify a set's manifest.json.

A set is a text model, its mmproj (the vision projector libmtmd loads) and optionally a draft model
for speculative decoding, in one folder beside a manifest.json that records each file's sha256,
size, architecture, quantization and vocabulary hash. Verifying before loading turns a wrong,
altered or mismatched file into one ModelError that lists every problem, instead of a crash or
silently wrong text inside llama.cpp.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import ModelError
from appliance.hashing import sha256_file

__all__ = [
    "ROLES",
    "GgufInfo",
    "VlmFileEntry",
    "VlmManifest",
    "load_vlm_manifest",
    "read_gguf_info",
    "verify_vlm_files",
    "write_vlm_manifest",
]

ROLES = ("model", "mmproj", "draft")
MANIFEST_VERSION = 1
_GGUF_MAGIC = b"GGUF"
# general.architecture of every mmproj that llama.cpp's converter writes.
_PROJECTOR_ARCHITECTURE = "clip"
_ENTRY_KEYS = ("role", "file", "sha256", "size", "architecture", "file_type", "vocab_sha256")


@dataclass(frozen=True)
class GgufInfo:
    """What a GGUF file's header says about it."""

    path: Path
    size: int
    architecture: str  # general.architecture, e.g. "llama", "qwen2vl", "clip" for an mmproj
    file_type: str  # "F32", "F16", "Q8_0", "Q4_K_M", ... from general.file_type, or "unknown"
    n_vocab: int | None  # None when the file has no vocabulary (an mmproj)
    vocab_sha256: str | None  # vocabulary_sha256() of the token texts; None without a vocabulary
    projector_type: str | None  # clip.projector_type of an mmproj, else None

    @property
    def is_projector(self) -> bool:
        return self.architecture == _PROJECTOR_ARCHITECTURE or self.projector_type is not None


@dataclass(frozen=True)
class VlmFileEntry:
    """One file of a set as its manifest promises it."""

    role: str  # "model", "mmproj" or "draft"
    file: str  # name relative to the manifest's folder
    sha256: str
    size: int
    architecture: str
    file_type: str
    vocab_sha256: str | None


@dataclass(frozen=True)
class VlmManifest:
    """A GGUF vision-language model set."""

    name: str
    family: str  # "qwen2vl", "smolvlm", "lightonocr", "paddleocr_vl", "hunyuan_ocr", "granite_docling", ...
    files: tuple[VlmFileEntry, ...]
    source: str  # the manifest file this was read from (or written to), for messages
    origin: str = ""  # where the files came from, as recorded when the manifest was written

    def entry(self, role: str) -> VlmFileEntry | None:
        for item in self.files:
            if item.role == role:
                return item
        return None


def vocabulary_sha256(tokens: list[bytes]) -> str:
    """sha256 over the token texts in id order, each as its UTF-8 bytes followed by one NUL byte.

    Two models whose hashes agree map every token id to the same text, which is what a draft model
    must share with its target for speculative decoding to be correct.
    """
    digest = hashlib.sha256()
    for token in tokens:
        digest.update(token)
        digest.update(b"\0")
    return digest.hexdigest()


def _file_type_name(value: int) -> str:
    from gguf import LlamaFileType

    try:
        name = LlamaFileType(value).name  # e.g. MOSTLY_Q4_K_M, ALL_F32
    except ValueError:
        return "unknown"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def read_gguf_info(path: Path) -> GgufInfo:
    """Read a GGUF file's header; a missing, non-GGUF, truncated or corrupt file is a ModelError."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            magic = handle.read(4)
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except OSError as error:
        raise ModelError(f"{path}: cannot read: {error.strerror}") from None
    if magic != _GGUF_MAGIC:
        raise ModelError(f"{path}: not a GGUF file (starts with {magic!r}, expected {_GGUF_MAGIC!r})")
    try:
        return _read_header(path, size)
    except ModelError:
        raise
    # gguf's reader fails with whatever numpy or struct raise on a cut or scrambled header.
    except Exception as error:
        raise ModelError(
            f"{path}: truncated or corrupt GGUF header ({type(error).__name__}: {error})"
        ) from None


def _read_header(path: Path, size: int) -> GgufInfo:
    from gguf import GGUFReader

    reader = GGUFReader(path, "r")
    fields: dict[str, Any] = reader.fields

    def scalar(key: str) -> Any:
        field = fields.get(key)
        return None if field is None else field.contents()

    # The header parses even when tensor data is cut off: check that every tensor lies inside the file.
    for tensor in reader.tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size:
            raise ModelError(
                f"{path}: truncated: tensor {tensor.name} ends at byte {end} but the file has {size} bytes"
            )
    architecture = scalar("general.architecture")
    if not isinstance(architecture, str) or not architecture:
        raise ModelError(f"{path}: corrupt GGUF: no general.architecture")
    file_type_value = scalar("general.file_type")
    file_type = _file_type_name(int(file_type_value)) if isinstance(file_type_value, int) else "unknown"

    n_vocab: int | None = None
    vocab_hash: str | None = None
    tokens_field = fields.get("tokenizer.ggml.tokens")
    if tokens_field is not None:
        # Raw bytes of each string, in id order: no decoding, so odd byte tokens cannot fail here.
        tokens = [bytes(tokens_field.parts[index]) for index in tokens_field.data]
        n_vocab = len(tokens)
        vocab_hash = vocabulary_sha256(tokens)

    projector_type: str | None = None
    for key in ("clip.projector_type", "clip.vision.projector_type"):
        value = scalar(key)
        if isinstance(value, str):
            projector_type = value
            break
    return GgufInfo(
        path=path,
        size=size,
        architecture=architecture,
        file_type=file_type,
        n_vocab=n_vocab,
        vocab_sha256=vocab_hash,
        projector_type=projector_type,
    )


def load_vlm_manifest(path: Path) -> VlmManifest:
    """Read a set's manifest.json; a malformed one is a ModelError naming what is wrong."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ModelError(f"cannot read VLM manifest {path}: {error.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelError(f"VLM manifest {path} is not valid JSON: {error}") from None
    if not isinstance(raw, dict):
        raise ModelError(f"VLM manifest {path} must hold a JSON object")
    for key in ("name", "family"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise ModelError(f"VLM manifest {path}: '{key}' must be a non-empty string")
    items = raw.get("files")
    if not isinstance(items, list) or not items:
        raise ModelError(f"VLM manifest {path} must hold a non-empty 'files' list")
    entries = [_parse_entry(path, index, item) for index, item in enumerate(items)]
    roles = [entry.role for entry in entries]
    for role in set(roles):
        if roles.count(role) > 1:
            raise ModelError(f"VLM manifest {path}: role {role!r} appears {roles.count(role)} times")
    for role in ("model", "mmproj"):
        if role not in roles:
            raise ModelError(f"VLM manifest {path}: no file with role {role!r}")
    origin = raw.get("origin", "")
    return VlmManifest(
        name=raw["name"],
        family=raw["family"],
        files=tuple(entries),
        source=str(path),
        origin=origin if isinstance(origin, str) else "",
    )


def _parse_entry(path: Path, index: int, item: Any) -> VlmFileEntry:
    where = f"VLM manifest {path}: files[{index}]"
    if not isinstance(item, dict):
        raise ModelError(f"{where} must be an object")
    problems = [
        key
        for key in ("role", "file", "sha256", "architecture", "file_type")
        if not isinstance(item.get(key), str) or not item[key]
    ]
    size = item.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        problems.append("size")
        size = -1
    vocab = item.get("vocab_sha256")
    if vocab is not None and not isinstance(vocab, str):
        problems.append("vocab_sha256")
    if problems:
        raise ModelError(f"{where} lacks or has a wrong {', '.join(problems)}")
    if item["role"] not in ROLES:
        raise ModelError(f"{where}: role {item['role']!r} is not one of {', '.join(ROLES)}")
    file = item["file"]
    # Names stay inside the set's folder: a manifest must not point the engine at other files.
    if Path(file).name != file or file in {".", ".."}:
        raise ModelError(f"{where}: file {file!r} must be a plain name in the manifest's folder")
    return VlmFileEntry(
        role=item["role"],
        file=file,
        sha256=item["sha256"],
        size=size,
        architecture=item["architecture"],
        file_type=item["file_type"],
        vocab_sha256=vocab,
    )


def verify_vlm_files(
    manifest: VlmManifest, model_dir: Path, check_hashes: bool = True
) -> dict[str, GgufInfo]:
    """Check every file of the set in model_dir; return role -> GgufInfo, or raise one ModelError.

    All problems are collected first, so a site fixing a model folder sees every bad file at once:
    missing files, sha256 or size mismatches, files that are not GGUF or are cut short, an
    architecture other than the manifest's, an mmproj that is not a projector (or a projector given
    as model or draft), and a draft whose vocabulary differs from the model's.
    """
    problems: list[str] = []
    infos: dict[str, GgufInfo] = {}
    for item in manifest.files:
        path = model_dir / item.file
        label = f"{item.role} {item.file}"
        if not path.is_file():
            problems.append(f"{label}: missing from {model_dir}")
            continue
        size = path.stat().st_size
        if size != item.size:
            problems.append(f"{label}: size {size} bytes, manifest says {item.size}")
        elif check_hashes and (actual := sha256_file(path)) != item.sha256:
            problems.append(f"{label}: sha256 {actual} does not match the manifest's {item.sha256}")
        try:
            info = read_gguf_info(path)
        except ModelError as error:
            problems.append(f"{label}: {_without_path(str(error), path)}")
            continue
        if info.architecture != item.architecture:
            problems.append(
                f"{label}: architecture {info.architecture!r}, manifest says {item.architecture!r}"
            )
        if item.role == "mmproj" and not info.is_projector:
            problems.append(
                f"{label}: not a projector (architecture {info.architecture!r}, no clip.projector_type)"
            )
        if item.role != "mmproj" and info.is_projector:
            problems.append(f"{label}: is a projector (mmproj), not a text model")
        if item.role != "mmproj" and item.vocab_sha256 is not None and info.vocab_sha256 != item.vocab_sha256:
            problems.append(f"{label}: vocabulary differs from the manifest's")
        infos[item.role] = info
    model, draft = infos.get("model"), infos.get("draft")
    if model is not None and draft is not None and model.vocab_sha256 != draft.vocab_sha256:
        problems.append(
            f"draft {draft.path.name}: vocabulary ({draft.n_vocab} tokens) differs from model "
            f"{model.path.name} ({model.n_vocab} tokens); a draft must share the model's tokenizer"
        )
    if problems:
        raise ModelError(
            f"VLM set {manifest.name} ({manifest.source}) in {model_dir}:\n  " + "\n  ".join(problems)
        )
    return infos


def _without_path(message: str, path: Path) -> str:
    prefix = f"{path}: "
    return message.removeprefix(prefix)


def write_vlm_manifest(
    path: Path, name: str, family: str, files: dict[str, Path], *, origin: str = "", verify: bool = False
) -> VlmManifest:
    """Write manifest.json for files (role -> path, all in path's folder), computed from the files.

    Every file must be a readable GGUF. With verify=True the set is also checked as it would be when
    loaded (an mmproj that is a projector, a draft sharing the model's vocabulary) and nothing is
    written for a set that would then be refused; without it a mismatched set is recorded as it is,
    so the check at load time is what refuses it.
    """
    unknown = sorted(set(files) - set(ROLES))
    if unknown:
        raise ModelError(f"unknown role(s) {', '.join(unknown)}; roles are {', '.join(ROLES)}")
    folder = path.parent.resolve()
    entries = []
    for role in ROLES:
        if role not in files:
            continue
        file_path = files[role]
        if file_path.resolve().parent != folder:
            raise ModelError(f"{role} {file_path}: must be in the manifest's folder {folder}")
        info = read_gguf_info(file_path)
        entries.append(
            VlmFileEntry(
                role=role,
                file=file_path.name,
                sha256=sha256_file(file_path),
                size=info.size,
                architecture=info.architecture,
                file_type=info.file_type,
                vocab_sha256=None if info.is_projector else info.vocab_sha256,
            )
        )
    manifest = VlmManifest(name=name, family=family, files=tuple(entries), source=str(path), origin=origin)
    for role in ("model", "mmproj"):
        if manifest.entry(role) is None:
            raise ModelError(f"a VLM set needs a {role} file")
    if verify:
        verify_vlm_files(manifest, folder, check_hashes=False)
    document = {
        "version": MANIFEST_VERSION,
        "name": name,
        "family": family,
        "origin": origin,
        "files": [{key: getattr(entry, key) for key in _ENTRY_KEYS} for entry in entries],
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return manifest

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
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from appliance.engines.vlm_gguf.line_image import LINE_HEIGHT, UNRECORDED_STRETCH, LineInput
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
    # How a line reader's lines are drawn (its export's stretch and levels, as it was trained);
    # None: not recorded (a page model, or a line reader from before the record).
    line_input: LineInput | None = None

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
            if magic != _GGUF_MAGIC:
                raise ModelError(f"{path}: not a GGUF file (starts with {magic!r}, expected {_GGUF_MAGIC!r})")
            return _HeaderReader(handle, path, size).read()
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ModelError(f"{path}: is a folder, not a GGUF file") from None
    except OSError as error:
        raise ModelError(f"{path}: cannot read: {error.strerror}") from None


# Keys whose values read_gguf_info keeps; every other value is skipped without being decoded.
_WANTED_KEYS = frozenset(
    {
        "general.architecture",
        "general.file_type",
        "general.alignment",
        "clip.projector_type",
        "clip.vision.projector_type",
        "tokenizer.ggml.tokens",
    }
)
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 8  # GGML_MAX_DIMS is 4; anything above 8 is a scrambled header, not a model


class _HeaderReader:
    """Streams a GGUF header (little-endian, version 2 or 3) from an open file.

    Written out instead of gguf.GGUFReader, which builds numpy views for every string and took
    about 9 s on a 152k-token vocabulary here; this reads the same header in a fraction of that and
    checks every length against the bytes left, so a scrambled length cannot ask for gigabytes.
    The gguf package still supplies the tables: value types, quantization block sizes, file types.
    """

    def __init__(self, handle: BinaryIO, path: Path, size: int) -> None:
        self._handle = handle
        self._path = path
        self._size = size
        self._pos = 4  # after the magic

    def _fail(self, what: str) -> ModelError:
        return ModelError(f"{self._path}: {what}")

    def _take(self, count: int) -> bytes:
        if count > self._size - self._pos:
            raise self._fail(
                f"truncated or corrupt GGUF header: needs {count} bytes at offset {self._pos}, "
                f"the file has {self._size}"
            )
        data = self._handle.read(count)
        if len(data) != count:
            raise self._fail(f"truncated GGUF header at offset {self._pos}")
        self._pos += count
        return data

    def _skip(self, count: int) -> None:
        if count > self._size - self._pos:
            raise self._fail(f"truncated or corrupt GGUF header: skips past the end at offset {self._pos}")
        self._handle.seek(count, 1)
        self._pos += count

    def _unpack(self, fmt: str) -> Any:
        return struct.unpack("<" + fmt, self._take(struct.calcsize(fmt)))[0]

    def _string(self) -> bytes:
        return self._take(self._unpack("Q"))

    def _value(self, value_type: int, keep: bool) -> Any:
        if value_type in _SCALAR_FORMATS:
            return self._unpack(_SCALAR_FORMATS[value_type])
        if value_type == _STRING:
            length = self._unpack("Q")
            if keep:
                return self._take(length)
            self._skip(length)
            return None
        if value_type == _ARRAY:
            item_type, count = self._unpack("I"), self._unpack("Q")
            if count > self._size - self._pos:  # every item takes at least one byte
                raise self._fail(f"corrupt GGUF header: an array of {count} items at offset {self._pos}")
            if item_type in _SCALAR_FORMATS and not keep:
                self._skip(count * struct.calcsize(_SCALAR_FORMATS[item_type]))
                return None
            return [self._value(item_type, keep) for _ in range(count)]
        raise self._fail(f"corrupt GGUF header: unknown value type {value_type} at offset {self._pos}")

    def read(self) -> GgufInfo:
        from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType

        version = self._unpack("I")
        if version not in {2, 3}:
            raise self._fail(f"GGUF version {version} is not supported (2 or 3, little-endian)")
        n_tensors, n_kv = self._unpack("Q"), self._unpack("Q")
        if n_tensors > self._size or n_kv > self._size:
            raise self._fail(f"corrupt GGUF header: {n_tensors} tensors, {n_kv} keys")
        values: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string().decode("utf-8", errors="replace")
            value_type = self._unpack("I")
            value = self._value(value_type, keep=key in _WANTED_KEYS)
            if key in _WANTED_KEYS:
                values[key] = value
        tensors: list[tuple[str, int, int]] = []  # name, offset in the data section, bytes
        for _ in range(n_tensors):
            name = self._string().decode("utf-8", errors="replace")
            n_dims = self._unpack("I")
            if n_dims > _MAX_DIMS:
                raise self._fail(f"corrupt GGUF header: tensor {name} has {n_dims} dimensions")
            dims = [self._unpack("Q") for _ in range(n_dims)]
            type_id, offset = self._unpack("I"), self._unpack("Q")
            try:
                block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
            except (ValueError, KeyError):
                raise self._fail(f"corrupt GGUF header: tensor {name} has unknown type {type_id}") from None
            elements = math.prod(dims)
            tensors.append((name, offset, elements // block * type_size))
        alignment = values.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0:
            raise self._fail(f"corrupt GGUF header: general.alignment {alignment!r}")
        data_start = -(-self._pos // alignment) * alignment
        # The header may be whole while the tensor data is cut off: every tensor must lie in the file.
        for name, offset, n_bytes in tensors:
            end = data_start + offset + n_bytes
            if end > self._size:
                raise self._fail(
                    f"truncated: tensor {name} ends at byte {end} but the file has {self._size} bytes"
                )
        return self._info(values)

    def _info(self, values: dict[str, Any]) -> GgufInfo:
        architecture = values.get("general.architecture")
        if not isinstance(architecture, bytes) or not architecture:
            raise self._fail("corrupt GGUF: no general.architecture")
        file_type_value = values.get("general.file_type")
        file_type = _file_type_name(file_type_value) if isinstance(file_type_value, int) else "unknown"
        n_vocab: int | None = None
        vocab_hash: str | None = None
        tokens = values.get("tokenizer.ggml.tokens")
        if isinstance(tokens, list):
            # Raw bytes of each token, in id order: nothing is decoded, so byte tokens cannot fail here.
            n_vocab = len(tokens)
            vocab_hash = vocabulary_sha256(tokens)
        projector_type: str | None = None
        for key in ("clip.projector_type", "clip.vision.projector_type"):
            value = values.get(key)
            if isinstance(value, bytes):
                projector_type = value.decode("utf-8", errors="replace")
                break
        return GgufInfo(
            path=self._path,
            size=self._size,
            architecture=architecture.decode("utf-8", errors="replace"),
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
    stretch = raw.get("line_stretch")
    if stretch is not None and (
        isinstance(stretch, bool) or not isinstance(stretch, (int, float)) or stretch <= 0
    ):
        raise ModelError(f"VLM manifest {path}: 'line_stretch' must be a positive number")
    levels = raw.get("line_levels")
    if levels is not None and not _is_grey_pair(levels):
        raise ModelError(f"VLM manifest {path}: 'line_levels' must be two grey levels [ink, paper] in 0-255")
    return VlmManifest(
        name=raw["name"],
        family=raw["family"],
        files=tuple(entries),
        source=str(path),
        origin=origin if isinstance(origin, str) else "",
        line_input=_line_input(stretch, levels),
    )


def _line_input(stretch: float | None, levels: list[int] | None) -> LineInput | None:
    """The recorded line input; a line reader that records levels but no stretch is at UNRECORDED_STRETCH."""
    if stretch is None and levels is None:
        return None
    return LineInput(
        stretch=UNRECORDED_STRETCH if stretch is None else float(stretch),
        levels=None if levels is None else (levels[0], levels[1]),
    )


def _is_grey_pair(value: Any) -> bool:
    """Whether value is [ink, paper]: two whole grey levels in 0-255 (JSON true is not one)."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in value)
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
    path: Path,
    name: str,
    family: str,
    files: dict[str, Path],
    *,
    origin: str = "",
    verify: bool = False,
    line_input: LineInput | None = None,
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
    if line_input is not None and line_input.height != LINE_HEIGHT:
        # The manifest records no height: the engine draws every line 28 px high, and a reader
        # trained on taller lines would read garbage there, not fail.
        raise ModelError(f"a reader of lines {line_input.height} px high; the engine draws {LINE_HEIGHT}")
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
    manifest = VlmManifest(
        name=name,
        family=family,
        files=tuple(entries),
        source=str(path),
        origin=origin,
        line_input=line_input,
    )
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
    if line_input is not None:
        document["line_stretch"] = line_input.stretch
        if line_input.levels is not None:
            document["line_levels"] = list(line_input.levels)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return manifest

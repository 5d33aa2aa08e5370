"""GGUF headers and VLM set manifests against the committed tiny fixtures (tests/fixtures/vlm)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from appliance.engines.vlm_gguf.gguf_manifest import (
    load_vlm_manifest,
    read_gguf_info,
    verify_vlm_files,
    write_vlm_manifest,
)
from appliance.engines.vlm_gguf.line_image import LineInput
from appliance.errors import ModelError
from appliance.hashing import sha256_file

FIXTURES = Path(__file__).parent / "fixtures" / "vlm"
FAMILIES = ("smolvlm", "qwen2vl", "lightonocr", "paddleocr_vl")


def copy_set(family: str, into: Path) -> Path:
    """A writable copy of one fixture set: the committed files are never touched."""
    target = into / family
    shutil.copytree(FIXTURES / family, target)
    return target


@pytest.mark.parametrize("family", FAMILIES)
def test_committed_sets_verify(family: str) -> None:
    manifest = load_vlm_manifest(FIXTURES / family / "manifest.json")
    infos = verify_vlm_files(manifest, FIXTURES / family)
    assert manifest.family == family
    assert set(infos) == {"model", "mmproj", "draft"}
    assert infos["mmproj"].projector_type is not None
    assert infos["mmproj"].n_vocab is None
    assert infos["model"].n_vocab == infos["draft"].n_vocab == 1024
    assert infos["model"].vocab_sha256 == infos["draft"].vocab_sha256
    assert all(info.file_type == "F32" for info in infos.values())
    entry = manifest.entry("draft")
    assert entry is not None
    assert entry.sha256 == sha256_file(FIXTURES / family / entry.file)


def test_header_facts() -> None:
    smol = read_gguf_info(FIXTURES / "smolvlm" / "mmproj-f32.gguf")
    qwen = read_gguf_info(FIXTURES / "qwen2vl" / "model-f32.gguf")
    assert (smol.architecture, smol.projector_type) == ("clip", "idefics3")
    assert (qwen.architecture, qwen.projector_type) == ("qwen2vl", None)
    assert qwen.size == (FIXTURES / "qwen2vl" / "model-f32.gguf").stat().st_size
    # The two families were trained with different special tokens: their vocabularies differ.
    other = read_gguf_info(FIXTURES / "smolvlm" / "model-f32.gguf")
    assert other.vocab_sha256 != qwen.vocab_sha256


def test_write_manifest_reproduces_committed(tmp_path: Path) -> None:
    folder = copy_set("qwen2vl", tmp_path)
    written = write_vlm_manifest(
        folder / "new.json",
        "tiny-qwen2vl",
        "qwen2vl",
        {role: folder / f"{role}-f32.gguf" for role in ("model", "mmproj", "draft")},
    )
    committed = load_vlm_manifest(FIXTURES / "qwen2vl" / "manifest.json")
    assert written.files == committed.files
    assert load_vlm_manifest(folder / "new.json").files == committed.files


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("missing.gguf", None, "no such file"),
        ("text.gguf", b"this is a text file, renamed\n", "not a GGUF file"),
        ("magic-only.gguf", b"GGUF", "truncated or corrupt"),
    ],
)
def test_read_gguf_info_refuses_non_gguf(
    tmp_path: Path, name: str, content: bytes | None, needle: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelError, match=needle) as caught:
        read_gguf_info(path)
    assert name in str(caught.value)


@pytest.mark.parametrize("keep", [0.5, 0.99, 0.01])
def test_read_gguf_info_refuses_truncated(tmp_path: Path, keep: float) -> None:
    source = FIXTURES / "smolvlm" / "model-f32.gguf"
    data = source.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelError, match=r"cut\.gguf: truncated"):
        read_gguf_info(path)


def verify_problems(folder: Path, check_hashes: bool = True) -> str:
    manifest = load_vlm_manifest(folder / "manifest.json")
    with pytest.raises(ModelError) as caught:
        verify_vlm_files(manifest, folder, check_hashes=check_hashes)
    return str(caught.value)


def test_truncated_copy_refused(tmp_path: Path) -> None:
    folder = copy_set("smolvlm", tmp_path)
    model = folder / "model-f32.gguf"
    model.write_bytes(model.read_bytes()[:-1000])
    message = verify_problems(folder)
    assert "model model-f32.gguf: size" in message
    assert "model model-f32.gguf: truncated" in message


def test_byte_flipped_copy_refused(tmp_path: Path) -> None:
    folder = copy_set("qwen2vl", tmp_path)
    draft = folder / "draft-f32.gguf"
    data = bytearray(draft.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the tensor data: the header still reads
    draft.write_bytes(bytes(data))
    message = verify_problems(folder)
    assert "draft draft-f32.gguf: sha256" in message
    assert "does not match the manifest" in message
    # Without hashes the flip goes unseen: only the header is checked then.
    manifest = load_vlm_manifest(folder / "manifest.json")
    assert set(verify_vlm_files(manifest, folder, check_hashes=False)) == {"model", "mmproj", "draft"}


def test_text_file_renamed_gguf_refused(tmp_path: Path) -> None:
    folder = copy_set("smolvlm", tmp_path)
    mmproj = folder / "mmproj-f32.gguf"
    text = b"not a model\n" * 100
    mmproj.write_bytes(text)
    message = verify_problems(folder, check_hashes=False)
    assert "mmproj mmproj-f32.gguf: size" in message
    assert "mmproj mmproj-f32.gguf: not a GGUF file" in message


def test_missing_file_and_every_problem_listed(tmp_path: Path) -> None:
    folder = copy_set("smolvlm", tmp_path)
    (folder / "draft-f32.gguf").unlink()
    (folder / "mmproj-f32.gguf").write_bytes(b"GGUF")
    message = verify_problems(folder)
    assert "draft draft-f32.gguf: missing" in message
    assert "mmproj mmproj-f32.gguf: truncated or corrupt" in message


def test_draft_from_other_family_refused(tmp_path: Path) -> None:
    folder = copy_set("smolvlm", tmp_path)
    shutil.copy(FIXTURES / "qwen2vl" / "draft-f32.gguf", folder / "draft-f32.gguf")
    files = {role: folder / f"{role}-f32.gguf" for role in ("model", "mmproj", "draft")}
    # Writing with verify=True refuses the swapped files: the vocabularies differ.
    with pytest.raises(ModelError, match="vocabulary") as caught:
        write_vlm_manifest(folder / "manifest.json", "mixed", "smolvlm", files, verify=True)
    assert "draft draft-f32.gguf" in str(caught.value)
    assert load_vlm_manifest(folder / "manifest.json").name == "tiny-smolvlm"  # left as it was
    # Written without verifying, the set is recorded as it is and refused when verified.
    write_vlm_manifest(folder / "mixed.json", "mixed", "smolvlm", files)
    with pytest.raises(ModelError, match="a draft must share the model's tokenizer"):
        verify_vlm_files(load_vlm_manifest(folder / "mixed.json"), folder)
    # Against the original manifest: hash, architecture and vocabulary all named.
    shutil.copy(FIXTURES / "smolvlm" / "manifest.json", folder / "manifest.json")
    message = verify_problems(folder, check_hashes=False)
    assert "draft draft-f32.gguf: architecture 'qwen2', manifest says 'llama'" in message
    assert "a draft must share the model's tokenizer" in message


def test_model_given_as_mmproj_refused(tmp_path: Path) -> None:
    folder = copy_set("qwen2vl", tmp_path)
    with pytest.raises(ModelError, match=r"mmproj model-f32\.gguf: not a projector"):
        write_vlm_manifest(
            folder / "manifest.json",
            "wrong",
            "qwen2vl",
            {"model": folder / "model-f32.gguf", "mmproj": folder / "model-f32.gguf"},
            verify=True,
        )
    shutil.copy(folder / "model-f32.gguf", folder / "mmproj-f32.gguf")
    message = verify_problems(folder, check_hashes=False)
    assert "mmproj mmproj-f32.gguf: architecture 'qwen2vl', manifest says 'clip'" in message
    assert "mmproj mmproj-f32.gguf: not a projector" in message


def test_projector_given_as_model_refused(tmp_path: Path) -> None:
    folder = copy_set("smolvlm", tmp_path)
    with pytest.raises(ModelError, match=r"model mmproj-f32\.gguf: is a projector"):
        write_vlm_manifest(
            folder / "manifest.json",
            "wrong",
            "smolvlm",
            {"model": folder / "mmproj-f32.gguf", "mmproj": folder / "mmproj-f32.gguf"},
            verify=True,
        )


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda m: m.pop("files"), "non-empty 'files' list"),
        (lambda m: m.__setitem__("family", 3), "'family' must be a non-empty string"),
        (lambda m: m["files"][0].__setitem__("sha256", None), "lacks or has a wrong sha256"),
        (lambda m: m["files"][0].__setitem__("size", "big"), "lacks or has a wrong size"),
        (lambda m: m["files"][0].__setitem__("role", "vision"), "role 'vision' is not one of"),
        (lambda m: m["files"][0].__setitem__("file", "../model-f32.gguf"), "must be a plain name"),
        (lambda m: m["files"].pop(1), "no file with role 'mmproj'"),
        (lambda m: m["files"].append(dict(m["files"][0])), "role 'model' appears 2 times"),
    ],
)
def test_malformed_manifest_refused(tmp_path: Path, change: object, needle: str) -> None:
    raw = json.loads((FIXTURES / "smolvlm" / "manifest.json").read_text(encoding="utf-8"))
    change(raw)  # type: ignore[operator]
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ModelError, match=needle):
        load_vlm_manifest(path)


def test_manifest_not_json_refused(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_bytes(b"\xff{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        load_vlm_manifest(path)
    with pytest.raises(ModelError, match="cannot read"):
        load_vlm_manifest(tmp_path / "absent.json")


def test_scrambled_headers_give_model_errors_only(tmp_path: Path) -> None:
    """Any cut or flipped header byte is a ModelError or still reads: never another exception."""
    data = (FIXTURES / "qwen2vl" / "mmproj-f32.gguf").read_bytes()
    path = tmp_path / "scrambled.gguf"
    outcomes = {"refused": 0, "read": 0}
    for position in range(4, 3000, 11):
        flipped = bytearray(data)
        flipped[position] ^= 0xA5
        for content in (bytes(flipped), data[:position]):
            path.write_bytes(content)
            try:
                read_gguf_info(path)
            except ModelError as error:
                assert "scrambled.gguf" in str(error)
                outcomes["refused"] += 1
            else:
                outcomes["read"] += 1
    # Every cut inside the header is refused; some flips (inside a value) still read.
    assert outcomes["refused"] >= len(range(4, 3000, 11))
    assert outcomes["read"] > 0


def test_a_folder_is_not_a_gguf_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="is a folder"):
        read_gguf_info(tmp_path)


def test_paddleocr_vl_set_reads_as_its_architectures() -> None:
    """PaddleOCR-VL: ERNIE text ("paddleocr"), a SentencePiece vocabulary, an ERNIE draft sharing it."""
    model = read_gguf_info(FIXTURES / "paddleocr_vl" / "model-f32.gguf")
    draft = read_gguf_info(FIXTURES / "paddleocr_vl" / "draft-f32.gguf")
    mmproj = read_gguf_info(FIXTURES / "paddleocr_vl" / "mmproj-f32.gguf")
    assert (model.architecture, draft.architecture) == ("paddleocr", "ernie4_5")
    assert model.vocab_sha256 == draft.vocab_sha256
    assert mmproj.projector_type == "paddleocr"


def test_a_line_readers_stretch_is_written_read_back_and_checked(tmp_path: Path) -> None:
    folder = copy_set("qwen2vl", tmp_path)
    files = {role: folder / f"{role}-f32.gguf" for role in ("model", "mmproj")}
    write_vlm_manifest(folder / "line.json", "line", "qwen2vl_line", files, line_input=LineInput(stretch=1.5))
    assert load_vlm_manifest(folder / "line.json").line_input == LineInput(stretch=1.5)
    assert load_vlm_manifest(FIXTURES / "qwen2vl" / "manifest.json").line_input is None
    for bad in (0, -1.5, "1.5", True):
        document = json.loads((folder / "line.json").read_text())
        document["line_stretch"] = bad
        (folder / "bad.json").write_text(json.dumps(document))
        with pytest.raises(ModelError, match="line_stretch"):
            load_vlm_manifest(folder / "bad.json")


def test_a_line_readers_levels_are_written_read_back_and_checked(tmp_path: Path) -> None:
    folder = copy_set("qwen2vl", tmp_path)
    files = {role: folder / f"{role}-f32.gguf" for role in ("model", "mmproj")}
    levelled = LineInput(stretch=3.0, levels=(54, 255))
    write_vlm_manifest(folder / "line.json", "line", "qwen2vl_line", files, line_input=levelled)
    assert load_vlm_manifest(folder / "line.json").line_input == levelled
    write_vlm_manifest(
        folder / "plain.json", "line", "qwen2vl_line", files, line_input=LineInput(stretch=3.0)
    )
    assert "line_levels" not in (folder / "plain.json").read_text()
    assert load_vlm_manifest(folder / "plain.json").line_input == LineInput(stretch=3.0)
    tall = LineInput(stretch=1.5, height=56)  # the manifest records no height: such a reader is refused
    with pytest.raises(ModelError, match="56 px"):
        write_vlm_manifest(folder / "tall.json", "line", "qwen2vl_line", files, line_input=tall)
    assert not (folder / "tall.json").exists()
    document = json.loads((folder / "line.json").read_text())
    del document["line_stretch"]  # levels but no stretch: a reader from before the stretch was recorded
    (folder / "old.json").write_text(json.dumps(document))
    assert load_vlm_manifest(folder / "old.json").line_input == LineInput(stretch=1.0, levels=(54, 255))
    for bad in ([54], [54, 256], [-1, 255], [54.5, 255], [True, 255], "54 255"):
        document = json.loads((folder / "line.json").read_text())
        document["line_levels"] = bad
        (folder / "bad.json").write_text(json.dumps(document))
        with pytest.raises(ModelError, match="line_levels"):
            load_vlm_manifest(folder / "bad.json")

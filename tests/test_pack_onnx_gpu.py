"""bench.pack_onnx_gpu offline: fake wheels and a fake CUDA provider library instead of pip download."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bench import pack_onnx_gpu
from bench.pack_onnx_gpu import PART_OVERHEAD, Item, folder_size, pack, split

PYBIND = "onnxruntime/capi/onnxruntime_pybind11_state.cpython-312-x86_64-linux-gnu.so"
PROVIDER = "onnxruntime/capi/libonnxruntime_providers_cuda.so"
BUDGET = PART_OVERHEAD + 200_000
ORT_INIT = b"""__version__ = "1.31.1"
def get_available_providers():
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]
"""


def provider_library(payloads: dict[int, bytes]) -> bytes:
    """A minimal ELF64 whose .nv_fatbin holds one fatbin with an entry per architecture."""
    entries = b""
    for arch, payload in payloads.items():
        header = bytearray(64)
        struct.pack_into("<HHIQ", header, 0, 2, 0, 64, len(payload))
        struct.pack_into("<I", header, 28, arch)
        entries += bytes(header) + payload
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entries)) + entries
    names = b"\0.shstrtab\0.nv_fatbin\0"
    fatbin_at = (64 + len(names) + 7) // 8 * 8
    sections_at = (fatbin_at + len(fatbin) + 7) // 8 * 8
    elf = bytearray(sections_at + 3 * 64)
    elf[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", elf, 0x28, sections_at)
    struct.pack_into("<HHH", elf, 0x3A, 64, 3, 1)
    elf[64 : 64 + len(names)] = names
    elf[fatbin_at : fatbin_at + len(fatbin)] = fatbin
    for index, (name, offset, size) in enumerate(((1, 64, len(names)), (11, fatbin_at, len(fatbin))), 1):
        struct.pack_into("<I", elf, sections_at + index * 64, name)
        struct.pack_into("<QQ", elf, sections_at + index * 64 + 0x18, offset, size)
    return bytes(elf)


def make_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, content in files.items():
            wheel.writestr(name, content)
    return path


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


@pytest.fixture
def packed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Pack fake downloads, a fake model package and two small data sets with a small budget."""
    noise = os.urandom  # incompressible, so the parts' sizes are the files' sizes
    sm80, sm90 = noise(150_000), noise(40_000)
    provider = provider_library({80: sm80, 90: sm90})
    expected_provider = provider.replace(sm80, bytes(len(sm80)))
    pybind = noise(120_000)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    ort = make_wheel(
        downloads / "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        {
            "onnxruntime/__init__.py": ORT_INIT,
            PROVIDER: provider,
            PYBIND: pybind,
            "onnxruntime/capi/libonnxruntime.so.1.31.1": b"left out",
            "onnxruntime_gpu-1.31.1.dist-info/METADATA": b"Name: onnxruntime-gpu\n",
        },
    )
    wheel_files = {
        f"fake{letter}": {f"fake{letter}/__init__.py": b"", f"fake{letter}/blob.bin": noise(90_000)}
        for letter in "abcd"
    }
    wheel_files["fakee"] = {"fakee-1.0.data/purelib/fakee.py": b"VALUE = 1\n"}
    wheels = [
        make_wheel(downloads / f"{name}-1.0-py3-none-any.whl", files) for name, files in wheel_files.items()
    ]
    monkeypatch.setattr(pack_onnx_gpu, "download", lambda work, versions, daemon=False: (ort, wheels))

    packages = tmp_path / "packages"
    (packages / "fakemodels").mkdir(parents=True)
    model = noise(100_000)
    (packages / "fakemodels" / "__init__.py").write_text("")
    (packages / "fakemodels" / "det.onnx").write_bytes(model)
    (packages / "fakemodels" / "unused.onnx").write_bytes(b"not named by the manifest")
    (packages / "fakemodels" / "keys.txt").write_text("a\nb\n")
    monkeypatch.syspath_prepend(str(packages))
    manifest = tmp_path / "fake.json"
    entry = {"role": "det", "file": "det.onnx", "sha256": sha256(model), "source_package": "fakemodels==1.0"}
    manifest.write_text(json.dumps({"models": [entry]}))

    data = []
    for name, count in (("receipts", 3), ("docs", 2)):
        folder = tmp_path / "shared" / name
        (folder / "images").mkdir(parents=True)
        for index in range(count):
            (folder / "images" / f"{index}.jpg").write_bytes(noise(20_000))
        (folder / "scoring.json").write_text("{}")
        data.append(folder)

    out = tmp_path / "out"
    parts = pack(out, BUDGET, data, [str(manifest)])
    return {
        "parts": parts,
        "provider": expected_provider,
        "pybind": pybind,
        "wheel_files": wheel_files,
        "model": model,
        "data": data,
    }


def run_part(part: Path, site: Path, data: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SITE": str(site), "DATA": str(data), "PYTHON": sys.executable}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        ["bash", str(part / "run.sh")], env=env, capture_output=True, text=True, check=False, timeout=120
    )


def snapshot(*folders: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path): (path.stat().st_mtime_ns, path.stat().st_size)
        for folder in folders
        for path in folder.rglob("*")
        if path.is_file()
    }


def test_the_daemon_option_downloads_what_the_daemon_imports_at_the_pinned_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[list[str]] = []

    def pip_download(requirements: list[str], dest: Path, *options: str) -> list[Path]:
        asked.append(list(requirements))
        return [dest / "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl"]

    monkeypatch.setattr(pack_onnx_gpu, "pip_download", pip_download)
    versions = pack_onnx_gpu.pins(pack_onnx_gpu.REPO / "pyproject.toml")
    pack_onnx_gpu.download(tmp_path, versions)
    pack_onnx_gpu.download(tmp_path, versions, daemon=True)
    bench_only, with_daemon = asked[1], asked[3]  # each call asks for onnxruntime-gpu, then the rest
    daemon_only = set(with_daemon) - set(bench_only)
    assert {requirement.split("==")[0] for requirement in daemon_only} == set(
        pack_onnx_gpu.DAEMON_REQUIREMENTS
    )
    assert (
        f"grpcio=={versions['grpcio']}" in daemon_only and f"watchdog=={versions['watchdog']}" in daemon_only
    )
    assert not any(requirement.startswith("grpcio") for requirement in bench_only)


def test_split_keeps_the_budget_and_places_every_item_once() -> None:
    items = [
        Item(f"item-{index}", Path(f"item-{index}"), size)
        for index, size in enumerate([7, 5, 5, 4, 3, 3, 2, 1])
    ]
    parts = split(items, 10)
    assert all(part.size <= 10 and part.size == sum(item.size for item in part.items) for part in parts)
    placed = [item.name for part in parts for item in part.items]
    assert sorted(placed) == sorted(item.name for item in items)
    assert len(parts) == 3  # 30 bytes in parts of 10
    with pytest.raises(SystemExit, match="larger than a part"):
        split([Item("big", Path("big"), 11)], 10)


def test_parts_fit_the_budget_and_hold_every_file_once(packed: dict[str, object]) -> None:
    parts = packed["parts"]
    assert isinstance(parts, list)
    assert len(parts) >= 3
    names: list[str] = []
    for part in parts:
        assert folder_size(part) <= BUDGET
        listed = [line.split("  ", 1)[1] for line in (part / "SHA256SUMS").read_text().splitlines()]
        on_disk = {
            path.relative_to(part).as_posix()
            for path in part.rglob("*")
            if path.is_file() and path.name not in ("run.sh", "SHA256SUMS")
        }
        assert set(listed) == on_disk
        names += listed
    assert len(names) == len(set(names))
    assert {
        f"site/{PROVIDER}.xz",
        f"site/{PYBIND}.xz",
        "site/onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.tar.xz",
        "site/model-fakemodels.tar.xz",
        "data/receipts-1.tar",
        "data/docs-1.tar",
    } <= set(names)


def test_parts_install_in_order_once(packed: dict[str, object], tmp_path: Path) -> None:
    parts = packed["parts"]
    assert isinstance(parts, list)
    site, data = tmp_path / "site", tmp_path / "data"

    refused = run_part(parts[1], site, data)
    assert refused.returncode == 2
    assert "run part-1/run.sh first" in refused.stderr
    assert not (site / ".onnx-gpu-part-2").exists()

    for part in parts:
        done = run_part(part, site, data)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "CUDAExecutionProvider" in done.stdout

    capi = site / "onnxruntime" / "capi"
    assert (site / PROVIDER).read_bytes() == packed["provider"]  # sm_80 zeroed, sm_90 kept
    assert (site / PYBIND).read_bytes() == packed["pybind"]
    assert not (capi / "libonnxruntime.so.1.31.1").exists()
    wheel_files = packed["wheel_files"]
    assert isinstance(wheel_files, dict)
    for files in wheel_files.values():
        for name, content in files.items():
            installed = name.split("/purelib/", 1)[-1]
            assert (site / installed).read_bytes() == content
    assert (site / "fakemodels" / "det.onnx").read_bytes() == packed["model"]
    assert (site / "fakemodels" / "keys.txt").is_file()
    assert not (site / "fakemodels" / "unused.onnx").exists()
    sources = packed["data"]
    assert isinstance(sources, list)
    for folder in sources:
        for path in folder.rglob("*"):
            if path.is_file():
                assert (data / folder.name / path.relative_to(folder)).read_bytes() == path.read_bytes()

    before = snapshot(site, data)
    for part in parts:
        again = run_part(part, site, data)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already installed" in again.stdout
    assert snapshot(site, data) == before

"""Pack onnxruntime-gpu, the model files and the data sets into parts for a GPU machine without network."""

# Usage: python -m bench.pack_onnx_gpu --out .gpu-carry/ort [--data DIR ...] [--manifest NAME] [--keep-arch N]
#        [--daemon]
#
# Downloads (pip download: cp312, manylinux x86_64, wheels only, pyproject.toml's pins) onnxruntime-gpu
# and what bench.onnx_gpu_shapes --full and bench.host_stages import that the GPU machine lacks (it has
# Python 3.12, torch with its CUDA 13 and cuDNN pip libraries, numpy, Pillow and OpenCV). The CUDA
# provider keeps only the cubins of --keep-arch (bench.strip_fatbin) and travels xz-packed, as does the
# pybind library; each wheel travels as a tar.xz of the files it installs; the files the manifests name
# come from the installed model packages, or from their pinned wheels; each --data folder goes in plain
# tars. All of it is split into as few folders part-1, part-2, ... as keep each part plus the working
# tree (git ls-files: tracked and untracked, not ignored) --margin under --limit, what one call to the
# GPU machine may carry. Each part gets a SHA256SUMS and a run.sh (bench/onnx_gpu_part.sh) that
# installs it, in order, into $SITE (default /tmp/site) and $DATA (default /tmp/data). See bench/README.md.

from __future__ import annotations

import argparse
import io
import json
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from appliance.hashing import sha256_file
from bench.strip_fatbin import zero_other_archs

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).with_name("onnx_gpu_part.sh")
MIB = 1 << 20
# What one call to the GPU machine may carry: the working tree plus the part.
CARRY_LIMIT = 64 * MIB
# Room in each part's budget for its run.sh and SHA256SUMS.
PART_OVERHEAD = 64 * 1024
# The data sets travel in tars of about this size, so that they fill the parts' gaps.
DATA_CHUNK = 4 * MIB
# The modules bench.onnx_gpu_shapes --full and bench.host_stages import (pinned in pyproject.toml),
# downloaded with their dependencies.
BENCH_REQUIREMENTS = (
    "pypdfium2",
    "pyclipper",
    "pydantic",
    "pyyaml",
    "jsonschema",
    "jsonschema-rs",
    "pikepdf",
    "python-stdnum",
    "onnx",
    "rapidfuzz",
    "protobuf",
)
# What the daemon itself imports beyond them (bench.daemon_pages runs it), packed with --daemon.
DAEMON_REQUIREMENTS = (
    "watchdog",
    "lxml",
    "fonttools",
    "json-repair",
    "grpcio",
    "grpcio-health-checking",
    "grpcio-reflection",
)
# Distributions the GPU machine has already (its own numpy, Pillow and OpenCV work with torch).
ON_THE_MACHINE = frozenset({"numpy", "pillow", "opencv-python-headless", "opencv-python"})
# Members of the onnxruntime-gpu wheel left behind: the C API library and the TensorRT provider,
# which the Python module never loads.
ORT_LEFT_OUT = re.compile(r"onnxruntime/capi/(libonnxruntime\.so.*|libonnxruntime_providers_tensorrt\.so)")
# Members of the wheel that travel alone, xz-packed: the CUDA provider and the pybind library.
ORT_ALONE = re.compile(
    r"onnxruntime/capi/(libonnxruntime_providers_cuda\.so|onnxruntime_pybind11_state\..*\.so)"
)
PIP_TARGET = (
    "--only-binary",
    ":all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--abi",
    "cp312",
    *(
        f"--platform={tag}_x86_64"
        for tag in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014")
    ),
)
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;]+)")


@dataclass(frozen=True)
class Item:
    """One file of a part: its path under the part folder and its size in bytes."""

    name: str
    path: Path
    size: int


@dataclass
class Part:
    """The items of one part and their total size."""

    items: list[Item] = field(default_factory=list)
    size: int = 0


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(pyproject: Path) -> dict[str, str]:
    """Every `name==version` pyproject.toml pins, dependencies and extras, by normalised name."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    found: dict[str, str] = {}
    for requirement in requirements:
        match = _PIN.match(requirement.strip())
        if match:
            found[normalise(match.group(1))] = match.group(2)
    return found


def model_package_hashes(requirements: Path) -> dict[str, tuple[str, list[str]]]:
    """model-packages.txt: normalised name -> (version, its --hash values)."""
    text = requirements.read_text(encoding="utf-8").replace("\\\n", " ")
    found: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        match = _PIN.match(line.split("#", 1)[0].strip())
        if match:
            found[normalise(match.group(1))] = (match.group(2), re.findall(r"--hash=(\S+)", line))
    return found


def tree_size(repo: Path) -> int:
    """Bytes of the working tree that travels with every call: tracked and untracked, not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    paths = {repo / name for name in listed.decode().split("\0") if name}
    return sum(path.stat().st_size for path in paths if path.is_file() and not path.is_symlink())


def pip_download(requirements: Sequence[str], dest: Path, *options: str) -> list[Path]:
    """`pip download` the requirements for the GPU machine's Python into dest; the wheels it holds."""
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--dest", str(dest)]
    subprocess.run([*pip, *PIP_TARGET, *options, *requirements], check=True)
    return sorted(dest.glob("*.whl"))


def wheel_name(wheel: Path) -> str:
    return normalise(wheel.name.split("-", 1)[0])


def _tarinfo(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, 0
    return info


def write_tar_xz(out: Path, members: Iterable[tuple[str, bytes, int]]) -> None:
    """A reproducible tar.xz (fixed times and owners) of (name, content, mode) members."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(out, "wb", preset=9) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for name, content, mode in members:
            tar.addfile(_tarinfo(name, len(content), mode), io.BytesIO(content))


def xz_file(source: Path | bytes | bytearray, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(out, "wb", preset=9) as packed:
        if isinstance(source, bytes | bytearray):
            packed.write(source)
        else:
            with source.open("rb") as stream:
                shutil.copyfileobj(stream, packed, 1 << 22)


def wheel_members(wheel: zipfile.ZipFile) -> list[tuple[zipfile.ZipInfo, str]]:
    """The wheel's files and the path pip would install each at (purelib/platlib data moved up)."""
    members = []
    for info in wheel.infolist():
        if info.is_dir():
            continue
        name = info.filename
        data = re.match(r"[^/]+\.data/([^/]+)/(.+)", name)
        if data:
            if data.group(1) not in ("purelib", "platlib"):
                print(f"  {name}: not a library file, left out")
                continue
            name = data.group(2)
        members.append((info, name))
    return members


def _mode(info: zipfile.ZipInfo) -> int:
    return (info.external_attr >> 16) & 0o777 or 0o644


def pack_wheel(wheel: Path, out: Path) -> None:
    """The files a wheel installs, as a tar.xz to unpack into the site folder."""
    with zipfile.ZipFile(wheel) as archive:
        write_tar_xz(out, ((name, archive.read(info), _mode(info)) for info, name in wheel_members(archive)))


def pack_onnxruntime(wheel: Path, site: Path, keep_arch: set[int]) -> None:
    """onnxruntime-gpu: its large libraries alone (the CUDA provider stripped), the rest in a tar.xz."""
    small: list[tuple[str, bytes, int]] = []
    with zipfile.ZipFile(wheel) as archive:
        for info, name in wheel_members(archive):
            if ORT_LEFT_OUT.fullmatch(name):
                continue
            if not ORT_ALONE.fullmatch(name):
                small.append((name, archive.read(info), _mode(info)))
                continue
            content = bytearray(archive.read(info))
            if name.endswith("/libonnxruntime_providers_cuda.so"):
                by_arch = zero_other_archs(content, keep_arch)
                print(f"  {name}: kept sm_{sorted(keep_arch)} of {sorted(by_arch)}")
            xz_file(content, site / f"{name}.xz")
    write_tar_xz(site / f"{wheel.name.removesuffix('.whl')}.tar.xz", small)


def manifest_path(name: str) -> Path:
    """A manifest file, or the name of one of the engine's built-in manifests."""
    path = Path(name)
    return path if path.suffix == ".json" else REPO / "appliance/engines/manifests" / f"{name}.json"


def installed_package_dir(name: str) -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec(name.replace("-", "_"))
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def model_files(manifests: Sequence[str]) -> dict[str, dict[str, str]]:
    """Over the manifests: source package (`name==version`) -> {file in the package: sha256}."""
    wanted: dict[str, dict[str, str]] = {}
    for name in manifests:
        for model in json.loads(manifest_path(name).read_text(encoding="utf-8"))["models"]:
            wanted.setdefault(model["source_package"], {})[model["file"]] = model["sha256"].lower()
    return wanted


def model_package_folder(package: str, files: dict[str, str], downloads: Path) -> Path:
    """The installed package's folder if it holds the files with their sha256, else its wheel's."""
    name, version = package.split("==", 1)
    folder = installed_package_dir(name)
    if folder is not None and all(
        (folder / file).is_file() and sha256_file(folder / file) == digest for file, digest in files.items()
    ):
        return folder
    print(f"{package}: not installed with the manifest's files; downloading its wheel")
    hashes = model_package_hashes(REPO / "model-packages.txt").get(normalise(name), (version, []))[1]
    requirements = downloads / f"{normalise(name)}.txt"
    requirements.write_text(f"{name}=={version} " + " ".join(f"--hash={h}" for h in hashes) + "\n")
    options = ["--no-deps", "-r", str(requirements)] + (["--require-hashes"] if hashes else [])
    (wheel,) = pip_download([], downloads / normalise(name), *options)
    folder = downloads / f"{normalise(name)}-unpacked"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder)
    folder /= name.replace("-", "_")
    for file, digest in files.items():
        if not (folder / file).is_file() or sha256_file(folder / file) != digest:
            raise SystemExit(f"{package}: {file} is missing from its wheel or differs from the manifest")
    return folder


def pack_models(manifests: Sequence[str], site: Path, downloads: Path) -> None:
    """Each model package's folder, less its .onnx files no manifest names, as a tar.xz."""
    for package, files in model_files(manifests).items():
        folder = model_package_folder(package, files, downloads)
        top = package.split("==", 1)[0].replace("-", "_")
        members = []
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder).as_posix()
            if (
                path.is_dir()
                or "__pycache__" in relative
                or (path.suffix == ".onnx" and relative not in files)
            ):
                continue
            members.append((f"{top}/{relative}", path.read_bytes(), 0o644))
        write_tar_xz(site / f"model-{top}.tar.xz", members)


def pack_data(folders: Sequence[Path], out: Path, chunk: int = DATA_CHUNK) -> None:
    """Each data folder as tars of about `chunk` bytes, unpacked into $DATA/<folder name>."""
    for folder in folders:
        files = sorted(path for path in folder.rglob("*") if path.is_file())
        groups: list[list[Path]] = [[]]
        size = 0
        for path in files:
            if groups[-1] and size + path.stat().st_size > chunk:
                groups.append([])
                size = 0
            groups[-1].append(path)
            size += path.stat().st_size
        for index, group in enumerate(groups, 1):
            out.mkdir(parents=True, exist_ok=True)
            with tarfile.open(out / f"{folder.name}-{index}.tar", "w") as tar:
                for path in group:
                    name = f"{folder.name}/{path.relative_to(folder).as_posix()}"
                    with path.open("rb") as stream:
                        tar.addfile(_tarinfo(name, path.stat().st_size, 0o644), stream)


def split(items: Sequence[Item], budget: int) -> list[Part]:
    """First fit, largest first: every item in one part, no part's items over `budget` bytes."""
    parts: list[Part] = []
    for item in sorted(items, key=lambda item: (-item.size, item.name)):
        if item.size > budget:
            raise SystemExit(f"{item.name} ({item.size:,} bytes) is larger than a part may be ({budget:,})")
        part = next((part for part in parts if part.size + item.size <= budget), None)
        if part is None:
            part = Part()
            parts.append(part)
        part.items.append(item)
        part.size += item.size
    return parts


def write_parts(parts: Sequence[Part], out: Path) -> list[Path]:
    """part-N folders: the items, SHA256SUMS, and run.sh from the template; their paths."""
    template = TEMPLATE.read_text(encoding="utf-8")
    previous_sums = ""
    folders = []
    for number, part in enumerate(parts, 1):
        folder = out / f"part-{number}"
        sums = []
        for item in sorted(part.items, key=lambda item: item.name):
            target = folder / item.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(item.path, target)
            sums.append(f"{sha256_file(target)}  {item.name}\n")
        (folder / "SHA256SUMS").write_text("".join(sums), encoding="utf-8")
        script = (
            template.replace("@PART@", str(number))
            .replace("@PARTS@", str(len(parts)))
            .replace("@PREVIOUS_SUMS@", previous_sums or '""')
        )
        (folder / "run.sh").write_text(script, encoding="utf-8")
        (folder / "run.sh").chmod(0o755)
        previous_sums = sha256_file(folder / "SHA256SUMS")
        folders.append(folder)
    return folders


def folder_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def download(work: Path, versions: dict[str, str], daemon: bool = False) -> tuple[Path, list[Path]]:
    """The onnxruntime-gpu wheel and the other wheels, the GPU machine's own distributions left out."""
    (ort,) = pip_download([f"onnxruntime-gpu=={versions['onnxruntime-gpu']}"], work / "ort", "--no-deps")
    constraints = work / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(versions.items())))
    names = BENCH_REQUIREMENTS + (DAEMON_REQUIREMENTS if daemon else ())
    wanted = [f"{name}=={versions[name]}" for name in names]
    wheels = pip_download(wanted, work / "wheels", "-c", str(constraints))
    return ort, [wheel for wheel in wheels if wheel_name(wheel) not in ON_THE_MACHINE]


def pack(  # noqa: PLR0917 (the CLI's options, each with its default)
    out: Path,
    part_budget: int,
    data: Sequence[Path] = (),
    manifests: Sequence[str] = ("ppocrv6_small",),
    keep_arch: Iterable[int] = (90,),
    daemon: bool = False,
) -> list[Path]:
    """Download, pack and split into out/part-N (out is emptied first); the part folders."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as scratch:
        work, staged = Path(scratch) / "downloads", Path(scratch) / "staged"
        work.mkdir()
        ort, wheels = download(work, pins(REPO / "pyproject.toml"), daemon)
        print(f"packing {ort.name}")
        pack_onnxruntime(ort, staged / "site", set(keep_arch))
        for wheel in wheels:
            print(f"packing {wheel.name}")
            pack_wheel(wheel, staged / "site" / f"{wheel.name.removesuffix('.whl')}.tar.xz")
        print(f"packing the model files of {', '.join(manifests)}")
        pack_models(manifests, staged / "site", work)
        pack_data(data, staged / "data")
        items = [
            Item(path.relative_to(staged).as_posix(), path, path.stat().st_size)
            for path in sorted(staged.rglob("*"))
            if path.is_file()
        ]
        return write_parts(split(items, part_budget - PART_OVERHEAD), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="emptied, then holds part-1, part-2, ...")
    parser.add_argument("--data", type=Path, nargs="*", default=[], help="folders copied into $DATA")
    parser.add_argument("--manifest", action="append", help="model manifest name or file (ppocrv6_small)")
    parser.add_argument("--keep-arch", type=int, action="append", help="SM architecture to keep (90)")
    parser.add_argument(
        "--daemon", action="store_true", help="also what the daemon imports (bench.daemon_pages)"
    )
    parser.add_argument("--limit", type=int, default=CARRY_LIMIT, help="bytes one call may carry")
    parser.add_argument("--margin", type=int, default=MIB, help="bytes kept under the limit")
    args = parser.parse_args()
    tree = tree_size(REPO)
    budget = args.limit - args.margin - tree
    print(f"working tree {tree:,} bytes: each part may hold {budget:,}")
    folders = pack(
        args.out, budget, args.data, args.manifest or ["ppocrv6_small"], args.keep_arch or [90], args.daemon
    )
    for folder in folders:
        size = folder_size(folder)
        print(f"{folder}: {size:,} bytes, with the tree {size + tree:,} of {args.limit:,}")
        if size + tree > args.limit - args.margin:
            raise SystemExit(f"{folder} is over the budget")


if __name__ == "__main__":
    main()

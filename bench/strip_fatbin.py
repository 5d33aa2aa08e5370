"""Zero the GPU code of other architectures in a shared library, so it compresses to what one GPU needs.

Usage: python -m bench.strip_fatbin LIBRARY OUT [--keep-arch 90]

onnxruntime-gpu's CUDA provider library (284 MB) carries ELF cubins for sm_75 to sm_120 in its
`.nv_fatbin` section, far more than a size-limited transfer to one GPU box takes. Every cubin entry of
another architecture keeps its header and has its payload zeroed, so offsets and sizes stay and
the CUDA runtime, which loads only the entry of the device's architecture, never reads the zeros;
xz then packs the library into about 51 MB. A benchmark-transfer tool only: never for a shipped
library.
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

_FATBIN_MAGIC = 0xBA55ED50


def fatbin_section(data: bytes | bytearray) -> tuple[int, int]:
    """File offset and size of the ELF64 `.nv_fatbin` section."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    names_offset = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)[0]
    for index in range(shnum):
        header = shoff + index * shentsize
        name_at = names_offset + struct.unpack_from("<I", data, header)[0]
        name = data[name_at : data.index(b"\0", name_at)]
        if name == b".nv_fatbin":
            offset, size = struct.unpack_from("<QQ", data, header + 0x18)
            return offset, size
    raise ValueError("no .nv_fatbin section")


def zero_other_archs(data: bytearray, keep: set[int]) -> dict[int, int]:
    """Zero the payload of every fatbin entry whose architecture is not in `keep`; bytes by arch."""
    offset, size = fatbin_section(data)
    end, position = offset + size, offset
    by_arch: dict[int, int] = {}
    while position < end:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, position)
        if magic != _FATBIN_MAGIC:
            position += 8  # fatbins are 8-byte aligned in the section
            continue
        entry, stop = position + header_size, position + header_size + fat_size
        while entry < stop:
            _kind, _unused, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            by_arch[arch] = by_arch.get(arch, 0) + payload
            if arch not in keep:
                start = entry + entry_header
                data[start : start + payload] = bytes(payload)
            entry += entry_header + payload
        position = stop
    return by_arch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shared_object", type=Path, metavar="LIBRARY")
    parser.add_argument("out", type=Path)
    parser.add_argument("--keep-arch", type=int, action="append", help="SM architecture to keep (90)")
    args = parser.parse_args()
    data = bytearray(args.shared_object.read_bytes())
    by_arch = zero_other_archs(data, set(args.keep_arch or [90]))
    args.out.write_bytes(data)
    print({f"sm_{arch}": size for arch, size in sorted(by_arch.items())})


if __name__ == "__main__":
    main()

"""Makes rasterizer input files on the fly: every format, and the broken and hostile kinds.

Nothing here is a stored sample; each helper writes a small file under the test's tmp_path so
that what a test feeds in is visible next to what it asserts.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
RED = (255, 0, 0)


def marked_page(
    size: tuple[int, int] = (120, 80), mark: str = "top-left", colour: tuple[int, ...] = RED
) -> Image.Image:
    """A white RGB page with a solid block in one corner, to see where that corner ends up."""
    width, height = size
    image = Image.new("RGB", size, WHITE)
    block_w, block_h = width // 4, height // 4
    x0 = 0 if "left" in mark else width - block_w
    y0 = 0 if "top" in mark else height - block_h
    ImageDraw.Draw(image).rectangle([x0, y0, x0 + block_w - 1, y0 + block_h - 1], fill=colour)
    return image


def numbered_page(number: int, size: tuple[int, int] = (90, 60)) -> Image.Image:
    """A white page with `number` black bars from the left, so pages can be told apart."""
    image = Image.new("RGB", size, WHITE)
    draw = ImageDraw.Draw(image)
    for bar in range(number):
        x = 5 + bar * 10
        draw.rectangle([x, 5, x + 4, size[1] - 6], fill=BLACK)
    return image


def count_bars(bgr_row: np.ndarray) -> int:
    """Number of dark runs along one row of a BGR page (the inverse of numbered_page)."""
    dark = bgr_row[:, 0] < 128
    return int(np.count_nonzero(dark[1:] & ~dark[:-1]) + int(dark[0]))


def save(image: Image.Image, path: Path, format: str, **params: object) -> Path:
    image.save(path, format=format, **params)
    return path


def jpeg_with_orientation(path: Path, orientation: int, size: tuple[int, int] = (120, 80)) -> Path:
    """A JPEG stored sideways-agnostic: pixels as captured, plus an EXIF orientation tag."""
    image = marked_page(size, "top-left")
    exif = Image.Exif()
    exif[0x0112] = orientation
    image.save(path, format="JPEG", quality=95, exif=exif)
    return path


def multipage_tiff(path: Path, pages: list[Image.Image], **params: object) -> Path:
    pages[0].save(path, format="TIFF", save_all=True, append_images=pages[1:], **params)
    return path


def tiff_bytes(page: Image.Image, **params: object) -> bytes:
    buffer = io.BytesIO()
    page.save(buffer, format="TIFF", **params)
    return buffer.getvalue()


def pdf_from_images(path: Path, pages: list[Image.Image], resolution: float = 72.0) -> Path:
    """An image-only PDF, one page per image; at 72 the page is as many points as pixels."""
    pages[0].save(path, format="PDF", save_all=True, append_images=pages[1:], resolution=resolution)
    return path


def handmade_pdf(objects: list[bytes]) -> bytes:
    """A PDF from numbered object bodies (object 1 is the catalog), with a correct xref table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def text_pdf(path: Path, text: str, size_pt: tuple[float, float] = (612, 792)) -> Path:
    """A one-page PDF whose only content is a Helvetica text object: a real text layer."""
    content = f"BT /F1 24 Tf 72 {size_pt[1] - 72:g} Td ({text}) Tj ET".encode()
    path.write_bytes(
        handmade_pdf(
            [
                b"<< /Type /Catalog /Pages 2 0 R >>",
                b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g]"
                b" /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>" % size_pt,
                b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
                b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
            ]
        )
    )
    return path


def blank_pdf(path: Path, pages: int, size_pt: tuple[float, float] = (612, 792)) -> Path:
    """A PDF of empty pages of any size (Pillow cannot make a 200-inch page cheaply)."""
    first_page = 3
    kids = b" ".join(b"%d 0 R" % (first_page + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
    ]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] >>" % size_pt] * pages
    path.write_bytes(handmade_pdf(objects))
    return path


def many_page_tiff(path: Path, pages: int) -> Path:
    """An uncompressed TIFF of `pages` 1x1 grey pages: thousands of pages in a few hundred KB."""
    tags = [(256, 1), (257, 1), (258, 8), (259, 1), (262, 1), (273, 8), (277, 1), (278, 1), (279, 1)]
    ifd_size = 2 + 12 * len(tags) + 4
    out = bytearray(b"II*\x00" + struct.pack("<I", 9) + b"\x80")  # header, then the one pixel at 8
    position = 9
    for index in range(pages):
        next_ifd = position + ifd_size if index < pages - 1 else 0
        out += struct.pack("<H", len(tags))
        for tag, value in tags:
            out += struct.pack("<HHII", tag, 4, 1, value)  # every tag as one LONG
        out += struct.pack("<I", next_ifd)
        position += ifd_size
    path.write_bytes(bytes(out))
    return path


def tiff_ifd_offsets(data: bytes) -> list[int]:
    """Where each page directory of a little-endian TIFF starts, following the chain."""
    assert data[:4] == b"II*\x00", "little-endian classic TIFF expected"
    offsets: list[int] = []
    offset = struct.unpack_from("<I", data, 4)[0]
    while offset:
        offsets.append(offset)
        entries = struct.unpack_from("<H", data, offset)[0]
        offset = struct.unpack_from("<I", data, offset + 2 + 12 * entries)[0]
    return offsets


def png_claiming_size(path: Path, width: int, height: int) -> Path:
    """A 1-bit PNG whose header claims width x height but holds almost no data: a bomb's header."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit greyscale
    rows = zlib.compress(b"\x00" * 4096)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )
    return path

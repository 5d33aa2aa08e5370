"""Format completeness check: whole files pass, files cut anywhere (or paused between pages) do not."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image

from appliance.errors import FailureReason
from appliance.intake.completeness import CompletenessResult, check_complete

CUT_FRACTIONS = (0.1, 0.5, 0.9)


def _page(mode: str = "L", size: tuple[int, int] = (120, 160), shade: int = 0) -> Image.Image:
    image = Image.new("L", size, 255)
    # Some content so compressed formats are not a handful of bytes.
    for y in range(0, size[1], 7):
        for x in range(size[0]):
            image.putpixel((x, y), (x * 3 + y + shade) % 256)
    return image.convert(mode)


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def _tiff(pages: int = 3, mode: str = "L", **options: object) -> bytes:
    images = [_page(mode, shade=index * 40) for index in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, "TIFF", save_all=True, append_images=images[1:], **options)
    return buffer.getvalue()


def _pdf(pages: int = 2) -> bytes:
    images = [_page("RGB", shade=index * 40) for index in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", save_all=True, append_images=images[1:], resolution=72)
    return buffer.getvalue()


def _check(tmp_path: Path, data: bytes, name: str = "scan.bin") -> CompletenessResult:
    path = tmp_path / name
    path.write_bytes(data)
    return check_complete(path)


def _cuts(data: bytes) -> list[int]:
    # "All but the last byte" means the last byte of content: writers may pad the end with NULs
    # that belong to nothing (Pillow's multi-page TIFF pads to 16 bytes), and dropping those is harmless.
    size = len(data)
    return sorted({int(size * fraction) for fraction in CUT_FRACTIONS} | {len(data.rstrip(b"\x00")) - 1})


def _assert_whole_and_cuts(tmp_path: Path, data: bytes, media_type: str) -> None:
    whole = _check(tmp_path, data)
    assert whole == CompletenessResult(True, media_type, None)
    for cut in _cuts(data):
        result = _check(tmp_path, data[:cut])
        assert not result.complete, f"cut at {cut} of {len(data)} passed"
        assert result.media_type == media_type
        assert result.reason


FORMATS = {
    "jpeg": (lambda: _encode(_page("RGB"), "JPEG", quality=90), "image/jpeg"),
    "png": (lambda: _encode(_page("RGB"), "PNG"), "image/png"),
    "bmp": (lambda: _encode(_page("RGB"), "BMP"), "image/bmp"),
    "webp": (lambda: _encode(_page("RGB"), "WEBP", quality=80), "image/webp"),
    "tiff": (_tiff, "image/tiff"),
    "tiff_big_endian": (lambda: _tiff(mode="I;16B"), "image/tiff"),
    "tiff_lzw": (lambda: _tiff(compression="tiff_lzw"), "image/tiff"),
    "tiff_group4": (lambda: _tiff(mode="1", compression="group4"), "image/tiff"),
    "bigtiff": (lambda: _tiff(big_tiff=True), "image/tiff"),
    "pdf": (_pdf, "application/pdf"),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_whole_file_passes_and_cut_file_fails(tmp_path: Path, fmt: str) -> None:
    make, media_type = FORMATS[fmt]
    _assert_whole_and_cuts(tmp_path, make(), media_type)


def test_empty_file_is_not_complete(tmp_path: Path) -> None:
    assert _check(tmp_path, b"") == CompletenessResult(False, None, "file is empty", FailureReason.EMPTY)


def test_unknown_bytes_are_complete_without_media_type(tmp_path: Path) -> None:
    assert _check(tmp_path, b"hello, this is not a scan\n" * 10) == CompletenessResult(True, None, None)


def test_magic_not_extension_decides(tmp_path: Path) -> None:
    data = _encode(_page("RGB"), "PNG")
    assert _check(tmp_path, data, "scan.pdf").media_type == "image/png"
    assert not _check(tmp_path, data[:-5], "scan.jpg").complete


@pytest.mark.parametrize("head", [b"\xff\xd8", b"%PD", b"II*", b"\x89PNG", b"B", b"RIFF\x10\x00"])
def test_file_cut_inside_its_signature_is_not_complete(tmp_path: Path, head: bytes) -> None:
    result = _check(tmp_path, head)
    assert not result.complete
    assert result.media_type is not None
    assert result.reason


def test_jpeg_reason_names_the_marker(tmp_path: Path) -> None:
    data = _encode(_page("RGB"), "JPEG")
    assert _check(tmp_path, data[:-2]).reason == "JPEG has no end-of-image marker (FF D9)"


def test_jpeg_with_trailing_padding_passes(tmp_path: Path) -> None:
    data = _encode(_page("RGB"), "JPEG")
    assert _check(tmp_path, data + b"\x00" * 300).complete
    assert _check(tmp_path, data + b"\r\n").complete


def test_preallocated_jpeg_full_of_zeros_fails(tmp_path: Path) -> None:
    # An SMB client may set the final size first and fill it in later.
    data = _encode(_page("RGB"), "JPEG")
    partial = data[: len(data) // 2] + b"\x00" * (len(data) - len(data) // 2)
    assert not _check(tmp_path, partial).complete


def test_three_page_tiff_cut_inside_page_three_fails(tmp_path: Path) -> None:
    for data in (_tiff(), _tiff(mode="I;16B")):
        assert _check(tmp_path, data).complete
        last_offset, last_length = _strip_of_last_page(data)
        # Pillow's own writer puts each IFD first, then its strip, then up to 15 NULs of padding.
        assert 0 <= len(data) - (last_offset + last_length) < 16
        result = _check(tmp_path, data[: last_offset + last_length // 2])
        assert not result.complete
        assert result.reason is not None
        assert "past the end of the file" in result.reason


def test_tiff_paused_between_pages_fails(tmp_path: Path) -> None:
    # libtiff writes a page's strips before its IFD and links the IFD in last, so a file paused
    # while page 3 is encoded is a valid 2-page TIFF followed by page 3's strip data.
    data = _tiff(mode="1", compression="group4")
    ifds = _ifd_chain(data)
    assert len(ifds) == 3
    third_strip_offset, _ = _strip_of_last_page(data)
    assert third_strip_offset < ifds[2]  # libtiff layout: data, then the IFD
    partial = bytearray(data[: ifds[2] - 1])
    second_count = struct.unpack_from("<H", partial, ifds[1])[0]
    struct.pack_into("<I", partial, ifds[1] + 2 + 12 * second_count, 0)  # page 2 is the last one so far
    result = _check(tmp_path, bytes(partial))
    assert not result.complete
    assert result.reason is not None
    assert "still being written" in result.reason


def test_tiff_header_without_ifd_yet_fails(tmp_path: Path) -> None:
    result = _check(tmp_path, b"II*\x00\x00\x00\x00\x00" + b"\x12" * 500)
    assert not result.complete
    assert result.reason == "TIFF header does not point to an IFD yet"


def test_group4_tiff_passes(tmp_path: Path) -> None:
    data = _encode(_page("1"), "TIFF", compression="group4")
    assert _check(tmp_path, data) == CompletenessResult(True, "image/tiff", None)


def test_tiled_tiff_with_strip_arrays_at_offsets(tmp_path: Path) -> None:
    # Many strips: StripOffsets/StripByteCounts are stored out of line rather than in the entry.
    image = _page("L", size=(300, 400))
    data = _encode(image, "TIFF", tiffinfo={278: 8})
    assert _check(tmp_path, data).complete
    assert not _check(tmp_path, data[:-10]).complete


def _tiff_with_exif_at_end(order: str) -> bytes:
    """A 4x2 grey TIFF by hand: SHORT strip offset and count stored inline, then the strip, then an
    Exif IFD whose value is the last thing in the file (so only following the pointer explains it)."""
    short, long_, ascii_ = 3, 4, 2

    def entry(tag: int, field_type: int, count: int, value: int) -> bytes:
        if field_type == short and count == 1:
            return struct.pack(order + "HHIH2x", tag, field_type, count, value)
        return struct.pack(order + "HHII", tag, field_type, count, value)

    strip_at, exif_at = 8 + 2 + 10 * 12 + 4, 8 + 2 + 10 * 12 + 4 + 8
    date_at = exif_at + 2 + 12 + 4
    entries = [
        entry(256, short, 1, 4),
        entry(257, short, 1, 2),
        entry(258, short, 1, 8),
        entry(259, short, 1, 1),
        entry(262, short, 1, 1),
        entry(273, short, 1, strip_at),
        entry(277, short, 1, 1),
        entry(278, short, 1, 2),
        entry(279, short, 1, 8),
        entry(34665, long_, 1, exif_at),
    ]
    magic = b"II*\x00" if order == "<" else b"MM\x00*"
    ifd0 = struct.pack(order + "H", len(entries)) + b"".join(entries) + struct.pack(order + "I", 0)
    exif = struct.pack(order + "H", 1) + entry(36867, ascii_, 20, date_at) + struct.pack(order + "I", 0)
    data = (
        magic
        + struct.pack(order + "I", 8)
        + ifd0
        + bytes(range(10, 90, 10))
        + exif
        + b"2024:01:02 03:04:05\x00"
    )
    assert len(data) == date_at + 20
    return data


@pytest.mark.parametrize("order", ["<", ">"])
def test_tiff_exif_ifd_and_inline_short_strips(tmp_path: Path, order: str) -> None:
    data = _tiff_with_exif_at_end(order)
    assert _check(tmp_path, data) == CompletenessResult(True, "image/tiff", None)
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (4, 2)
        assert image.getpixel((0, 0)) == 10
    for cut in (*_cuts(data), len(data) - 10):
        assert not _check(tmp_path, data[:cut]).complete, cut


def test_tiff_ifd_loop_fails_without_hanging(tmp_path: Path) -> None:
    header = b"II*\x00" + struct.pack("<I", 8)
    entry = struct.pack("<HHII", 256, 4, 1, 1)  # ImageWidth = 1
    ifd = struct.pack("<H", 1) + entry + struct.pack("<I", 8)  # next IFD: itself
    result = _check(tmp_path, header + ifd)
    assert not result.complete
    assert result.reason is not None
    assert "loop" in result.reason


def test_tiff_two_ifd_cycle_fails(tmp_path: Path) -> None:
    entry = struct.pack(">HHII", 256, 4, 1, 1)
    first = struct.pack(">H", 1) + entry + struct.pack(">I", 26)
    second = struct.pack(">H", 1) + entry + struct.pack(">I", 8)
    result = _check(tmp_path, b"MM\x00*" + struct.pack(">I", 8) + first + second)
    assert not result.complete
    assert result.reason is not None
    assert "loop" in result.reason


def test_tiff_absurd_entry_count_fails(tmp_path: Path) -> None:
    data = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 60000) + b"\x00" * 100
    result = _check(tmp_path, data)
    assert not result.complete
    assert result.reason is not None
    assert "60000" in result.reason


def test_pdf_with_incremental_update_passes(tmp_path: Path) -> None:
    original = _pdf(1)
    buffer = io.BytesIO(original)
    buffer.seek(0, io.SEEK_END)
    _page("RGB", shade=99).save(buffer, "PDF", append=True, resolution=72)
    data = buffer.getvalue()
    assert data.count(b"%%EOF") == 2
    path = tmp_path / "updated.pdf"
    path.write_bytes(data)
    document = pdfium.PdfDocument(str(path))
    assert len(document) == 2
    document.close()
    assert check_complete(path) == CompletenessResult(True, "application/pdf", None)
    # Cut inside the update: an earlier %%EOF lies in the file, but not at its end.
    cut = _check(tmp_path, data[: (len(original) + len(data)) // 2])
    assert not cut.complete
    assert cut.reason is not None
    assert "%%EOF" in cut.reason


def test_pdf_with_trailing_whitespace_and_nuls_passes(tmp_path: Path) -> None:
    assert _check(tmp_path, _pdf(1) + b"\r\n\x00\x00\x00 \n").complete


def test_pdf_cut_just_before_final_eof_fails(tmp_path: Path) -> None:
    data = _pdf(1)
    end = data.rindex(b"%%EOF")
    assert not _check(tmp_path, data[: end + 3]).complete


def test_pdf_with_eof_that_pdfium_cannot_open_fails_with_pdfium_reason(tmp_path: Path) -> None:
    result = _check(tmp_path, b"%PDF-1.7\n" + b"garbage " * 50 + b"\n%%EOF\n")
    assert not result.complete
    assert result.media_type == "application/pdf"
    assert result.reason is not None
    assert "PDFium" in result.reason


def test_encrypted_pdf_counts_as_complete(tmp_path: Path) -> None:
    pikepdf = pytest.importorskip("pikepdf")
    source = tmp_path / "plain.pdf"
    source.write_bytes(_pdf(1))
    target = tmp_path / "locked.pdf"
    with pikepdf.open(source) as pdf:
        pdf.save(target, encryption=pikepdf.Encryption(owner="owner-secret", user="user-secret"))
    with pytest.raises(pdfium.PdfiumError):
        pdfium.PdfDocument(str(target))
    assert check_complete(target) == CompletenessResult(True, "application/pdf", None)


def test_bmp_reason_gives_sizes(tmp_path: Path) -> None:
    data = _encode(_page("RGB"), "BMP")
    result = _check(tmp_path, data[:100])
    assert result.reason == f"BMP header declares {len(data)} bytes but the file has 100"


def test_vanished_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        check_complete(tmp_path / "gone.tif")


def _ifd_chain(data: bytes) -> list[int]:
    order = "<" if data[:2] == b"II" else ">"
    offsets = []
    offset = struct.unpack_from(order + "I", data, 4)[0]
    while offset:
        offsets.append(offset)
        count = struct.unpack_from(order + "H", data, offset)[0]
        offset = struct.unpack_from(order + "I", data, offset + 2 + 12 * count)[0]
    return offsets


def _strip_of_last_page(data: bytes) -> tuple[int, int]:
    """(offset, byte count) of the single strip of the last page of a classic TIFF from Pillow."""
    order = "<" if data[:2] == b"II" else ">"
    last = _ifd_chain(data)[-1]
    count = struct.unpack_from(order + "H", data, last)[0]
    values: dict[int, int] = {}
    for index in range(count):
        tag, field_type, _, _ = struct.unpack_from(order + "HHI4s", data, last + 2 + 12 * index)
        code = "H" if field_type == 3 else "I"
        values[tag] = struct.unpack_from(order + code, data, last + 2 + 12 * index + 8)[0]
    return values[273], values[279]

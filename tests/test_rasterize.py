"""Behaviour of the Rasterizer: every input format, the limits, broken files, and laziness."""

from __future__ import annotations

import io
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pikepdf
import pytest
from PIL import Image, TiffImagePlugin

from appliance.config import RasterizeConfig
from appliance.errors import DocumentError, FailureReason
from appliance.pipeline.rasterize import Rasterizer, RasterPage, _to_bgr, sniff_media_type
from tests.fixtures_files import (
    blank_pdf,
    count_bars,
    handmade_pdf,
    jpeg_with_orientation,
    many_page_tiff,
    marked_page,
    multipage_tiff,
    numbered_page,
    pdf_from_images,
    png_claiming_size,
    save,
    text_pdf,
    tiff_ifd_offsets,
)

RED_BGR = (0, 0, 255)


def rasterize(path: Path, **limits: object) -> list[RasterPage]:
    return list(Rasterizer(RasterizeConfig(**limits)).pages(path))  # type: ignore[arg-type]


def failure(path: Path, **limits: object) -> DocumentError:
    """The DocumentError that reading every page of `path` raises (any other exception fails)."""
    with pytest.raises(DocumentError) as caught:
        rasterize(path, **limits)
    assert path.name in caught.value.message, "the message must name the file"
    return caught.value


def assert_bgr_page(page: RasterPage, height: int, width: int) -> None:
    assert page.image.dtype == np.uint8
    assert page.image.shape == (height, width, 3)
    assert page.image.flags["C_CONTIGUOUS"]


def assert_colour(pixel: np.ndarray, expected: tuple[int, int, int], tolerance: int = 0) -> None:
    assert np.abs(pixel.astype(int) - np.array(expected)).max() <= tolerance, (pixel, expected)


# --- formats -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("format", "suffix", "params", "tolerance"),
    [
        ("PNG", "png", {}, 0),
        ("BMP", "bmp", {}, 0),
        ("WEBP", "webp", {"lossless": True}, 0),
        ("TIFF", "tif", {}, 0),
        ("JPEG", "jpg", {"quality": 95}, 40),
    ],
)
def test_single_page_formats_come_out_as_bgr_with_the_mark_in_place(
    tmp_path: Path, format: str, suffix: str, params: dict[str, object], tolerance: int
) -> None:
    path = save(marked_page((120, 80), "top-left"), tmp_path / f"page.{suffix}", format, **params)

    (page,) = rasterize(path)

    assert page.index == 0
    assert_bgr_page(page, 80, 120)
    # Red in RGB is (0, 0, 255) in BGR: a swapped channel order would show blue here.
    assert_colour(page.image[5, 5], RED_BGR, tolerance)
    assert_colour(page.image[75, 115], (255, 255, 255), tolerance)


def test_png_transparency_is_composited_on_white_paper(tmp_path: Path) -> None:
    image = Image.new("RGBA", (40, 30), (0, 0, 0, 0))  # fully transparent black
    image.paste((0, 0, 0, 255), (0, 0, 10, 10))  # one opaque black square
    image.paste((255, 0, 0, 128), (20, 0, 30, 10))  # half-transparent red
    (page,) = rasterize(save(image, tmp_path / "alpha.png", "PNG"))

    assert_bgr_page(page, 30, 40)
    assert_colour(page.image[20, 20], (255, 255, 255))  # transparent: paper, not black
    assert_colour(page.image[5, 5], (0, 0, 0))
    assert_colour(page.image[5, 25], (127, 127, 255), tolerance=2)  # red at half strength on white


def test_palette_png_keeps_its_colours_and_palette_transparency_is_white(tmp_path: Path) -> None:
    image = marked_page((60, 40), "bottom-right").convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
    (page,) = rasterize(save(image, tmp_path / "palette.png", "PNG"))
    assert_colour(page.image[38, 58], RED_BGR)
    assert_colour(page.image[2, 2], (255, 255, 255))

    transparent = Image.new("P", (20, 10), 1)
    transparent.putpalette([0, 0, 0, 0, 0, 0])  # both entries black...
    transparent.paste(0, (0, 0, 10, 10))
    (page,) = rasterize(save(transparent, tmp_path / "ptrans.png", "PNG", transparency=1))
    assert_colour(page.image[5, 2], (0, 0, 0))
    assert_colour(page.image[5, 15], (255, 255, 255))  # ...but index 1 is transparent


@pytest.mark.parametrize("mode", ["1", "L", "P", "RGB", "CMYK", "YCbCr"])
def test_every_opaque_mode_becomes_its_rgb_conversion_in_bgr_order(mode: str) -> None:
    pixels = np.random.default_rng(3).integers(0, 256, (23, 37, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    bgr = _to_bgr(image)
    assert bgr.dtype == np.uint8 and bgr.shape == (23, 37, 3) and bgr.flags.c_contiguous
    assert np.array_equal(bgr, np.asarray(image.convert("RGB"))[:, :, ::-1])


def test_16_bit_grey_png_is_scaled_to_8_bits(tmp_path: Path) -> None:
    values = np.zeros((10, 30), dtype=np.uint16)
    values[:, 10:20] = 32768
    values[:, 20:] = 65535
    image = Image.fromarray(values)  # uint16: mode "I;16"
    path = save(image, tmp_path / "grey16.png", "PNG")
    with Image.open(path) as reopened:
        assert reopened.mode.startswith("I"), "the fixture must really be a 16-bit file"

    (page,) = rasterize(path)

    assert_bgr_page(page, 10, 30)
    assert_colour(page.image[5, 5], (0, 0, 0))
    assert_colour(page.image[5, 15], (128, 128, 128), tolerance=1)
    assert_colour(page.image[5, 25], (255, 255, 255))


@pytest.mark.parametrize(
    ("orientation", "mark_at"),
    [
        # 6: the camera was turned clockwise; upright, the stored top-left corner is top-right.
        (6, "top-right"),
        # 8: turned counter-clockwise; the stored top-left corner ends up bottom-left.
        (8, "bottom-left"),
    ],
)
def test_jpeg_exif_orientation_is_turned_upright(tmp_path: Path, orientation: int, mark_at: str) -> None:
    path = jpeg_with_orientation(tmp_path / f"photo{orientation}.jpg", orientation, size=(120, 80))

    (page,) = rasterize(path)

    assert_bgr_page(page, 120, 80)  # stored 120 wide x 80 high, upright 80 wide x 120 high
    corners = {
        "top-left": page.image[5, 5],
        "top-right": page.image[5, 74],
        "bottom-left": page.image[114, 5],
        "bottom-right": page.image[114, 74],
    }
    for corner, pixel in corners.items():
        assert_colour(pixel, RED_BGR if corner == mark_at else (255, 255, 255), tolerance=40)


@pytest.mark.parametrize(
    ("floor_mpx", "declared_dpi", "reduction", "dpi"),
    [
        (1.0, (600, 600), 2, 300.0),  # 1200x900 keeps 1 Mpx, 600x450 would not
        (0.25, (600, 600), 4, 150.0),
        (0.01, None, 8, 37.5),  # the undeclared 300 dpi, an eighth of it
        (5.0, (600, 600), 1, 600.0),  # already under twice the floor: read whole
        (0.0, (600, 600), 1, 600.0),  # 0 turns the scale-down off
    ],
)
def test_large_jpeg_is_decoded_at_the_dct_scale_that_keeps_the_floor(
    tmp_path: Path, floor_mpx: float, declared_dpi: tuple[int, int] | None, reduction: int, dpi: float
) -> None:
    extra = {"dpi": declared_dpi} if declared_dpi else {}
    path = save(marked_page((2400, 1800), "bottom-right"), tmp_path / "scan.jpg", "JPEG", quality=90, **extra)

    (page,) = rasterize(path, jpeg_draft_megapixels=floor_mpx)

    height, width = 1800 // reduction, 2400 // reduction
    assert_bgr_page(page, height, width)
    assert page.dpi == pytest.approx(dpi)
    # The mark (the bottom-right quarter-size block) is where the whole page has it, scaled.
    assert_colour(page.image[height - height // 8, width - width // 8], RED_BGR, tolerance=40)
    assert_colour(page.image[height - height // 8, width // 8], (255, 255, 255), tolerance=40)
    assert_colour(page.image[height // 8, width - width // 8], (255, 255, 255), tolerance=40)


def test_only_jpeg_is_scaled_down(tmp_path: Path) -> None:
    path = save(marked_page((2400, 1800), "top-left"), tmp_path / "scan.png", "PNG")

    (page,) = rasterize(path, jpeg_draft_megapixels=0.01)

    assert_bgr_page(page, 1800, 2400)
    assert page.dpi is None


def test_multipage_tiff_yields_every_page_in_order(tmp_path: Path) -> None:
    path = multipage_tiff(
        tmp_path / "three.tif", [numbered_page(n) for n in (1, 2, 3)], compression="tiff_lzw"
    )

    pages = rasterize(path)

    assert [page.index for page in pages] == [0, 1, 2]
    assert [count_bars(page.image[30]) for page in pages] == [1, 2, 3]
    for page in pages:
        assert_bgr_page(page, 60, 90)


def test_ccitt_group4_tiff_from_a_scanner_is_read(tmp_path: Path) -> None:
    pages = [numbered_page(n, size=(200, 100)).convert("1") for n in (2, 3)]
    path = multipage_tiff(tmp_path / "scan.tif", pages, compression="group4", dpi=(300, 300))
    with Image.open(path) as written:
        assert written.mode == "1"
        assert written.info["compression"] == "group4"

    result = rasterize(path)

    assert [count_bars(page.image[50]) for page in result] == [2, 3]
    for page in result:
        assert_bgr_page(page, 100, 200)
        assert set(np.unique(page.image)) == {0, 255}
        assert page.dpi == pytest.approx(300)


def test_pdf_pages_come_out_in_order_as_bgr_scaled_by_pdf_dpi(tmp_path: Path) -> None:
    images = [numbered_page(n, size=(90, 60)) for n in (1, 2, 3)]
    images[0] = marked_page((90, 60), "top-right")
    path = pdf_from_images(tmp_path / "doc.pdf", images, resolution=72)  # 90x60 pt pages

    at_72 = rasterize(path, pdf_dpi=72)
    at_144 = rasterize(path, pdf_dpi=144)

    assert [page.index for page in at_72] == [0, 1, 2]
    for page in at_72:
        assert_bgr_page(page, 60, 90)
        assert page.dpi == 72
    for page in at_144:
        assert_bgr_page(page, 120, 180)
    assert_colour(at_144[0].image[5, 175], RED_BGR, tolerance=30)
    assert_colour(at_144[0].image[5, 5], (255, 255, 255), tolerance=30)
    assert [count_bars(page.image[60]) for page in at_144[1:]] == [2, 3]


def test_pdf_text_layer_is_counted_and_image_only_pdf_has_none(tmp_path: Path) -> None:
    (with_text,) = rasterize(text_pdf(tmp_path / "text.pdf", "Hello World"), pdf_dpi=72)
    (image_only,) = rasterize(pdf_from_images(tmp_path / "scan.pdf", [marked_page()]), pdf_dpi=72)

    assert with_text.text_layer_chars == len("Hello World")
    assert with_text.image.min() < 128, "the text is rendered too"
    assert image_only.text_layer_chars == 0


# --- sniffing ----------------------------------------------------------------------------------


def test_format_is_sniffed_from_the_bytes_not_the_extension(tmp_path: Path) -> None:
    disguised = save(marked_page((40, 20)), tmp_path / "actually_a_png.pdf", "PNG")
    assert sniff_media_type(disguised) == "image/png"
    (page,) = rasterize(disguised)
    assert_bgr_page(page, 20, 40)
    assert page.text_layer_chars is None  # read as an image, not as a PDF

    notes = tmp_path / "notes.jpg"
    notes.write_text("this is a text file, whatever its name says\n")
    assert failure(notes).reason is FailureReason.UNSUPPORTED_FORMAT


def test_empty_file_is_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.tif"
    empty.write_bytes(b"")
    assert failure(empty).reason is FailureReason.EMPTY


# --- broken files ------------------------------------------------------------------------------


def _encoded(image: Image.Image, format: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format)
    return buffer.getvalue()


@pytest.mark.parametrize(("format", "suffix"), [("JPEG", "jpg"), ("PNG", "png")])
@pytest.mark.parametrize("where", ["in the pixels", "in the header"])
def test_a_file_cut_short_is_truncated_wherever_it_is_cut(
    tmp_path: Path, format: str, suffix: str, where: str
) -> None:
    # One cut-short file gets one reason: Pillow words the failure differently in the header
    # ("Truncated File Read") and in the pixel data ("image file is truncated").
    data = _encoded(numbered_page(3, size=(300, 200)), format)
    cut = len(data) // 2 if where == "in the pixels" else {"JPEG": 6, "PNG": 16}[format]
    path = tmp_path / f"cut.{suffix}"
    path.write_bytes(data[:cut])

    assert failure(path).reason is FailureReason.TRUNCATED


def test_a_jpeg_cut_short_is_truncated_when_read_at_a_reduced_scale_too(tmp_path: Path) -> None:
    data = _encoded(numbered_page(3, size=(1200, 900)), "JPEG")
    path = tmp_path / "cut.jpg"
    path.write_bytes(data[: len(data) // 2])

    assert failure(path, jpeg_draft_megapixels=0.1).reason is FailureReason.TRUNCATED


def test_a_pdf_with_garbage_after_its_header_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pdf"
    path.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 8)
    assert failure(path).reason is FailureReason.CORRUPT


def test_a_pdf_page_tree_promising_a_missing_page_is_corrupt_after_the_good_page(tmp_path: Path) -> None:
    path = tmp_path / "short.pdf"
    path.write_bytes(
        handmade_pdf(
            [
                b"<< /Type /Catalog /Pages 2 0 R >>",
                b"<< /Type /Pages /Kids [3 0 R] /Count 2 >>",
                b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 72 72] >>",
            ]
        )
    )
    pages = Rasterizer(RasterizeConfig(pdf_dpi=72)).pages(path)
    assert_bgr_page(next(pages), 72, 72)
    with pytest.raises(DocumentError) as caught:
        next(pages)
    assert caught.value.reason is FailureReason.CORRUPT
    assert "page 2" in caught.value.message


def test_a_password_protected_pdf_is_encrypted(tmp_path: Path) -> None:
    plain = pdf_from_images(tmp_path / "plain.pdf", [marked_page()])
    locked, permissions_only = tmp_path / "locked.pdf", tmp_path / "permissions.pdf"
    with pikepdf.open(plain) as pdf:
        pdf.save(locked, encryption=pikepdf.Encryption(owner="owner", user="secret", R=6))
        pdf.save(permissions_only, encryption=pikepdf.Encryption(owner="owner", user="", R=6))

    assert failure(locked).reason is FailureReason.ENCRYPTED
    # Encrypted with an empty open password (only editing restricted): readable, so it is read.
    assert len(rasterize(permissions_only)) == 1


def test_a_file_over_max_file_mb_is_too_large_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.bmp"
    path.write_bytes(b"BM" + b"\x00" * 20_000)  # not even a valid BMP: the size check comes first
    error = failure(path, max_file_mb=0.01)
    assert error.reason is FailureReason.TOO_LARGE


@pytest.mark.parametrize("kind", ["tiff", "pdf"])
def test_more_pages_than_max_pages_is_refused_before_any_page(tmp_path: Path, kind: str) -> None:
    pages = [numbered_page(n) for n in (1, 2, 3)]
    if kind == "tiff":
        path = multipage_tiff(tmp_path / "three.tif", pages)
    else:
        path = pdf_from_images(tmp_path / "three.pdf", pages)

    generator = Rasterizer(RasterizeConfig(max_pages=2)).pages(path)
    with pytest.raises(DocumentError) as caught:
        next(generator)  # refused up front, not after decoding two pages
    assert caught.value.reason is FailureReason.TOO_MANY_PAGES
    assert len(rasterize(path, max_pages=3)) == 3


def test_a_tiff_with_a_huge_number_of_pages_is_refused_quickly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pillow's n_frames walks every page header, quadratically: 20 000 one-pixel pages (2 MB)
    # took seconds. The limit must be applied without walking past it: counted in page
    # directories read, which a loaded machine cannot blur as it can a time limit.
    path = many_page_tiff(tmp_path / "pages.tif", 20_000)
    directories_read = 0
    load = TiffImagePlugin.ImageFileDirectory_v2.load

    def counted_load(directory: TiffImagePlugin.ImageFileDirectory_v2, fp: Any) -> None:
        nonlocal directories_read
        directories_read += 1
        load(directory, fp)

    monkeypatch.setattr(TiffImagePlugin.ImageFileDirectory_v2, "load", counted_load)
    error = failure(path)
    assert error.reason is FailureReason.TOO_MANY_PAGES
    limit = RasterizeConfig().max_pages
    assert 0 < directories_read <= 3 * (limit + 1), directories_read
    assert len(rasterize(many_page_tiff(tmp_path / "few.tif", 3))) == 3, "the fixture must be a valid TIFF"


def test_a_decompression_bomb_is_refused_from_its_header(tmp_path: Path) -> None:
    path = png_claiming_size(tmp_path / "bomb.png", 30_000, 30_000)  # 900 MP, a few hundred bytes
    assert path.stat().st_size < 1000

    tracemalloc.start()  # memory, not time, shows that no pixel was decoded
    try:
        error = failure(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert error.reason is FailureReason.PAGE_TOO_LARGE
    assert peak < 5_000_000, f"decoding started: {peak} bytes allocated"


@pytest.mark.parametrize("times_the_limit", [1.5, 3, 5])
def test_a_page_over_the_pixel_limit_is_page_too_large_however_far_over(
    tmp_path: Path, times_the_limit: float
) -> None:
    # Pillow's own guard (warning at twice our limit, error at four times) must not turn these
    # into CORRUPT: all three are the same refusal.
    limit_mp = 0.01  # 10 000 pixels
    path = png_claiming_size(tmp_path / "wide.png", int(10_000 * times_the_limit / 100), 100)
    assert failure(path, max_page_megapixels=limit_mp).reason is FailureReason.PAGE_TOO_LARGE


def test_a_small_page_limit_does_not_leak_into_other_pillow_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pillow's guard is process-wide: a rasterizer with a tiny limit must not make every later
    # Pillow read of the process (review PNGs, another rasterizer) refuse ordinary images.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)
    tiny = 0.01  # 10 000 pixels
    too_wide = png_claiming_size(tmp_path / "wide.png", 500, 100)
    assert failure(too_wide, max_page_megapixels=tiny).reason is FailureReason.PAGE_TOO_LARGE
    ordinary = tmp_path / "ordinary.png"
    Image.new("RGB", (600, 550), "white").save(ordinary)

    with Image.open(ordinary) as image:
        image.load()
        assert image.size == (600, 550)
    (page,) = rasterize(ordinary)
    assert page.image.shape == (550, 600, 3)


def test_a_poster_sized_pdf_page_is_rendered_smaller_with_a_warning(tmp_path: Path) -> None:
    path = blank_pdf(tmp_path / "poster.pdf", 1, size_pt=(14_400, 14_400))  # 200 x 200 inches
    config = RasterizeConfig()

    (page,) = rasterize(path)

    height, width, _ = page.image.shape
    assert height * width <= config.max_page_megapixels * 1_000_000
    assert height * width > 0.95 * config.max_page_megapixels * 1_000_000, "no smaller than needed"
    assert page.dpi is not None
    assert page.dpi < config.pdf_dpi
    assert width == pytest.approx(200 * page.dpi, abs=1)
    assert len(page.warnings) == 1
    assert "dpi" in page.warnings[0]


def test_a_pdf_page_too_big_to_render_legibly_is_refused(tmp_path: Path) -> None:
    path = blank_pdf(tmp_path / "billboard.pdf", 1, size_pt=(14_400, 14_400))
    assert failure(path, max_page_megapixels=1.0).reason is FailureReason.PAGE_TOO_LARGE


# --- laziness ----------------------------------------------------------------------------------


def test_pages_are_decoded_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = multipage_tiff(tmp_path / "three.tif", [numbered_page(n) for n in (1, 2, 3)])
    decoded: list[int] = []
    original_load = TiffImagePlugin.TiffImageFile.load

    def counting_load(self: TiffImagePlugin.TiffImageFile) -> object:
        decoded.append(self.tell())
        return original_load(self)

    monkeypatch.setattr(TiffImagePlugin.TiffImageFile, "load", counting_load)
    pages = Rasterizer(RasterizeConfig()).pages(path)
    assert decoded == [], "nothing is read before the first page is asked for"

    first = next(pages)

    assert count_bars(first.image[30]) == 1
    assert set(decoded) == {0}
    assert [count_bars(page.image[30]) for page in pages] == [2, 3]
    assert set(decoded) == {0, 1, 2}


def test_a_tiff_cut_after_page_one_yields_page_one_then_fails_truncated(tmp_path: Path) -> None:
    data = multipage_tiff(tmp_path / "full.tif", [numbered_page(n) for n in (1, 2, 3)]).read_bytes()
    second_directory = tiff_ifd_offsets(data)[1]
    path = tmp_path / "cut.tif"
    path.write_bytes(data[: second_directory + 2])  # page 2's directory is cut off

    pages = Rasterizer(RasterizeConfig()).pages(path)
    first = next(pages)
    assert count_bars(first.image[30]) == 1
    with pytest.raises(DocumentError) as caught:
        next(pages)
    assert caught.value.reason is FailureReason.TRUNCATED
    assert "page 2" in caught.value.message


def test_a_tiff_cut_inside_page_ones_directory_is_not_passed_off_as_one_page(tmp_path: Path) -> None:
    # Pillow treats an unreadable "next page" pointer as the end of the file: without a check the
    # cut-off pages would vanish silently and a three-page scan would pass as one page.
    data = multipage_tiff(tmp_path / "full.tif", [numbered_page(n) for n in (1, 2, 3)]).read_bytes()
    first_directory = tiff_ifd_offsets(data)[0]
    entries = int.from_bytes(data[first_directory : first_directory + 2], "little")
    next_pointer = first_directory + 2 + 12 * entries
    path = tmp_path / "cut.tif"
    path.write_bytes(data[: next_pointer + 2])

    assert failure(path).reason is FailureReason.TRUNCATED


def test_pages_made_on_several_threads_at_once_are_those_made_one_at_a_time(tmp_path: Path) -> None:
    # A worker reading several jobs at once rasterizes from several threads: PDFium must never
    # run on two at once, and one thread must never take another's short-read warning (a
    # cut-short TIFF is told by warnings alone) and call a healthy file truncated, or miss its own.
    pdf = pdf_from_images(tmp_path / "doc.pdf", [numbered_page(n) for n in (1, 2, 3)], resolution=72)
    tiff = multipage_tiff(tmp_path / "doc.tif", [numbered_page(n) for n in (1, 2, 3)])
    data = tiff.read_bytes()
    first_directory = tiff_ifd_offsets(data)[0]
    entries = int.from_bytes(data[first_directory : first_directory + 2], "little")
    cut = tmp_path / "cut.tif"
    cut.write_bytes(data[: first_directory + 2 + 12 * entries + 2])
    files = [pdf, tiff, cut] * 8

    def read(path: Path) -> list[int] | FailureReason:
        try:
            return [
                count_bars(page.image[30]) for page in Rasterizer(RasterizeConfig(pdf_dpi=72)).pages(path)
            ]
        except DocumentError as error:
            return error.reason

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(read, files))

    assert results == [read(path) for path in files]
    assert results[:3] == [[1, 2, 3], [1, 2, 3], FailureReason.TRUNCATED]

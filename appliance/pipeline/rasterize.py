"""Turns an input file into page images one page at a time, under limits that stop hostile files.

PDF pages are rendered with pypdfium2; TIFF (multi-page, CCITT G4 included), JPEG (EXIF
orientation honoured; large pages decoded at a reduced DCT scale, see RasterizeConfig), PNG, BMP
and WebP are decoded with Pillow. Pages are yielded one by one so
a 500-page PDF never sits in memory whole.

Text layers: a PDF page that already carries text is still OCRed from its rendered image, and
the number of text-layer characters is recorded on the page. Scanners embed their own OCR of
unknown quality, and one engine with per-character confidences for every page is what routing
and review need; trusting an embedded layer is a per-profile option for later, not a default.
"""

from __future__ import annotations

import itertools
import logging
import math
import struct
import threading
import warnings
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pypdfium2 as pdfium
from PIL import ExifTags, Image, ImageOps

from appliance.config import RasterizeConfig
from appliance.document import DEFAULT_DPI
from appliance.errors import DocumentError, FailureReason
from appliance.media_types import HEAD_SIZE, sniff
from appliance.pipeline.pdf_tree import page_tree_loop

log = logging.getLogger(__name__)

_PIL_FORMATS = {
    "image/tiff": "TIFF",
    "image/jpeg": "JPEG",
    "image/png": "PNG",
    "image/bmp": "BMP",
    "image/webp": "WEBP",
}
SUPPORTED_MEDIA_TYPES = ("application/pdf", *_PIL_FORMATS)


@dataclass
class RasterPage:
    """One page as an HxWx3 uint8 BGR array, with where it came from."""

    index: int
    image: np.ndarray
    dpi: float | None
    text_layer_chars: int | None = None
    warnings: tuple[str, ...] = ()


def sniff_media_type(path: Path) -> str:
    """Media type from the file's first bytes; raise DocumentError for anything we do not read."""
    with path.open("rb") as handle:
        head = handle.read(HEAD_SIZE)
    if not head:
        raise DocumentError(FailureReason.EMPTY, f"{path.name} is empty (0 bytes)")
    media_type, partial = sniff(head)
    if media_type is not None and not partial:
        return media_type
    raise DocumentError(
        FailureReason.UNSUPPORTED_FORMAT,
        f"{path.name} is not a PDF, TIFF, JPEG, PNG, BMP or WebP file (first bytes {head[:8].hex()})",
    )


def _to_bgr(image: Image.Image) -> np.ndarray:
    """Any Pillow mode (1-bit fax, 16-bit grey, palette, CMYK, alpha) to 8-bit BGR."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        array = np.asarray(image, dtype=np.float64)
        peak = array.max() or 1.0
        image = Image.fromarray((array * (255.0 / peak)).astype(np.uint8), mode="L")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        # Transparent scans are composited onto white paper, not onto black.
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba)
    # One OpenCV pass from the decoded pixels, off the GIL: a converted copy and numpy's reversed
    # channels took 5-17 ms a receipt and 45-64 ms a grey A4 page at 200 dpi (1-3 and 15-19 this way).
    if image.mode == "L":
        return cv2.cvtColor(np.asarray(image), cv2.COLOR_GRAY2BGR)
    rgb = np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)


def _let_pillow_open(pixels: int) -> None:
    """Raise Pillow's process-wide bomb guard to at least `pixels`; never lower it.

    Pillow warns at MAX_IMAGE_PIXELS and raises at twice that, from the header alone. Our own
    limit is checked from the same header before any pixel is decoded (`_decode_frame`), so
    Pillow's guard only has to stay out of its way when a site allows larger pages than Pillow's
    default. Lowering it would leak one rasterizer's limit into every other Pillow read of the
    process (review PNGs, a second rasterizer with another configuration).
    """
    current = Image.MAX_IMAGE_PIXELS
    if current is not None and current < pixels:
        Image.MAX_IMAGE_PIXELS = pixels


def _upright(frame: Image.Image) -> Image.Image:
    """The frame turned as its EXIF orientation says; the frame itself when there is nothing to turn.

    ImageOps.exif_transpose copies a frame it leaves as it is: a page of pixels for nothing.
    """
    if frame.getexif().get(ExifTags.Base.Orientation, 1) == 1:
        return frame
    return ImageOps.exif_transpose(frame) or frame


class Rasterizer:
    """Applies the configured limits and yields the pages of one file."""

    def __init__(self, config: RasterizeConfig) -> None:
        self._config = config
        self._max_pixels = int(config.max_page_megapixels * 1_000_000)

    def check_size(self, path: Path) -> int:
        size = path.stat().st_size
        limit = int(self._config.max_file_mb * 1024 * 1024)
        if size > limit:
            raise DocumentError(
                FailureReason.TOO_LARGE,
                f"{path.name} is {size / 1048576:.1f} MB, over rasterize.max_file_mb "
                f"({self._config.max_file_mb:g} MB)",
            )
        return size

    def pages(self, path: Path, media_type: str | None = None) -> Iterator[RasterPage]:
        """Yield the pages of a file; raise DocumentError on anything that cannot be read safely.

        Safe to call from several threads (a worker reading several jobs at once): each page is
        made under one process-wide lock, the file's closing included.
        """
        pages = self._pages(path, media_type)
        try:
            while True:
                with _ONE_PAGE_AT_A_TIME:
                    page = next(pages, None)
                if page is None:
                    return
                yield page
        finally:
            with _ONE_PAGE_AT_A_TIME:
                pages.close()

    def _pages(self, path: Path, media_type: str | None) -> Generator[RasterPage]:
        self.check_size(path)
        media_type = media_type or sniff_media_type(path)
        if media_type == "application/pdf":
            yield from self._pdf_pages(path)
        else:
            yield from self._image_pages(path, media_type)

    def _pdf_pages(self, path: Path) -> Iterator[RasterPage]:
        try:
            pdf = pdfium.PdfDocument(str(path))
        except pdfium.PdfiumError as error:
            text = str(error).lower()
            if "password" in text:
                raise DocumentError(
                    FailureReason.ENCRYPTED, f"{path.name} is password-protected; save it without a password"
                ) from None
            raise DocumentError(
                FailureReason.CORRUPT, f"{path.name} is not a readable PDF: {error}"
            ) from None
        try:
            loop = page_tree_loop(path)
            if loop is not None:
                raise DocumentError(FailureReason.CORRUPT, f"{path.name} is a broken PDF: {loop}")
            count = len(pdf)
            if count == 0:
                raise DocumentError(FailureReason.EMPTY, f"{path.name} has no pages")
            if count > self._config.max_pages:
                raise DocumentError(
                    FailureReason.TOO_MANY_PAGES,
                    f"{path.name} has {count} pages, over rasterize.max_pages ({self._config.max_pages})",
                )
            for index in range(count):
                yield self._render_pdf_page(pdf, index, path)
        finally:
            pdf.close()

    def _render_pdf_page(self, pdf: pdfium.PdfDocument, index: int, path: Path) -> RasterPage:
        try:
            page = pdf[index]
        except pdfium.PdfiumError as error:
            # A page tree whose /Count promises more pages than it holds fails here, on that page.
            raise DocumentError(
                FailureReason.CORRUPT, f"{path.name} page {index + 1} cannot be loaded: {error}"
            ) from None
        try:
            width_pt, height_pt = page.get_size()
            dpi = float(self._config.pdf_dpi)
            notes: list[str] = []
            pixels = (width_pt * dpi / 72) * (height_pt * dpi / 72)
            if pixels > self._max_pixels:
                # A poster-sized page is rendered at the resolution that fits the pixel limit
                # rather than refused: the limit exists to bound memory, and this bounds it.
                dpi = dpi * (self._max_pixels / pixels) ** 0.5
                # pdfium rounds the bitmap's sides up, which can land a few pixels over the limit.
                while math.ceil(width_pt * dpi / 72) * math.ceil(height_pt * dpi / 72) > self._max_pixels:
                    dpi *= 0.999
                notes.append(
                    f"page rendered at {dpi:.0f} dpi instead of {self._config.pdf_dpi}"
                    " to stay under rasterize.max_page_megapixels"
                )
            if dpi < _MIN_PDF_DPI:
                raise DocumentError(
                    FailureReason.PAGE_TOO_LARGE,
                    f"{path.name} page {index + 1} is {width_pt / 72:.0f}x{height_pt / 72:.0f} inches,"
                    " too large to render",
                )
            try:
                textpage = page.get_textpage()
                text_chars = textpage.count_chars()
                textpage.close()
            except pdfium.PdfiumError:
                text_chars = None
            bitmap = page.render(scale=dpi / 72, grayscale=False)
            image = bitmap.to_numpy()
            # pdfium renders BGR(A) or grey; normalise to 3-channel BGR.
            if image.ndim == 2:
                image = np.repeat(image[:, :, np.newaxis], 3, axis=2)
            elif image.shape[2] == 4:
                image = image[:, :, :3]
            image = np.ascontiguousarray(image)
            bitmap.close()
        except pdfium.PdfiumError as error:
            raise DocumentError(
                FailureReason.CORRUPT, f"{path.name} page {index + 1} cannot be rendered: {error}"
            ) from None
        finally:
            page.close()
        return RasterPage(
            index=index, image=image, dpi=dpi, text_layer_chars=text_chars, warnings=tuple(notes)
        )

    def _image_pages(self, path: Path, media_type: str) -> Iterator[RasterPage]:
        _let_pillow_open(self._max_pixels * 2)
        pil_format = _PIL_FORMATS[media_type]
        try:
            with _ShortReads() as short_reads, warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                image = Image.open(path, formats=[pil_format])
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
            # Pillow refuses these from the header alone, so they are over our limit too.
            raise DocumentError(
                FailureReason.PAGE_TOO_LARGE,
                f"{path.name} claims more pixels than rasterize.max_page_megapixels allows: {error}",
            ) from None
        except _DECODE_ERRORS as error:
            raise DocumentError(
                _failure_reason(error, short_reads), f"{path.name} cannot be decoded: {error}"
            ) from None
        with image:
            if short_reads:
                # A TIFF whose first page directory is cut short opens as a one-page file; saying
                # so would silently drop the pages that were cut off.
                raise DocumentError(
                    FailureReason.TRUNCATED, f"{path.name} is cut short: {short_reads.messages[0]}"
                )
            self._check_frame_count(path, pil_format)
            for index in itertools.count():
                if index > 0:
                    try:
                        with _ShortReads() as short_reads:
                            image.seek(index)
                    except EOFError:
                        return
                    except _DECODE_ERRORS as error:
                        raise DocumentError(
                            _failure_reason(error, short_reads),
                            f"{path.name} page {index + 1} cannot be read: {error}",
                        ) from None
                    if short_reads:
                        raise DocumentError(
                            FailureReason.TRUNCATED,
                            f"{path.name} page {index + 1} is cut short: {short_reads.messages[0]}",
                        )
                yield self._decode_frame(image, index, path)

    def _check_frame_count(self, path: Path, pil_format: str) -> None:
        """Refuse a file with more than max_pages frames, reading at most max_pages + 1 headers.

        Pillow's n_frames walks every page directory of a TIFF (quadratic in their number: 20 000
        empty pages in a 2 MB file take seconds), so a crafted file could stall the daemon before
        any limit applied. Seeking to the first frame past the limit reads no further than that.
        A separate handle is used because a failed seek leaves a Pillow image in an unreliable
        state; a page whose header is broken is reported when the pages reach it, after the
        good pages before it.
        """
        try:
            with warnings.catch_warnings():
                # Short-read warnings come again, and are judged, when the pages reach that header.
                warnings.simplefilter("ignore")
                with Image.open(path, formats=[pil_format]) as probe:
                    probe.seek(self._config.max_pages)
        except _DECODE_ERRORS:  # EOFError included: there is no frame past the limit
            return
        raise DocumentError(
            FailureReason.TOO_MANY_PAGES,
            f"{path.name} has more than rasterize.max_pages ({self._config.max_pages}) pages",
        )

    def _decode_frame(self, frame: Image.Image, index: int, path: Path) -> RasterPage:
        width, height = frame.size
        if width * height > self._max_pixels:
            raise DocumentError(
                FailureReason.PAGE_TOO_LARGE,
                f"{path.name} page {index + 1} is {width}x{height} pixels,"
                f" over rasterize.max_page_megapixels ({self._config.max_page_megapixels:g})",
            )
        if width == 0 or height == 0:
            raise DocumentError(FailureReason.CORRUPT, f"{path.name} page {index + 1} has no pixels")
        dpi_info = frame.info.get("dpi")
        dpi = float(dpi_info[0]) if dpi_info and dpi_info[0] else None
        reduction = self._jpeg_reduction(frame)
        if reduction > 1:
            # Pillow's draft() picks the largest DCT scale whose floor-divided size still reaches
            # the request (libjpeg then rounds up). The page keeps its physical size: its
            # resolution falls with the pixel count (an undeclared one is the DEFAULT_DPI every
            # output assumes), so the outputs place it exactly where a full decode would.
            frame.draft(frame.mode, (width // reduction, height // reduction))
            if frame.size != (width, height):
                dpi = (dpi or DEFAULT_DPI) / round(width / frame.size[0])
        try:
            frame.load()
            image = _to_bgr(_upright(frame))
        except _DECODE_ERRORS as error:
            raise DocumentError(
                _failure_reason(error), f"{path.name} page {index + 1} cannot be decoded: {error}"
            ) from None
        return RasterPage(index=index, image=image, dpi=dpi)

    def _jpeg_reduction(self, frame: Image.Image) -> int:
        """One of JPEG_SCALES: the largest DCT scale-down that leaves the page jpeg_draft_megapixels."""
        floor = self._config.jpeg_draft_megapixels * 1_000_000
        if frame.format != "JPEG" or floor <= 0:
            return 1
        fits = [scale for scale in JPEG_SCALES if math.prod(jpeg_scaled_size(frame.size, scale)) >= floor]
        return max(fits, default=1)


# The scale-downs libjpeg's DCT scaling decodes directly (Pillow's draft() picks among them).
JPEG_SCALES = (1, 2, 4, 8)


def jpeg_scaled_size(size: tuple[int, int], scale: int) -> tuple[int, int]:
    """The pixel size libjpeg decodes a (width, height) JPEG to at 1/scale: rounded up."""
    return math.ceil(size[0] / scale), math.ceil(size[1] / scale)


# A poster page is rendered smaller rather than refused (see _render_pdf_page), down to this. The
# largest page PDF allows without UserUnit, 200x200 inches, comes out at about 45 dpi under the
# default 80-megapixel limit, where poster-sized type is still legible; below 20 dpi even 72-point
# type is under 20 pixels high, so nothing would be read and the page is refused instead.
_MIN_PDF_DPI = 20.0

# What Pillow's decoders raise on malformed input. Its format plugins are Python code parsing
# hostile bytes, so besides the documented OSError/SyntaxError a bad header can surface as
# TypeError ("Missing dimensions"), ValueError, EOFError or struct.error; each is the file's
# fault and becomes a DocumentError, never a crash of the whole run.
_DECODE_ERRORS = (OSError, EOFError, SyntaxError, ValueError, TypeError, IndexError, KeyError, struct.error)


# PDFium must not be called from two threads at once, not even on two documents (pypdfium2's
# documentation: it crashes or corrupts the process), and Pillow's short-read warnings are caught
# with warnings.catch_warnings, which changes process-wide state: a thread could take another's
# warning for its own and call a whole file truncated. So pages are made one at a time; the
# engine's work on one page still overlaps the making of the next.
_ONE_PAGE_AT_A_TIME = threading.Lock()


class _ShortReads:
    """Records Pillow's short-read warnings inside a block ("... but only got M", "Truncated File Read").

    Pillow's TIFF reader does not raise when a page directory runs past the end of the file: it
    warns and carries on with the tags it got. Those warnings are the only sign that the file was
    cut short rather than written wrong, so they are collected here (and not printed).
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._catcher = warnings.catch_warnings(record=True)
        self._caught: list[warnings.WarningMessage] = []

    def __enter__(self) -> _ShortReads:
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always", UserWarning)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._catcher.__exit__(None, None, None)
        for caught in self._caught:
            text = str(caught.message)
            if "only got" in text.lower() or "truncated" in text.lower():
                self.messages.append(text.strip())
            else:
                # Not a sign of truncation: pass it on as if it had not been caught.
                warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)

    def __bool__(self) -> bool:
        return bool(self.messages)


def _failure_reason(error: BaseException, short_reads: _ShortReads | None = None) -> FailureReason:
    """TRUNCATED when the file ended before its data did, CORRUPT for anything else it holds.

    The two get different advice (re-send or re-scan versus repair), so one cut-short file must
    not be called corrupt at one byte offset and truncated at the next: Pillow says "image file
    is truncated" while decoding pixels but "Truncated File Read" while reading a header.
    """
    if isinstance(error, EOFError) or "truncated" in str(error).lower() or short_reads:
        return FailureReason.TRUNCATED
    return FailureReason.CORRUPT

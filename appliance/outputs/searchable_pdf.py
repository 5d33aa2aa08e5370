"""Searchable PDF (PDF/A-2b): each page image at its true size under an invisible text layer.

The page images are the ones the document was read from, handed over by the reader (the Document
holds text, not pixels); without them the input is rasterized again as it was read. The text
is drawn in render mode 3 (invisible) with a glyphless Identity-H CIDFont and a ToUnicode CMap,
each word stretched over its box, so that search, selection and text extraction work in any
script without a CJK font in the file. pikepdf (qpdf) writes the file; the PDF/A parts are an
sRGB OutputIntent made by Pillow's LittleCMS, XMP metadata with pdfaid, the font embedded, and
no encryption.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pikepdf
from pikepdf import Array, Dictionary, Name
from PIL import Image, ImageCms

from appliance import __version__
from appliance.config import RasterizeConfig
from appliance.document import Document, Page
from appliance.outputs.glyphless_font import ADVANCE, ASCENT, DESCENT, FONT_NAME, glyphless_font
from appliance.outputs.words import line_words, page_dpi
from appliance.pipeline.rasterize import JPEG_SCALES, Rasterizer, jpeg_scaled_size

JPEG_QUALITY = 85
_FONT_RESOURCE = "/F1"
_IMAGE_RESOURCE = "/Im0"
# Identity-H codes are two bytes; CID 0 is .notdef, so a document can use 65,535 characters.
_MAX_CID = 0xFFFF
_BFCHAR_CHUNK = 100  # the CMap syntax allows at most 100 entries per beginbfchar block


@dataclass(frozen=True)
class PageImage:
    """A page image encoded for embedding: JPEG bytes, its pixel size and colour space."""

    data: bytes
    width: int
    height: int
    colour_space: str  # "/DeviceRGB" or "/DeviceGray"


class _CharCodes:
    """Assigns each distinct character of the document a CID, in order of first use."""

    def __init__(self) -> None:
        self.cids: dict[str, int] = {}

    def encode(self, text: str) -> bytes:
        codes = bytearray()
        for char in text:
            cid = self.cids.get(char)
            if cid is None:
                cid = len(self.cids) + 1
                if cid > _MAX_CID:
                    raise ValueError("more than 65,535 distinct characters in one document")
                self.cids[char] = cid
            codes += cid.to_bytes(2, "big")
        return bytes(codes)

    def to_unicode_cmap(self) -> bytes:
        entries = [
            f"<{cid:04X}> <{char.encode('utf-16-be').hex().upper()}>" for char, cid in self.cids.items()
        ]
        chunks = []
        for start in range(0, len(entries), _BFCHAR_CHUNK):
            chunk = entries[start : start + _BFCHAR_CHUNK]
            chunks.append(f"{len(chunk)} beginbfchar\n" + "\n".join(chunk) + "\nendbfchar")
        return (
            "/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
            "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
            "/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n"
            "1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n"
            + "\n".join(chunks)
            + "\nendcmap\nCMapName currentdict /CMap defineresource pop\nend\nend\n"
        ).encode("ascii")

    def cid_to_gid_map(self) -> bytes:
        # Every CID draws glyph 1, the blank one; CID 0 stays .notdef.
        return b"\x00\x00" + b"\x00\x01" * len(self.cids)


def _num(value: float) -> str:
    """A number as PDF content syntax: at most three decimals, no exponent, no '-0'."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _text_layer(page: Page, codes: _CharCodes, page_height_pt: float, scale: float) -> bytes:
    """Content-stream operators that lay each word of the page, invisibly, over its box.

    Each line is one text object with one font size (the line's height), so that extractors see
    a common baseline and join its words into one line; each word is followed by a space that
    is stretched, with the word, up to the next word's start, so that the gap reads as a space.
    """
    operators: list[str] = []
    for line in page.lines:
        words = [word for word in line_words(line) if word.text]
        if not words:
            continue
        line_height = max((line.box[3] - line.box[1]) * scale, 1.0)
        # The em box runs from DESCENT to ASCENT around the baseline; this places it on the box.
        baseline = page_height_pt - line.box[3] * scale - DESCENT / 1000 * line_height
        operators.append(f"BT 3 Tr {_FONT_RESOURCE} {_num(line_height)} Tf")
        for index, word in enumerate(words):
            last = index == len(words) - 1
            text = word.text if last else word.text + " "
            right = word.box[2] if last else max(words[index + 1].box[0], word.box[2])
            target = max((right - word.box[0]) * scale, 0.1)
            natural = len(text) * ADVANCE / 1000 * line_height
            stretch = 100 * target / natural
            x = word.box[0] * scale
            operators.append(
                f"{_num(stretch)} Tz 1 0 0 1 {_num(x)} {_num(baseline)} Tm <{codes.encode(text).hex()}> Tj"
            )
        operators.append("ET")
    return "\n".join(operators).encode("ascii")


def needs_page_images(media_type: str) -> bool:
    """Whether a source's pages are embedded from the images it was read from.

    A JPEG is not: its own bits go in as they are, or it is decoded whole again (one page), so the
    archive keeps the file's resolution when the text was read at a reduced DCT scale.
    """
    return media_type != "image/jpeg"


def encode_page(image: np.ndarray) -> PageImage:
    """A rasterized page (BGR) as JPEG, in grey when the page has no colour (smaller, same look)."""
    height, width = image.shape[:2]
    if np.array_equal(image[:, :, 0], image[:, :, 1]) and np.array_equal(image[:, :, 1], image[:, :, 2]):
        pil = Image.fromarray(np.ascontiguousarray(image[:, :, 0]), mode="L")
        colour_space = "/DeviceGray"
    else:
        pil = Image.fromarray(np.ascontiguousarray(image[:, :, ::-1]), mode="RGB")
        colour_space = "/DeviceRGB"
    buffer = io.BytesIO()
    pil.save(buffer, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    return PageImage(buffer.getvalue(), width, height, colour_space)


def _original_jpeg(source: Path, document: Document) -> PageImage | None:
    """The input's own JPEG bits, when they can go into the PDF as they are.

    Re-encoding a JPEG loses quality for nothing; the original is used when it is one page of
    plain RGB or grey, upright (no EXIF rotation) and of the size the document was read at, or
    that size's multiple when it was read at a reduced DCT scale (rasterize.jpeg_draft_megapixels):
    the image is drawn over the whole page whatever its pixel count.
    """
    if document.source.media_type != "image/jpeg" or len(document.pages) != 1:
        return None
    page = document.pages[0]
    with Image.open(source) as image:
        orientation = image.getexif().get(0x0112, 1)
        read_at = {jpeg_scaled_size(image.size, scale) for scale in JPEG_SCALES}
        if image.mode not in ("RGB", "L") or orientation != 1 or (page.width, page.height) not in read_at:
            return None
        colour_space = "/DeviceRGB" if image.mode == "RGB" else "/DeviceGray"
        pixels = image.size
    return PageImage(source.read_bytes(), pixels[0], pixels[1], colour_space)


def _rasterize_config(document: Document) -> RasterizeConfig:
    """Settings that rasterize the input as it was read when the document was made.

    PDF pages are rendered at the dpi recorded on the page. The limits are raised to what this
    file is known to need: it passed the site's limits when it was read, and a second read
    refused by the defaults would lose the whole PDF for nothing. JPEGs are decoded whole: the
    image is drawn over the page whatever its pixel count, so the archive keeps the file's own
    resolution even when the text was read at a reduced scale.
    """
    dpis = [page.dpi for page in document.pages if page.dpi]
    pdf_dpi = round(max(dpis)) if dpis else 300
    largest = max((page.width * page.height for page in document.pages), default=0)
    defaults = RasterizeConfig()
    return RasterizeConfig(
        pdf_dpi=min(max(pdf_dpi, 72), 1200),
        max_file_mb=max(defaults.max_file_mb, document.source.size / 1048576 + 1),
        max_pages=max(defaults.max_pages, len(document.pages)),
        max_page_megapixels=max(defaults.max_page_megapixels, largest / 1_000_000 + 1),
        jpeg_draft_megapixels=0,
    )


def _page_images(document: Document, source: Path, given: Sequence[PageImage] | None) -> Iterator[PageImage]:
    """The image of each document page, in page order, one at a time."""
    original = _original_jpeg(source, document)
    if original is not None:
        yield original
        return
    if given is not None and needs_page_images(document.source.media_type):
        yield from given
        return
    wanted = {page.index for page in document.pages}
    for raster in Rasterizer(_rasterize_config(document)).pages(source, document.source.media_type):
        if raster.index in wanted:
            yield encode_page(raster.image)


def _srgb_profile() -> bytes:
    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
    data: bytes = profile.tobytes()
    return data


def _font(pdf: pikepdf.Pdf, codes: _CharCodes) -> pikepdf.Object:
    """The Type0 font: Identity-H codes, every CID drawn with the blank glyph, ToUnicode back."""
    font_file = pdf.make_stream(glyphless_font())
    descriptor = Dictionary(
        Type=Name.FontDescriptor,
        FontName=Name("/" + FONT_NAME),
        Flags=4,  # symbolic: the glyphs are not a standard Latin set
        FontBBox=Array([0, DESCENT, ADVANCE, ASCENT]),
        ItalicAngle=0,
        Ascent=ASCENT,
        Descent=DESCENT,
        CapHeight=700,
        StemV=80,
        FontFile2=font_file,
    )
    cid_font = Dictionary(
        Type=Name.Font,
        Subtype=Name.CIDFontType2,
        BaseFont=Name("/" + FONT_NAME),
        CIDSystemInfo=Dictionary(
            Registry=pikepdf.String("Adobe"), Ordering=pikepdf.String("Identity"), Supplement=0
        ),
        FontDescriptor=pdf.make_indirect(descriptor),
        DW=ADVANCE,
        CIDToGIDMap=pdf.make_stream(codes.cid_to_gid_map()),
    )
    return pdf.make_indirect(
        Dictionary(
            Type=Name.Font,
            Subtype=Name.Type0,
            BaseFont=Name("/" + FONT_NAME),
            Encoding=Name("/Identity-H"),
            DescendantFonts=Array([pdf.make_indirect(cid_font)]),
            ToUnicode=pdf.make_stream(codes.to_unicode_cmap()),
        )
    )


def _make_pdfa(pdf: pikepdf.Pdf, document: Document) -> None:
    """OutputIntent and XMP metadata that PDF/A-2b asks for."""
    icc = pdf.make_stream(_srgb_profile())
    icc.N = 3
    intent = Dictionary(
        Type=Name.OutputIntent,
        S=Name.GTS_PDFA1,
        OutputConditionIdentifier=pikepdf.String("sRGB IEC61966-2.1"),
        Info=pikepdf.String("sRGB IEC61966-2.1"),
        DestOutputProfile=icc,
    )
    pdf.Root.OutputIntents = Array([pdf.make_indirect(intent)])
    # pikepdf keeps the Info dictionary in step with the XMP, which PDF/A requires.
    with pdf.open_metadata(set_pikepdf_as_editor=False) as meta:
        meta["pdfaid:part"] = "2"
        meta["pdfaid:conformance"] = "B"
        meta["dc:title"] = document.source.name
        meta["xmp:CreatorTool"] = f"ocr-appliance {__version__}"
        meta["pdf:Producer"] = f"ocr-appliance {__version__} (pikepdf {pikepdf.__version__})"
        if document.created:
            meta["xmp:CreateDate"] = document.created
            meta["xmp:ModifyDate"] = document.created


def render_searchable_pdf(
    document: Document, source: Path | None, page_images: Sequence[PageImage] | None = None
) -> bytes:
    """The searchable PDF of a document; `source` is the input file it was read from.

    `page_images` are the document's pages as read, in page order (`encode_page`); without them
    the pages are rasterized again from `source`.
    """
    if source is None:
        raise ValueError("a searchable PDF needs the input file for its page images")
    pdf = pikepdf.new()
    codes = _CharCodes()
    contents: list[tuple[Page, PageImage, bytes]] = []
    images = _page_images(document, source, page_images)
    for page in document.pages:
        image = next(images, None)
        if image is None:
            raise ValueError(f"{source.name}: page {page.index + 1} could not be rasterized again")
        scale = 72.0 / page_dpi(page.dpi)
        contents.append((page, image, _text_layer(page, codes, page.height * scale, scale)))
    # The font is made after every page's text so that its CMap holds every character used.
    font = _font(pdf, codes)
    for page, image, text_ops in contents:
        scale = 72.0 / page_dpi(page.dpi)
        width_pt, height_pt = page.width * scale, page.height * scale
        xobject = pdf.make_stream(
            image.data,
            Type=Name.XObject,
            Subtype=Name.Image,
            Width=image.width,
            Height=image.height,
            ColorSpace=Name(image.colour_space),
            BitsPerComponent=8,
            Filter=Name.DCTDecode,
        )
        # The image fills the page whatever its pixel size; the text uses the page's own pixels.
        draw_image = (
            f"q {round(width_pt, 3)} 0 0 {round(height_pt, 3)} 0 0 cm {_IMAGE_RESOURCE} Do Q\n".encode()
        )
        resources = Dictionary(
            XObject=Dictionary({_IMAGE_RESOURCE: xobject}), Font=Dictionary({_FONT_RESOURCE: font})
        )
        pdf.pages.append(
            pikepdf.Page(
                Dictionary(
                    Type=Name.Page,
                    MediaBox=Array([0, 0, round(width_pt, 3), round(height_pt, 3)]),
                    Resources=resources,
                    Contents=pdf.make_stream(draw_image + text_ops),
                )
            )
        )
    _make_pdfa(pdf, document)
    buffer = io.BytesIO()
    pdf.save(buffer, min_version="1.7", deterministic_id=True)
    return buffer.getvalue()

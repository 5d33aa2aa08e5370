"""A TrueType font whose only glyph is empty, for invisible text layers in any script.

The searchable PDF shows every character through this one blank glyph (CID -> GID 1) and says
what the character is through a ToUnicode CMap, as Tesseract and OCRmyPDF do: no CJK font file
needs shipping, and PDF/A's "fonts embedded" rule is met by a font of a few hundred bytes.

The font is built with fontTools rather than committed as a binary so that its provenance is
this file, and with fixed timestamps so the same document always gives the same font bytes.
"""

from __future__ import annotations

import io
from functools import cache

from fontTools.fontBuilder import FontBuilder
from fontTools.pens.ttGlyphPen import TTGlyphPen

FONT_NAME = "GlyphLessFont"
UNITS_PER_EM = 1000
# Every glyph advances half an em: the PDF's /DW must say the same, because PDF/A requires the
# widths in the font dictionary to match the embedded program's.
ADVANCE = 500
ASCENT = 800
DESCENT = -200
# 2020-01-01 in seconds since 1904-01-01, TrueType's epoch; any fixed value keeps bytes stable.
_FIXED_TIMESTAMP = 3660681600


@cache
def glyphless_font() -> bytes:
    """The font program (TrueType bytes): .notdef and one empty glyph, both ADVANCE wide."""
    builder = FontBuilder(UNITS_PER_EM, isTTF=True)
    glyph_order = [".notdef", "blank"]
    builder.setupGlyphOrder(glyph_order)
    builder.setupCharacterMap({0x20: "blank"})
    empty = TTGlyphPen(None).glyph()
    builder.setupGlyf(dict.fromkeys(glyph_order, empty))
    builder.setupHorizontalMetrics(dict.fromkeys(glyph_order, (ADVANCE, 0)))
    builder.setupHorizontalHeader(ascent=ASCENT, descent=DESCENT)
    builder.setupNameTable({"familyName": FONT_NAME, "styleName": "Regular"})
    builder.setupOS2(
        sTypoAscender=ASCENT,
        sTypoDescender=DESCENT,
        usWinAscent=ASCENT,
        usWinDescent=-DESCENT,
        sxHeight=500,
        sCapHeight=700,
    )
    builder.setupPost()
    builder.updateHead(created=_FIXED_TIMESTAMP, modified=_FIXED_TIMESTAMP)
    buffer = io.BytesIO()
    builder.save(buffer)
    return buffer.getvalue()

"""Which characters the recogniser may write: a site's alphabet instead of PP-OCRv5's 18,383.

A site that reads only Latin-script documents gains twice from a smaller alphabet: the CTC head's
MatMul and Softmax over 18,385 classes are about a tenth of recognition time, and a blurred
glyph can no longer come out as a CJK look-alike or a full-width sign. The classes outside the
alphabet are cut from the head at load (graph.restrict_output_classes), so their logits never
compete; the probabilities of the kept classes are the full model's renormalised over them.
"""

from __future__ import annotations

from pathlib import Path

from appliance.errors import ModelError

# Printable ASCII, the Latin-1 supplement's letters and signs, and the typographic marks and
# currency signs receipts and letters print (the dictionary keeps whichever of these it has).
_LATIN1 = "".join(chr(code) for code in range(0xA1, 0x100) if code != 0xAD)  # not the soft hyphen
LATIN = "".join(chr(code) for code in range(0x20, 0x7F)) + _LATIN1 + "€‘’‚“”„–—•…‰′″™№"

BUILTIN = {"latin": LATIN}


def load_charset(spec: str) -> set[str]:
    """The characters of a built-in set (`latin`) or of a UTF-8 file (line breaks ignored)."""
    if spec in BUILTIN:
        return set(BUILTIN[spec])
    path = Path(spec)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelError(
            f"engine.ppocr_onnx.charset is {spec!r}: neither a built-in set ({', '.join(BUILTIN)}) "
            "nor a readable file"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ModelError(f"engine.ppocr_onnx.charset file {path} cannot be read as UTF-8: {error}") from None
    characters = set(text) - {"\n", "\r"}
    if not characters:
        raise ModelError(f"engine.ppocr_onnx.charset file {path} lists no characters")
    return characters


def charset_classes(keys: list[str], allowed: set[str]) -> list[int]:
    """Indices of the dictionary entries made only of allowed characters, the CTC blank (0) first."""
    kept = [0] + [index for index, key in enumerate(keys) if index and key and set(key) <= allowed]
    if len(kept) < 2:
        raise ModelError("engine.ppocr_onnx.charset shares no character with the recogniser's dictionary")
    return kept

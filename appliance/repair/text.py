"""Unicode width and whitespace normalisation that keeps CJK punctuation in CJK text."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

FULLWIDTH_FIRST, FULLWIDTH_LAST = 0xFF01, 0xFF5E  # ！ .. ～, the full-width copy of ASCII 0x21..0x7E
IDEOGRAPHIC_SPACE = "\u3000"


def is_cjk(char: str) -> bool:
    """Han, kana, hangul and CJK punctuation: the characters whose neighbours keep full width."""
    code = ord(char)
    return (
        0x3000 <= code <= 0x30FF  # CJK punctuation, hiragana, katakana
        or 0x3400 <= code <= 0x4DBF
        or 0x4E00 <= code <= 0x9FFF
        or 0xF900 <= code <= 0xFAFF
        or 0xAC00 <= code <= 0xD7AF
        or 0x20000 <= code <= 0x2FA1F
    )


def _is_fullwidth_ascii(char: str) -> bool:
    return FULLWIDTH_FIRST <= ord(char) <= FULLWIDTH_LAST


def _is_fullwidth_alnum(char: str) -> bool:
    return _is_fullwidth_ascii(char) and unicodedata.category(char)[0] in "LN"


def _neighbour_is_cjk(text: str, index: int, step: int) -> bool:
    """Whether the nearest character that is not full-width punctuation or space is CJK.

    Full-width punctuation between CJK characters (公司（北京）) is the correct typography there;
    the same glyphs between Latin letters or digits ((ＡＢＣ)) are recogniser width noise.
    """
    index += step
    while 0 <= index < len(text):
        char = text[index]
        if char.isspace() or (_is_fullwidth_ascii(char) and not _is_fullwidth_alnum(char)):
            index += step
            continue
        return is_cjk(char) and not _is_fullwidth_ascii(char)
    return False


@dataclass(frozen=True)
class Normalised:
    """A normalised text, which source characters it keeps (to carry confidences) and which rules fired."""

    text: str
    kept: list[int]  # kept[i] is the index in the source text of output character i
    rules: list[str]


def to_halfwidth(text: str) -> tuple[str, bool]:
    """Full-width letters and digits always; full-width punctuation only outside CJK runs."""
    out: list[str] = []
    changed = False
    for index, char in enumerate(text):
        if _is_fullwidth_alnum(char) or (
            (_is_fullwidth_ascii(char) or char == IDEOGRAPHIC_SPACE)
            and not (_neighbour_is_cjk(text, index, -1) or _neighbour_is_cjk(text, index, 1))
        ):
            # Full-width block is ASCII shifted by 0xFEE0; the ideographic space maps to a space.
            out.append(" " if char == IDEOGRAPHIC_SPACE else chr(ord(char) - 0xFEE0))
            changed = True
        else:
            out.append(char)
    return "".join(out), changed


def pair_parentheses(text: str) -> tuple[str, bool]:
    """A closing parenthesis takes the width of the one it closes within the line.

    Recognisers often write `（DFSG)`: the opening full-width parenthesis read right, the closing
    one as ASCII. The opening one says which the printer used. One character for one, so
    confidences stay aligned. Lone or ASCII-opened parentheses are left as read: in Chinese
    technical text both widths occur (`fdisk(8)` beside `（见下文）`), measured on printed pages:
    widening every ASCII parenthesis next to a CJK character was wrong more often than right.
    """
    out = list(text)
    opened: list[str] = []
    for index, char in enumerate(text):
        if char in "(（":
            opened.append(char)
        elif char in ")）" and opened and opened.pop() == "（" and char == ")":
            out[index] = "）"
    result = "".join(out)
    return result, result != text


def normalise(text: str) -> Normalised:
    """Half-width where it is text, then one space between words and none at the ends.

    Width mapping is one character for one, so the engine's per-character confidences stay aligned;
    whitespace removal records which characters survive so their confidences can be kept.
    """
    rules: list[str] = []
    halfwidth, changed = to_halfwidth(text)
    if changed:
        rules.append("text.fullwidth")
    halfwidth, changed = pair_parentheses(halfwidth)
    if changed:
        rules.append("text.paired_parenthesis")
    kept: list[int] = []
    out: list[str] = []
    for index, char in enumerate(halfwidth):
        if char.isspace() and char != IDEOGRAPHIC_SPACE and (not out or out[-1] == " "):
            continue
        out.append(" " if char.isspace() and char != IDEOGRAPHIC_SPACE else char)
        kept.append(index)
    if out and out[-1] == " ":
        out.pop()
        kept.pop()
    result = "".join(out)
    if len(kept) != len(halfwidth) or any(result[i] != halfwidth[k] for i, k in enumerate(kept)):
        rules.append("text.whitespace")
    return Normalised(result, kept, rules)

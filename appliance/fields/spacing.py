"""Spaces a recogniser lost in a shop's name or address, put back where receipts print them.

Recognisers drop the narrow gaps of thermal print: "UNIHAKKAINTERNATIONALSDNBHD",
"BAKERIES(KL)SDN BHD", "SDN.BHD", "DISTRIBUTOR &MARKETING". Only unambiguous places are touched:
around brackets, after an abbreviating point, around an ampersand spaced on one side, and around
words of a small business and address vocabulary found inside a long run of letters.
"""

from __future__ import annotations

import re
import unicodedata

# Words that name a kind of business or a part of an address (Malaysia, Singapore and English).
# A word is split out of a run only when the run is long, so "ENTERPRISES" stays whole.
VOCABULARY = (
    "INTERNATIONAL", "ENTERPRISE", "TRADING", "HARDWARE", "RESTAURANT", "RESTORAN", "MARKETING",
    "SERVICES", "SERVICE", "BAKERIES", "BAKERY", "SUPERMARKET", "STATIONERY", "FURNISHING", "HOLDINGS",
    "INDUSTRIES", "DISTRIBUTOR", "CORPORATION", "COMPANY", "BROTHERS", "PHARMACY", "ELECTRICAL",
    "MACHINERY", "TRAVEL", "KITCHEN", "NOODLE", "HOUSE", "GROCER", "SEAFOOD", "CONFECTIONERY",
    "PERNIAGAAN", "SYARIKAT", "KEDAI", "STATION", "JALAN", "TAMAN", "BANDAR", "KAWASAN", "PERINDUSTRIAN",
    "SEKSYEN", "KUALA", "LUMPUR", "SELANGOR", "JOHOR", "BAHRU", "PENANG", "PAHANG", "MALAYSIA",
    "PETALING", "SHAH", "ALAM", "UTAMA", "JAYA", "SETIA", "INDAH", "PERDANA", "METRO", "SDN", "BHD",
)  # fmt: skip
_LONG_RUN = re.compile(r"[A-Z]{10,}")
_WORDS = re.compile("|".join(sorted(VOCABULARY, key=len, reverse=True)))


def _split_run(match: re.Match[str]) -> str:
    return _split_word(match.group(0))


def _split_word(run: str) -> str:
    pieces: list[str] = []
    position = 0
    for word in _WORDS.finditer(run):
        before = run[position : word.start()]
        # A piece of one or two letters left over is more likely part of a longer word: keep whole.
        if before and len(before) < 3:
            continue
        if before:
            pieces.append(before)
        pieces.append(word.group(0))
        position = word.end()
    rest = run[position:]
    if rest and len(rest) < 3 and pieces:
        pieces[-1] += rest
    elif rest:
        pieces.append(rest)
    return " ".join(pieces) if pieces else run


def split_glued_words(text: str) -> str:
    """Long capitalised words of an address split at vocabulary words ("Bandarmenjalara").

    Only words of 12 letters or more: shorter mixed-case words were read with their spaces.
    """
    return re.sub(
        r"\b[A-Z][a-z]{11,}\b",
        lambda m: " ".join(piece.capitalize() for piece in _split_word(m[0].upper()).split(" ")),
        text,
    )


def restore_spaces(text: str, ampersand: bool = True) -> str:
    """The text with the spaces thermal print lost put back; the letters' case is kept.

    With `ampersand` false an ampersand keeps the spacing read: addresses print "10& 12" as is.
    """
    text = re.sub(r"\s+", " ", _plain_latin(text)).strip()
    # Only runs printed in capitals: a mixed-case word ("Kitchenette") was read with its spaces.
    text = _LONG_RUN.sub(_split_run, text)
    # SDN.BHD -> SDN. BHD; SDNBHD -> SDN BHD
    text = re.sub(r"\b(SDN)\s*(\.?)\s*(BHD)", lambda m: f"{m[1]}{m[2]} {m[3]}", text, flags=re.IGNORECASE)
    text = re.sub(r"(?<=[A-Za-z0-9.])\(", " (", text)  # BAKERIES(KL) -> BAKERIES (KL)
    text = re.sub(r"\)(?=[A-Za-z0-9])", ") ", text)  # (KL)SDN -> (KL) SDN
    text = re.sub(r"\b(MR|MRS|MS|DR|CO)\.(?=[A-Za-z(])", r"\1. ", text, flags=re.IGNORECASE)  # MR.D.I.Y.
    if ampersand:
        text = re.sub(r"(?<=\S) &(?=\S)|(?<=\S)& (?=\S)", " & ", text)  # "A &B", "A& B": both sides
    return re.sub(r"\s+", " ", text).strip()


def _plain_latin(text: str) -> str:
    """Latin letters without the accents a multilingual reader adds ("Jaīan", "ÁLAM"); CJK untouched.

    Malay and English names and addresses carry no accents, so an accent is a misread mark.
    """
    if not any(unicodedata.combining(char) for char in unicodedata.normalize("NFD", text)):
        return text
    out = []
    for char in text:
        base = unicodedata.normalize("NFD", char)
        out.append(base[0] if base[0].isascii() and base[0].isalpha() else char)
    return "".join(out)

"""Misread glyphs and marks in a printed address, fixed only where a word or a number is unambiguous.

Thermal print loses the tail of a comma (read "."), splits letters ("L.OT", "Ma11" for MALL) and
shares shapes between letters and digits (JA1AN, 29O, G3O). A token is changed only when the
result is certain: a letter token becomes a word of the address vocabulary below (one confusable
glyph away, or a 1/0/I/l swap away), a digit inside a number stays a digit, and a point becomes a
comma only between two parts of the address, never after an abbreviation ("NO.", "P.T.", "JLN.").
"""

from __future__ import annotations

import re

# Words that recur in addresses of Malaysia, Singapore and English-speaking places; long enough
# (or common enough) that one misread glyph cannot turn another real word into them.
VOCABULARY = frozenset(
    [
        "JALAN",
        "TAMAN",
        "LORONG",
        "PERSIARAN",
        "LEBUH",
        "LEBUHRAYA",
        "KAMPUNG",
        "KAMPONG",
        "BANDAR",
        "BARU",
        "KAWASAN",
        "PERINDUSTRIAN",
        "SEKSYEN",
        "PUSAT",
        "PLAZA",
        "WISMA",
        "MENARA",
        "KOMPLEKS",
        "MALL",
        "FLOOR",
        "GROUND",
        "LEVEL",
        "BLOCK",
        "UNIT",
        "LOT",
        "ROAD",
        "STREET",
        "AVENUE",
        "DRIVE",
        "LANE",
        "HIGHWAY",
        "CENTRE",
        "CENTER",
        "INDUSTRIAL",
        "PARK",
        "SQUARE",
        "SELANGOR",
        "KUALA",
        "LUMPUR",
        "JOHOR",
        "BAHRU",
        "PENANG",
        "PULAU",
        "PINANG",
        "PAHANG",
        "PERAK",
        "KEDAH",
        "KELANTAN",
        "TERENGGANU",
        "MELAKA",
        "MALACCA",
        "SABAH",
        "SARAWAK",
        "NEGERI",
        "SEMBILAN",
        "PUTRAJAYA",
        "LABUAN",
        "PERLIS",
        "MALAYSIA",
        "SINGAPORE",
        "DARUL",
        "EHSAN",
        "TAKZIM",
        "PETALING",
        "JAYA",
        "SHAH",
        "ALAM",
        "SUBANG",
        "KLANG",
        "CHERAS",
        "KEPONG",
        "PUCHONG",
        "DAMANSARA",
        "AMPANG",
        "SETAPAK",
        "GOMBAK",
        "KAJANG",
        "SERDANG",
        "SEREMBAN",
        "IPOH",
        "UTARA",
        "SELATAN",
        "TIMUR",
        "BARAT",
        "TENGAH",
        "UTAMA",
        "INDAH",
        "PERDANA",
    ]
)
# Glyph pairs a recogniser confuses on receipts (either way).
_CONFUSABLE = {
    frozenset(pair)
    for pair in ("IL", "I1", "L1", "O0", "OD", "OQ", "EC", "EO", "EF", "BE", "B8", "S5", "G6", "UV",
                 "MN", "HN", "RK", "PR", "UO", "Z2")
}  # fmt: skip
_DIGIT_OF = {"O": "0", "o": "0", "I": "1", "l": "1", "|": "1"}
_LETTER_OF = {"0": "O", "1": "L", "5": "S", "8": "B"}
_TOKEN = re.compile(r"[A-Za-z0-9|.]+")
# Abbreviations that end with a point as printed ("NO. 1", "JLN. IPOH"): the point is no comma.
_ABBREVIATION = frozenset(
    [
        "NO",
        "JLN",
        "JLN2",
        "TMN",
        "BDR",
        "KG",
        "KPG",
        "LRG",
        "PJS",
        "BT",
        "ST",
        "RD",
        "AVE",
        "DR",
        "MT",
        "LOT",
        "BLK",
        "BLD",
        "JL",
        "SG",
        "PT",
        "KM",
        "SEK",
        "SEKSYEN",
    ]
)


def _keep_case(source: str, word: str) -> str:
    """`word` in the case the token was printed in: all capitals, or a capital then lower case."""
    letters = [char for char in source if char.isalpha()]
    if letters and all(char.isupper() for char in letters):
        return word
    return word.capitalize()


def _one_glyph_away(token: str, word: str, any_glyph: bool) -> bool:
    if len(token) != len(word):
        return False
    differ = [(a, b) for a, b in zip(token, word, strict=True) if a != b]
    return len(differ) == 1 and (any_glyph or frozenset(differ[0]) in _CONFUSABLE)


def _as_word(token: str) -> str | None:
    """The vocabulary word a letter token (or one with 1/0/I/l glyphs or a stray point) was, if any."""
    plain = token.upper()
    if plain in VOCABULARY:
        return None
    if "." in plain:
        joined = plain.replace(".", "")
        # "L.OT": a speck splitting one word, never an abbreviation's point ("P.T.", "NO.")
        return joined if joined in VOCABULARY and not plain.endswith(".") and len(joined) >= 3 else None
    letters = sum(char.isalpha() for char in plain)
    if letters < 2:
        return None
    swapped = "".join(_LETTER_OF.get(char, char) for char in plain)
    if swapped != plain and swapped in VOCABULARY and letters >= len(plain) / 2:
        return swapped  # "MA11" -> MALL, "JA1AN" -> JALAN
    if not plain.isalpha() or len(plain) < 5:
        return None
    # One confusable glyph off ("SCLANGOR", "JAIAN", "FLEOR"); in a word of six letters or more any
    # one glyph ("LUMOUR"), since no other word is that close. Only when one word fits.
    near = [word for word in VOCABULARY if _one_glyph_away(plain, word, any_glyph=len(plain) >= 6)]
    return near[0] if len(near) == 1 else None


def _fix_token(match: re.Match[str]) -> str:
    token = match.group(0)
    word = _as_word(token.rstrip(".") if token.count(".") == 1 and token.endswith(".") else token)
    if word is not None:
        return _keep_case(token, word) + ("." if token.endswith(".") and "." not in word else "")
    # A number with a letter-shaped digit after a digit: "29O" -> 290, "G3O" -> G30, "1l5" -> 115
    # (an I or l only between digits: "3I" may be a unit's letter; "10D" always is).
    return re.sub(r"(?<=\d)(?:[Oo](?=\d|$|\.)|[Il|](?=\d))", lambda m: _DIGIT_OF[m.group(0)], token)


def fix_glyphs(text: str) -> str:
    """The address with misread letters in vocabulary words and letter-shaped digits in numbers fixed."""
    return _TOKEN.sub(_fix_token, text)


def _point_to_comma(match: re.Match[str]) -> str:
    before = match.group("before")
    after_slash = match.start() > 0 and match.string[match.start() - 1] == "/"  # "U13/X. SETIA"
    initial = len(before) == 1 and before.isalpha() and not after_slash
    if before.upper() in _ABBREVIATION or initial:
        return match.group(0)  # "NO. 5", "JLN. IPOH", "P.T. 2811": an abbreviation's point
    return f"{before}, "


def fix_punctuation(text: str) -> str:
    """Commas read as points between parts of an address, specks after commas, points joining words.

    The address's last point stays: SROIE (and the print) end many addresses with one.
    """
    text = re.sub(r"(?<=[,.])\s*['`‘’]+\s*", " ", text)  # "ALAM,'SELANGOR": a speck after a comma
    text = re.sub(r"(?<=[A-Za-z]{3})\.(?=[A-Za-z]{3})", " ", text)  # "PUTRA.DENGKIL"
    # "BATU 5.51200 KUALA": a point between a number and a postcode is a comma.
    text = re.sub(r"(?<=\b\d)\.(?=\d{5}\b)|(?<=\b\d\d)\.(?=\d{5}\b)", ", ", text)
    # "OFF JALAN KEPONG. 52100", "19. JALAN": a point after a word or number, then more address.
    return re.sub(r"(?<![.\w])(?P<before>[A-Za-z0-9]+)\.\s+(?=[A-Za-z0-9(])", _point_to_comma, text)

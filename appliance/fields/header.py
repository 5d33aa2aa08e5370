"""A receipt's head: the shop's name (company) and its address, from the rows above the first sums.

The name is printed first, before the registration number and the address; where several name
rows are printed (a brand, then the legal name "... SDN BHD"), the one with a company marker
nearest above the address is the company, and a row that starts with a marker ("ENTERPRISE
(SETIA ALAM) SDN BHD") continues the row above. The address is the rows after the name up to
the phone, tax-id or date rows, joined with spaces as printed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from appliance.fields.address_words import fix_glyphs, fix_punctuation
from appliance.fields.spacing import restore_spaces, split_glued_words
from appliance.repair.dates import find_dates

if TYPE_CHECKING:
    from appliance.fields.receipt import Row

_MARKER = (
    r"SDN\.?\s*BHD|\bBHD\b|\bBERHAD\b|S/B\b|\bSDN\b|\bPLT\b|\bLLP\b|\bCORP(ORATION)?\b|ENTERPRISES?|"
    r"TRADING|RESTORAN|RESTAURANT|HARDWARE|STATIONERY|"
    r"\bMART\b|BAKER(Y|IES)|\bCO\.|COMPANY|\bLTD\b|LIMITED|\bINC\b|\bPLC\b|\bGROUP\b|GROCER|SUPERMARKET|"
    r"PHARMACY|\bCAFE\b|KEDAI|PERNIAGAAN|SYARIKAT|MARKETING|\(M\)|PTE\.?\s*LTD|有限公司|公司|商店|超市|酒店"
)
COMPANY_MARKER = re.compile(_MARKER, re.IGNORECASE)
# Markers of the legal entity (the name SROIE and a ledger want) rather than of the kind of shop:
# "MYDIN MART SRI MUDA" is the branch, "TRI SHAAS SDN BHD" the company.
_LEGAL = re.compile(
    # PLT and LLP: a limited liability partnership; BERHAD: a public company ("... BERHAD").
    r"SDN\.?\s*BHD|\bBHD\b|\bBERHAD\b|S/B\b|\bSDN\b|\bPLT\b|\bLLP\b|\bCORP(ORATION)?\b|PTE\.?\s*LTD|"
    r"\bLTD\b|LIMITED|\bINC\b|\bPLC\b|ENTERPRISES?|TRADING|COMPANY|\bCO\.|\(M\)|有限公司|公司",
    re.IGNORECASE,
)
_STARTS_WITH_MARKER = re.compile(rf"^\W*({_MARKER})", re.IGNORECASE)
_NOT_NAME = re.compile(
    r"TAX\s*INVOICE|^\W*(INVOICE|RECEIPT|OFFICIAL\s*RECEIPT|CASH\s*(BILL|SALES?)|SIMPLIFIED|WELCOME|"
    r"YOUR\s*ORDER|ORDER\s*NO|THANK)|发票|收据",
    re.IGNORECASE,
)
REGISTRATION = re.compile(
    r"\(?\s*(?:C[O0](?:MPANY)?\.?\s*-?\s*(?:REG(?:ISTRATION)?\.?\s*)?(?:N[O0]\.?)?|REG\.?\s*N[O0]\.?|ROC|UEN|BRN|C[O0]-RE\w*)"
    r"\s*[:.]?\s*\d{4,}[-\s·.]?[A-Z]\b\s*\)?|\(\s*\d{4,}[-\s·.]?[A-Z]?\s*\)|^\W*\d{5,}\s*-\s*[A-Z]\W*$|"
    # a bare company number with its check letter after a name ("BAKERY 000965911-P")
    r"(?<=[A-Za-z] )\d{6,12}[-.·][A-Z]\b",
    re.IGNORECASE,
)
_ADDRESS_START = re.compile(
    r"^\W*(NO\b|NO\.|LOT\b|L\d|UNIT\b|LEVEL\b|BLOCK\b|BLK\b|\d+[A-Z]?\s*[-,/.&]|\d+\s+[A-Z])|"
    r"\b(JALAN|JLN|TAMAN|TMN|ROAD|STREET|LORONG|PERSIARAN|AVENUE)\b|\b\d{5}\b",
    re.IGNORECASE,
)
_ADDRESS_STOP = re.compile(
    # No trailing boundary: the recogniser often drops spaces ("DocumentNo:", "TAXINVOICE").
    r"\b(TEL|FAX|PHONE|H/?P|GST|SST|EMAIL|E-MAIL|WWW|HTTP|DATE|INVOICE|RECEIPT|CASHIER|TABLE|BILL|"
    r"ORDER|TAX|DOC(UMENT)?|TIME|COUNTER|MEMBER|SALES?|SERVER|TERMINAL|NO\s*:\s*\d|OPEN|MOBILE|"
    r"WHATSAPP|GUEST|SLIP|PAY|CASH|UEN|BRN)|REG\.?\s*N[O0]|C[O0]\.?\s*N[O0]|COMPANY\s*(REG|NO)|电话|日期|发票",
    re.IGNORECASE,
)
_LICENSEE = re.compile(r"LICENSEE|OWNED\s*BY|OPERATED\s*BY|A\s*MEMBER\s*OF|DIMILIKI", re.IGNORECASE)
_PHONE = re.compile(r"\+?\(?\d{2,4}\)?[-\s]?\d{3,4}[-\s]?\d{3,5}\b")
_AMOUNT = re.compile(r"\d\.\d{2}\b")
_POSTCODE = re.compile(r"\b\d{5}\b")
_HEAD_ROWS = 15


def _name_like(text: str) -> bool:
    letters = sum(char.isalpha() for char in text)
    return letters >= 3 and not _NOT_NAME.search(text) and not find_dates(text, "en")


def _is_registration(text: str) -> bool:
    return bool(REGISTRATION.search(text)) and sum(c.isalpha() for c in REGISTRATION.sub("", text)) < 3


def company_rows(rows: list[Row]) -> list[int]:
    """The indices of the company's rows at the head of the first page, or [] when none is name-like."""
    head = [(index, row) for index, row in enumerate(rows[:_HEAD_ROWS]) if row.page == 0]
    # The head ends at the first registration, address, phone or date row after a name was seen.
    names: list[int] = []
    registered = -1  # the name row right above the row of the registration number that ends the head
    for index, row in head:
        text = row.text.strip()
        marked = COMPANY_MARKER.search(text)
        ends = (
            _is_registration(text)
            or (_ADDRESS_START.search(text) and not marked)
            # a legal name is never a stop row, whatever it starts with ("Timeless ... Sdn Bhd")
            or (_ADDRESS_STOP.search(text) and not _LEGAL.search(text))
            or find_dates(text, "en")
        )
        if ends and names:
            if _is_registration(text) and names[-1] == index - 1:
                registered = index - 1
            break
        if not ends and _name_like(text):
            names.append(index)
    if not names:
        return []
    legal = [index for index in names if _LEGAL.search(rows[index].text)]
    if not legal:
        # The registration number is printed under the name it registers: the row above it is the
        # company, not a logo read as text or a brand above it ("FACE TO FACE" / "FTOF NOODLE HOUSE").
        # Only in a short head (a logo read as text, a brand, the name): in a longer one, rows not
        # read as an address may stand between the shop's name and an operator's name and number.
        if registered >= 0 and len(names) <= 3:
            return [registered]
        return [names[0]]  # a brand alone ("THREE STOOGES" above "BISTRO & CAFE"): the first
    chosen = [legal[-1]]
    # A name wrapped over rows: "AIK HUAT HARDWARE" / "ENTERPRISE (SETIA" / "ALAM) SDN BHD", or
    # a row above that cannot end a name ("LIM & SONS HARDWARE &" / "TRADING SDN BHD").
    while chosen[0] - 1 in names:
        text = rows[chosen[0]].text
        above = rows[chosen[0] - 1].text
        if not (
            _STARTS_WITH_MARKER.search(text) or text.count(")") > text.count("(") or _OPEN_END.search(above)
        ):
            break
        chosen.insert(0, chosen[0] - 1)
    return chosen


# A row ending in a conjunction or a hyphen continues on the next row.
_OPEN_END = re.compile(r"(&|\bAND|\bDAN|\bOF|-)\s*$", re.IGNORECASE)


def company_value(raw: str) -> str:
    """The name without its registration number, with lost spaces restored."""
    value = restore_spaces(REGISTRATION.sub(" ", raw)).strip(" ,:-")
    # The legal suffix glued to the name by a lost space ("COFFEE 28S/B"), and misread: S/B
    # (Sendirian Berhad) as S/D, S/8 or 5/B, BHD as HHD or 8HD.
    value = re.sub(r"(?<=[A-Za-z0-9])(S/[B8D])$", r" \1", value, flags=re.IGNORECASE)
    value = re.sub(r"\b[S5]/[B8D]$", "S/B", value, flags=re.IGNORECASE)
    return re.sub(r"\b(SDN\.?\s*)[8H]HD\b", r"\1BHD", value, flags=re.IGNORECASE)


def address_rows(rows: list[Row], after: int) -> list[int]:
    """Rows after the company up to the first phone, tax-id, date or amount row."""
    picked: list[int] = []
    # A branch or licensee row ("MYDIN MART SRI MUDA", "Licensee of ...") may stand between the
    # name and the address: the address starts at the first row that reads like one, if near.
    begin = after + 1
    for index in range(after + 1, min(after + 4, len(rows))):
        text = rows[index].text
        if _ADDRESS_START.search(text) and not _ADDRESS_STOP.search(text) and not _is_registration(text):
            between = [rows[i].text for i in range(after + 1, index)]
            # Rows up to a registration number belong to the name block ("FTOF NOODLE HOUSE" /
            # "(002049088-U)"): the number ends the name, whatever the rows above it say.
            last = max((n for n, t in enumerate(between) if REGISTRATION.search(t)), default=-1)
            if all(COMPANY_MARKER.search(t) or _LICENSEE.search(t) for t in between[last + 1 :]):
                begin = index
            break
    for index in range(begin, min(begin + 8, len(rows))):
        text = rows[index].text.strip()
        if _is_registration(text):
            continue  # before the phone test: "(002049088-U)" has a phone number's digits
        stop = _ADDRESS_STOP.search(text) or find_dates(text, "en") or _AMOUNT.search(text)
        phone_only = _PHONE.search(text) and sum(c.isalpha() for c in text) < 4
        if stop or phone_only:
            if picked:
                break
            continue  # a registration or tax-id row between the name and the address
        if _is_registration(text) or (re.fullmatch(r"[\W\d]*-?[A-Z]?\W*", text) and len(text) < 14):
            continue
        if not picked and REGISTRATION.search(text):
            continue  # the rest of the name with its registration number ("... BAKERY (123456-P)")
        if index + 1 < len(rows) and _AMOUNT.search(rows[index + 1].text) and picked:
            break  # a row right above a row of amounts names an item, not a street
        after_postcode = [i for i in picked if _POSTCODE.search(rows[i].text)]
        if after_postcode and (
            picked[-1] != after_postcode[-1]
            or not (re.fullmatch(r"[A-Za-z .,]{3,40}", text) or _outlet_row(rows, index))
        ):
            break  # after the postcode row only one row naming a state or country belongs to the address
        picked.append(index)
        if len(picked) >= 5:
            break
    return picked


def _outlet_row(rows: list[Row], index: int) -> bool:
    """A numbered outlet printed under the address ("1320-TMN BATU"), right above the tax-id rows."""
    text = rows[index].text
    after = rows[index + 1].text if index + 1 < len(rows) else ""
    return bool(
        re.match(r"^\d+\s*-?\s*[A-Za-z]", text)
        and _ADDRESS_START.search(text)
        and not _POSTCODE.search(text)
        and (_ADDRESS_STOP.search(after) or _PHONE.search(after))
    )


def address_value(parts: list[str]) -> str:
    """The address rows joined with single spaces, lost spaces restored, registration numbers cut.

    Besides the name's rules: a space after a postcode glued to the town ("43200Cheras") and
    between the words of a town run together in mixed case ("JohorBahru", "Bandarmenjalara"),
    misread glyphs in address words and numbers, and commas read as points. Commas, ampersands
    and numbers keep the spacing read: SROIE writes the print's own "7/4,KAWASAN", "10& 12" and
    "UPTOWN3".
    """
    text = restore_spaces(REGISTRATION.sub(" ", " ".join(parts)), ampersand=False)
    text = re.sub(r"\b(\d{5})(?=[A-Za-z]{3})", r"\1 ", text)
    text = re.sub(r"(?<=[a-z]{2})(?=[A-Z][a-z])", " ", text)
    text = fix_punctuation(fix_glyphs(split_glued_words(text)))
    return re.sub(r"\s+", " ", text).strip()

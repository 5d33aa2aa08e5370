"""Seeded generator of synthetic line texts of the kind printed on receipts, invoices and documents.

Nothing here is copied from a dataset: every line is assembled from small built-in vocabularies, a
word list (Debian's /usr/share/dict/words, passed by path) and random characters, so a model trained
on it has to read glyphs rather than recall lines. No torch: the appliance's test env imports this.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.text_forms import normalize_spaced

# GB2312 level 1 (rows 16-55) holds the 3,755 most common Simplified Chinese characters; Python's own
# codec lists them, so no download or dataset is needed.
_GB2312_L1_ROWS = range(0xB0, 0xD8)
# The share of Latin lines with a run of their fields in brackets (`TextSource._bracketed`).
BRACKETED_SHARE = 0.08
# The share of amounts that are 0.00 (`TextSource._amount`); a fifth more are whole and a tenth end in .50.
AMOUNT_ZERO_SHARE = 0.08
# The share of serial numbers (`TextSource._serial`) padded with zeros to their width.
ZERO_PADDED_SHARE = 0.35
# The share of shop names whose first word is a possessive (`BEN'S`, `MCDONALD'S`); item and
# notice words take one less often (`TextSource._possessive`).
POSSESSIVE_SHARE = 0.15
# The share of terms lines that start with a list's number or mark (`1. ALL SALES ARE FINAL.`).
NUMBERED_TERMS_SHARE = 0.3
# The share of item descriptions that name the product's size (`COKE 500ML`, `FOIL 30CM*7.62M`).
PACK_SIZE_SHARE = 0.25
# A word of letters with a contraction's short tail (`BEN'S`, `DON'T`, `WE'LL`): capitalised whole.
_TITLE_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]{1,2}\b)?")


def label_of(text: str) -> str:
    """What a model learns to write for a line drawn from `text`: one space a gap, as the appliance writes."""
    # `_spaces` puts runs of spaces between fields so that the renderer draws the wide gaps of
    # aligned columns, but the appliance places every line single-spaced (the ONNX engine writes one
    # space a gap, and the cascade single-spaces a re-read line), as receipts' ground truths are:
    # a label with the run in it would only teach the reader to count gap widths nothing keeps.
    # The spaced CER's own form, so a label and a scored read are spaced alike.
    return normalize_spaced(text, case_insensitive=False)


def letter_case(text: str) -> str:
    """How a line is printed, as a reader that keeps case wrote it: `upper`, `mostly lower`, ..."""
    upper, lower = sum(char.isupper() for char in text), sum(char.islower() for char in text)
    if upper + lower == 0:
        return "no letters"
    if lower == 0:
        return "upper"
    return "mostly lower" if lower > upper else "some lower"


def title_case(text: str) -> str:
    """Each word's first letter a capital, the rest small: `Ben's`, not str.title's `Ben'S`."""
    return _TITLE_WORD.sub(lambda word: word.group(0).capitalize(), text)


def common_chinese(limit: int | None = None) -> list[str]:
    """The GB2312 level-1 characters (3,755), in code order; the first `limit` if given."""
    chars: list[str] = []
    for row in _GB2312_L1_ROWS:
        for cell in range(0xA1, 0xFF):
            try:
                chars.append(bytes([row, cell]).decode("gb2312"))
            except UnicodeDecodeError:
                continue  # row 55 ends early (0xD7FA-0xD7FE are unassigned)
    return chars[:limit] if limit else chars


_FALLBACK_WORDS = (
    "apple",
    "bread",
    "butter",
    "coffee",
    "delivery",
    "express",
    "fresh",
    "garden",
    "golden",
    "happy",
    "house",
    "kitchen",
    "market",
    "mineral",
    "noodle",
    "office",
    "paper",
    "quality",
    "rice",
    "service",
    "station",
    "sugar",
    "super",
    "tea",
    "trading",
    "water",
    "world",
)

_LEGAL = (
    "SDN BHD",
    "SDN. BHD.",
    "S/B",
    "SDN.BHD",
    "LTD",
    "LTD.",
    "PTE LTD",
    "ENTERPRISE",
    "TRADING",
    "CO.",
    "CO",
    "CORPORATION",
    "BHD",
    "(M) SDN BHD",
    "INC",
    "LLC",
    "GMBH",
    "& SONS",
    "HOLDINGS",
)
_SHOP_WORDS = (
    "MART",
    "STORE",
    "HARDWARE",
    "BOOK",
    "STATIONERY",
    "RESTAURANT",
    "CAFE",
    "BAKERY",
    "PHARMACY",
    "MINI MARKET",
    "SUPERMARKET",
    "FOOD",
    "TRADING",
    "MOTOR",
    "ELECTRICAL",
    "GIFT",
    "TEXTILE",
    "KEDAI",
    "KOPITIAM",
    "DIY",
    "AUTO PARTS",
    "OPTICAL",
    "FRUITS",
)
_STREET = ("JALAN", "JLN", "JALAN", "LORONG", "PERSIARAN", "LEBUH", "ROAD", "STREET", "AVENUE", "LANE")
_AREA = ("TAMAN", "TMN", "BANDAR", "KAMPUNG", "SEKSYEN", "PUSAT", "KAWASAN PERINDUSTRIAN", "DESA")
_TOWNS = (
    "JOHOR BAHRU",
    "KUALA LUMPUR",
    "PETALING JAYA",
    "SHAH ALAM",
    "SKUDAI",
    "KLANG",
    "IPOH",
    "PUCHONG",
    "CHERAS",
    "SERI KEMBANGAN",
    "SUBANG JAYA",
    "MELAKA",
    "SEREMBAN",
    "KAJANG",
    "SINGAPORE",
    "PENANG",
    "KOTA KINABALU",
    "KUCHING",
    "SPRINGFIELD",
    "RIVERSIDE",
    "LONDON",
)
_STATES = (
    "JOHOR",
    "SELANGOR",
    "SELANGOR DARUL EHSAN",
    "JOHOR DARUL TAKZIM",
    "W.P. KUALA LUMPUR",
    "PERAK",
    "PAHANG",
    "KEDAH",
    "SABAH",
    "MALAYSIA",
)
_LABELS = (
    "TOTAL",
    "SUBTOTAL",
    "SUB TOTAL",
    "GRAND TOTAL",
    "CASH",
    "CHANGE",
    "ROUNDING",
    "DISCOUNT",
    "TOTAL INCL. GST",
    "TOTAL EXCL. GST",
    "TOTAL INCL GST",
    "TOTAL EXCL GST",
    "NETT TOTAL",
    "AMOUNT",
    "BALANCE",
    "PAID",
    "TENDERED",
    "VISA",
    "MASTER",
    "DEBIT CARD",
    "SERVICE CHARGE",
    "TAX",
    "QTY",
    "PRICE",
    "ITEM",
    "DESCRIPTION",
    "CASHIER",
    "TABLE",
    "PAX",
    "MEMBER",
    "POINTS",
    "TOTAL QTY",
    "TOTAL SAVINGS",
    "DEPOSIT",
)
# Words that receipts build their labels from, for labels of words in any order (`label`): a
# model that learns only the fixed phrases above writes one of them after the first word it reads
# (`TOTAL 0% SUPPLIES:` read `Total Excl. Gst :185.17`, `TOTAL ITEM(S) : 8` read `Total Incl.`).
# Each word once, in a set, so none is drawn twice as often as the rest.
_LABEL_WORDS = tuple(
    sorted(
        {word for label in _LABELS for word in label.split()}
        | {
            "AMT",
            "GST",
            "SST",
            "EXCLUDING",
            "INCLUDING",
            # `(INCLUSIVE OF GST)` was read `(Inclusive of 9.97)` with only `INCLUDING` here
            "INCLUSIVE",
            "EXCLUSIVE",
            "GST(S)",
            "SUPPLIES",
            "SUMMARY",
            "ITEM(S)",
            "PAX(S)",
            "QTY(S)",
            "(RM)",
            "(S)",
            "(SR)",
            "(ZR)",
            "0%",
            "6%",
            "10%",
            "NO.",
            "NO",
            # bare as receipts print them (`TOTAL INCL GST`): with only `INCL.` among the words,
            # the reader added the stop to every `INCL` it read
            "INCL",
            "EXCL",
            "OF",
            "WITH",
            "@",
            "REG",
            "DOC",
            "REF",
            "BILL",
            "SALES",
            "NET",
            "GROSS",
            "ADJ",
            "ADJUSTMENT",
            "PAYMENT",
            "RECEIVED",
            "DUE",
        }
    )
)
_HEADERS = (
    "TAX INVOICE",
    "SIMPLIFIED TAX INVOICE",
    "CASH SALE",
    "CASH BILL",
    "RECEIPT",
    "OFFICIAL RECEIPT",
    "INVOICE",
    "DELIVERY ORDER",
    "QUOTATION",
    "CREDIT NOTE",
    "COPY",
    "DUPLICATE",
    "BILL",
    "CUSTOMER'S COPY",
    "MERCHANT'S COPY",
)
_THANKS = (
    "THANK YOU",
    "THANK YOU, PLEASE COME AGAIN",
    "THANK YOU & COME AGAIN",
    "HAVE A NICE DAY",
    "GOODS SOLD ARE NOT RETURNABLE",
    "GOODS SOLD ARE NOT REFUNDABLE",
    "PLEASE COME AGAIN",
    "THANK YOU FOR SHOPPING WITH US",
    "** THANK YOU **",
    "*** PLEASE KEEP THIS RECEIPT ***",
    "EXCHANGE WITHIN 7 DAYS WITH RECEIPT",
    "THIS IS A COMPUTER GENERATED RECEIPT",
    "WE'LL SEE YOU AGAIN",
    "DON'T FORGET YOUR RECEIPT",
    "E.&.O.E.",
    "E. & O.E.",
)
# The words of a receipt's terms and notices (returns, exchanges, tax invoices, loyalty schemes,
# opening hours), with the common English words between them: its long lines are such sentences,
# and the 3.77% reader misread their plain words (`FROM THE DATE OF PURCHASE` read `from ithe dete
# of purchase`) where it read items and prices well. `FACEBOOK` among them: the web lines alone
# taught it `facebook.com`, and it wrote that for `FACEBOOK :` on clean print.
# fmt: off
_TERMS_GLUE = (
    "THE", "OF", "FOR", "TO", "IS", "ARE", "BE", "IN", "ON", "WITH", "WITHIN", "FROM", "BY", "AT", "IF",
    "ANY", "ALL", "YOUR", "OUR", "US", "WE", "YOU", "THIS", "THAT", "IT", "NOT", "NO", "OR", "AND", "AS",
    "WILL", "MAY", "MUST", "CAN", "ONLY", "BEFORE", "AFTER", "PER", "ITS", "UPON", "UNDER",
)
_TERMS_WORDS = (
    "DAYS", "DAY", "WEEK", "MONTHS", "DATE", "TIME", "HOURS", "OPEN", "DAILY", "GOODS", "SOLD",
    "RETURNABLE", "REFUNDABLE", "EXCHANGE", "EXCHANGED", "RECEIPT", "ORIGINAL", "PURCHASE", "REQUEST",
    "INVOICE", "TAX", "PRESCRIBED", "MADE", "COMPUTER", "GENERATED", "SIGNATURE", "REQUIRED", "CUSTOMER",
    "SERVICE", "PLEASE", "KEEP", "PROVIDE", "STATE", "CONDITION", "ENQUIRY", "EMAIL", "CONTACT", "FOLLOW",
    "LIKE", "VISIT", "WEBSITE", "MEMBER", "POINTS", "LOYALTY", "PROGRAMME", "TODAY", "CHANGE", "PRICES",
    "SUBJECT", "WITHOUT", "NOTICE", "VALID", "WARRANTY", "ITEMS", "DISCOUNTED", "ACCEPTED", "REFUND",
    "CHARGED", "RESERVE", "RIGHT", "TERMS", "CONDITIONS", "APPLY", "PRODUCTS", "RETURN", "DAMAGED",
    "DEFECTIVE", "PROOF", "COPY", "STORE", "OUTLET", "MANAGEMENT", "ABSOLUTE", "DISCRETION", "BASED",
    "BELONG", "CODE", "INDICATED", "SUPPLY", "COMPLIANT", "PERSONAL", "DATA", "FACEBOOK", "INSTAGRAM",
    "WHATSAPP", "PAGE",
)
# fmt: on
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_UNITS = ("PCS", "PC", "KG", "G", "ML", "L", "BOX", "PKT", "BTL", "CTN", "SET", "ROLL", "UNIT", "EA")
# A product's size in its name (`500ML`, `100S` sheets), not the unit it is sold by (`_UNITS`).
_SIZE_UNITS = ("ML", "G", "GM", "KG", "L", "CM", "MM", "M", "S", "GR", "OZ")
_OPEN_DAYS = ("MON-FRI", "MON-SAT", "SUN-THU", "FRI-SAT", "DAILY", "EVERYDAY", "SUN & PH")
_CURRENCIES = ("RM", "RM ", "$", "$ ", "MYR ", "SGD ", "USD ", "EUR ", "¥", "￥")
_ZH_LABELS = (
    "合计",
    "总计",
    "金额",
    "数量",
    "单价",
    "发票号码",
    "日期",
    "地址",
    "电话",
    "收款",
    "找零",
    "现金",
    "备注",
    "名称",
    "税额",
    "小计",
    "开票日期",
    "购买方",
    "销售方",
    "收据",
    "谢谢惠顾",
)
_PUNCT = ".,:;-/()#&*%@+='\"!?[]<>_|"
# What a receipt's rule lines frame (`==== GST SUMMARY ====`).
_RULE_TITLES = (*_HEADERS, *_THANKS, "GST SUMMARY", "TAX SUMMARY", "PAYMENT", "END")
# Web and mail addresses as receipts print them under the shop's name or at the foot.
_DOMAINS = ("com", "com", "com", "com.my", "my", "net", "org", "co", "com.sg", "biz", "net.my")
_MAIL_HOSTS = ("gmail.com", "yahoo.com", "hotmail.com", "outlook.com", "live.com", "streamyx.com")
_SITES = ("facebook.com", "m.facebook.com", "instagram.com", "twitter.com", "fb.com")
_WEB_LABELS = (
    "E:",
    "EMAIL:",
    "E-MAIL:",
    "EMAIL :",
    "WEBSITE:",
    "WEB:",
    "W:",
    "VISIT US AT",
    "FOLLOW US",
    "EMAIL US:",
)


class TextSource:
    """Seeded line texts; `line()` picks a class by weight, `line_of(kind)` forces one (tests use it)."""

    def __init__(
        self, seed: int, words: Path | Sequence[str] | None = None, chinese: Sequence[str] | None = None
    ) -> None:
        self.rng = random.Random(seed)
        self.words = _load_words(words)
        self.zh = list(chinese) if chinese is not None else common_chinese()
        # Weights (shares of 170): receipt-like structure most of the time, 9% pure random
        # characters to force reading, 11% Chinese or mixed lines, 26% fragments: one or two fields
        # cut from another kind of line, as a text detector boxes a receipt's columns apart (a
        # lone price, a quantity, `TAX`, `Cash`). Half of the lines of real receipts hold 8
        # characters or fewer. 5% are a receipt-like line's fields shuffled, so that no line can
        # be finished from its first words; 2% web or mail addresses; 4% a whole line clipped
        # mid-word at one end, as a detector's box or a fold cuts a printed phrase (`THANK YO`);
        # 3% a shop's terms, their words in any order; 2% the rows of a receipt's tax summary
        # (`S = 6%`, `Z = 0%`, `GST@6%`), whose `%` signs the 2.98% reader misread one time in ten
        # and `@` signs one in five. Rule lines (stars, dashes or equals) are off: the one run
        # with them at weight 2 wrote runs of marks a hundred long for two receipt lines that
        # were none (train/README.md, "Bleeding ink and single-spaced labels").
        self.kinds: dict[str, tuple[float, Callable[[], str]]] = {
            "company": (7, self.company),
            "address": (8, self.address),
            "item": (10, self.item),
            "price": (5, self.price_line),
            "date": (5, self.date_line),
            "invoice": (4, self.invoice),
            "tax_id": (3, self.tax_id),
            "phone": (3, self.phone),
            "label": (8, self.label),
            "thanks": (2, self.thanks),
            "words": (8, self.word_line),
            "random": (15, self.random_chars),
            "chinese": (10, self.chinese),
            "mixed": (8, self.mixed),
            "header": (2, self.header),
            "code": (2, self.code_line),
            "fragment": (44, self.fragment),
            "shuffled": (8, self.shuffled),
            "web": (4, self.web),
            "clipped": (6, self.clipped),
            "terms": (5, self.terms),
            "tax_summary": (3, self.tax_summary),
            "rule": (0, self.rule),
        }

    def line(self) -> str:
        kinds = list(self.kinds)
        weights = [self.kinds[k][0] for k in kinds]
        return self.line_of(self.rng.choices(kinds, weights)[0])

    def _fields_of_one(self, kinds: Sequence[str]) -> list[str]:
        """The space-separated fields of a line of one of `kinds`, drawn at random."""
        return self.kinds[self.rng.choice(kinds)][1]().split()

    def fragment(self) -> str:
        """One field, or two neighbouring ones, of a receipt-like line: what a detector box holds."""
        fields = self._fields_of_one(
            ["item", "price", "label", "date", "phone", "invoice", "company", "code", "tax_summary"]
        )
        if not fields:
            return "0"
        start = self.rng.randrange(len(fields))
        return " ".join(fields[start : start + (2 if self.rng.random() < 0.25 else 1)])

    def line_of(self, kind: str) -> str:
        text = self.kinds[kind][1]()
        # Web lines choose their own case; a rule line's title is a header already.
        if kind not in {"chinese", "mixed", "random", "web", "rule"}:
            text = self._case(self._bracketed(text))
        return self._spaces(text).strip() or "0"

    # --- helpers -------------------------------------------------------------------------------
    def _case(self, text: str) -> str:
        # Receipts print headings, items and totals in capitals, but their terms, addresses and
        # notices often in lower or mixed case: 30% of the receipt lines' ONNX reads are mostly
        # lower case (41% of their characters), and the 3.77% reader, trained on 12% such lines,
        # read them at 4.64% against 3.01% for lines in capitals (train/README.md).
        r = self.rng.random()
        if r < 0.55:
            return text.upper()
        if r < 0.72:
            return title_case(text)
        if r < 0.84:  # a sentence: its first letter a capital (`Keep the invoice for returns`)
            lower = text.lower()
            first = next((i for i, char in enumerate(lower) if char.isalpha()), None)
            return lower if first is None else lower[:first] + lower[first].upper() + lower[first + 1 :]
        return text if r < 0.9 else text.lower()

    def _bracketed(self, text: str) -> str:
        # Brackets round any run of fields, on a few lines: the company lines put a town in
        # brackets and the tax lines a code, and a reader trained on those alone wrote a town
        # whenever a receipt's bracket held something it read badly (`Total Sales (Inclusive of
        # GST) :` read `Total Sales (melaka) s/b & 9.97`). Sometimes the closing one is cut off,
        # as a detector's box cuts a line.
        fields = text.split()
        if len(fields) < 2 or self.rng.random() >= BRACKETED_SHARE:
            return text
        start = self.rng.randrange(len(fields))
        end = min(len(fields), start + self.rng.randint(1, 3))
        opening, closing = self.rng.choice([("(", ")"), ("(", ")"), ("(", ")"), ("[", "]")])
        if end == len(fields) and self.rng.random() < 0.2:
            closing = ""
        inner = " ".join(fields[start:end])
        return " ".join([*fields[:start], f"{opening}{inner}{closing}", *fields[end:]])

    def _spaces(self, text: str) -> str:
        # Receipts align columns with runs of spaces: mostly single, sometimes double, rarely more.
        out = []
        for ch in text:
            if ch == " ":
                r = self.rng.random()
                out.append(" " if r < 0.85 else "  " if r < 0.97 else " " * self.rng.randint(3, 6))
            else:
                out.append(ch)
        return "".join(out)

    def _word(self) -> str:
        return self.rng.choice(self.words)

    def _possessive(self, word: str, share: float) -> str:
        # Receipts print possessives in shop names, notices and items (`MCDONALD'S`, `CUSTOMER'S
        # COPY`, `GARDENIA'S PRODUCTS`, `WORKER'S CARD`), and the word list has them taken out:
        # the 2.98% reader, which had seen an apostrophe only among random characters, misread 17
        # of the receipt crops' 26 (`CUSTOMERS COPY`, `Gardenials`, `McDonald1s`).
        if self.rng.random() >= share:
            return word
        return f"{word}'{'s' if word[-1:].islower() else 'S'}"

    def _digits(self, n: int) -> str:
        return "".join(self.rng.choice(string.digits) for _ in range(n))

    def _serial(self, n: int) -> str:
        # Invoice, bill and tax numbers are printed zero-padded to a fixed width (`00134609`,
        # `000306020352`), and many faces draw that zero like the letter O: only the digits
        # beside it tell them apart. Drawn digit by digit, a run of leading zeros never came up,
        # and a reader read `:000306020352` as `:O00306020352`.
        if n < 2 or self.rng.random() >= ZERO_PADDED_SHARE:
            return self._digits(n)
        significant = self.rng.randint(1, n - 1)
        return "0" * (n - significant) + self.rng.choice("123456789") + self._digits(significant - 1)

    def _short_code(self) -> str:
        # Shop, till and shift codes: a few letters and a short zero-padded number (`SH01`,
        # `B003`, `POS01`, `GA06`), where the zero sits between letters and digits.
        letters = "".join(self.rng.choice(string.ascii_uppercase) for _ in range(self.rng.randint(1, 3)))
        return letters + self._serial(self.rng.randint(2, 4))

    def _pack_size(self) -> str:
        # Sizes are mostly round (`500ML`, `250G`, `1000ML`): a zero printed against a unit's
        # letters, which faces draw like the letter O (`500ML` read `50OML`, `600ML` `60OML`).
        number = self.rng.choice(
            [
                str(self.rng.choice([1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60]) * 10),
                str(self.rng.choice([1, 2, 3, 5]) * 100 * self.rng.choice([1, 10])),
                str(self.rng.randint(1, 999)),
                f"{self.rng.randint(0, 9)}.{self.rng.randint(1, 99)}",
            ]
        )
        size = number + self.rng.choice(_SIZE_UNITS)
        r = self.rng.random()
        if r < 0.15:  # a multipack: `6X330ML`, `12 X 30G`
            return f"{self.rng.choice([2, 3, 4, 6, 10, 12, 24])}{self.rng.choice(['X', ' X ', '*'])}{size}"
        if r < 0.3:  # several measures: `57MMX60MMX12MM`, `30CM*7.62M`
            unit = self.rng.choice(["MM", "CM", "M"])
            parts = [
                f"{self.rng.choice([1, 2, 3, 5, 6]) * 10 + self.rng.choice([0, 0, 2, 5, 7])}{unit}"
                for _ in range(self.rng.randint(2, 3))
            ]
            return self.rng.choice(["X", "*", " X "]).join(parts)
        return size

    def _amount(self) -> str:
        value = self.rng.choice(
            [self.rng.uniform(0, 20), self.rng.uniform(0, 300), self.rng.uniform(0, 20000)]
        )
        # Receipts print many round sums and zeros (cash tendered 50.00, rounding 0.00, a
        # discount of 0.00); drawn uniformly they never came up, and a reader read a clean `0.00`
        # as `O.OO`.
        r = self.rng.random()
        if r < AMOUNT_ZERO_SHARE:
            value = 0.0
        elif r < 0.25:
            value = float(round(value))
        elif r < 0.35:
            value = round(value * 2) / 2
        return f"{value:,.2f}" if value >= 1000 and self.rng.random() < 0.6 else f"{value:.2f}"

    def _money(self) -> str:
        text = self._amount()
        return self.rng.choice(_CURRENCIES) + text if self.rng.random() < 0.35 else text

    # --- line classes ---------------------------------------------------------------------------
    def company(self) -> str:
        words = [self._word() for _ in range(self.rng.randint(1, 3))]
        words[0] = self._possessive(words[0], POSSESSIVE_SHARE)
        if self.rng.random() < 0.02:  # a name with an elided article (`D'ROSH`)
            words[-1] = f"{self.rng.choice('DL')}'{words[-1]}"
        if self.rng.random() < 0.08:  # initials with full stops (`B.I.G.`, `I.T`): dots between letters
            letters = [self.rng.choice(string.ascii_uppercase) for _ in range(self.rng.randint(2, 4))]
            words.insert(0, ".".join(letters) + ("." if self.rng.random() < 0.7 else ""))
        name = " ".join(words)
        if self.rng.random() < 0.5:
            name += " " + self.rng.choice(_SHOP_WORDS)
        if self.rng.random() < 0.3:
            name += f" ({self.rng.choice(_TOWNS).split()[0]})"
        reg = f" ({self._digits(self.rng.randint(5, 7))}-{self.rng.choice('ABDHKMPTUVWX')})"
        return name + " " + self.rng.choice(_LEGAL) + (reg if self.rng.random() < 0.25 else "")

    def address(self) -> str:
        r = self.rng.random()
        number = self.rng.choice(
            [
                f"NO. {self.rng.randint(1, 199)}",
                f"NO.{self.rng.randint(1, 99)}",
                f"NO {self.rng.randint(1, 199)}",
                f"LOT {self.rng.randint(1, 9999)}",
                f"{self.rng.randint(1, 99)}-{self.rng.randint(1, 9)}",
                f"{self.rng.randint(1, 60)}",
                f"G-{self.rng.randint(1, 30)}",
                f"#{self.rng.randint(1, 30):02d}-{self.rng.randint(1, 99):02d}",  # a unit (`#10-02`)
            ]
        )
        if r < 0.35:
            return f"{number}, {self.rng.choice(_STREET)} {self._word()} {self.rng.randint(1, 30)},"
        if r < 0.6:
            return (
                f"{self.rng.choice(_AREA)} {self._word()} {self._word() if self.rng.random() < 0.4 else ''},"
            )
        if r < 0.85:
            # Most receipts end the postcode's line bare or with a comma; a full stop after every
            # state taught the reader to add one (`47500 SUBANG JAYA, SELANGOR` read `... SELANGOR.`).
            end = self.rng.choice([".", "", "", ","])
            return f"{self._digits(5)} {self.rng.choice(_TOWNS)}, {self.rng.choice(_STATES)}{end}"
        return (
            f"{number} {self.rng.choice(_STREET)} {self._word()}, {self._digits(5)} {self.rng.choice(_TOWNS)}"
        )

    def item(self) -> str:
        qty = self.rng.randint(1, 24)
        unit = self._amount()
        total = f"{qty * float(unit.replace(',', '')):.2f}"
        desc = " ".join(self._possessive(self._word(), 0.04) for _ in range(self.rng.randint(1, 3)))
        if self.rng.random() < 0.08:  # a pack's count (`PAPER 100'S`, `GEL PEN 3'S`)
            desc += f" {self.rng.choice([2, 3, 5, 6, 10, 12, 20, 24, 50, 100])}'S"
        if self.rng.random() < PACK_SIZE_SHARE:  # before the name (`500ML COKE`) or after it
            size = self._pack_size()
            desc = f"{size} {desc}" if self.rng.random() < 0.3 else f"{desc} {size}"
        r = self.rng.random()
        if r < 0.15:
            return f"{self._digits(13)} {desc}"
        if r < 0.25:  # a shop's own short item code (`5588 EAGLE FRIED DACE`, `0155 TWISTIES`)
            return f"{self._serial(self.rng.randint(3, 6))} {desc}"
        if r < 0.5:
            return f"{qty} X {unit} {total}"
        if r < 0.7:
            tax_code = self.rng.choice(["SR", "ZR", "S", "Z", ""])
            return f"{desc} {qty} {self.rng.choice(_UNITS)} {unit} {total} {tax_code}"
        if r < 0.85:
            sku = f"{self.rng.choice(string.ascii_uppercase)}{self._serial(self.rng.randint(3, 7))}"
            # Some shops mark an item code's end with `#` (`A002#`, `PLACEMAT 145#`).
            sku += "#" if self.rng.random() < 0.15 else ""
            return f"{sku} {desc} {total}"
        return f"{qty} {desc} @{self.rng.choice(['', ' '])}{unit}"

    def price_line(self) -> str:
        return self.rng.choice(
            [self._money(), f"{self._money()} {self._money()}", f"{self.rng.choice(_LABELS)} {self._money()}"]
        )

    def date_line(self) -> str:
        d, m, y = self.rng.randint(1, 31), self.rng.randint(1, 12), self.rng.randint(1995, 2030)
        t = f"{self.rng.randint(0, 23):02d}:{self.rng.randint(0, 59):02d}"
        if self.rng.random() < 0.5:
            t += f":{self.rng.randint(0, 59):02d}"
        if self.rng.random() < 0.3:
            t += self.rng.choice([" AM", " PM", "AM", "PM"])
        date = self.rng.choice(
            [
                f"{d:02d}/{m:02d}/{y}",
                f"{d}/{m}/{y % 100:02d}",
                f"{d:02d}-{m:02d}-{y}",
                f"{y}-{m:02d}-{d:02d}",
                f"{d:02d} {_MONTHS[m - 1]} {y}",
                f"{d:02d}.{m:02d}.{y}",
                f"{_MONTHS[m - 1]} {d}, {y}",
                f"{y}年{m}月{d}日",
            ]
        )
        return self.rng.choice(
            [
                date,
                f"{date} {t}",
                f"DATE: {date}",
                f"DATE : {date}  TIME : {t}",
                t,
                f"{date} {t} {self.rng.choice(['CASHIER', 'POS', 'TERMINAL'])}: {self._serial(3)}",
                f"{date} {t} {self._short_code()} {self._short_code()}",
                self._opening_hours(),
            ]
        )

    def _opening_hours(self) -> str:
        # Shops print their hours under the address, often as 24-hour clock figures full of zeros
        # (`SUN-THU:1000 HRS - 2200 HRS`, `OPEN DAILY 10.00AM - 10.00PM`).
        days = self.rng.choice(_OPEN_DAYS)
        start, end = self.rng.randint(6, 11), self.rng.randint(17, 23)
        times = self.rng.choice(
            [
                (f"{start:02d}00 HRS", f"{end:02d}00 HRS"),
                (f"{start}.00AM", f"{end - 12}.00PM"),
                (f"{start}AM", f"{end - 12}PM"),
                (f"{start:02d}:00", f"{end:02d}:{self.rng.choice(['00', '30'])}"),
            ]
        )
        head = self.rng.choice(
            [f"{days}:", f"{days} :", f"OPEN {days}", "BUSINESS HOURS:", "OPENING HOURS :"]
        )
        gap = self.rng.choice(["", " "]) if head.endswith(":") else " "
        return f"{head}{gap}{times[0]}{self.rng.choice([' - ', '-', ' TO '])}{times[1]}"

    def invoice(self) -> str:
        label = self.rng.choice(
            [
                "INVOICE NO",
                "INV NO",
                "RECEIPT NO",
                "RECEIPT #",
                "BILL NO",
                "DOC NO",
                "REF",
                "TRANS NO",
                "ORDER NO",
                "SLIP NO",
                "CHECK",
                "BILL#",
                "ORD #",
                "REG #",
                "ORDER #",
                "TABLE #",
            ]
        )
        prefix = self.rng.choice(["", "INV", "CS", "R", "T", "OR", "TX", "SI-"])
        sep = self.rng.choice([": ", " : ", ":", " "])
        return f"{label}{sep}{prefix}{self._serial(self.rng.randint(4, 10))}"

    def tax_id(self) -> str:
        return self.rng.choice(
            [
                f"GST REG NO: {self._serial(12)}",
                f"GST ID : {self._serial(12)}",
                f"GST @{self.rng.choice(['', ' '])}{self.rng.choice([6, 0, 10, 7])}% {self._money()}",
                f"SST ID: {self.rng.choice('ABCW')}{self._digits(2)}-{self._digits(4)}-{self._digits(8)}",
                f"CO. REG. NO. {self._digits(6)}-{self.rng.choice('AKPTVW')}",
                f"({self._digits(6)}-{self.rng.choice('AKPTVW')})",
                f"TIN: {self._digits(10)}",
            ]
        )

    def phone(self) -> str:
        number = self.rng.choice(
            [
                f"0{self.rng.randint(3, 9)}-{self._digits(4)} {self._digits(4)}",
                f"0{self.rng.randint(3, 9)}-{self._digits(7)}",
                f"+60 1{self._digits(1)}-{self._digits(7)}",
                f"({self._digits(3)}) {self._digits(3)}-{self._digits(4)}",
                f"010-{self._digits(8)}",
            ]
        )
        return f"{self.rng.choice(['TEL', 'TEL:', 'TEL NO:', 'PHONE:', 'FAX:', 'HP:', 'H/P'])} {number}"

    def label(self) -> str:
        sep = self.rng.choice([" :", ":", " : ", " ", "  "])
        if self.rng.random() < 0.5:
            name = self.rng.choice(_LABELS)
        else:  # words of receipt labels in any order, so no phrase can be guessed from its start
            name = " ".join(self.rng.choice(_LABEL_WORDS) for _ in range(self.rng.randint(1, 4)))
        value = self._money() if self.rng.random() < 0.6 else ""
        return f"{name}{sep}{value}"

    def shuffled(self) -> str:
        """The fields of a receipt-like line in a random order: read, not recalled from the pattern."""
        fields = self._fields_of_one(
            ["item", "label", "thanks", "header", "address", "company", "price", "date"]
        )
        self.rng.shuffle(fields)
        return " ".join(fields) or "0"

    def clipped(self, kind: str | None = None) -> str:
        """A receipt's fixed phrase or line cut at any character, mostly at its end.

        The 3.77% reader finished such lines from the phrases it was trained on (`GOODS SOLD ARE NOT
        RETURNABLE TH` read `... RETURNABLE THANK (KINABALU)`, `PLEASE COME AGAIN !` with `THANK
        ***` after it): a line that stops mid-word teaches it to stop where the ink stops.
        """
        kind = kind or self.rng.choice(["thanks", "label", "company", "address", "header", "item"])
        text = self.kinds[kind][1]().strip()
        if len(text) < 6:
            return text or "0"
        keep = self.rng.randint(3, len(text) - 2)
        clipped = text[:keep] if self.rng.random() < 0.75 else text[len(text) - keep :]
        return clipped.strip() or "0"

    def terms(self) -> str:
        """One or two sentences of a receipt's terms in words drawn at random: read, never recalled.

        Each sentence mostly ends in a full stop, as a receipt's notices do (`GOODS SOLD ARE NOT
        RETURNABLE. THANK YOU.`): the text source the 3.77% reader learnt from put one only after an
        abbreviation or a state's name, and that reader wrote a comma for the full stop after any
        other word.
        """
        sentences = []
        for _ in range(1 if self.rng.random() < 0.6 else 2):
            # About as many short common words as content words, as in the sentences they stand for.
            words = [
                self.rng.choice(_TERMS_GLUE)
                if self.rng.random() < 0.45
                else self._possessive(self.rng.choice(_TERMS_WORDS), 0.04)
                for _ in range(self.rng.randint(2, 6))
            ]
            if len(words) > 2 and self.rng.random() < 0.25:  # a comma inside, between two clauses
                words[self.rng.randrange(len(words) - 1)] += ","
            sentences.append(" ".join(words) + self.rng.choice([".", ".", ".", ".", "!", "", " :"]))
        # Shops number their terms (`1. ALL SALES ARE FINAL.`, `2) NO REFUND`); a reader that saw
        # a digit before words only in addresses and items wrote `1, All sales are final.`.
        if self.rng.random() < NUMBERED_TERMS_SHARE:
            number = self.rng.randint(1, 9)
            marker = self.rng.choice([f"{number}.", f"{number}.", f"{number})", f"({number})", "*", "-"])
            sentences[0] = f"{marker}{self.rng.choice([' ', ' ', '  '])}{sentences[0]}"
        return " ".join(sentences)

    def tax_summary(self) -> str:
        """A row of a receipt's tax summary, or the rate as a total line gives it.

        `S = 6%`, `Z = 0%  12.00  0.00`, `SR @ 6%`, `(@ 6%)`, `TOTAL INCL. GST@6%`: a tax code, an
        equals sign or an at sign and a rate, glued or spaced as printers set them; a lone zero
        after letters is a rate here, not an O.
        """
        rng = self.rng
        code = rng.choice(["S", "Z", "SR", "ZR", "E", "T", "N", "ES", "OS"])
        # Zero-rated and exempt codes carry 0%, standard ones a rate (6% in the GST years).
        zero = code in {"Z", "ZR", "E", "ES", "OS"} and rng.random() < 0.8
        rate = f"{0 if zero else rng.choice([6, 6, 10, 5, 8, 0])}{rng.choice(['%', '%', '%', '%', ' %'])}"
        gap = rng.choice(["", " "])
        row = rng.choice(
            [
                f"{code} = {rate}",
                f"{code}={rate}",
                f"{code}{gap}@{gap}{rate}",
                f"{code} {rate}",
                f"({gap}@ {rate})",
                f"({code}@{rate})",
                f"GST{gap}@{gap}{rate}",
                f"TOTAL {rng.choice(['INCL.', 'EXCL.', 'INCL', 'EXCL'])} GST{gap}@{gap}{rate}",
            ]
        )
        if rng.random() < 0.5:
            row += "".join(f" {self._amount()}" for _ in range(rng.randint(1, 2)))
        return row

    def thanks(self) -> str:
        """A receipt's closing phrase; a third of them end in a full stop, some two phrases so."""
        phrase = self.rng.choice(_THANKS)
        r = self.rng.random()
        if r < 0.15 and phrase[-1].isalpha():
            return f"{phrase}. {self.rng.choice(_THANKS)}."
        return f"{phrase}." if r < 0.35 and phrase[-1].isalpha() else phrase

    def rule(self) -> str:
        """A receipt's rule: a run of stars, dashes, equals or dots, spaced out or round a title.

        Receipts part their sections with such lines (`********`, `- - - -`, `==== GST SUMMARY
        ====`); a reader that never saw one writes letters for the marks.
        """
        mark = self.rng.choice("**--==._")
        draw = self.rng.random()
        if draw < 0.2:
            return " ".join(mark * self.rng.randint(3, 16))
        if draw < 0.6:
            return mark * self.rng.randint(3, 40)
        title = self.rng.choice(_RULE_TITLES)
        sides = [mark * self.rng.randint(3, 14) for _ in range(2)]
        if self.rng.random() < 0.7:
            sides[1] = sides[0]
        gap = " " if self.rng.random() < 0.8 else ""
        return f"{sides[0]}{gap}{title}{gap}{sides[1]}"

    def header(self) -> str:
        return self.rng.choice(_HEADERS)

    def code_line(self) -> str:
        return self.rng.choice(
            [
                self._digits(13),
                f"*{self._digits(8)}*",
                f"#{self._digits(6)}",
                f"{self.rng.choice(string.ascii_uppercase)}{self._digits(4)}-{self._digits(3)}",
                f"{self._short_code()} {self._short_code()}",
                self._short_code(),
                self._serial(self.rng.randint(6, 12)),
                f"{self._digits(self.rng.randint(3, 4))}#",
            ]
        )

    def web(self) -> str:
        """An e-mail or web address, sometimes after its label: receipts print both, in any case."""
        rng = self.rng

        def name() -> str:
            parts = [self._word().lower() for _ in range(rng.randint(1, 2))]
            joined = rng.choice(["", "", ".", "_", "-"]).join(parts)
            return joined + (self._digits(rng.randint(1, 4)) if rng.random() < 0.3 else "")

        host = f"{name()}.{rng.choice(_DOMAINS)}"
        r = rng.random()
        if r < 0.35:
            text = f"{name()}@{rng.choice(_MAIL_HOSTS) if rng.random() < 0.5 else host}"
        elif r < 0.6:
            text = f"www.{host}"
        elif r < 0.8:
            path = "-".join(self._word().capitalize() for _ in range(rng.randint(1, 3)))
            text = f"{rng.choice(['https', 'http'])}://{rng.choice(['', 'www.', 'm.'])}{host}/{path}"
        else:
            text = (
                f"{rng.choice(_SITES)}/{''.join(self._word().capitalize() for _ in range(rng.randint(1, 3)))}"
            )
        case = rng.random()
        text = text.lower() if case < 0.45 else text.upper() if case < 0.8 else text
        if rng.random() < 0.35:
            text = f"{rng.choice(_WEB_LABELS)} {text}"
        return text

    def word_line(self) -> str:
        return " ".join(self._word() for _ in range(self.rng.randint(1, 7)))

    def random_chars(self) -> str:
        pool = self.rng.choice(
            [
                string.ascii_uppercase + string.digits,
                string.ascii_letters + string.digits,
                string.ascii_uppercase + string.digits + _PUNCT,
                string.digits + ".,-/:",
            ]
        )
        parts = [
            "".join(self.rng.choice(pool) for _ in range(self.rng.randint(1, 9)))
            for _ in range(self.rng.randint(1, 6))
        ]
        return " ".join(parts)

    def chinese(self) -> str:
        n = self.rng.randint(2, 22)
        text = "".join(self.rng.choice(self.zh) for _ in range(n))
        if self.rng.random() < 0.3:
            text = f"{self.rng.choice(_ZH_LABELS)}{self.rng.choice(['：', ':', ''])}{text}"
        if self.rng.random() < 0.3:
            text += self.rng.choice(["。", "，", "、", "；", "！", "（一）", "）"])
        return text

    def mixed(self) -> str:
        parts = [self.rng.choice(_ZH_LABELS) + self.rng.choice(["：", ":", " "])]
        parts.append(
            self.rng.choice(
                [
                    self._money(),
                    self._digits(self.rng.randint(3, 11)),
                    self._word().upper(),
                    "".join(self.rng.choice(self.zh) for _ in range(self.rng.randint(1, 6))),
                    self.date_line(),
                    f"{self.rng.randint(1, 99)} {self.rng.choice(_UNITS)}",
                ]
            )
        )
        if self.rng.random() < 0.5:
            parts.append(" " + "".join(self.rng.choice(self.zh) for _ in range(self.rng.randint(1, 8))))
        return "".join(parts)


def _load_words(words: Path | Sequence[str] | None) -> list[str]:
    if words is None:
        return list(_FALLBACK_WORDS)
    if isinstance(words, Path):
        # Debian's list has possessives ("apple's") and accented entries; keep plain ASCII words.
        raw = words.read_text(encoding="utf-8", errors="ignore").split()
        kept = [w for w in raw if w.isascii() and w.isalpha() and "'" not in w and len(w) > 1]
        return kept or list(_FALLBACK_WORDS)
    return list(words)


def main() -> None:
    """Prints sample lines: `python -m train.text_source [N] [WORDS]`."""
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    source = TextSource(0, Path(sys.argv[2]) if len(sys.argv) > 2 else None)
    for _ in range(n):
        print(repr(source.line()))


if __name__ == "__main__":
    main()

"""The synthetic line source: seeded, covering every class of line, with realistic spacing."""

from __future__ import annotations

import re
from pathlib import Path

from train.text_source import (
    _TERMS_GLUE,
    _TERMS_WORDS,
    _THANKS,
    TextSource,
    common_chinese,
    label_of,
    letter_case,
    title_case,
)


def test_same_seed_gives_the_same_lines_and_another_seed_others() -> None:
    first = _lines(TextSource(7), 200)
    again = _lines(TextSource(7), 200)
    other = _lines(TextSource(8), 200)
    assert first == again
    assert first != other


def test_every_kind_of_line_appears_in_a_few_thousand_lines() -> None:
    source = TextSource(3)
    kinds = list(source.kinds)
    for kind in kinds:
        lines = [source.line_of(kind) for _ in range(20)]
        assert all(line and line == line.strip() for line in lines), kind
    lines = _lines(TextSource(4), 3000)
    assert any(re.search(r"\d+\.\d\d", line) for line in lines)  # prices
    assert any(re.search(r"\d{1,2}[/-]\d{1,2}[/-]\d{2,4}", line) for line in lines)  # dates
    assert any(re.search(r"SDN|LTD|ENTERPRISE|TRADING|S/B", line) for line in lines)  # legal forms
    assert any(re.search(r"\b\d{5}\b [A-Z]", line) for line in lines)  # postcode and town
    assert any("JALAN" in line or "JLN" in line or "TAMAN" in line or "TMN" in line for line in lines)
    assert any(re.search(r"\b\d{13}\b", line) for line in lines)  # EAN-13 item codes
    assert any(line.endswith(":") or " : " in line for line in lines)  # labels with colons
    assert any(re.fullmatch(r"[\u4e00-\u9fff，。：；、！（）一]+", line) for line in lines)  # Chinese
    assert any(re.search(r"[\u4e00-\u9fff]", line) and re.search(r"[A-Z0-9]", line) for line in lines)


def test_rule_lines_run_marks_alone_spaced_out_or_round_a_title() -> None:
    source = TextSource(9)
    rules = [source.line_of("rule") for _ in range(300)]
    runs = re.compile(r"([*=._-])\1{2,}")
    spaced = re.compile(r"([*=._-])( +\1){2,}")  # the source's own spacing may double a gap
    assert all(runs.search(line) or spaced.fullmatch(line) for line in rules)
    assert any(re.fullmatch(r"([*=._-])\1{2,}", line) for line in rules)  # marks alone
    assert any(spaced.fullmatch(line) for line in rules)  # spaced out
    assert any(re.search(r"[A-Z]{3}", line) and runs.match(line) for line in rules)  # round a title
    # Off in the mix until a run shows they do not make the reader write marks where there are none.
    drawn = _lines(TextSource(10), 5000)
    assert sum(bool(re.search(r"[-=*_]{4,}", line)) for line in drawn) < 10


def test_mostly_upper_case_with_single_and_some_double_spaces() -> None:
    lines = [line for line in _lines(TextSource(5), 3000) if re.search("[A-Za-z]", line)]
    upper = sum(line == line.upper() for line in lines)
    assert 0.5 < upper / len(lines) < 0.98
    gaps = [len(gap) for line in lines for gap in re.findall(" +", line)]
    single, double = gaps.count(1), gaps.count(2)
    assert single > 5 * double > 0


def test_words_come_from_the_given_list(tmp_path: Path) -> None:
    words = tmp_path / "words"
    words.write_text("zebra\nquokka\naardvark's\nnaïve\n", encoding="utf-8")
    source = TextSource(1, words)
    assert source.words == ["zebra", "quokka"]  # possessives and non-ASCII entries are dropped
    text = " ".join(source.line_of("words") for _ in range(20)).upper()
    assert set(re.sub(r"[()\[\]]", "", text).split()) <= {"ZEBRA", "QUOKKA"}  # brackets aside


def test_common_chinese_is_gb2312_level_one() -> None:
    chars = common_chinese()
    assert len(chars) == 3755
    assert chars[0] == "啊"
    assert "的" in chars and "我" in chars
    assert common_chinese(10) == chars[:10]


def _lines(source: TextSource, n: int) -> list[str]:
    return [source.line() for _ in range(n)]


def test_the_carried_wheels_are_the_pins_of_the_training_requirements() -> None:
    from train.pack import CARRIED, carried_pins

    pins = carried_pins()
    assert sorted(pin.split("==")[0] for pin in pins) == sorted(CARRIED)
    assert all(pin.split("==")[1] for pin in pins)


def test_many_lines_are_short_fields_as_a_detector_boxes_them() -> None:
    lines = _lines(TextSource(6), 3000)
    short = [line for line in lines if len(line) <= 8]
    assert len(short) > 0.25 * len(lines)  # receipts: a lone price, a quantity, a label
    assert any(re.fullmatch(r"\d+\.\d\d", line) for line in short)
    assert any(re.fullmatch(r"\d{1,2}", line) for line in short)


def test_labels_and_shuffled_lines_cannot_be_finished_from_their_first_word() -> None:
    # A reader trained on a closed list of label phrases wrote one of them after reading its
    # first word; half the labels are now receipt words in any order, and some lines shuffled.
    from train.text_source import _LABEL_WORDS, _LABELS, _THANKS

    source = TextSource(11)
    labels = [source.label() for _ in range(400)]
    composed = [label for label in labels if not label.startswith(_LABELS)]
    assert 0.25 < len(composed) / len(labels) < 0.6
    names = {tuple(word for word in label.split() if word in _LABEL_WORDS) for label in composed}
    assert len(names) > 2 * len(_LABELS)  # not another closed list
    shuffled = [source.shuffled() for _ in range(600)]
    reordered = [
        line
        for line in shuffled
        if any(line != thanks and sorted(line.split()) == sorted(thanks.split()) for thanks in _THANKS)
    ]
    assert reordered  # thank-you lines among them, their words in another order


def test_brackets_hold_any_fields_not_mostly_a_town() -> None:
    # A reader that only ever saw a town or a tax code in brackets wrote a town into a receipt's
    # `(Inclusive of GST)`; brackets now close round any run of a line's fields on a few lines.
    from train.text_source import _TOWNS

    lines = _lines(TextSource(12), 6000)
    inside = [m for line in lines for m in re.findall(r"[(\[]([^)\]]*)[)\]]?", line)]
    towns = {town.split()[0] for town in _TOWNS}
    in_town = sum(text.strip().upper() in towns for text in inside)
    assert len(inside) > 0.07 * len(lines)
    assert in_town < 0.25 * len(inside)
    assert len({text.upper() for text in inside}) > 0.6 * len(inside)  # not a closed list either
    assert any(" " in text.strip() for text in inside)  # runs of several fields
    assert any("[" in line for line in lines)


def test_web_and_mail_addresses_appear_in_lower_and_upper_case() -> None:
    # A reader that had never seen an address read `FACEBOOK.COM/BARWANGRICE` as words.
    source = TextSource(13)
    lines = [source.line_of("web") for _ in range(300)]
    mail = [line for line in lines if re.search(r"[\w.-]+@[\w-]+\.[a-z.]+$", line, re.IGNORECASE)]
    urls = [line for line in lines if re.search(r"(https?://|www\.)[\w.-]+\.[a-z]", line, re.IGNORECASE)]
    assert len(mail) > 50 and len(urls) > 50
    assert any(line == line.lower() for line in lines) and any(line == line.upper() for line in lines)
    assert any(re.match(r"(E-?MAIL|WEB(SITE)?|E|W)\s?:", line) for line in lines)  # after a label
    assert len(set(lines)) > 280  # addresses made of words, not a list of them
    everyday = _lines(TextSource(14), 3000)
    assert 20 < sum("@" in line and "." in line.split("@")[-1] for line in everyday) < 200


def test_amounts_include_zeros_and_round_sums() -> None:
    # Drawn uniformly, 0.00 never came up, and a reader read a clean `0.00` as `O.OO`.
    source = TextSource(15)
    amounts = [source._amount() for _ in range(2000)]
    assert 0.04 < sum(amount == "0.00" for amount in amounts) / len(amounts) < 0.15
    assert 0.2 < sum(amount.endswith(".00") for amount in amounts) / len(amounts) < 0.5
    assert any(amount.endswith(".50") for amount in amounts)
    assert len(set(amounts)) > 0.6 * len(amounts)  # still mostly any sum
    assert any(line == "0.00" for line in _lines(TextSource(16), 5000))  # alone, as a column's field


def test_serial_numbers_are_often_zero_padded_to_their_width() -> None:
    # A zero printed like an O at the head of a number is told by the digits after it, so the
    # lines must hold such numbers: padded invoice and tax numbers, and short codes like SH01.
    lines = _lines(TextSource(6), 3000)
    padded = [m for line in lines for m in re.findall(r"(?<![\d.,])00+[1-9]\d*\b", line)]
    assert len(padded) > 30
    assert any(re.search(r"\b(GST REG NO|GST ID) ?: 0+[1-9]\d*\b", line) for line in lines)
    assert any(re.search(r"\b[A-Z]{1,3}0+[1-9]\d*\b", line) for line in lines)  # SH01, B003
    tax_lines = [line for line in lines if re.match(r"GST (REG NO|ID) ?:", line)]
    tax_numbers = [line.split(":")[-1].strip(" ()[]") for line in tax_lines]
    assert tax_numbers and all(len(number) == 12 for number in tax_numbers)


def test_a_label_is_single_spaced_while_the_line_drawn_keeps_its_wide_gaps() -> None:
    lines = _lines(TextSource(4), 3000)
    wide = [line for line in lines if "  " in line]
    assert len(wide) > 100  # the renderer still draws the gaps of aligned columns
    for line in wide:
        label = label_of(line)
        assert "  " not in label
        assert label.split() == line.split()
    assert label_of("RM   Tax  :  0.60") == "RM Tax : 0.60"


def test_a_clipped_line_is_a_phrase_cut_at_either_end_mostly_mid_word() -> None:
    source = TextSource(12)
    phrases = [" ".join(phrase.upper().split()) for phrase in _THANKS]
    clipped = [" ".join(source.clipped("thanks").upper().split()) for _ in range(400)]
    # A cut may fall where a shorter phrase ends (`THANK YOU` of `THANK YOU, PLEASE COME AGAIN`).
    assert sum(line in phrases for line in clipped) < len(clipped) // 10
    heads = [line for line in clipped if any(p.startswith(line) for p in phrases)]
    tails = [line for line in clipped if any(p.endswith(line) for p in phrases)]
    # A few carry brackets put round their fields, as any receipt-like line may.
    assert len(set(heads) | set(tails)) > 0.8 * len(set(clipped))
    assert len(heads) > 2 * len(tails) > 60
    mid_word = [
        line
        for line in heads
        if any(p.startswith(line) and p[len(line) : len(line) + 1].isalnum() for p in phrases)
    ]
    assert len(mid_word) > len(heads) // 2


def test_terms_lines_are_sentences_of_common_and_receipt_words_never_the_same_twice() -> None:
    source = TextSource(14)
    lines = [source.line_of("terms") for _ in range(300)]
    assert len(set(lines)) == len(lines)  # drawn word by word: nothing to recall
    # A possessive's `'S` aside (`CUSTOMER'S COPY`).
    words = [
        re.sub(r"[^A-Z]", "", re.sub(r"'S\b", "", word.upper())) for line in lines for word in line.split()
    ]
    words = [word for word in words if word]
    assert all(word in _TERMS_GLUE or word in _TERMS_WORDS for word in words)
    glue = sum(word in _TERMS_GLUE for word in words) / len(words)
    assert 0.3 < glue < 0.6  # about as many short common words as the sentences they stand for
    assert sum(len(line.replace(" ", "")) >= 20 for line in lines) > len(lines) // 2


def test_a_quarter_of_the_lines_with_letters_are_mostly_lower_case_some_as_sentences() -> None:
    lines = [line for line in _lines(TextSource(15), 3000) if re.search("[A-Za-z]", line)]
    lower = [line for line in lines if letter_case(line) == "mostly lower"]
    assert 0.25 < len(lower) / len(lines) < 0.5
    sentences = [line for line in lower if re.fullmatch(r"[^A-Za-z]*[A-Z][^A-Z]*", line)]
    assert len(sentences) > len(lines) // 20


def test_notices_end_their_sentences_in_full_stops_after_ordinary_words() -> None:
    source = TextSource(16)
    terms = [source.line_of("terms") for _ in range(400)]
    thanks = [source.line_of("thanks") for _ in range(400)]
    stops = re.compile(r"[A-Za-z]{4,}\.(?: |$)")  # after a word, not an abbreviation such as NO.
    assert sum(bool(stops.search(line)) for line in terms) > len(terms) // 3
    assert (
        sum(bool(re.search(r"[A-Za-z]\. [A-Za-z*]", line)) for line in terms) > len(terms) // 10
    )  # two sentences
    assert len(terms) // 5 < sum(bool(stops.search(line)) for line in thanks) < len(thanks) // 2


def test_abbreviations_and_the_postcode_line_often_go_without_a_full_stop() -> None:
    """Receipts print `NO 21`, `INCL GST`, `TRADING CO` and `... SELANGOR` bare as often as not."""
    source = TextSource(17)
    kinds = {"NO": "address", "INCL": "label", "CO": "company"}
    for word, kind in kinds.items():
        lines = [source.line_of(kind).upper() for _ in range(3000)]
        bare = sum(len(re.findall(rf"\b{word}\b(?![.])", line)) for line in lines)
        dotted = sum(len(re.findall(rf"\b{word}[.]", line)) for line in lines)
        assert dotted > 0 and bare > dotted / 3, (word, bare, dotted)
    postcode = re.compile(r"\d{5} [A-Z ]+, [A-Z .]+[.,]?$")
    postcodes = [
        line for line in (source.line_of("address").upper() for _ in range(3000)) if postcode.match(line)
    ]
    stopped = sum(line.endswith(".") for line in postcodes)
    assert len(postcodes) > 300 and 0.1 < stopped / len(postcodes) < 0.5


def test_possessives_appear_in_names_items_and_notices_their_s_small_in_title_case() -> None:
    # The word list has its possessives taken out; receipts print them (`CUSTOMER'S COPY`).
    lines = _lines(TextSource(17), 6000)
    possessive = [line for line in lines if re.search(r"[A-Za-z0-9]'[Ss]\b", line)]
    assert 30 < len(possessive) < 300
    assert any(re.search(r"\b\d+'S\b", line) for line in possessive)  # a pack's count: `100'S`
    assert not any(re.search(r"[a-z]'S\b", line) for line in lines)  # never str.title's `Ben'S`
    assert any(re.search(r"\b[A-Z][a-z]+'s\b", line) for line in lines)
    assert title_case("BEN'S CAFE (KL) ITEM(S) 3'S") == "Ben's Cafe (Kl) Item(S) 3'S"
    assert title_case("DON'T D'ROSH 10KG") == "Don't D'Rosh 10Kg"


def test_tax_summary_rows_glue_or_space_a_code_a_sign_and_a_rate() -> None:
    source = TextSource(18)
    rows = [source.line_of("tax_summary").upper() for _ in range(1000)]
    assert all("%" in row for row in rows)
    assert any(re.match(r"Z +=? *0 ?%", row) for row in rows)  # the zero after letters is a digit
    assert any(re.search(r"GST@\d+%", row) for row in rows)  # glued, as `TOTAL INCL. GST@6%`
    assert any(re.search(r"\(@ \d+%\)", row) for row in rows)
    assert any(re.search(r"\d %", row) for row in rows)  # spaced: a detector may box `%` alone
    assert any(re.search(r"% \d+\.\d\d", row) for row in rows)  # with the summary's amounts
    fields = _lines(TextSource(19), 20000)  # a tax row's field alone, as a detector boxes it
    assert any(re.fullmatch(r"\(?[A-Za-z]{1,2}[=@]\d+%\)?", line) for line in fields)


def test_item_codes_and_numbers_may_carry_a_hash_before_or_after() -> None:
    lines = _lines(TextSource(20), 6000)
    assert sum(bool(re.search(r"[A-Z]?\d+#", line)) for line in lines) > 10  # `A002#`, `1526#`
    assert any(re.search(r"(BILL#|ORD #|REG #)", line.upper()) for line in lines)
    assert any(re.search(r"#\d\d-\d\d", line) for line in lines)  # a unit number: `#10-02`


def test_initials_with_full_stops_between_letters_appear_in_names() -> None:
    # `B.I.G.`, `I.T PRODUCT`, `E.&.O.E.`: read `BILL`, `LT`, `ELSOLE.` by the 2.98% reader.
    lines = [line.upper() for line in _lines(TextSource(21), 6000)]
    assert sum(bool(re.search(r"\b[A-Z]\.[A-Z]\.[A-Z]", line)) for line in lines) > 6
    assert any("E.&.O.E." in line or "E. & O.E." in line for line in lines)


def test_item_lines_may_start_with_a_short_item_code() -> None:
    # `5588 EAGLE FRIED DACE` was read `SSBB EAGLE ...`: digits before words, not only EAN-13s.
    source = TextSource(22)
    items = [source.line_of("item").upper() for _ in range(2000)]
    short = [line for line in items if re.match(r"\d{3,6} [A-Z']{2,}", line)]
    assert 0.05 < len(short) / len(items) < 0.2
    assert any(re.match(r"0+[1-9]\d* [A-Z]", line) for line in short)  # zero-padded: `0155 TWISTIES`
    assert any(re.match(r"\d{13} [A-Z]", line) for line in items)


def test_item_descriptions_may_name_a_pack_size_with_zeros_against_its_unit() -> None:
    # `500ML COKE` was read `50OML`, `600ML` `60OML`: a zero beside a unit's letters.
    source = TextSource(23)
    items = [source.line_of("item").upper() for _ in range(3000)]
    sized = [line for line in items if re.search(r"\b\d+(\.\d+)?(ML|G|GM|KG|L|CM|MM|M|GR|OZ)\b", line)]
    assert 0.05 < len(sized) / len(items) < 0.3
    assert sum(bool(re.search(r"\d0(ML|G|KG|CM)\b", line)) for line in sized) > 20
    assert any(re.search(r"\d+ ?[X*] ?\d+(ML|G|MM|CM|M)\b", line) for line in sized)  # `6X330ML`


def test_dates_include_opening_hours_in_twenty_four_hour_figures() -> None:
    # `SUN-THU:1000 HRS - 2200 HRS` was read `1OOO HRS - 22OO HRS`.
    source = TextSource(24)
    dates = [source.line_of("date").upper() for _ in range(3000)]
    assert any(re.search(r"\b[01]\d00 HRS ?(-|TO) ?[12]\d00 HRS\b", line) for line in dates)
    assert sum(bool(re.search(r"\d(\.00)?(AM|PM) ?(-|TO) ?\d", line)) for line in dates) > 10


def test_terms_may_be_numbered_as_a_list() -> None:
    # `1. ALL SALES ARE FINAL.` was read `1, All sales are final.`.
    source = TextSource(25)
    terms = [source.line_of("terms") for _ in range(1000)]
    numbered = [line for line in terms if re.match(r"\(?\d[.)] +[A-Za-z]", line)]
    assert 0.1 < len(numbered) / len(terms) < 0.4
    assert any(re.match(r"\d\. ", line) for line in numbered)

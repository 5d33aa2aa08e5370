"""Table-driven tests of each repair rule: what it changes, what it must leave alone."""

from __future__ import annotations

from decimal import Decimal

import pytest

from appliance.repair.amounts import parse_amount
from appliance.repair.chinese_numerals import parse_financial, to_financial
from appliance.repair.confidence import aggregate, with_checks
from appliance.repair.dates import find_dates, parse_date
from appliance.repair.ids import check_id, find_ids
from appliance.repair.json_output import parse_model_json
from appliance.repair.numeric import fix_digits
from appliance.repair.ruleset import RULES, RULESET_VERSION, Check
from appliance.repair.text import normalise
from appliance.repair.totals import check_cash_change, check_items, check_tax


@pytest.mark.parametrize(
    ("text", "expected", "rules"),
    [
        ("ＡＢＣ１２３", "ABC123", ["text.fullwidth"]),
        ("ＴＯＴＡＬ：１２．５０", "TOTAL:12.50", ["text.fullwidth"]),
        ("公司（北京）有限公司", "公司（北京）有限公司", []),  # CJK punctuation in CJK text stays
        ("金额：１００元", "金额：100元", ["text.fullwidth"]),  # digits narrow, the CJK colon stays
        ("你好，世界。", "你好，世界。", []),
        ("(ＡＢＣ)", "(ABC)", ["text.fullwidth"]),
        ("a  b\tc ", "a b c", ["text.whitespace"]),
        ("ＡＢ　ＣＤ", "AB CD", ["text.fullwidth"]),
        ("中文　中文", "中文　中文", []),  # the ideographic space is CJK spacing there
        ("plain text", "plain text", []),
    ],
)
def test_text_normalisation(text: str, expected: str, rules: list[str]) -> None:
    result = normalise(text)
    assert result.text == expected
    assert result.rules == rules
    assert len(result.kept) == len(result.text)


def test_whitespace_removal_keeps_confidence_alignment() -> None:
    result = normalise("A  B")
    assert result.text == "A B"
    assert result.kept == [0, 1, 3]  # the second space (index 2) is dropped with its confidence


@pytest.mark.parametrize(
    ("value", "expected", "changed"),
    [
        ("1O.5O", "10.50", True),
        ("l2.3S", "12.35", True),
        ("B8.00", "88.00", True),
        ("12.50", "12.50", False),
        ("TOTAL", "TOTAL", False),  # no digits: a word, not a number
        ("SOLD", "SOLD", False),
        ("SO", "SO", False),
        ("1OOO", "1OOO", False),  # more confusables than digits: too unsure to rewrite
        ("12 kg", "12 kg", False),  # a letter that is no confusable: not a bare number
    ],
)
def test_numeric_confusions_only_in_numbers(value: str, expected: str, changed: bool) -> None:
    assert fix_digits(value) == (expected, changed)


@pytest.mark.parametrize(
    ("raw", "locale", "value", "rules"),
    [
        ("RM 1,007.50", "en-MY", "1007.50", {"amount.currency", "amount.thousands", "amount.decimal_point"}),
        ("$8.20", "en-US", "8.20", {"amount.currency", "amount.decimal_point"}),
        ("1.234,56 €", "de-DE", "1234.56", {"amount.currency", "amount.thousands", "amount.decimal_comma"}),
        ("12,50", "en-MY", "12.50", {"amount.decimal_comma"}),  # two decimals: a decimal comma anywhere
        ("1,000", "en-MY", "1000", {"amount.thousands"}),  # ambiguous: the locale's point decides
        ("1,000", "de-DE", "1.000", {"amount.decimal_comma"}),
        ("1.000", "de-DE", "1000", {"amount.thousands"}),
        ("1 234 567,8", "fr-FR", "1234567.8", {"amount.thousands", "amount.decimal_comma"}),
        ("1O.5O", "en-MY", "10.50", {"numeric.confusion", "amount.decimal_point"}),
        ("¥1,280.00", "zh-CN", "1280.00", {"amount.currency", "amount.thousands", "amount.decimal_point"}),
        ("壹佰贰拾叁元肆角伍分", "zh-CN", "123.45", {"amount.cn_financial"}),
        ("-3.00", "en-MY", "-3.00", {"amount.decimal_point"}),
    ],
)
def test_amounts(raw: str, locale: str, value: str, rules: set[str]) -> None:
    amount = parse_amount(raw, locale)
    assert amount is not None
    assert amount.text == value
    assert set(amount.rules) == rules


@pytest.mark.parametrize("raw", ["TOTAL", "", "12/03/2018", "RM", "abc 12"])
def test_not_amounts(raw: str) -> None:
    assert parse_amount(raw, "en-MY") is None


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("0", "零元整"),
        ("0.50", "伍角整"),
        ("0.05", "伍分"),
        ("10", "壹拾元整"),
        ("20.07", "贰拾元零柒分"),
        ("1005.30", "壹仟零伍元叁角整"),
        ("100000", "壹拾万元整"),
        ("1000100", "壹佰万零壹佰元整"),
        ("10050", "壹万零伍拾元整"),
        ("123456789.12", "壹亿贰仟叁佰肆拾伍万陆仟柒佰捌拾玖元壹角贰分"),
        ("100000000", "壹亿元整"),
        ("1000000000000", "壹万亿元整"),
    ],
)
def test_chinese_financial_numerals_both_ways(value: str, written: str) -> None:
    assert to_financial(Decimal(value)) == written
    assert parse_financial(written) == Decimal(value)


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ("人民币壹拾万元整", "100000"),
        ("拾元", "10"),  # 拾 without a digit before it is 10
        ("￥贰佰叁拾肆元伍角陆分", "234.56"),
        ("壹佰圆正", "100"),
        ("一百二十元", "120"),  # everyday digits mixed in
    ],
)
def test_chinese_financial_variants(written: str, value: str) -> None:
    assert parse_financial(written) == Decimal(value)


@pytest.mark.parametrize("written", ["hello", "壹元伍", "整"])
def test_not_chinese_financial(written: str) -> None:
    assert parse_financial(written) is None


def test_chinese_financial_round_trip_many() -> None:
    for cents in [*range(0, 100_000, 37), 10**10 + 5, 10**8 + 10**4, 200_300_400_500]:
        value = Decimal(cents) / 100
        assert parse_financial(to_financial(value)) == value, value


@pytest.mark.parametrize(
    ("text", "locale", "iso", "rule", "ambiguous"),
    [
        ("2024年3月5日", "zh-CN", "2024-03-05", "date.cjk", False),
        ("2024-03-05", "en-US", "2024-03-05", "date.iso", False),
        ("2024/3/5", "en-MY", "2024-03-05", "date.iso", False),
        ("05/03/2024", "en-MY", "2024-03-05", "date.dmy", True),  # ambiguous: the locale decided
        ("05/03/2024", "en-US", "2024-05-03", "date.mdy", True),
        ("25/12/2018", "en-US", "2018-12-25", "date.dmy", False),  # 25 cannot be a month
        ("12/25/2018", "en-MY", "2018-12-25", "date.mdy", False),
        ("05-02-18", "en-MY", "2018-02-05", "date.dmy", True),
        ("07/07/2020", "en-US", "2020-07-07", "date.mdy", False),  # same either way
        ("5 Mar 2024", "en-MY", "2024-03-05", "date.month_name", False),
        ("Mar 5, 2024", "en-MY", "2024-03-05", "date.month_name", False),
        ("05Mar201818:24", "en-MY", "2018-03-05", "date.month_name", False),  # spaces lost by OCR
        ("10 OCT 2017", "en-MY", "2017-10-10", "date.month_name", False),
        ("DATE: 25/12/20188:13:39PM", "en-MY", "2018-12-25", "date.dmy", False),
        ("10/03/201817:24:07", "en-MY", "2018-03-10", "date.dmy", True),  # the time glued on
        ("Date:17/06/20187:36:12PM", "en-MY", "2018-06-17", "date.dmy", False),
        ("2018-03-2317:24", "en-MY", "2018-03-23", "date.iso", False),
        ("DATE :100CT2017 TUE", "en-MY", "2017-10-10", "date.month_name", False),  # O read as 0
        ("01:34PM 568017 05 02-18", "en-MY", "2018-02-05", "date.dmy", True),  # a separator lost
        ("2O18-O3-23", "en-MY", "2018-03-23", "date.iso", False),
    ],
)
def test_dates(text: str, locale: str, iso: str, rule: str, ambiguous: bool) -> None:
    date = parse_date(text, locale)
    assert date is not None
    assert (date.iso, date.rules[0], date.ambiguous) == (iso, rule, ambiguous)


@pytest.mark.parametrize("text", ["31/02/2018", "TEL 03-1234 5678", "12.50", "2018", "13/13/2018"])
def test_not_dates(text: str) -> None:
    assert find_dates(text, "en-MY") == []


def test_two_digit_year_is_reported() -> None:
    date = parse_date("12/03/18", "en-MY")
    assert date is not None and "date.two_digit_year" in date.rules and date.iso == "2018-03-12"


@pytest.mark.parametrize(
    ("kind", "raw", "passed", "rule"),
    [
        ("card", "4111 1111 1111 1111", True, "id.luhn"),
        ("card", "4111 1111 1111 1112", False, "id.luhn"),
        ("iban", "GB82 WEST 1234 5698 7654 32", True, "id.iban.mod97"),
        ("iban", "GB82 WEST 1234 5698 7654 33", False, "id.iban.mod97"),
        ("iban", "DE89370400440532013000", True, "id.iban.mod97"),
        ("isbn10", "0-306-40615-2", True, "id.isbn10"),
        ("isbn10", "0-306-40615-3", False, "id.isbn10"),
        ("isbn13", "978-0-306-40615-7", True, "id.isbn13"),
        ("isbn13", "978-0-306-40615-8", False, "id.isbn13"),
        ("ean13", "4006381333931", True, "id.ean13"),
        ("ean13", "4006381333932", False, "id.ean13"),
        ("ean13", "4OO6381333931", True, "id.ean13"),  # confusions repaired inside an ID
        ("cn_ric", "11010519491231002X", True, "id.cn_ric.gb11643"),
        ("cn_ric", "110105194912310021", False, "id.cn_ric.gb11643"),
        ("cn_uscc", "91110000600037341L", True, "id.cn_uscc.gb32100"),
        ("cn_uscc", "91110000600037341M", False, "id.cn_uscc.gb32100"),
    ],
)
def test_id_checksums(kind: str, raw: str, passed: bool, rule: str) -> None:
    result = check_id(kind, raw)
    assert (result.passed, result.rule_id) == (passed, rule)


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("IBAN: GB82 WEST 1234 5698 7654 32", [("iban", True)]),
        ("ISBN 978-0-306-40615-7", [("isbn13", True)]),
        ("统一社会信用代码：91110000600037341L", [("cn_uscc", True)]),
        ("身份证号码：11010519491231002X", [("cn_ric", True)]),
        ("Card No: 4111 1111 1111 1112", [("card", False)]),
        ("EAN 4006381333931", [("ean13", True)]),
        ("INV NO OR18030502160349", []),  # a document number is not taken for an IBAN
        ("9556939040116 KF CLAY", []),  # an unlabelled 13-digit code is not checked
    ],
)
def test_ids_found_in_text(text: str, kinds: list[tuple[str, bool]]) -> None:
    assert [(found.kind, found.passed) for found in find_ids(text)] == kinds


@pytest.mark.parametrize(
    ("subtotal", "tax", "total", "rounding", "passed"),
    [
        ("100.00", "6.00", "106.00", None, True),
        ("100.00", "6.00", "106.05", "0.05", True),
        ("106.00", "6.00", "106.00", None, True),  # prices printed tax-inclusive
        ("100.00", "6.00", "116.00", None, False),
    ],
)
def test_tax_cross_check(subtotal: str, tax: str, total: str, rounding: str | None, passed: bool) -> None:
    check = check_tax(
        Decimal(subtotal), Decimal(tax), Decimal(total), Decimal(rounding) if rounding else None
    )
    assert check is not None and check.passed is passed and check.rule_id == "total.tax"


def test_service_charge_is_part_of_the_total() -> None:
    check = check_tax(
        Decimal("295.00"), Decimal("19.47"), Decimal("343.95"), Decimal("-0.02"), Decimal("29.50")
    )
    assert check is not None and check.passed
    without = check_tax(Decimal("295.00"), Decimal("19.47"), Decimal("343.95"), Decimal("-0.02"))
    assert without is not None and not without.passed


def test_cash_minus_change_is_the_total() -> None:
    assert check_cash_change(Decimal("50.00"), Decimal("21.70"), Decimal("28.30")) == Check(
        "total.cash_change", True, "50.00 - 21.70 vs 28.30"
    )
    assert not check_cash_change(Decimal("50.00"), Decimal("32.55"), Decimal("117.45")).passed  # type: ignore[union-attr]
    # change counted from the unrounded amount: the printed rounding is allowed for
    check = check_cash_change(Decimal("10.03"), Decimal("5.00"), Decimal("5.00"), Decimal("0.03"))
    assert check is not None and check.passed
    assert check_cash_change(Decimal("50.00"), None, Decimal("28.30")) is None


def test_tax_cross_check_needs_both_values() -> None:
    assert check_tax(None, Decimal(1), Decimal(2)) is None


@pytest.mark.parametrize(
    ("items", "subtotal", "total", "passed"),
    [
        (["1.00", "2.50"], None, "3.50", True),
        (["1.00", "2.50"], "3.50", "3.71", True),
        (["1.00", "2.50"], None, "4.50", False),
    ],
)
def test_items_cross_check(items: list[str], subtotal: str | None, total: str, passed: bool) -> None:
    check = check_items([Decimal(i) for i in items], Decimal(subtotal) if subtotal else None, Decimal(total))
    assert check is not None and check.passed is passed


def test_items_cross_check_stops_at_the_sums_a_count_left_in() -> None:
    # a tax summary's taxable amount read as one more item: the first items still add up
    check = check_items([Decimal("5.20"), Decimal("8.90"), Decimal("13.30")], None, Decimal("14.10"))
    assert check is not None and check.passed
    # prices without tax: items plus the tax make the total
    check = check_items([Decimal("10.00"), Decimal("11.32")], None, Decimal("22.60"), Decimal("1.28"))
    assert check is not None and check.passed
    check = check_items([Decimal("5.20"), Decimal("5.20"), Decimal("8.90")], None, Decimal("14.10"))
    assert check is not None and not check.passed


def test_items_cross_check_needs_two_items() -> None:
    assert check_items([Decimal(1)], None, Decimal(1)) is None


SCHEMA = {"type": "object", "required": ["total"], "properties": {"total": {"type": "string"}}}


@pytest.mark.parametrize(
    ("text", "value", "repaired", "valid"),
    [
        ('{"total": "9.00"}', {"total": "9.00"}, False, True),
        ('```json\n{total: "9.00",}\n```', {"total": "9.00"}, True, True),
        ('{"total": "9.00"', {"total": "9.00"}, True, True),
        ('{"total": 9}', {"total": 9}, False, False),  # parses, but the schema says string
        ("no json here", None, False, False),
    ],
)
def test_model_json(text: str, value: object, repaired: bool, valid: bool) -> None:
    result = parse_model_json(text, SCHEMA)
    assert result.value == value
    assert bool(result.changes) is repaired
    assert all(change.rule_id == "json.repair" for change in result.changes)
    assert result.valid is valid


@pytest.mark.parametrize(
    ("values", "method", "expected"),
    [
        ([0.9, 0.5, 1.0], "min", 0.5),
        ([0.5, 1.0], "mean", 0.75),
        ([0.5, 0.5], "product", 0.25),
        ([0.25, 1.0], "geomean", 0.5),
        ([], "min", 0.0),
    ],
)
def test_confidence_aggregates(values: list[float], method: str, expected: float) -> None:
    assert aggregate(values, method) == pytest.approx(expected)  # type: ignore[arg-type]


def test_passing_checks_raise_confidence_and_failing_leave_it() -> None:
    assert with_checks(0.8, [True]) == pytest.approx(0.9)
    assert with_checks(0.8, [False]) == pytest.approx(0.8)


def test_ruleset_is_versioned_and_rule_ids_are_stable_strings() -> None:
    assert RULESET_VERSION.count(".") == 2
    assert all(rule == rule.lower() and " " not in rule for rule in RULES)

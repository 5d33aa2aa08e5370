"""The receipt profile on documents built by hand: fields, checks, review flags and the JSON schema."""

from __future__ import annotations

import pytest

from appliance.config import RepairConfig
from appliance.document import Block, Document, Line, Page, SourceFile, Word
from appliance.outputs.json_result import validate_result
from appliance.repair.ruleset import RULESET_VERSION
from appliance.repair.step import repair_document


def _line(text: str, y: float, x: float = 10.0, confidence: float = 0.99) -> Line:
    width = 10.0 * len(text)
    box = (x, y, x + width, y + 20)
    words = []
    offset = 0
    for word in text.split(" "):
        if word:
            start = x + 10 * text.index(word, offset)
            words.append(Word(word, (start, y, start + 10 * len(word), y + 20), confidence))
            offset = text.index(word, offset) + len(word)
    polygon = ((box[0], box[1]), (box[2], box[1]), (box[2], box[3]), (box[0], box[3]))
    return Line(text, box, polygon, confidence, [confidence] * len(text), words)


def _document(rows: list[list[str]], confidence: float = 0.99) -> Document:
    blocks = [
        Block([_line(text, 30.0 * index, 10 + 300 * n, confidence) for n, text in enumerate(row)])
        for index, row in enumerate(rows)
    ]
    page = Page(index=0, width=800, height=30 * len(rows) + 40, dpi=None, blocks=blocks)
    source = SourceFile("r.png", "/in/r.png", "0" * 64, 1, "image/png")
    return Document(source=source, engine={"name": "test", "models": []}, pages=[page])


RECEIPT = [
    ["ACME TRADING SDN BHD"],
    ["(123456-X)"],
    ["NO 5, JALAN MAJU 3,"],
    ["47400 PETALING JAYA"],
    ["SELANGOR"],
    ["TEL: 03-1234 5678"],
    ["INVOICE NO: INV-0042"],
    ["DATE: 05/03/2024 10:11"],
    ["PEN", "2.50"],
    ["BOOK", "7.50"],
    ["SUBTOTAL", "10.00"],
    ["SST 6%", "0.60"],
    ["TOTAL", "RM10.60"],
    ["CASH", "20.00"],
    ["CHANGE", "9.40"],
]


def test_receipt_fields_with_values_checks_and_boxes() -> None:
    document = _document(RECEIPT)
    repair_document(document, RepairConfig(confidence_aggregate="min"))
    fields = document.fields
    assert fields["company"].value == "ACME TRADING SDN BHD"
    assert fields["address"].value == "NO 5, JALAN MAJU 3, 47400 PETALING JAYA SELANGOR"
    assert (fields["date"].raw, fields["date"].value) == ("05/03/2024", "2024-03-05")
    assert "date.ambiguous" in fields["date"].reasons[0]  # day-first only because of en-MY
    assert (fields["total"].raw, fields["total"].value) == ("RM10.60", "10.60")
    assert {c.rule_id: c.passed for c in fields["total"].checks} == {
        "total.tax": True,
        "total.items_sum": True,
        "total.cash_change": True,  # 20.00 tendered - 9.40 change
    }
    assert fields["total"].review is False
    assert fields["total"].confidence > 0.99  # passing cross-checks raised it
    assert fields["tax"].value == "0.60"
    assert fields["invoice_number"].value == "INV-0042"
    assert fields["total"].to_dict()["boxes"] == [[310.0, 360.0, 380.0, 380.0]]
    assert document.repairs is not None and document.repairs.ruleset_version == RULESET_VERSION
    changed = {(c.rule_id, c.ref) for c in document.repairs.changes}
    assert ("amount.currency+amount.decimal_point", "fields.total") in changed


def test_failing_cross_check_forces_review() -> None:
    rows = [row if row[0] != "TOTAL" else ["TOTAL", "RM11.60"] for row in RECEIPT]
    document = _document(rows)
    repair_document(document, RepairConfig())
    total = document.fields["total"]
    assert total.review is True
    assert any(reason.startswith("total.tax failed") for reason in total.reasons)


def test_low_confidence_and_missing_fields_go_to_review() -> None:
    document = _document([["SOME SHOP SDN BHD"], ["TOTAL", "5.00"]], confidence=0.6)
    # Two rows score too little as a receipt: a folder of receipts only asks for fields always.
    config = RepairConfig(review_threshold=0.8, confidence_aggregate="min", receipt_min_score=0)
    repair_document(document, config)
    assert document.fields["total"].review is True
    assert document.fields["total"].reasons == ["confidence.low: 0.600 < 0.8"]
    assert document.fields["date"].reasons == ["field.missing"]
    assert document.fields["date"].value is None


def test_chinese_numerals_cross_checked_against_the_total() -> None:
    rows = [
        ["北京某某有限公司"],
        ["日期：2024年3月5日"],
        ["价税合计（大写）", "壹佰零陆元整"],
        ["合计", "¥106.00"],
    ]
    document = _document(rows)
    repair_document(document, RepairConfig(locale="zh-CN"))
    total = document.fields["total"]
    assert total.value == "106.00"
    assert {c.rule_id: c.passed for c in total.checks}["amount.cn_financial.crosscheck"] is True
    assert document.fields["date"].value == "2024-03-05"


def test_chinese_numerals_disagreeing_with_the_total_force_review() -> None:
    rows = [["北京某某有限公司"], ["价税合计（大写）", "壹佰零柒元整"], ["合计", "¥106.00"]]
    document = _document(rows)
    repair_document(document, RepairConfig(locale="zh-CN"))
    assert document.fields["total"].review is True


def test_line_text_normalised_with_confidences_aligned_and_logged() -> None:
    document = _document([["ＴＯＴＡＬ  １２．５０"], ["公司（北京）"]])
    repair_document(document, RepairConfig(field_profile="none"))
    first, second = document.pages[0].lines
    assert first.text == "TOTAL 12.50"
    assert len(first.char_confidences) == len(first.text)
    assert second.text == "公司（北京）"
    assert document.repairs is not None
    assert {c.rule_id for c in document.repairs.changes} == {"text.fullwidth", "text.whitespace"}
    assert document.fields == {}


@pytest.mark.parametrize("profile", ["receipt", "none"])
def test_result_with_fields_and_repairs_validates(profile: str) -> None:
    document = _document(RECEIPT)
    repair_document(document, RepairConfig(field_profile=profile))  # type: ignore[arg-type]
    result = document.to_dict()
    validate_result(result)
    assert result["repairs"]["ruleset_version"] == RULESET_VERSION
    if profile == "receipt":
        assert set(result["fields"]["total"]) == {
            "raw", "value", "confidence", "boxes", "rules", "checks", "review", "reasons"
        }  # fmt: skip


def test_numeric_confusions_never_touch_free_text() -> None:
    document = _document([["SOLD BY SOS SDN BHD"], ["TOTAL", "1O.5O"]])
    repair_document(document, RepairConfig(receipt_min_score=0))
    assert document.pages[0].lines[0].text == "SOLD BY SOS SDN BHD"
    assert document.fields["company"].value == "SOLD BY SOS SDN BHD"


# A till slip as a reader gives it: item rows with quantity, unit price and amount, a tax summary
# that repeats the sums, spaces lost between words, the date glued to the time.
TILL_SLIP = [
    ["SINARMAJUTRADINGSDNBHD"],
    ["(100234-K)"],
    ["NO.8,JALAN BUNGA RAYA 3,"],
    ["52100KUALA LUMPUR"],
    ["TEL:03-6200 1234"],
    ["GST NO:000123456789"],
    ["TAX INVOICE"],
    ["DATE:14/02/201919:05:33"],
    ["WHITE BREAD 400G"],
    ["1X 4.20", "4.20 SR"],
    ["FRESH MILK 1L"],
    ["2X 6.65", "13.30 SR"],
    ["TOTAL QTY:", "3"],
    ["TOTAL INCL GST", "17.50"],
    ["CASH", "20.00"],
    ["CHANGE", "2.50"],
    ["GST SUMMARY", "AMOUNT", "TAX"],
    ["SR @6%", "16.51", "0.99"],
]


def test_till_slip_fields_with_reader_spacing() -> None:
    document = _document(TILL_SLIP)
    repair_document(document, RepairConfig())
    fields = document.fields
    assert fields["company"].value == "SINARMAJU TRADING SDN BHD"
    assert fields["address"].value == "NO.8,JALAN BUNGA RAYA 3, 52100 KUALA LUMPUR"
    assert (fields["date"].raw, fields["date"].value) == ("14/02/2019", "2019-02-14")
    assert fields["total"].value == "17.50"
    checks = {c.rule_id: c.passed for c in fields["total"].checks}
    # unit prices are not counted beside the line amounts: 4.20 + 13.30, not 4.20 + 4.20 + 6.65 + 13.30
    assert checks == {"total.items_sum": True, "total.cash_change": True}
    assert not any(field.review for field in fields.values())


def test_rounded_total_is_taken_over_the_unrounded_one() -> None:
    rows = [
        ["KEDAI RUNCIT ANEKA"],
        ["DATE: 02/01/2019"],
        ["SUGAR 1KG", "2.89"],
        ["FLOUR 1KG", "2.58"],
        ["TOTAL AMOUNT:", "5.47"],
        ["ROUNDING:", "-0.02"],
        ["NETT TOTAL:", "5.45"],
    ]
    document = _document(rows)
    repair_document(document, RepairConfig())
    total = document.fields["total"]
    assert total.value == "5.45"
    assert "total.rounded" in total.rules
    assert {c.rule_id: c.passed for c in total.checks} == {"total.items_sum": True}


def test_total_confirmed_by_cash_and_change_not_by_the_tender_line() -> None:
    rows = [
        ["KOPITIAM MAJU RESTAURANT"],
        ["DATE: 02/01/2019"],
        ["NASI LEMAK", "6.00"],
        ["TEH TARIK", "2.50"],
        ["SUB TOTAL", "8.50"],
        ["SERVICE CHARGE 10%", "0.85"],
        ["SST 6%", "0.51"],
        ["ROUNDING ADJ", "-0.01"],
        ["TOTAL", "9.85"],
        ["CASH", "50.00"],
        ["CHANGE", "40.15"],
    ]
    document = _document(rows)
    repair_document(document, RepairConfig())
    total = document.fields["total"]
    assert total.value == "9.85"
    # the service charge is part of what is paid: 8.50 + 0.85 + 0.51 - 0.01
    assert {c.rule_id: c.passed for c in total.checks} == {
        "total.cash_change": True,
        "total.tax": True,
        "total.items_sum": True,
    }
    assert total.review is False


def test_a_misread_total_disagreeing_with_cash_and_change_goes_to_review() -> None:
    rows = [row if row[0] != "TOTAL" else ["TOTAL", "19.85"] for row in [
        ["KOPITIAM MAJU RESTAURANT"], ["DATE: 02/01/2019"], ["NASI LEMAK", "6.00"], ["TEH TARIK", "3.85"],
        ["TOTAL", "9.85"], ["CASH", "50.00"], ["CHANGE", "40.15"],
    ]]  # fmt: skip
    document = _document(rows)
    repair_document(document, RepairConfig())
    total = document.fields["total"]
    assert total.value == "19.85"
    assert total.review is True
    assert any(reason.startswith("total.cash_change failed") for reason in total.reasons)


def test_values_tied_to_other_printed_numbers_need_no_review_however_faint() -> None:
    rows = [
        ["KOPITIAM MAJU RESTAURANT"],
        ["DATE: 02/01/2019 12:01"],
        ["NASI LEMAK", "6.00"],
        ["TEH TARIK", "3.85"],
        ["TOTAL", "9.85"],
        ["CASH", "50.00"],
        ["CHANGE", "40.15"],
        ["PRINTED 02/01/2019 12:02"],
    ]
    document = _document(rows, confidence=0.6)
    repair_document(document, RepairConfig(review_threshold=0.8))
    assert {c.rule_id for c in document.fields["date"].checks} == {"date.repeated"}
    assert document.fields["total"].review is False  # cash minus change is the total
    assert document.fields["date"].review is False  # the same day read from two rows
    assert document.fields["company"].review is True  # nothing ties a faint name


def test_address_stops_before_an_item_and_skips_a_branch_row() -> None:
    rows = [
        ["MAJU JAYA HARDWARE SDN BHD"],
        ["MAJU JAYA CHERAS BRANCH SDN BHD (654321-W)"],
        ["LOT 12, JALAN MAJU 2,"],
        ["BANDAR MAHKOTA CHERAS"],  # no postcode printed: nothing but the item row ends the address
        ["PVC PIPE"],
        ["2X 4.50", "9.00"],
        ["TOTAL", "9.00"],
        ["DATE: 25/12/2018"],
    ]
    document = _document(rows)
    repair_document(document, RepairConfig())
    assert document.fields["company"].value == "MAJU JAYA CHERAS BRANCH SDN BHD"
    assert document.fields["address"].value == "LOT 12, JALAN MAJU 2, BANDAR MAHKOTA CHERAS"


def test_an_invoice_table_is_not_summed_by_its_last_column() -> None:
    rows = [
        ["ROTI SEGAR BAKERIES SDN BHD"],
        ["DATE: 25/12/2018"],
        ["WHITE LOAF", "2.13", "10", "2.00", "19.17", "1.15"],  # price, qty, discount, amount, tax
        ["WHOLEMEAL", "2.78", "5", "0.00", "13.90", "0.83"],
        ["TOTAL PAYABLE:", "35.05"],
    ]
    document = _document(rows)
    repair_document(document, RepairConfig())
    assert document.fields["total"].value == "35.05"
    assert document.fields["total"].checks == []  # no sum of 1.15 + 0.83 to fail against it


@pytest.mark.parametrize(
    ("rows", "locale", "expected"),
    [
        (  # Singapore: a UEN above the address, a service charge, a NETS card payment
            [["KOPI CORNER PTE LTD"], ["UEN: 201234567K"], ["Blk 123 Ang Mo Kio Ave 3 #01-45"],
             ["Singapore 560123"], ["GST Reg No: M2-1234567-8"], ["Date: 12/08/2023 Time: 09:15"],
             ["Kopi O x2", "2.80"], ["Kaya Toast Set", "4.50"], ["Sub-Total", "7.30"],
             ["Svc Chg 10%", "0.73"], ["GST 8%", "0.64"], ["Total", "S$8.67"], ["NETS", "8.67"]],
            "en-SG",
            ("KOPI CORNER PTE LTD", "Blk 123 Ang Mo Kio Ave 3 #01-45 Singapore 560123", "2023-08-12", "8.67"),
        ),
        (  # United States: month first, "BALANCE DUE" after a card payment is no change given
            [["JOE'S DINER"], ["123 MAIN STREET"], ["SPRINGFIELD, IL 62701"], ["TEL (217) 555-0100"],
             ["Mar 5, 2024 12:31 PM"], ["2 COFFEE", "$5.00"], ["1 PANCAKES", "$8.50"], ["SUBTOTAL", "$13.50"],
             ["TAX 8%", "$1.08"], ["TOTAL", "$14.58"], ["VISA", "$14.58"], ["BALANCE DUE", "$0.00"]],
            "en-US",
            ("JOE'S DINER", "123 MAIN STREET SPRINGFIELD, IL 62701", "2024-03-05", "14.58"),
        ),
    ],
)  # fmt: skip
def test_receipts_from_elsewhere(rows: list[list[str]], locale: str, expected: tuple[str, ...]) -> None:
    document = _document(rows)
    repair_document(document, RepairConfig(locale=locale))
    fields = document.fields
    assert tuple(fields[name].value for name in ("company", "address", "date", "total")) == expected
    assert all(check.passed for check in fields["total"].checks)
    assert not any(field.review for field in fields.values())


def _dated_receipt(date_rows: list[str], gst: str = "GST ID: 000123456789") -> list[list[str]]:
    return [
        ["MAJU BAKERY SDN BHD"],
        ["NO 3, JALAN MAWAR, 43000 KAJANG"],
        [gst],
        *([text] for text in date_rows),
        ["BUN", "4.00"],
        ["TOTAL", "4.00"],
        ["CASH", "10.00"],
        ["CHANGE", "6.00"],
    ]


def test_a_date_before_malaysian_gst_on_a_receipt_with_a_gst_number_goes_to_review() -> None:
    document = _document(_dated_receipt(["REG C01 04-05-2013 16:07"]))
    repair_document(document, RepairConfig(locale="en-MY"))
    date = document.fields["date"]
    assert date.value == "2013-05-04"
    assert {c.rule_id: c.passed for c in date.checks} == {"date.tax_era": False}
    assert date.review is True
    document = _document(_dated_receipt(["REG C01 04-05-2018 16:07"]))
    repair_document(document, RepairConfig(locale="en-MY"))
    assert document.fields["date"].checks == [] and document.fields["date"].review is False
    # Elsewhere a GST number says nothing about the year (Singapore has had GST since 1994).
    document = _document(_dated_receipt(["DATE 04-05-2013"], gst="GST REG NO: 001234567890"))
    repair_document(document, RepairConfig(locale="en-SG"))
    assert document.fields["date"].review is False


def test_a_date_printed_twice_that_reads_differently_goes_to_review() -> None:
    document = _document(_dated_receipt(["DATE: 12/03/2018 10:11", "PRINTED 12/03/2013 10:12"]))
    repair_document(document, RepairConfig(locale="en-MY"))
    date = document.fields["date"]
    assert date.value == "2018-03-12"
    assert [(c.rule_id, c.passed) for c in date.checks] == [("date.conflict", False)]
    assert date.review is True


def test_address_starts_after_a_name_row_that_carries_a_bare_company_number() -> None:
    rows = [["ROTI MAJU"], ["kopitiam 001234567.p"], ["117, Jalan Mawar, Sri Petaling"], ["Tel:03-1234 5678"],
            ["DATE 05/03/2018"], ["BUN", "4.00"], ["TOTAL", "4.00"]]  # fmt: skip
    document = _document(rows)
    repair_document(document, RepairConfig())
    assert document.fields["address"].value == "117, Jalan Mawar, Sri Petaling"

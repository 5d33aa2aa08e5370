"""Address text: misread glyphs in address words and numbers, commas read as points, block edges."""

from __future__ import annotations

import pytest

from appliance.config import RepairConfig
from appliance.fields.address_words import fix_glyphs, fix_punctuation
from appliance.fields.header import address_value
from appliance.repair.step import repair_document
from tests.test_fields_receipt import _document


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        ("LOT G7 & G8O, PLAZA Ma11 CITY", "LOT G7 & G80, PLAZA Mall CITY"),
        ("NO 31O, JA1AN BESAR", "NO 310, JALAN BESAR"),
        ("Jaian Raya, 41000 Klang, SCLANGOR", "Jalan Raya, 41000 Klang, SELANGOR"),
        ("Ground Fleor, 50000 Kuala Lumour", "Ground Floor, 50000 Kuala Lumpur"),
        ("L.ot 7, Jalan Mawar", "Lot 7, Jalan Mawar"),
        ("UNIT 10D, BLOCK 3I, TAMPOL", "UNIT 10D, BLOCK 3I, TAMPOL"),  # a unit's letter; no known word
        ("LOT P.T. 12, NO. 5", "LOT P.T. 12, NO. 5"),
    ],
)
def test_fix_glyphs_changes_only_clear_words_and_numbers(read: str, expected: str) -> None:
    assert fix_glyphs(read) == expected


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        ("8. JALAN MAWAR, OFF JALAN IPOH. 51200 KL.", "8, JALAN MAWAR, OFF JALAN IPOH, 51200 KL."),
        ("WISMA ABC II. NO 3, JALAN X/Y. TAMAN Z", "WISMA ABC II, NO 3, JALAN X/Y, TAMAN Z"),
        ("JALAN BATU 5.51200 KUALA LUMPUR", "JALAN BATU 5, 51200 KUALA LUMPUR"),
        ("TMN MAJU.KAJANG", "TMN MAJU KAJANG"),
        ("SHAH ALAM,'SELANGOR", "SHAH ALAM, SELANGOR"),
        ("NO. 5, JLN. IPOH, LOT P.T. 2811, ST. JOHN", "NO. 5, JLN. IPOH, LOT P.T. 2811, ST. JOHN"),
    ],
)  # fmt: skip
def test_fix_punctuation_reads_points_between_parts_as_commas(read: str, expected: str) -> None:
    assert fix_punctuation(read) == expected


def test_address_value_keeps_ampersand_spacing_and_splits_a_glued_town() -> None:
    assert address_value(["NO.4, 6& 8 JALAN MAJU", "Bandarsrimelati, 52200 Kuala Lumpur."]) == (
        "NO.4, 6& 8 JALAN MAJU Bandar Srimelati, 52200 Kuala Lumpur."
    )


def test_address_after_a_second_name_row_and_registration_and_with_its_outlet_row() -> None:
    rows = [
        ["KEDAI MAKAN MAJU"],
        ["MAJU NOODLE HOUSE"],  # a second name, ended by the registration number
        ["(001234567-U)"],
        ["NO.8, JALAN MAWAR 2,"],
        ["41150 KLANG, SELANGOR"],
        ["1234-TMN MAWAR"],  # the outlet, printed under the address
        ["GST ID: 000123456789"],
        ["DATE: 05/03/2018"],
        ["TEA", "2.00"],
        ["TOTAL", "2.00"],
    ]
    document = _document(rows)
    repair_document(document, RepairConfig())
    assert document.fields["address"].value == "NO.8, JALAN MAWAR 2, 41150 KLANG, SELANGOR 1234-TMN MAWAR"

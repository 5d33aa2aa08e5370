"""The company on invented receipt heads: the registered name, and its legal suffix as read."""

from __future__ import annotations

import pytest

from appliance.config import RepairConfig
from appliance.fields.header import company_value
from appliance.repair.step import repair_document
from tests.test_fields_receipt import _document

_TAIL = [["TEL: 03-2222 1111"], ["DATE: 14/09/2019 10:11"], ["TEA", "4.00"], ["TOTAL", "4.00"]]


@pytest.mark.parametrize(
    ("head", "company"),
    [
        # A logo read as a word above the name its registration number follows.
        ([["Qwib"], ["LUCKY STAR CAFE"], ["(001234567 P)"], ["NO. 8, JALAN BUNGA RAYA"]], "LUCKY STAR CAFE"),
        # A brand above the registered trading name.
        (
            [["SUN AND MOON KITCHEN"], ["SAM KITCHEN"], ["(001234567-A)"], ["No.5, Jalan Ria 2,"]],
            "SAM KITCHEN",
        ),
        # A long head (address rows misread so they look like names): the operator registered above
        # the number is not taken for the shop.
        (
            [["SUNRISE PETROL KEMUNING"], ["Kebun Teh Satu"], ["Kemuning Utama"], ["Selangor"],
             ["Rosh Servport"], ["CO.REG.NO:000948487-V"]],
            "SUNRISE PETROL KEMUNING",
        ),
        # No registration number under the names: the first one (the brand) stays the company.
        ([["THREE MONKEYS"], ["BISTRO & CAFE"], ["NO 1, JALAN DUA"]], "THREE MONKEYS"),
        # A name wrapped after a conjunction; a brand above a legal name is not part of it.
        (
            [["MAJU JAYA FOOD AND"], ["BEVERAGES SDN BHD"], ["(123456-K)"], ["NO 1, JALAN SATU"]],
            "MAJU JAYA FOOD AND BEVERAGES SDN BHD",
        ),
        ([["KEDAI MAJU"], ["BUMI HIJAU SDN BHD"], ["NO 1, JALAN SATU"]], "BUMI HIJAU SDN BHD"),
        # A limited liability partnership (PLT) is a legal name under its brand.
        ([["KOPI HOUSE"], ["ANGGERIK KOPI PLT"], ["NO 3, JALAN MAWAR"]], "ANGGERIK KOPI PLT"),
        ([["SURIA MART"], ["SURIA JAYA BERHAD"], ["LOT 9, JALAN EMAS"]], "SURIA JAYA BERHAD"),
        # A legal name wins over a name row right above the registration number.
        ([["PINE TREE TRADING SDN BHD"], ["PINE TREE"], ["(765432-K)"], ["LOT 4, JALAN TIGA"]],
         "PINE TREE TRADING SDN BHD"),
    ],
)  # fmt: skip
def test_the_company_is_the_name_its_registration_number_follows(head: list[list[str]], company: str) -> None:
    document = _document(head + _TAIL)
    repair_document(document, RepairConfig())
    assert document.fields["company"].value == company


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("Moon and tea 12S/B", "Moon and tea 12 S/B"),  # the suffix glued on by a lost space
        ("77 QUICK MART 5/B (123456-X)", "77 QUICK MART S/B"),  # S read as 5
        ("77 QUICK MARTS/8", "77 QUICK MART S/B"),
        ("RIA PRINT SHOP 25/B", "RIA PRINT SHOP 25/B"),  # a number, not a misread suffix
    ],
)
def test_legal_suffix_split_off_and_repaired(raw: str, value: str) -> None:
    assert company_value(raw) == value

"""Spaces lost by the reader in names and addresses, put back where receipts print them."""

from __future__ import annotations

import pytest

from appliance.fields.header import address_value, company_value
from appliance.fields.spacing import restore_spaces


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        ("SINARMAJUTRADINGSDNBHD", "SINARMAJU TRADING SDN BHD"),
        ("KEDAI BUKU(PJ)SDN.BHD.", "KEDAI BUKU (PJ) SDN. BHD."),
        ("MR.A.B.C.(M) SDN BHD", "MR. A.B.C. (M) SDN BHD"),
        ("TAN &LEE MARKETING", "TAN & LEE MARKETING"),
        ("F&B CORNER", "F&B CORNER"),  # an ampersand printed without spaces stays so
        ("ENTERPRISES", "ENTERPRISES"),  # a short run is one word
        ("Sunrise Kitchenette", "Sunrise Kitchenette"),  # mixed case was read with its spaces
    ],
)
def test_restore_spaces(read: str, expected: str) -> None:
    assert restore_spaces(read) == expected


def test_company_value_drops_the_registration_number() -> None:
    assert company_value("ACME HARDWARE(M)SDN BHD(123456-X)") == "ACME HARDWARE (M) SDN BHD"
    assert company_value("BAKERIES (KL) SDN BHD (139386 X)") == "BAKERIES (KL) SDN BHD"
    assert company_value("77 FRESH MART S/D (519537·X)") == "77 FRESH MART S/B"  # B read as D
    assert company_value("Sunrise Health Sdn Hhd") == "Sunrise Health Sdn BHD"


def test_address_value_spaces_postcodes_and_towns_and_keeps_printed_commas() -> None:
    read = ["NO.3, JALANMAJUJAYA 5/2,TAMAN SRI,", "43200Cheras, JohorBahru"]
    assert address_value(read) == "NO.3, JALAN MAJU JAYA 5/2,TAMAN SRI, 43200 Cheras, Johor Bahru"
    assert address_value(["LOT 5, JALAN SS21/39, UP2-01"]) == "LOT 5, JALAN SS21/39, UP2-01"  # codes stay
    assert address_value(["(CO.REG:123456-X) LOT 5, JALAN MAJU"]) == "LOT 5, JALAN MAJU"

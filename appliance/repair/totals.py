"""Cross-checks of a receipt's sums: line items against the total, subtotal plus tax against the total."""

from __future__ import annotations

from decimal import Decimal

from appliance.repair.ruleset import Check

# Receipts round to 0.05 (Malaysia) or print a rounding line; a cent of slack absorbs the printing.
TOLERANCE = Decimal("0.01")


def check_items(items: list[Decimal], subtotal: Decimal | None, total: Decimal) -> Check | None:
    """Line items add up to the subtotal (or, without one, to the total); None with fewer than 2 items."""
    if len(items) < 2:
        return None
    target = subtotal if subtotal is not None else total
    found = sum(items, Decimal(0))
    passed = abs(found - target) <= TOLERANCE
    return Check("total.items_sum", passed, f"items {found} vs {target}")


def check_tax(
    subtotal: Decimal | None, tax: Decimal | None, total: Decimal, rounding: Decimal | None = None
) -> Check | None:
    """Subtotal + tax (+ rounding) equals the total; None unless subtotal and tax were both read.

    Prices are often printed tax-inclusive, so subtotal == total with tax shown is accepted too.
    """
    if subtotal is None or tax is None:
        return None
    adjust = rounding or Decimal(0)
    exclusive = subtotal + tax + adjust
    passed = abs(exclusive - total) <= TOLERANCE or abs(subtotal + adjust - total) <= TOLERANCE
    return Check("total.tax", passed, f"{subtotal} + {tax} + {adjust} vs {total}")

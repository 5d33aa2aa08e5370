"""Cross-checks of a receipt's sums: items against the total, subtotal plus charges, cash minus change."""

from __future__ import annotations

from decimal import Decimal

from appliance.repair.ruleset import Check

# Receipts round to 0.05 (Malaysia) or print a rounding line; a cent of slack absorbs the printing.
TOLERANCE = Decimal("0.01")
# Malaysian and Singaporean cash totals are rounded to 5 sen/cents: at most 2 sen either way.
CASH_ROUNDING = Decimal("0.02")


def _near(a: Decimal, b: Decimal, slack: Decimal = TOLERANCE) -> bool:
    return abs(a - b) <= slack


def check_items(
    items: list[Decimal], subtotal: Decimal | None, total: Decimal, tax: Decimal | None = None
) -> Check | None:
    """Line items add up to the subtotal or the total (with tax added, if prices exclude it).

    None with fewer than 2 items. The sum may stop before the last amounts taken as items (a
    deposit, a voucher or a count printed above the sums), so the sums of the first 2, 3, ... items
    are tried too; the rounded total may differ from the items by the 2 sen of cash rounding.
    """
    if len(items) < 2:
        return None
    targets = [(subtotal, TOLERANCE)] if subtotal is not None else []
    targets.append((total, CASH_ROUNDING))
    if tax:
        targets.append((total - tax, CASH_ROUNDING))
    running = Decimal(0)
    passed = False
    for count, item in enumerate(items, 1):
        running += item
        if count >= 2 and any(_near(running, target, slack) for target, slack in targets):
            passed = True
            break
    found = sum(items, Decimal(0))
    target = subtotal if subtotal is not None else total
    return Check("total.items_sum", passed, f"items {found} vs {target}")


def check_tax(
    subtotal: Decimal | None,
    tax: Decimal | None,
    total: Decimal,
    rounding: Decimal | None = None,
    service: Decimal | None = None,
) -> Check | None:
    """Subtotal (+ service) + tax (+ rounding) equals the total; None unless subtotal and tax were read.

    Prices are often printed tax-inclusive, so subtotal == total with tax shown is accepted too; a
    restaurant's service charge (often 10%) is part of what is paid, so it is added when printed.
    """
    if subtotal is None or tax is None:
        return None
    adjust = rounding or Decimal(0)
    charge = service or Decimal(0)
    sums = [subtotal + charge + tax + adjust, subtotal + charge + adjust, subtotal + tax + adjust]
    # Without a printed rounding line the total may still be the cash-rounded sum.
    slack = TOLERANCE if rounding is not None else CASH_ROUNDING
    passed = any(_near(value, total, slack) for value in sums)
    detail = (
        f"{subtotal} + {charge} + {tax} + {adjust} vs {total}"
        if service
        else f"{subtotal} + {tax} + {adjust} vs {total}"
    )
    return Check("total.tax", passed, detail)


def check_cash_change(
    cash: Decimal | None, change: Decimal | None, total: Decimal, rounding: Decimal | None = None
) -> Check | None:
    """Cash tendered minus change given equals the total; None unless both were read.

    Change is sometimes counted from the unrounded amount, so the rounding printed is allowed for.
    """
    if cash is None or change is None:
        return None
    paid = cash - change
    slack = max(TOLERANCE, abs(rounding or Decimal(0)))
    return Check("total.cash_change", _near(paid, total, slack), f"{cash} - {change} vs {total}")

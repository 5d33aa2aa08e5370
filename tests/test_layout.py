"""Reading order: visual rows top to bottom, each row left to right."""

from __future__ import annotations

from appliance.document import Line
from appliance.pipeline.layout import group_rows, order_page


def _line(text: str, x0: float, y0: float, x1: float, y1: float) -> Line:
    return Line(text=text, box=(x0, y0, x1, y1), polygon=(), confidence=1.0, char_confidences=[1.0])


def test_pieces_of_one_row_stay_together_even_when_tops_differ() -> None:
    lines = [
        _line("9.00", 600, 104, 680, 134),
        _line("TOTAL", 40, 100, 160, 130),
        _line("CASH", 40, 150, 130, 180),
        _line("10.00", 590, 152, 680, 182),
    ]
    rows = group_rows(lines)
    assert [[line.text for line in row] for row in rows] == [["TOTAL", "9.00"], ["CASH", "10.00"]]


def test_rows_are_ordered_top_to_bottom() -> None:
    lines = [_line(str(i), 10, 300 - 50 * i, 100, 330 - 50 * i) for i in range(5)]
    assert [block.text for block in order_page(lines)] == ["4", "3", "2", "1", "0"]


def test_a_tall_line_does_not_swallow_its_neighbours() -> None:
    lines = [
        _line("TITLE", 10, 0, 400, 80),
        _line("left", 10, 90, 100, 110),
        _line("right", 500, 60, 600, 80),
    ]
    texts = [block.text for block in order_page(lines)]
    assert texts[-1] == "left"


def test_empty_page_has_no_blocks() -> None:
    assert order_page([]) == []


def test_two_columns_are_read_column_by_column() -> None:
    """Prose in two columns with aligned baselines: the left column first, then the right."""
    lines = [_line(f"L{i}", 40, 100 + 40 * i, 540, 130 + 40 * i) for i in range(6)]
    lines += [_line(f"R{i}", 600, 100 + 40 * i, 1100, 130 + 40 * i) for i in range(6)]
    lines.append(_line("TITLE", 300, 20, 800, 60))
    texts = [block.text for block in order_page(lines)]
    assert texts == ["TITLE", *[f"L{i}" for i in range(6)], *[f"R{i}" for i in range(6)]]


def test_receipt_labels_and_amounts_keep_row_order() -> None:
    """A table-like region (short cells on shared rows) is read row by row, not column by column."""
    labels = ["SUBTOTAL", "TAX", "TOTAL", "CASH"]
    lines = [_line(text, 40, 100 + 40 * i, 200, 130 + 40 * i) for i, text in enumerate(labels)]
    lines += [_line(f"{i}.00", 600, 100 + 40 * i, 680, 130 + 40 * i) for i in range(4)]
    assert [block.text for block in order_page(lines)] == [f"{t} {i}.00" for i, t in enumerate(labels)]


def test_unaligned_columns_are_split_at_the_valley() -> None:
    lines = [_line(f"L{i}", 40, 100 + 40 * i, 300, 130 + 40 * i) for i in range(4)]
    lines += [_line(f"R{i}", 400, 120 + 40 * i, 700, 150 + 40 * i) for i in range(4)]
    texts = [block.text for block in order_page(lines)]
    assert texts == [*[f"L{i}" for i in range(4)], *[f"R{i}" for i in range(4)]]

"""Reading order for now: lines grouped into visual rows, rows top to bottom, left to right.

Lines whose vertical centres fall inside each other's height belong to one row, so a receipt's
"TOTAL ..... 9.00" reads as one row even when its two halves are detected as separate lines with
slightly different tops. Column detection and XY-cut come with the layout work.
"""

from __future__ import annotations

from appliance.document import Block, Line


def _centre_y(line: Line) -> float:
    return (line.box[1] + line.box[3]) / 2


def group_rows(lines: list[Line]) -> list[list[Line]]:
    """Lines in rows, top to bottom; each row left to right."""
    rows: list[list[Line]] = []
    for line in sorted(lines, key=_centre_y):
        if rows:
            row = rows[-1]
            top = min(item.box[1] for item in row)
            bottom = max(item.box[3] for item in row)
            height = bottom - top
            line_height = line.box[3] - line.box[1]
            overlap = min(bottom, line.box[3]) - max(top, line.box[1])
            if overlap > 0.5 * min(height, line_height):
                row.append(line)
                continue
        rows.append([line])
    return [sorted(row, key=lambda item: item.box[0]) for row in rows]


def order_page(lines: list[Line]) -> list[Block]:
    """Blocks in reading order; for now one block per visual row."""
    return [Block(lines=row) for row in group_rows(lines)]

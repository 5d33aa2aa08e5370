"""Reading order: lines into visual rows, rows into regions by XY-cut, columns by projection valleys.

Lines whose vertical centres fall inside each other's height belong to one row (`group_rows`), so
a receipt's "TOTAL ..... 9.00" reads as one row even when its two halves are detected as separate
lines with slightly different tops. The benchmark orders ground truth and hypotheses with
`group_rows`, so its behaviour is fixed.

`order_page` adds the page structure on top: a recursive XY-cut over the line boxes. A region is
split at a vertical valley (an x range no line crosses) when the two sides are columns, else at
its widest horizontal gap; a region with neither is read in rows. A vertical valley between sides
whose lines sit on the same rows (a receipt's labels and amounts, a table, a term and its
description) is table-like and keeps row order, unless both sides are prose (long lines with a
narrow gutter between them), which is how a two-column page with aligned baselines looks.
Blocks stay visual rows, so the text of a block is one line of the plain-text output.
"""

from __future__ import annotations

import statistics

from appliance.document import Block, Line

# A column gutter is at least this many median line heights wide.
_MIN_GUTTER = 1.0
# Sides whose lines share rows this often are a table, not columns (unless both are prose).
_ALIGNED = 0.5
# Prose: median line width at least this many line heights; gutter at most this share of a column.
_PROSE_WIDTH = 6.0
_PROSE_GUTTER = 0.25


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


def _gaps(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The empty stretches between merged intervals (projection valleys), as (start, end)."""
    gaps: list[tuple[float, float]] = []
    ordered = sorted(intervals)
    reach = ordered[0][1]
    for start, end in ordered[1:]:
        if start > reach:
            gaps.append((reach, start))
        reach = max(reach, end)
    return gaps


def _same_row(a: Line, b: Line) -> bool:
    overlap = min(a.box[3], b.box[3]) - max(a.box[1], b.box[1])
    return overlap > 0.5 * min(a.box[3] - a.box[1], b.box[3] - b.box[1])


def _are_columns(left: list[Line], right: list[Line], gutter: float, line_height: float) -> bool:
    """Whether the two sides of a vertical valley read one after the other (not row by row)."""
    small, other = (left, right) if len(left) <= len(right) else (right, left)
    aligned = sum(1 for line in small if any(_same_row(line, item) for item in other)) / len(small)
    if aligned < _ALIGNED:
        return True
    # Aligned sides: columns only when both are prose with a narrow gutter between them.
    for side in (left, right):
        widths = [line.box[2] - line.box[0] for line in side]
        extent = max(line.box[2] for line in side) - min(line.box[0] for line in side)
        if len(side) < 2 or statistics.median(widths) < _PROSE_WIDTH * line_height:
            return False
        if gutter > _PROSE_GUTTER * extent:
            return False
    return True


def _xy_cut(lines: list[Line], line_height: float) -> list[list[Line]]:
    """Rows of a region in reading order."""
    if len(lines) < 2:
        return group_rows(lines)
    for start, end in sorted(
        _gaps([(line.box[0], line.box[2]) for line in lines]), key=lambda gap: gap[0] - gap[1]
    ):
        if end - start < _MIN_GUTTER * line_height:
            break
        middle = (start + end) / 2
        left = [line for line in lines if line.box[2] <= middle]
        right = [line for line in lines if line.box[0] >= middle]
        if _are_columns(left, right, end - start, line_height):
            return _xy_cut(left, line_height) + _xy_cut(right, line_height)
    horizontal = _gaps([(line.box[1], line.box[3]) for line in lines])
    if horizontal:
        start, end = max(horizontal, key=lambda gap: gap[1] - gap[0])
        middle = (start + end) / 2
        top = [line for line in lines if line.box[3] <= middle]
        bottom = [line for line in lines if line.box[1] >= middle]
        return _xy_cut(top, line_height) + _xy_cut(bottom, line_height)
    return group_rows(lines)


def order_rows(lines: list[Line]) -> list[list[Line]]:
    """Rows in reading order: columns one after the other, tables and receipts row by row."""
    if not lines:
        return []
    line_height = statistics.median(max(1.0, line.box[3] - line.box[1]) for line in lines)
    return _xy_cut(lines, line_height)


def order_page(lines: list[Line]) -> list[Block]:
    """Blocks in reading order; one block per visual row within its column or region."""
    return [Block(lines=row) for row in order_rows(lines)]

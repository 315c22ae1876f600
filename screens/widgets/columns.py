"""Fixed-width DataTable columns, recomputed for the pane's width.

A DataTable's auto-width column only ever grows (`clear()` keeps its measured width) and is measured
against the console's width, which in the web view starts tiny: after 80 -> 200 -> 80 columns the header
kept its wide cells and cut the last ones, and in the browser the columns came out 6 cells wide with their
labels run together. So every column here has a width we chose, each including its one-cell gap (the
tables use no cell padding), and a new pane width rebuilds the columns.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import DataTable

ColumnSpec = tuple[str, str, int]  # (label, key, width including the gap)


def current_columns(table: DataTable) -> list[ColumnSpec]:
    return [(str(c.label), str(c.key.value), c.width) for c in table.ordered_columns]


def set_columns(table: DataTable, specs: Sequence[ColumnSpec]) -> bool:
    """Give `table` exactly these fixed-width columns. When they differ from what it has, its rows are
    cleared (the caller adds them again, clipped to the new widths) and True is returned."""
    specs = [(label, key, max(1, width)) for label, key, width in specs]
    if current_columns(table) == specs:
        return False
    table.clear(columns=True)
    for label, key, width in specs:
        table.add_column(label, key=key, width=width)
    return True

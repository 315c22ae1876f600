"""Fixed-width DataTable columns, recomputed for the pane's width.

A DataTable's auto-width column only ever grows (`clear()` keeps its measured width) and is measured
against the console's width, which in the web view starts tiny: after 80 -> 200 -> 80 columns the header
kept its wide cells and cut the last ones, and in the browser the columns came out 6 cells wide with their
labels run together. So every column here has a width we chose, each including its one-cell gap (the
tables use no cell padding), and a new pane width rebuilds the columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

ColumnSpec = tuple[str, str, int]  # (label, key, width including the gap)


class FixedTable(DataTable):
    """A DataTable whose columns all have widths we chose (`set_columns`): new rows are not measured.

    DataTable measures every cell of every new row on its next idle, for auto-width columns; with fixed
    widths the result is never used, yet it was the largest single cost of the Tasks pane's rebuild (every
    task's row, once a second while a fast worker writes: issue 33 item 6). Only the virtual size is kept up.
    Rows with a label or an automatic height still go the measured way (these tables add neither)."""

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        new_rows = list(new_rows)
        rows = [self.rows.get(k) for k in new_rows]
        if any(c.auto_width for c in self.columns.values()) or any(
            r is not None and (r.label is not None or r.auto_height) for r in rows
        ):
            super()._update_dimensions(new_rows)
        else:
            super()._update_dimensions(())  # the virtual size (rows x the columns' widths) only


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

"""The runs in a database, to choose one (shown on start when there are several)."""

from __future__ import annotations

import datetime as dt

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from screens.format import STATUS_STYLE
from screens.widgets.footer import KeyFooter
from workbench.view import Run, View, worker_state


class RunsScreen(Screen):
    BINDINGS = [Binding("enter", "open", "Open run", id="runs.open", show=True)]
    DEFAULT_CSS = """
    RunsScreen #runs-title { padding: 0 1; background: $panel; text-style: bold; }
    RunsScreen DataTable { height: 1fr; }
    """

    class Loaded(Message):
        def __init__(self, runs: list[Run]) -> None:
            super().__init__()
            self.runs = runs

    def compose(self) -> ComposeResult:
        yield Static("Runs: choose one (enter)", id="runs-title")
        table: DataTable = DataTable(cursor_type="row", id="runs-table")
        for col in ("id", "name", "status", "worker", "step", "model", "created"):
            table.add_column(col, key=col)
        yield table
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        with View.open(self.app.db_path) as view:  # type: ignore[attr-defined]
            runs = view.runs()
        self.post_message(self.Loaded(runs))

    def on_runs_screen_loaded(self, message: Loaded) -> None:
        table = self.query_one(DataTable)
        table.clear()
        now = self.app.clock()  # type: ignore[attr-defined]
        if not message.runs:
            self.query_one("#runs-title", Static).update(
                "No runs in this database yet: start one with `workbench train CONFIG` or `workbench demo`."
            )
        for r in message.runs:
            state = worker_state(r, now)
            table.add_row(
                str(r.id),
                r.name,
                Text(r.status, style=STATUS_STYLE.get(r.status, "")),
                Text(state, style="green" if state == "alive" else "dim"),
                "–" if r.last_step is None else str(r.last_step),
                r.model,
                dt.datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M"),
                key=str(r.id),
            )
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.app.open_run(int(event.row_key.value))  # type: ignore[attr-defined]

    def action_open(self) -> None:
        table = self.query_one(DataTable)
        if table.row_count:
            key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
            self.app.open_run(int(key))  # type: ignore[attr-defined]

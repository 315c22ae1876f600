"""The run's event log: every status change with its reason, resumes, verifier swaps, pauses; newest last,
followed live (a poll reads only events past the last one shown)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from screens.format import clip
from screens.widgets.footer import KeyFooter
from workbench.view import Event

if TYPE_CHECKING:
    from screens.host import Host

KIND_STYLE = {"status": "cyan", "resume": "green", "verifier": "magenta", "error": "bold red"}


class EventsScreen(Screen):
    BINDINGS = [Binding("escape", "back", "Back", id="events.back")]
    DEFAULT_CSS = """
    EventsScreen #events-title { padding: 0 1; background: $panel; text-style: bold; }
    EventsScreen DataTable { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.last_id = 0

    @property
    def wb(self) -> Host:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static("Event log", id="events-title")
        table: DataTable = DataTable(cursor_type="row", cell_padding=0, id="events-table")
        for label, key, width in (("time", "time", 9), ("kind", "kind", 10), ("message", "message", None)):
            table.add_column(label, key=key, width=width)
        yield table
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(self.wb.poll_s, self.poll)
        self.query_one(DataTable).focus()

    def poll(self) -> None:
        view, run_id = self.wb.view, self.wb.run_id
        if view is None or run_id is None:
            return
        events = view.events(run_id, self.last_id)
        if events:
            self.add(events)

    def add(self, events: list[Event]) -> None:
        table = self.query_one(DataTable)
        follow = table.row_count == 0 or table.cursor_row >= table.row_count - 1
        for e in events:
            table.add_row(
                dt.datetime.fromtimestamp(e.created).strftime("%H:%M:%S"),
                Text(e.kind, style=KIND_STYLE.get(e.kind, "")),
                clip(e.message, 300),
                key=str(e.id),
            )
        self.last_id = events[-1].id
        self.query_one("#events-title", Static).update(f"Event log · {table.row_count} events (newest last)")
        if follow:
            table.move_cursor(row=table.row_count - 1, animate=False)

    def action_back(self) -> None:
        self.app.pop_screen()

"""Every key binding, per screen, read from the BINDINGS themselves so the list cannot go stale, and when
each run control is allowed, read from workbench.view's table (the one the keys and the palette obey)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from workbench.view import ACTIONS


def _bindings_table(app: App, title: str, bindings: list) -> Table:
    table = Table(
        title=title, title_justify="left", title_style="bold", show_header=False, box=None, pad_edge=False
    )
    table.add_column("key", style="bold cyan", no_wrap=True, min_width=10)
    table.add_column("action")
    for b in bindings:
        if not isinstance(b, Binding):
            continue
        keys = ", ".join(app.get_key_display(Binding(k.strip(), b.action)) for k in b.key.split(","))
        label = Text(b.description or b.action)
        if b.tooltip:
            label.append(f"  {b.tooltip}", style="dim")
        table.add_row(keys, label)
    return table


def _rules_table() -> Table:
    table = Table(
        title="When the run controls work",
        title_justify="left",
        title_style="bold",
        show_header=False,
        box=None,
        pad_edge=False,
    )
    table.add_column("control", style="bold cyan", no_wrap=True, min_width=10)
    table.add_column("when")
    for a in ACTIONS:
        table.add_row(f"{a.key or 'ctrl+p'}  {a.title.rstrip('…')}", Text(a.when, style="dim"))
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="help.close")]

    def __init__(self, sections: list[tuple[str, list[Binding]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-box", id="help-box"):
            yield Label("Keys", classes="modal-title")
            with VerticalScroll():
                for title, bindings in self.sections:
                    yield Static(_bindings_table(self.app, title, bindings))
                yield Static(_rules_table())
                yield Static(
                    "ctrl+p opens the command palette (its entries follow the run's state).", classes="muted"
                )
            yield Static("esc: close", classes="muted")

    def action_close(self) -> None:
        self.dismiss(None)

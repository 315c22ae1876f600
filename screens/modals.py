"""Small modal screens: confirm, one-line prompt, and a scrollable text view."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str, detail: str = "", yes: str = "Yes") -> None:
        super().__init__()
        self.question, self.detail, self.yes = question, detail, yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-box"):
            yield Label(self.question, classes="modal-title")
            if self.detail:
                yield Static(self.detail, classes="muted")
            with Horizontal(classes="modal-buttons"):
                yield Button("No (n)", id="no", compact=True)
                yield Button(f"{self.yes} (y)", id="yes", variant="error", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class PromptScreen(ModalScreen[str | None]):
    """One line of input; Enter returns it, Escape returns None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(self, title: str, *, placeholder: str = "", value: str = "", detail: str = "") -> None:
        super().__init__()
        self.title_text, self.placeholder, self.value, self.detail = title, placeholder, value, detail

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-box"):
            yield Label(self.title_text, classes="modal-title")
            if self.detail:
                yield Static(self.detail, classes="muted")
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            yield Static("enter: save · esc: cancel", classes="muted")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class TextScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,enter", "close", "Close", id="text.close")]

    def __init__(self, title: str, body: str | Text) -> None:
        super().__init__()
        self.title_text, self.body = title, body

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-box"):
            yield Label(self.title_text, classes="modal-title")
            with VerticalScroll():
                yield Static(self.body if isinstance(self.body, Text) else Text(self.body))
            yield Static("esc: close", classes="muted")

    def action_close(self) -> None:
        self.dismiss(None)

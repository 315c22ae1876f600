"""Small modal screens: confirm, one-line prompt, and a scrollable text view."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from workbench.view import workbench_command


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


class QuitScreen(ModalScreen[str | None]):
    """Quitting while a worker trains: keep it training in the background ("keep"), stop it ("stop"), or
    stay (None). Says how to come back either way."""

    BINDINGS = [
        Binding("k,enter", "answer('keep')", "Keep training", id="quit.keep"),
        Binding("s", "answer('stop')", "Stop training", id="quit.stop"),
        Binding("escape,n", "answer(None)", "Cancel", id="quit.cancel"),
    ]

    def __init__(self, run_id: int, db_path: str) -> None:
        super().__init__()
        self.run_id, self.db_path = run_id, db_path

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-box"):
            yield Label(
                f"Run #{self.run_id} is training. Keep it training in the background?", classes="modal-title"
            )
            wb = workbench_command()  # what works from this shell (make demo leaves .venv/bin off PATH)
            yield Static(
                f"It goes on without this window. Come back with `{wb} tui --db {self.db_path}`, "
                f"see it with `{wb} ls --db {self.db_path}`, stop it with "
                f"`{wb} stop {self.run_id} --db {self.db_path}`.",
                classes="muted",
            )
            with Horizontal(classes="modal-buttons"):
                yield Button("Cancel (esc)", id="cancel", compact=True)
                yield Button("Stop training (s)", id="stop", variant="error", compact=True)
                yield Button("Keep training (k)", id="keep", variant="primary", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_answer(self, value: str | None) -> None:
        self.dismiss(value)


class PromptScreen(ModalScreen[str | None]):
    """One line of input; Enter returns it, Escape returns None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(
        self,
        title: str,
        *,
        placeholder: str = "",
        value: str = "",
        detail: str = "",
        check: Callable[[str], str | None] | None = None,
    ) -> None:
        super().__init__()
        self.title_text, self.placeholder, self.value, self.detail = title, placeholder, value, detail
        self.check = check  # the answer's error (shown here, the prompt stays open), None when it is fine

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-box"):
            yield Label(self.title_text, classes="modal-title")
            if self.detail:
                yield Static(self.detail, classes="muted")
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            yield Static("enter: save · esc: cancel", classes="muted")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        error = self.check(event.value) if self.check is not None else None
        if error is None:
            self.dismiss(event.value)
            return
        text = Text(error, style="red")
        shown = self.query("#prompt-error")
        if shown:
            shown.first(Static).update(text)
        elif (
            event.input.parent is not None
        ):  # mounted on the first error only: an unerring prompt is unchanged
            event.input.parent.mount(Static(text, id="prompt-error"), before=event.input)

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

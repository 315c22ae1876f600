"""The trajectory filters as a form: reward range, step range, task, verifier version, split, errors."""

from __future__ import annotations

import dataclasses
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from workbench.view import TrajectoryFilter, VerifierVersion

SPLITS = ("train", "held_out", "probe")


def _num(text: str, cast: type) -> Any:
    text = text.strip()
    return cast(text) if text else None


class FilterScreen(ModalScreen[TrajectoryFilter | None]):
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="filters.cancel"),
        Binding("ctrl+s", "apply", "Apply", id="filters.apply"),
    ]
    DEFAULT_CSS = """
    FilterScreen Grid { grid-size: 2; grid-columns: 16 1fr; grid-rows: 3; height: auto; }
    FilterScreen Grid Label { padding: 1 0 0 0; }
    """

    def __init__(self, flt: TrajectoryFilter, verifiers: list[VerifierVersion]) -> None:
        super().__init__()
        self.flt = flt
        self.verifiers = verifiers

    def compose(self) -> ComposeResult:
        f = self.flt

        def text(v: Any) -> str:
            return "" if v is None else str(v)

        with Vertical(classes="modal-box"):
            yield Label("Filter trajectories", classes="modal-title")
            with Grid():
                yield Label("reward min")
                yield Input(text(f.reward_min), id="reward_min", type="number")
                yield Label("reward max")
                yield Input(text(f.reward_max), id="reward_max", type="number")
                yield Label("step min")
                yield Input(text(f.step_min), id="step_min", type="integer")
                yield Label("step max")
                yield Input(text(f.step_max), id="step_max", type="integer")
                yield Label("task id")
                yield Input(text(f.task_id), id="task_id", type="integer")
                yield Label("verifier")
                yield Select(
                    [(v.title + (" (active)" if v.active else ""), v.id) for v in self.verifiers],
                    value=f.verifier_id if f.verifier_id is not None else Select.NULL,
                    allow_blank=True,
                    prompt="any version",
                    id="verifier_id",
                )
                yield Label("split")
                yield Select(
                    [(s, s) for s in SPLITS],
                    value=f.split if f.split else Select.NULL,
                    allow_blank=True,
                    prompt="any split",
                    id="split",
                )
            yield Checkbox("errors only", f.errors_only, id="errors_only")
            yield Static("ctrl+s: apply · esc: cancel", classes="muted")
            with Horizontal(classes="modal-buttons"):
                yield Button("Clear", id="clear", compact=True)
                yield Button("Apply", id="apply", variant="primary", compact=True)

    def _value(self, wid: str, cast: type) -> Any:
        return _num(self.query_one(f"#{wid}", Input).value, cast)

    def _select(self, wid: str) -> Any:
        value = self.query_one(f"#{wid}", Select).value
        return None if value is Select.NULL else value

    def action_apply(self) -> None:
        try:
            flt = dataclasses.replace(
                self.flt,
                reward_min=self._value("reward_min", float),
                reward_max=self._value("reward_max", float),
                step_min=self._value("step_min", int),
                step_max=self._value("step_max", int),
                task_id=self._value("task_id", int),
                verifier_id=self._select("verifier_id"),
                split=self._select("split"),
                errors_only=self.query_one("#errors_only", Checkbox).value,
            )
        except ValueError as exc:
            self.notify(f"not a number: {exc}", severity="error")
            return
        self.dismiss(flt)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "clear":
            self.dismiss(TrajectoryFilter(self.flt.run_id, text=self.flt.text))
        else:
            self.action_apply()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_apply()

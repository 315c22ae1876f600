"""Verifier scores: the current step's reward histogram, failure shares and part means over steps."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from screens.scores import render_scores
from workbench.view import Step, Trajectory


class ScoresPane(VerticalScroll):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: list[Trajectory] = []
        self.steps: list[Step] = []
        self.step: int | None = None
        self.task_note = ""
        self._width = self._height = 0

    def compose(self) -> ComposeResult:
        yield Static(id="scores-body")

    def on_mount(self) -> None:
        self.border_title = "Verifier scores"

    def show(self, step: int | None, rows: list[Trajectory], steps: list[Step], task_note: str = "") -> None:
        self.step, self.rows, self.steps, self.task_note = step, rows, steps, task_note
        self.redraw()

    def redraw(self) -> None:
        self._width, self._height = self.size.width, self.size.height
        self.query_one("#scores-body", Static).update(
            render_scores(
                self.rows,
                self.steps,
                step=self.step,
                width=self._width or 40,
                height=self.size.height,
                task_note=self.task_note,
            )
        )

    def on_resize(self) -> None:
        if self.size.width != self._width or self.size.height != self._height:
            self.redraw()

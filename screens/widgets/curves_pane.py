"""Training curves with textual-plotext: one curve at a time, [ and ] to switch, redrawn only when new
steps (or evals) arrive, downsampled to the plot's width."""

from __future__ import annotations

import time
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from screens.curves import CURVES, StepSeries, downsample, step_ticks
from workbench.view import Eval, Step, baseline_value, eval_points, metric_points

COLORS = ("cyan", "magenta", "yellow", "green")
STREAM_REDRAW_S = 1.0  # polled steps redraw the plot at most this often


class CurvesPane(Vertical):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps: list[Step] = []
        self.evals: list[Eval] = []
        self.task_series: StepSeries | None = None
        self.task_name = ""
        self.index = 0
        self.sft: list[tuple[int, float]] = []  # the SFT warm-up's (step, loss), as it comes
        self.waiting = ""  # what an empty curve waits for (the worker's phase), said in the plot
        self._chosen = False  # the user picked a curve: no more switching by itself
        self._drawn_width = -1
        self._dirty = True
        self._streamed = False  # new steps or SFT points not drawn yet: drawn within STREAM_REDRAW_S
        self._drawn_at = 0.0

    def compose(self) -> ComposeResult:
        yield Static(id="curve-note")
        yield PlotextPlot(id="curve-plot")

    def on_mount(self) -> None:
        self._titles()

    @property
    def curve(self):  # -> Curve
        return CURVES[self.index]

    def _titles(self) -> None:
        self.border_title = f"Curves: {self.curve.title} ({self.index + 1}/{len(CURVES)})"
        self.border_subtitle = "[ ] switch"
        note = self.query_one("#curve-note", Static)
        note.update(self.curve.note)
        note.display = bool(self.curve.note)

    def switch(self, delta: int) -> None:
        self._chosen = True
        self.index = (self.index + delta) % len(CURVES)
        self._titles()
        self._dirty = True
        self.redraw()

    def set_data(
        self, *, steps: list[Step] | None = None, evals: list[Eval] | None = None, stream: bool = False
    ) -> None:
        """`stream`: new steps from a poll (drawn within STREAM_REDRAW_S), else drawn at the next redraw."""
        if steps is not None:
            self.steps = steps
            if stream:
                self._streamed = True
            else:
                self._dirty = True
            self._auto_pick()
        if evals is not None and [e.id for e in evals] != [e.id for e in self.evals]:
            self.evals = evals
            self._dirty = True

    def add_sft(self, points: list[tuple[int, float]], *, stream: bool = False) -> None:
        if points:
            self.sft = self.sft + points
            if stream:
                self._streamed = True
            else:
                self._dirty = True
        self._auto_pick()

    def set_waiting(self, text: str) -> None:
        if text != self.waiting:
            self.waiting = text
            self._dirty = True

    def _auto_pick(self) -> None:
        """Until the user picks a curve: the SFT loss while the warm-up is all there is, then the reward."""
        if self._chosen:
            return
        key = "sft_loss" if self.sft and not self.steps else "reward"
        index = next(i for i, c in enumerate(CURVES) if c.key == key)
        if index != self.index:
            self.index = index
            self._titles()
            self._dirty = True

    def set_task_series(self, series: StepSeries | None, name: str = "") -> None:
        self.task_series, self.task_name = series, name
        self._dirty = True

    def redraw(self) -> None:
        plot = self.query_one(PlotextPlot)
        width = plot.size.width
        # New points redraw at most every STREAM_REDRAW_S (a fast worker logs steps faster than a plot is
        # worth redrawing); a switch, a resize, evals or a task filter redraw at once.
        if self._streamed and time.monotonic() - self._drawn_at >= STREAM_REDRAW_S:
            self._dirty = True
        if not self._dirty and width == self._drawn_width:
            return
        self._dirty, self._streamed, self._drawn_width = False, False, width
        self._drawn_at = time.monotonic()
        plt = plot.plt
        plt.clear_figure()
        max_points = max(10, 2 * (width - 8))  # braille: two points a cell, minus the y-axis labels
        curve = self.curve
        drawn = False
        all_xs: list[float] = []  # every x drawn: the whole-step ticks span them
        if curve.key == "sft_loss":
            if self.sft:
                xs, ys = downsample(
                    [float(s) for s, _ in self.sft], [loss for _, loss in self.sft], max_points
                )
                plt.plot(xs, ys, marker="braille", color="green")
                all_xs += xs
                drawn = True
        elif curve.key == "held_out":
            xs, ys = eval_points(self.evals)
            base = baseline_value(self.evals)
            if xs:
                plt.plot(xs, ys, marker="braille", color="cyan")
                all_xs += xs
                lo_x, lo_y = eval_points(self.evals, "success_ci_low")
                hi_x, hi_y = eval_points(self.evals, "success_ci_high")
                if lo_x and len(lo_x) == len(xs):
                    plt.plot(lo_x, lo_y, marker="dot", color="gray")
                    plt.plot(hi_x, hi_y, marker="dot", color="gray")
                drawn = True
            if base is not None:
                plt.hline(base, "yellow")
                if not xs:
                    plt.plot([0.0], [base], marker="braille", color="yellow")
                drawn = True
        else:
            for i, key in enumerate(curve.metrics):
                xs, ys = metric_points(self.steps, key)
                if xs:
                    xs, ys = downsample(xs, ys, max_points)
                    label = key.split("/")[-1] if len(curve.metrics) > 1 else None
                    plt.plot(xs, ys, marker="braille", color=COLORS[i % len(COLORS)], label=label)
                    all_xs += xs
                    drawn = True
            if curve.key == "reward" and self.task_series is not None:
                xs, ys = self.task_series.points()
                if xs:
                    xs, ys = downsample(xs, ys, max_points)
                    plt.plot(xs, ys, marker="braille", color="magenta", label=self.task_name[:16] or "task")
                    all_xs += xs
                    drawn = True
        if all_xs:
            ticks = step_ticks(all_xs, width - 8)
            plt.xticks(ticks, [str(t) for t in ticks])
        if not drawn:  # say what it waits for, not just that it is empty
            what = (
                "the SFT warm-up's first step"
                if curve.key == "sft_loss"
                else "an eval"
                if curve.key == "held_out"
                else "the first GRPO step"
            )
            plt.title(f"waiting for {what}" + (f" (now: {self.waiting})" if self.waiting else ""))
        plot.refresh()

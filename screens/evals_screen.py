"""Evaluations: the baseline and each checkpoint on the validation split (which decides promotion) with the
test split's success beside it (reported only), CIs, the best and promoted ones marked with why, success
per skill (multi-step kinds first, single calls beside them, with the paired Δ per kind), and flags for the
usual ways GRPO goes wrong (overfitting, length drift, JSON regressions).
`s` shows the test split's own table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from screens.curves import step_ticks
from screens.format import num, pct
from screens.widgets.footer import KeyFooter
from workbench.view import (
    Checkpoint,
    Eval,
    EvalRow,
    Step,
    View,
    baseline_value,
    best_eval,
    eval_flags,
    eval_points,
    eval_rows,
    skill_rows,
)
from workbench.view.evaluations import multi_step_rows

if TYPE_CHECKING:
    from screens.host import Host

# Widths include a one-space gap (no cell padding), so all twelve columns fit 80 terminal columns.
COLUMNS = (
    ("", "mark", 7),
    ("step", "step", 5),
    ("mode", "mode", 7),
    ("json", "json", 5),
    ("tool", "tool", 5),
    ("args", "args", 5),
    ("success 95%CI", "success", 15),
    ("Δbase", "delta", 6),
    ("unsafe", "unsafe", 7),
    ("test", "test", 6),
    ("tok", "tokens", 4),
    ("n", "n", 4),
)
SPLIT_ROLE = {"validation": "decides promotion", "test": "reported only, decides nothing"}


class EvalsScreen(Screen):
    CSS_PATH = "evals.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back", id="evals.back"),
        Binding("m", "toggle_mode", "Mode", id="evals.mode", tooltip="Show greedy / sampled / all evals"),
        Binding("s", "toggle_split", "Split", id="evals.split", tooltip="Show the validation / test split"),
    ]

    class Loaded(Message):
        def __init__(
            self,
            evals: list[Eval],
            checkpoints: list[Checkpoint],
            steps: list[Step],
            promotion: str | None = None,
        ) -> None:
            super().__init__()
            self.evals, self.checkpoints, self.steps = evals, checkpoints, steps
            self.promotion = promotion  # the last promotion decision's message (why), if any

    def __init__(self) -> None:
        super().__init__()
        self.mode: str | None = None  # None: all modes
        self.split = "validation"
        self.evals: list[Eval] = []
        self.best: Eval | None = None
        self._count = -1

    @property
    def wb(self) -> Host:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static(id="evals-title")
        table: DataTable = DataTable(cursor_type="row", cell_padding=0, id="evals-table")
        for label, key, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table
        yield Static(id="evals-flags")
        # Scrolls: the multi-step kinds and the per-skill lines outgrow a 24-row terminal; the plot keeps its rows.
        yield VerticalScroll(Static(id="evals-skills"), id="evals-skills-box")
        yield PlotextPlot(id="evals-plot")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self._load()
        self.set_interval(5.0, self._check_new)

    def _check_new(self) -> None:
        # A cheap indexed read; the full reload (steps for the flags) happens in a thread when evals change.
        view, run_id = self.wb.view, self.wb.run_id
        if view is not None and run_id is not None and len(view.evals(run_id)) != self._count:
            self._load()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        run_id = self.wb.run_id
        assert run_id is not None
        with View.open(self.wb.db_path) as view, view.snapshot():
            evals, checkpoints, steps = view.evals(run_id), view.checkpoints(run_id), view.steps(run_id)
            decisions = [e for e in view.last_events(run_id, 500) if e.kind == "promotion"]
        promoted = [e for e in decisions if ": promoted:" in e.message]
        why = (promoted or decisions)[-1].message if decisions else None
        self.post_message(self.Loaded(evals, checkpoints, steps, why))

    def on_evals_screen_loaded(self, message: Loaded) -> None:
        self._count = len(message.evals)
        rows = eval_rows(message.evals, message.checkpoints, self.mode, split=self.split)
        self.evals = [r.eval for r in rows]
        self.best = best_eval(self.evals)  # validation only: test rows never get a best or a promotion mark
        base_success = (
            baseline_value(self.evals)
            if self.split == "validation"
            else next((r.eval.success for r in rows if r.eval.is_baseline), None)
        )
        # The test split's success beside each validation row: the same policy (step, checkpoint, mode).
        tests = {
            (e.step, e.checkpoint_id, e.mode, e.is_baseline): e for e in message.evals if e.split == "test"
        }
        table = self.query_one(DataTable)
        table.clear()
        for r in rows:  # baseline first, then checkpoints in step order
            e = r.eval
            is_best = self.best is not None and e.id == self.best.id
            # best: the highest held-out success; promoted: what the promotion rule chose (it must beat the
            # baseline on success with no more unsafe calls), the checkpoint a user should ship.
            mark = (
                Text("★promo" if is_best else "promo", style="bold green")
                if r.promoted
                else Text("★ best", style="bold green")
                if is_best
                else Text("base", style="bold")
                if e.is_baseline
                else Text("")
            )
            success = Text(pct(e.success, 1), style="bold" if is_best else "")
            lo, hi = e.metric("success_ci_low"), e.metric("success_ci_high")
            if lo is not None and hi is not None:
                success.append(f" {100 * lo:.0f}–{100 * hi:.0f}", style="dim")
            delta = (
                None
                if base_success is None or e.success is None or e.is_baseline
                else e.success - base_success
            )
            unsafe = e.metric("unsafe_rate")
            # A checkpoint saved at another step than its eval says so after the step.
            ck = r.checkpoint_step
            table.add_row(
                mark,
                str(e.step) if ck in (None, e.step) else f"{e.step}@{ck}",
                e.mode,
                pct(e.metric("valid_json_rate")),
                pct(e.metric("correct_tool_rate")),
                pct(e.metric("correct_args_rate")),
                success,
                Text(
                    "" if delta is None else f"{100 * delta:+.0f}pp",
                    style="green" if (delta or 0) > 0 else "red",
                ),
                Text(pct(unsafe), style="bold red" if (unsafe or 0) > 0 else ""),
                pct(t.success)
                if self.split == "validation"
                and (t := tests.get((e.step, e.checkpoint_id, e.mode, e.is_baseline)))
                else "",
                num(e.metric("mean_tokens"), 0),
                str(e.metrics.get("n", "–")),
                key=str(e.id),
            )
        mode = self.mode or "all modes"
        best = f" · best: step {self.best.step} ({pct(self.best.success, 1)})" if self.best else ""
        promoted = next((r.eval for r in rows if r.promoted), None)
        if promoted is not None and promoted is not self.best:
            best += f" · promoted: step {promoted.step} ({pct(promoted.success, 1)})"
        self.query_one("#evals-title", Static).update(
            Text(
                f"{self.split.capitalize()} ({SPLIT_ROLE[self.split]}) · {mode} (m, s switch){best}",
                style="bold",
            )
        )
        flags = eval_flags(
            message.steps, [e for e in message.evals if self.mode is None or e.mode == self.mode]
        )
        body = Text()
        if message.promotion:
            body.append("promotion: ", style="bold")
            body.append(message.promotion + "\n")
        if not flags:
            body.append("no warning flags", style="dim")
        for f in flags:
            body.append("⚠ ", style="bold yellow")
            body.append(f.message + "\n")
        body.rstrip()
        self.query_one("#evals-flags", Static).update(body)
        self._show_skills([r for r in rows if r.eval.mode == "greedy"])
        self._plot(self.evals)

    def _show_skills(self, rows: list[EvalRow]) -> None:
        """Success per skill (tool and argument kind) for base, SFT-only, promoted and the last checkpoint;
        multi-step tasks first, in their own lines: single calls beside them, each kind, the paired Δ."""
        ms_header, ms_lines = multi_step_rows(rows)
        header, lines = skill_rows(rows, multi_step=not ms_lines)
        text = Text()
        if ms_lines:
            text.append("multi-step  " + "  ".join(ms_header[2:-1]) + f"  ({ms_header[-1]})\n", style="bold")
            for line in ms_lines:
                text.append(f"{line[0].removeprefix('multi-step: ')} (n={line[1]}): ")
                text.append(" → ".join(line[2:-1]), style="dim")
                delta = line[-1]
                text.append(
                    f"  Δ {delta}\n", style="green" if delta.startswith("+") and "[+" in delta else ""
                )
        if lines:
            text.append("per skill  " + "  ".join(h for h in header[2:]) + "\n", style="bold")
            for line in lines:
                text.append(f"{line[0]} (n={line[1]}): ", style="")
                text.append(" → ".join(line[2:]) + "\n", style="dim")
        text.rstrip()
        self.query_one("#evals-skills", Static).update(text)

    def _plot(self, evals: list[Eval]) -> None:
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_figure()
        xs, ys = eval_points(evals, split=self.split)
        base = next((e.success for e in evals if e.is_baseline), None)
        if xs:
            plt.plot(xs, ys, marker="braille", color="cyan")
            ticks = step_ticks(xs, plot.size.width - 8)
            plt.xticks(ticks, [str(t) for t in ticks])
        if base is not None:
            plt.hline(base, "yellow")
        if not xs and base is None:
            plt.title("no evaluations yet")
        else:
            base_note = f", yellow line: baseline {100 * base:.1f}%" if base is not None else ""
            plt.title(f"{self.split} success by step{base_note}")
        plot.refresh()

    def action_toggle_split(self) -> None:
        self.split = "test" if self.split == "validation" else "validation"
        self._load()

    def action_toggle_mode(self) -> None:
        order = [None, "greedy", "sampled"]
        self.mode = order[(order.index(self.mode) + 1) % len(order)]
        self._load()

    def action_back(self) -> None:
        self.app.pop_screen()

"""Evaluations: the baseline and each checkpoint on held-out tasks, with CIs, the best one marked, and flags
for the usual ways GRPO goes wrong (overfitting, length drift, JSON regressions)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual_plotext import PlotextPlot

from screens.curves import baseline_value, eval_points
from screens.db import thread_db
from screens.eval_logic import best_eval, eval_flags
from screens.format import num, pct
from store import metrics as sm

if TYPE_CHECKING:
    from screens.app import WorkbenchApp

# Widths include a one-space gap (no cell padding), so all twelve columns fit 80 terminal columns.
COLUMNS = (("", "mark", 7), ("step", "step", 5), ("mode", "mode", 7), ("json", "json", 5), ("tool", "tool", 5),
           ("args", "args", 5), ("success 95%CI", "success", 15), ("Δbase", "delta", 6), ("unsafe", "unsafe", 7),
           ("lat", "latency", 6), ("tok", "tokens", 4), ("n", "n", 4))


class EvalsScreen(Screen):
    CSS_PATH = "evals.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back", id="evals.back"),
        Binding("m", "toggle_mode", "Mode", id="evals.mode", tooltip="Show greedy / sampled / all evals"),
    ]

    class Loaded(Message):
        def __init__(self, evals: list[dict[str, Any]], checkpoints: list[dict[str, Any]],
                     steps: list[dict[str, Any]]) -> None:
            super().__init__()
            self.evals, self.checkpoints, self.steps = evals, checkpoints, steps

    def __init__(self) -> None:
        super().__init__()
        self.mode: str | None = None  # None: all modes
        self.evals: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self._count = -1

    @property
    def wb(self) -> WorkbenchApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static(id="evals-title")
        table: DataTable = DataTable(cursor_type="row", cell_padding=0, id="evals-table")
        for label, key, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table
        yield Static(id="evals-flags")
        yield PlotextPlot(id="evals-plot")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self._load()
        self.set_interval(5.0, self._check_new)

    def _check_new(self) -> None:
        # A cheap indexed read; the full reload (steps for the flags) happens in a thread when evals change.
        if len(sm.list_evals(self.wb.db, self.wb.run_id)) != self._count:
            self._load()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        with thread_db(self.wb.db_path) as db:
            evals = sm.list_evals(db, self.wb.run_id)
            checkpoints = sm.list_checkpoints(db, self.wb.run_id)
            steps = sm.steps_since(db, self.wb.run_id, -1)
        self.post_message(self.Loaded(evals, checkpoints, steps))

    def on_evals_screen_loaded(self, message: Loaded) -> None:
        self._count = len(message.evals)
        evals = [e for e in message.evals if self.mode is None or e["mode"] == self.mode]
        self.evals = evals
        self.best = best_eval(evals)
        ckpt_step = {c["id"]: c["step"] for c in message.checkpoints}
        base = next((e for e in evals if e.get("is_baseline")), None)
        base_success = (base or {}).get("metrics", {}).get("success_rate")
        table = self.query_one(DataTable)
        table.clear()
        # Baseline first, then checkpoints in step order.
        for e in sorted(evals, key=lambda e: (not e.get("is_baseline"), e["step"], e["id"])):
            m = e.get("metrics") or {}
            is_best = self.best is not None and e["id"] == self.best["id"]
            mark = Text("★ best", style="bold green") if is_best else Text("base", style="bold") if e.get("is_baseline") else Text("")
            success = Text(pct(m.get("success_rate"), 1), style="bold" if is_best else "")
            if m.get("success_ci_low") is not None and m.get("success_ci_high") is not None:
                success.append(f" {100 * m['success_ci_low']:.0f}–{100 * m['success_ci_high']:.0f}", style="dim")
            delta = None if base_success is None or m.get("success_rate") is None or e.get("is_baseline") \
                else m["success_rate"] - base_success
            # A checkpoint saved at another step than its eval says so after the step.
            ck = ckpt_step.get(e.get("checkpoint_id"))
            table.add_row(
                mark, str(e["step"]) if ck in (None, e["step"]) else f"{e['step']}@{ck}",
                e["mode"], pct(m.get("valid_json_rate")), pct(m.get("correct_tool_rate")), pct(m.get("correct_args_rate")),
                success,
                Text("" if delta is None else f"{100 * delta:+.0f}pp", style="green" if (delta or 0) > 0 else "red"),
                Text(pct(m.get("unsafe_rate")), style="bold red" if (m.get("unsafe_rate") or 0) > 0 else ""),
                f"{num(m.get('mean_latency_s'), 2)}s", num(m.get("mean_tokens"), 0), str(m.get("n", "–")),
                key=str(e["id"]),
            )
        mode = self.mode or "all modes"
        best = f" · best: step {self.best['step']} ({pct((self.best.get('metrics') or {}).get('success_rate'), 1)})" \
            if self.best else ""
        self.query_one("#evals-title", Static).update(
            Text(f"Evaluations on held-out tasks · {mode} (m switches){best}", style="bold")
        )
        flags = eval_flags(message.steps, evals)
        body = Text()
        if not flags:
            body.append("no warning flags", style="dim")
        for f in flags:
            body.append("⚠ ", style="bold yellow")
            body.append(f.message + "\n")
        body.rstrip()
        self.query_one("#evals-flags", Static).update(body)
        self._plot(evals)

    def _plot(self, evals: list[dict[str, Any]]) -> None:
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_figure()
        xs, ys = eval_points(evals)
        base = baseline_value(evals)
        if xs:
            plt.plot(xs, ys, marker="braille", color="cyan")
        if base is not None:
            plt.hline(base, "yellow")
        if not xs and base is None:
            plt.title("no evaluations yet")
        else:
            base_note = f", yellow line: baseline {100 * base:.1f}%" if base is not None else ""
            plt.title(f"held-out success by step{base_note}")
        plot.refresh()

    def action_toggle_mode(self) -> None:
        order = [None, "greedy", "sampled"]
        self.mode = order[(order.index(self.mode) + 1) % len(order)]
        self._load()

    def action_back(self) -> None:
        self.app.pop_screen()

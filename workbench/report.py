"""`workbench report`: a run's evaluations on validation and test side by side, why the promoted checkpoint
was promoted, and success per skill (tool and argument kind), so a user sees which skill fails and which
one training moved. The rows and their rules are workbench.view.evaluations', as on the evaluations screen."""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import asdict
from typing import Any

from workbench.view import View, eval_rows, skill_rows

SPLITS = ("validation", "test")


def eval_table(view: View, run_id: int, mode: str = "greedy") -> list[dict[str, Any]]:
    """Every eval row as a JSON-ready dict, validation first then test: the promoted one marked, each with
    its paired success difference to the baseline and to SFT-only (same tasks) on its own split."""
    evals, checkpoints = view.evals(run_id), view.checkpoints(run_id)
    return [
        {"split": split, "label": r.label, "step": r.eval.step, "kind": r.kind, "promoted": r.promoted,
         **r.eval.metrics, "vs_base": asdict(r.vs_base) if r.vs_base else None,
         "vs_sft": asdict(r.vs_sft) if r.vs_sft else None}
        for split in SPLITS for r in eval_rows(evals, checkpoints, mode, split=split)
    ]


def _paired_cell(d: Any) -> str:
    if d is None:
        return "-"
    cell = f"{d.delta:+.2f} [{d.ci_low:+.2f}, {d.ci_high:+.2f}]"
    if d.cluster_ci is not None:
        cell += f" T[{d.cluster_ci[0]:+.2f}, {d.cluster_ci[1]:+.2f}]"
    return cell


def _rate(value: Any, ci: tuple[Any, Any] | None = None) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    if ci and all(isinstance(c, (int, float)) for c in ci):
        return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    return f"{value:.2f}"


def print_report(db: str, run_id: int, *, mode: str = "greedy", as_json: bool = False, n_events: int = 20) -> int:
    from rich.console import Console
    from rich.table import Table

    with View.open(db) as view:
        run = view.run(run_id)
        if as_json:
            print(json.dumps(eval_table(view, run_id, mode), indent=2))
            return 0
        evals, checkpoints = view.evals(run_id), view.checkpoints(run_id)
        events = view.last_events(run_id, max(n_events, 200))
    # Piped to a file, rich would wrap at 80 columns: give the tables the width they need instead.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    for split in SPLITS:
        rows = eval_rows(evals, checkpoints, mode, split=split)
        if not rows:
            continue
        role = "decides promotion" if split == "validation" else "reported only: nothing is decided on it"
        table = Table(title=f"run {run_id} ({run.name}, {run.status}): {split} ({role}), {mode}")
        for col in ("policy", "valid JSON", "tool", "args", "success [95% CI]", "unsafe", "no call", "parallel",
                    "tokens", "vs base", "vs SFT-only"):
            table.add_column(col, justify="left" if col == "policy" else "right")
        for r in rows:
            m = r.eval.metrics
            table.add_row(
                r.label + (" *" if r.promoted else ""), _rate(m.get("valid_json_rate")),
                _rate(m.get("correct_tool_rate")), _rate(m.get("correct_args_rate")),
                _rate(m.get("success_rate"), (m.get("success_ci_low"), m.get("success_ci_high"))),
                _rate(m.get("unsafe_rate")), _rate(m.get("no_call_accuracy")), _rate(m.get("parallel_success")),
                f"{m.get('mean_tokens', 0):.1f}", _paired_cell(r.vs_base),
                _paired_cell(r.vs_sft),
            )
        console.print(table)
        header, lines = skill_rows(rows)
        if lines:
            skills = Table(title=f"{split}: success per skill")
            for col in header:
                skills.add_column(col, justify="left" if col == "skill" else "right")
            for line in lines:
                skills.add_row(*line)
            console.print(skills)
    print("* promoted: clearly better than the baseline and than SFT-only on validation (paired, 95% CI above 0)")
    print("no call: share of no-call tasks (expected_tool null) answered without a call; parallel: success on"
          " tasks expecting several calls in one turn; '-' where the split has none")
    print("vs base / vs SFT-only: paired success difference on the same tasks [95% bootstrap CI over tasks]"
          " T[95% CI over phrasing templates]")
    decisions = [e for e in events if e.kind == "promotion"]
    promoted = [e for e in decisions if ": promoted:" in e.message]
    if promoted:
        print(f"promoted: {promoted[-1].message}")
    elif decisions:
        print(f"nothing promoted; last decision: {decisions[-1].message}")
    shown = events[-n_events:] if n_events > 0 else []
    if shown:
        print(f"\nevents (the last {len(shown)}):")
        for e in shown:
            print(f"  {dt.datetime.fromtimestamp(e.created):%Y-%m-%d %H:%M:%S}  {e.kind:<8} {e.message}")
    return 0

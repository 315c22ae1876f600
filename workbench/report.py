"""`workbench report`: a run's evaluations on validation and test side by side, why the promoted checkpoint
was promoted, and success per skill (tool and argument kind; multi-step kinds in their own table, single
calls beside them), so a user sees which skill fails and which one training moved. The rows and their rules
are workbench.view.evaluations', as on the evaluations screen."""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from workbench.view import EvalRow, View, eval_rows, skill_rows
from workbench.view.evaluations import multi_step_rows, skill_columns

SPLITS = ("validation", "test")


def eval_table(view: View, run_id: int, mode: str = "greedy") -> list[dict[str, Any]]:
    """Every eval row as a JSON-ready dict, validation first then test: the promoted one marked, each with
    its paired success difference to the baseline and to SFT-only (same tasks) on its own split."""
    evals, checkpoints = view.evals(run_id), view.checkpoints(run_id)
    return [
        {
            "split": split,
            "label": r.label,
            "step": r.eval.step,
            "kind": r.kind,
            "promoted": r.promoted,
            **r.eval.metrics,
            "vs_base": asdict(r.vs_base) if r.vs_base else None,
            "vs_sft": asdict(r.vs_sft) if r.vs_sft else None,
        }
        for split in SPLITS
        for r in eval_rows(evals, checkpoints, mode, split=split)
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


def _all_events(view: View, run_id: int, kind: str) -> list[Any]:
    """Every event of one kind, oldest first: a promotion can be older than the last N events a report shows."""
    found, after = [], 0
    while page := view.events(run_id, after_id=after, limit=500):
        found += [e for e in page if e.kind == kind]
        after = page[-1].id
    return found


def promotion_footnote(rows: list[EvalRow]) -> str:
    """The footnote for the `*` row, saying the part of workbench.run.promotion.promotion that applied to
    it: the SFT-only checkpoint is compared with the baseline only (never with itself); a later checkpoint also
    with SFT-only when the run has an SFT-only eval."""
    head = (
        "* promoted (what to deploy): on validation, paired on the same tasks, clearly better than the "
        "baseline (95% CI of the difference above 0), no more unsafe calls than it"
    )
    tail = ", and more successful than the checkpoint promoted before it"
    promoted = next((r for r in rows if r.promoted), None)
    has_sft = any(r.kind == "sft" for r in rows)
    if promoted is None:
        return (
            f"{head}{', and, after the SFT warm-up, clearly better than SFT-only' if has_sft else ''}{tail}; "
            "no checkpoint of this run passed"
        )
    if (
        promoted.eval.solved is None
    ):  # evals stored before per-task results: the rule's point-estimate fallback
        head = (
            "* promoted (what to deploy): on validation, success above the baseline's "
            "(point estimates: no per-task results)"
        )
    if promoted.kind == "sft":
        later = [r for r in rows if r.kind not in ("base", "sft")]
        return f"{head}: the SFT-only checkpoint, so compared with the baseline only" + (
            "; a later one must also be clearly better than SFT-only, and none was" if later else ""
        )
    return f"{head}{', and clearly better than SFT-only' if has_sft else ''}{tail}"


def deploy_line(run_id: int, checkpoints: list[Any], rows: list[EvalRow], decisions: list[Any]) -> str:
    """`deploy: PATH (why)`: the promoted checkpoint's folder and the decision that promoted it, with the
    last decision after it when later checkpoints were not promoted; or why there is nothing to deploy."""
    promoted = [c for c in checkpoints if c.promoted]
    if not promoted:
        if decisions:
            last = decisions[-1].message
            return (
                f"deploy: nothing from run {run_id}: no checkpoint passed the promotion rule (last: {last})"
            )
        return f"deploy: nothing yet from run {run_id}: no checkpoint has a validation eval and a promotion decision"
    c = promoted[-1]
    label = next((r.label for r in rows if r.promoted), f"{c.kind} @ step {c.step}")
    prefix = f"step {c.step}: promoted: "
    why = next(
        (e.message.removeprefix(prefix) for e in reversed(decisions) if e.message.startswith(prefix)), None
    )
    text = f"{label}, promoted on validation" + (f": {why}" if why else "")
    after = [e for e in decisions if _decision_step(e.message) > c.step]
    if after:
        text += f"; later: {after[-1].message}"
    missing = "" if Path(c.path).exists() else " [not on this machine]"
    return f"deploy: {c.path}{missing} ({text})"


def _decision_step(message: str) -> int:
    """The step a promotion event is about (`step N: ...`); -1 when it names none."""
    head = message.split(":", 1)[0]
    return int(head[5:]) if head.startswith("step ") and head[5:].isdigit() else -1


def wrapper_rows(rows: list[Any]) -> list[list[str]]:
    """The skill table's format-failure line, beside the skills' success (the columns of `skill_rows`): the share
    of replies holding a well-formed call in the wrong wrapper (a ```json fence, bare JSON where tags are
    expected), apart from wrong tool and wrong args; shown when some policy has any."""
    cols = skill_columns(rows)
    values = [r.eval.metric("wrong_wrapper_rate") for r in cols]
    if not any(v for v in values):
        return []
    n = next((r.eval.metric("n") for r in cols if r.eval.metric("n") is not None), 0)
    return [["wrong wrapper (share)", str(int(n or 0)), *("-" if v is None else f"{v:.2f}" for v in values)]]


def print_report(
    db: str, run_id: int, *, mode: str = "greedy", as_json: bool = False, n_events: int = 20
) -> int:
    from rich.console import Console
    from rich.table import Table

    with View.open(db, check=True) as view:  # a damaged file is refused, naming its pages
        run = view.run(run_id)
        if as_json:
            print(json.dumps(eval_table(view, run_id, mode), indent=2))
            return 0
        evals, checkpoints = view.evals(run_id), view.checkpoints(run_id)
        events = view.last_events(run_id, n_events) if n_events > 0 else []
        decisions = _all_events(view, run_id, "promotion")
    # Piped to a file, rich would wrap at 80 columns: give the tables the width they need instead.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    for split in SPLITS:
        rows = eval_rows(evals, checkpoints, mode, split=split)
        if not rows:
            continue
        role = "decides promotion" if split == "validation" else "reported only: nothing is decided on it"
        table = Table(title=f"run {run_id} ({run.name}, {run.status}): {split} ({role}), {mode}")
        for col in (
            "policy",
            "valid JSON",
            "tool",
            "args",
            "success [95% CI]",
            "unsafe",
            "no call",
            "parallel",
            "tokens",
            "vs base",
            "vs SFT-only",
        ):
            table.add_column(col, justify="left" if col == "policy" else "right")
        for r in rows:
            m = r.eval.metrics
            table.add_row(
                r.label + (" *" if r.promoted else ""),
                _rate(m.get("valid_json_rate")),
                _rate(m.get("correct_tool_rate")),
                _rate(m.get("correct_args_rate")),
                _rate(m.get("success_rate"), (m.get("success_ci_low"), m.get("success_ci_high"))),
                _rate(m.get("unsafe_rate")),
                _rate(m.get("no_call_accuracy")),
                _rate(m.get("parallel_success")),
                f"{m.get('mean_tokens', 0):.1f}",
                _paired_cell(r.vs_base),
                _paired_cell(r.vs_sft),
            )
        console.print(table)
        ms_header, ms_lines = multi_step_rows(rows)
        if ms_lines:  # judged on the world's final state: single calls beside them, then one row per kind
            console.print(
                _table(f"{split}: multi-step success per kind, single calls beside them", ms_header, ms_lines)
            )
        header, lines = skill_rows(rows, multi_step=not ms_lines)
        lines += wrapper_rows(rows)
        if lines:
            console.print(_table(f"{split}: success per skill", header, lines))
    print(promotion_footnote(eval_rows(evals, checkpoints, "greedy", split="validation")))
    print(
        "no call: share of no-call tasks (expected_tool null) answered without a call; parallel: success on"
        " tasks expecting several calls in one turn; '-' where the split has none"
    )
    print(
        "vs base / vs SFT-only: paired success difference on the same tasks [95% bootstrap CI over tasks]"
        " T[95% CI over phrasing templates]"
    )
    if any(multi_step_rows(eval_rows(evals, checkpoints, mode, split=s))[1] for s in SPLITS):
        print(
            "multi-step: success is the final world state equal to the expected one with nothing unsafe; Δ: the"
            " last column minus SFT-only (else base), paired on the kind's tasks [95% bootstrap CI]"
        )
    if events:
        print(f"\nevents (the last {len(events)}):")
        for e in events:
            print(f"  {dt.datetime.fromtimestamp(e.created):%Y-%m-%d %H:%M:%S}  {e.kind:<8} {e.message}")
    # Last, so it is what a reader (or `tail -1`) takes away. Promotion reads greedy validation evals only.
    print(
        deploy_line(
            run_id, checkpoints, eval_rows(evals, checkpoints, "greedy", split="validation"), decisions
        )
    )
    return 0


def _table(title: str, header: list[str], lines: list[list[str]]) -> Any:
    """A rich table whose first column is a label (left) and the rest numbers (right)."""
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for line in lines:
        table.add_row(*line)
    return table

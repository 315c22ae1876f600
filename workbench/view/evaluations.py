"""Reading a run's evaluations: the baseline, the SFT-only policy, the best checkpoint, the promoted one,
paired comparisons and the warning flags, for the evaluations screen and `workbench report`. The promotion
rule and the selections it needs (baseline, SFT-only) are the engine's (`workbench.run.promotion`, which the
recorder applies); `workbench.view` re-exports them, so readers show the rule the run decided by.

Every rule here decides on the validation split only. Test-split evals (`Eval.split == "test"`) are shown
beside them (`eval_rows(..., split="test")`) and never enter a decision."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workbench.domains.calendar.agent_tasks import DATASET as AGENT_DATASET
from workbench.domains.calendar.agent_tasks import KINDS as AGENT_KINDS
from workbench.eval import PairedDifference, paired_difference
from workbench.run.promotion import baseline, checkpoint_evals, on_split, sft_only
from workbench.skills import skill_label
from workbench.view.records import Checkpoint, Eval, Step

# Differences smaller than these are noise at the held-out sizes we run (tens of tasks).
REWARD_RISE = 0.05
SUCCESS_FALL = 0.05
LENGTH_DRIFT = 0.5
JSON_REGRESSION = 0.05


@dataclass(frozen=True)
class Flag:
    kind: str
    message: str


def best_eval(evals: Sequence[Eval]) -> Eval | None:
    """The non-baseline validation eval with the highest success; ties go to fewer unsafe calls, then earlier."""
    scored = [e for e in on_split(evals) if not e.is_baseline and e.success is not None]
    if not scored:
        return None
    return min(scored, key=lambda e: (-(e.success or 0.0), e.metric("unsafe_rate") or 0.0, e.step, e.id))


@dataclass(frozen=True)
class EvalRow:
    """One line of the report: an eval, what it measured, and its paired differences to the references."""

    eval: Eval
    label: str  # "base", "sft @ step 0", "periodic @ step 10", ...
    kind: str | None  # "base", or the checkpoint's kind
    checkpoint_step: int | None
    promoted: bool
    vs_base: PairedDifference | None
    vs_sft: PairedDifference | None


def eval_rows(
    evals: Sequence[Eval],
    checkpoints: Sequence[Checkpoint],
    mode: str | None = "greedy",
    split: str = "validation",
) -> list[EvalRow]:
    """Baseline, SFT-only and each checkpoint in order, each with its paired success difference to the
    baseline and to the SFT-only policy (rows before a reference are not compared with it), on one split."""
    by_id = {c.id: c for c in checkpoints}
    chosen = [e for e in evals if (mode is None or e.mode == mode) and e.split == split]
    chosen.sort(key=lambda e: (not e.is_baseline, e.step, e.id))
    kinds = [
        "base" if e.is_baseline else (by_id[e.checkpoint_id].kind if e.checkpoint_id in by_id else None)
        for e in chosen
    ]
    refs = {
        k: next(
            (i for i, (e, kind) in enumerate(zip(chosen, kinds, strict=True)) if kind == k and e.solved), None
        )
        for k in ("base", "sft")
    }

    def versus(i: int, ref: int | None) -> PairedDifference | None:
        e = chosen[i]
        if ref is None or i <= ref or e.solved is None:
            return None
        return paired_difference(e.solved, chosen[ref].solved or {}, clusters=e.clusters)

    rows = []
    for i, (e, kind) in enumerate(zip(chosen, kinds, strict=True)):
        ck = by_id.get(e.checkpoint_id) if e.checkpoint_id is not None else None
        label = "base" if e.is_baseline else (f"{ck.kind} @ step {ck.step}" if ck else f"step {e.step}")
        rows.append(
            EvalRow(
                e,
                label,
                kind,
                ck.step if ck else None,
                bool(ck and ck.promoted),
                versus(i, refs["base"]),
                versus(i, refs["sft"]),
            )
        )
    return rows


def skill_columns(rows: list[EvalRow]) -> list[EvalRow]:
    """Base, SFT-only, the promoted checkpoint and the last one (each once): the policies a skill table compares."""
    picked: list[EvalRow] = []
    for pick in (
        next((r for r in rows if r.kind == "base"), None),
        next((r for r in rows if r.kind == "sft"), None),
        next((r for r in rows if r.promoted), None),
        rows[-1] if rows else None,
    ):
        if pick is not None and all(pick.eval.id != p.eval.id for p in picked):
            picked.append(pick)
    return picked


def skill_rows(rows: list[EvalRow], *, multi_step: bool = True) -> tuple[list[str], list[list[str]]]:
    """(header, lines) of success per skill for the chosen policies of one split; `multi_step=False` leaves
    the multi-step skills to their own table (`multi_step_rows`)."""
    cols = skill_columns(rows)
    skills = sorted(
        {
            s
            for r in cols
            for s in r.eval.by_skill
            if multi_step or not (s == "multi_step" or s.startswith("agent:"))
        },
        key=lambda s: (not s.startswith("tool:"), s),
    )
    header = ["skill", "n"] + [r.label + (" *" if r.promoted else "") for r in cols]
    lines = []
    for s in skills:
        n = next((r.eval.by_skill[s]["n"] for r in cols if s in r.eval.by_skill), 0)
        cells = [f"{r.eval.by_skill[s]['success']:.2f}" if s in r.eval.by_skill else "-" for r in cols]
        lines.append([skill_label(s), str(int(n)), *cells])
    # The call families with their own rates (no call is right; several calls in one turn), when a split has them.
    for label, rate, count in (
        ("no call", "no_call_accuracy", "no_call_n"),
        ("parallel calls", "parallel_success", "parallel_n"),
    ):
        if any(r.eval.metric(rate) is not None for r in cols):
            n = next((r.eval.metric(count) for r in cols if r.eval.metric(count) is not None), 0)
            cells = [f"{v:.2f}" if (v := r.eval.metric(rate)) is not None else "-" for r in cols]
            lines.append([label, str(int(n or 0)), *cells])
    return header, lines


def _agent_kind(task_id: str) -> str | None:
    """A calendar_agent task's kind, read off its id (`calendar_agent:<split>:<kind>:<i>`), else None."""
    parts = task_id.split(":")
    return parts[2] if len(parts) == 4 and parts[0] == AGENT_DATASET and parts[2] in AGENT_KINDS else None


def multi_step_rows(rows: list[EvalRow]) -> tuple[list[str], list[list[str]]]:
    """(header, lines) of the multi-step skill table for the skill table's policies: single-call success beside
    multi-step, then each calendar_agent kind (`agent:<kind>`), and the last column's paired difference to
    SFT-only (to the baseline when there is none) on the same tasks. ([], []) when no policy was evaluated on a
    multi-step task.

    Single-call success is the rest of the split (all tasks less the multi-step ones, from `solved` and
    by_skill's multi_step). The paired cells need each task's kind, read off its id: they are left "-" where
    the split holds multi-step tasks of another family, whose ids say nothing."""
    cols = skill_columns(rows)
    if not any("multi_step" in r.eval.by_skill for r in cols):
        return [], []
    target = cols[-1] if cols else None
    ref = next((r for r in cols if r.kind == "sft" and r is not target), None) or next(
        (r for r in cols if r.kind == "base" and r is not target), None
    )
    delta_head = f"Δ vs {'SFT-only' if ref is not None and ref.kind == 'sft' else 'base'} [95% CI]"
    header = ["multi-step", "n"] + [r.label + (" *" if r.promoted else "") for r in cols] + [delta_head]

    def subset(e: Eval, keep: Callable[[str], bool]) -> dict[str, float]:
        return {t: v for t, v in (e.solved or {}).items() if keep(t)}

    def paired(keep: Callable[[str], bool]) -> str:
        if target is None or ref is None or not target.eval.solved or not ref.eval.solved:
            return "-"
        d = paired_difference(subset(target.eval, keep), subset(ref.eval, keep))
        return "-" if d is None else f"{d.delta:+.2f} [{d.ci_low:+.2f}, {d.ci_high:+.2f}]"

    def single(e: Eval) -> tuple[int, float] | None:
        ms, solved = e.by_skill.get("multi_step"), e.solved
        if not solved or not ms:
            return None
        n = len(solved) - int(ms["n"])
        return None if n <= 0 else (n, (sum(solved.values()) - ms["success"] * ms["n"]) / n)

    # Ids tell the kinds apart only when every multi-step task is the generated family's.
    known = all(
        len(subset(r.eval, lambda t: _agent_kind(t) is not None)) == int(r.eval.by_skill["multi_step"]["n"])
        for r in cols
        if r.eval.solved and "multi_step" in r.eval.by_skill
    )
    lines = []
    singles = [single(r.eval) for r in cols]
    if any(singles):
        n = next(s[0] for s in singles if s)
        lines.append(
            [
                "single call",
                str(n),
                *("-" if s is None else f"{s[1]:.2f}" for s in singles),
                paired(lambda t: _agent_kind(t) is None) if known else "-",
            ]
        )
    for skill in ("multi_step", *(f"agent:{k}" for k in AGENT_KINDS)):
        if not any(skill in r.eval.by_skill for r in cols):
            continue
        n = next(int(r.eval.by_skill[skill]["n"]) for r in cols if skill in r.eval.by_skill)
        cells = [
            f"{r.eval.by_skill[skill]['success']:.2f}" if skill in r.eval.by_skill else "-" for r in cols
        ]
        kind = skill.removeprefix("agent:")
        keep: Callable[[str], bool] = (
            (lambda t: _agent_kind(t) is not None)
            if skill == "multi_step"
            else (lambda t, k=kind: _agent_kind(t) == k)
        )  # type: ignore[misc]
        lines.append([skill_label(skill), str(n), *cells, paired(keep) if known else "-"])
    return header, lines


def metric_points(steps: Sequence[Step], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one step metric, NaN and missing values left out."""
    xs, ys = [], []
    for s in steps:
        v = s.metric(key)
        if v is not None:
            xs.append(float(s.step))
            ys.append(v)
    return xs, ys


def eval_points(
    evals: Sequence[Eval], key: str = "success_rate", split: str = "validation"
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for e in on_split(evals, split):
        v = e.metric(key)
        if not e.is_baseline and v is not None:
            xs.append(float(e.step))
            ys.append(v)
    return xs, ys


def baseline_value(evals: Sequence[Eval], key: str = "success_rate") -> float | None:
    base = baseline(evals)
    return None if base is None else base.metric(key)


def _mean_around(xs: list[float], ys: list[float], step: float, window: int = 5) -> float | None:
    vals = [y for x, y in zip(xs, ys, strict=True) if step - window < x <= step]
    return sum(vals) / len(vals) if vals else None


def eval_flags(steps: Sequence[Step], evals: Sequence[Eval]) -> list[Flag]:
    """The usual ways GRPO goes wrong, read off the curves and the validation evals."""
    flags: list[Flag] = []
    evals = on_split(evals)
    base = baseline(evals)
    checks = checkpoint_evals(evals)
    # 1. Train reward up while held-out success goes down, between the last two evals.
    xs, ys = metric_points(steps, "reward")
    if len(checks) >= 2 and xs:
        prev, last = checks[-2], checks[-1]
        r0, r1 = _mean_around(xs, ys, prev.step), _mean_around(xs, ys, last.step)
        s0, s1 = prev.success, last.success
        if (
            r0 is not None
            and r1 is not None
            and s0 is not None
            and s1 is not None
            and r1 - r0 > REWARD_RISE
            and s0 - s1 > SUCCESS_FALL
        ):
            flags.append(
                Flag(
                    "overfit",
                    f"train reward rose {r0:+.2f} → {r1:+.2f} while held-out success fell "
                    f"{100 * s0:.0f}% → {100 * s1:.0f}% (steps {prev.step}→{last.step}): overfitting or reward hacking",
                )
            )
    # 2. Completion length drifting away from where it started.
    _, ly = metric_points(steps, "completions/mean_length")
    if len(ly) >= 4:
        k = max(1, min(5, len(ly) // 3))
        early, late = sum(ly[:k]) / k, sum(ly[-k:]) / k
        if early > 0 and abs(late - early) / early > LENGTH_DRIFT:
            flags.append(
                Flag(
                    "length",
                    f"completion length drifted {early:.0f} → {late:.0f} tokens "
                    f"({(late - early) / early:+.0%} vs the first {k} steps)",
                )
            )
    # 3. Invalid JSON more often than the untrained model: the policy found reward elsewhere.
    if base is not None and checks:
        b, last_json = base.metric("valid_json_rate"), checks[-1].metric("valid_json_rate")
        if b is not None and last_json is not None and b - last_json > JSON_REGRESSION:
            flags.append(
                Flag(
                    "json",
                    f"invalid-JSON rate {100 * (1 - last_json):.0f}% at step {checks[-1].step} vs {100 * (1 - b):.0f}% "
                    "at baseline: possible reward hacking",
                )
            )
    # 4. The best GRPO checkpoint not clearly above the SFT warm-up it started from, paired on the same tasks
    #    (two overlapping CIs say little; the paired difference is what decides whether GRPO helped).
    sft = sft_only(evals)
    best = best_eval([e for e in checks if e.step > 0 and e.mode == "greedy"]) if sft else None
    if sft and best and sft.solved and best.solved:
        d = paired_difference(best.solved, sft.solved)
        if d is not None and not d.clearly_better:
            flags.append(
                Flag(
                    "vs_sft",
                    f"best GRPO checkpoint (step {best.step}) vs SFT-only: {100 * d.delta:+.0f}pp on the same "
                    f"{d.n_tasks} tasks (95% CI {100 * d.ci_low:+.0f}…{100 * d.ci_high:+.0f}pp): not clearly better "
                    "than the warm-up",
                )
            )
    return flags

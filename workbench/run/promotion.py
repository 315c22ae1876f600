"""Which checkpoint a run promotes: the rule the recorder applies to each validation eval, written with its
reason as a `promotion` event. `workbench report` and the evaluations screen show the same rule's choice
(through `workbench.view`, which re-exports it and the selections below).

It decides on the validation split only: test-split evals (`Eval.split == "test"`) are reported beside it and
never enter a decision."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.eval import PairedDifference, beats, paired_difference
from workbench.run.records import Checkpoint, Eval


def on_split(evals: Sequence[Eval], split: str = "validation") -> list[Eval]:
    return [e for e in evals if e.split == split]


def baseline(evals: Sequence[Eval], split: str = "validation") -> Eval | None:
    return next((e for e in evals if e.is_baseline and e.split == split), None)


def checkpoint_evals(evals: Sequence[Eval], split: str = "validation") -> list[Eval]:
    """Every eval of the split but the baseline, in step order."""
    return sorted((e for e in evals if not e.is_baseline and e.split == split), key=lambda e: (e.step, e.id))


def sft_only(evals: Sequence[Eval], split: str = "validation") -> Eval | None:
    """The greedy eval of the policy the SFT warm-up left (step 0, not the baseline)."""
    return next((e for e in checkpoint_evals(evals, split) if e.step == 0 and e.mode == "greedy"), None)


@dataclass(frozen=True)
class Promotion:
    promote: bool
    reason: str  # one line: the paired differences that decided it


def _paired(candidate: Eval, reference: Eval) -> PairedDifference | None:
    if not candidate.solved or not reference.solved:
        return None
    return paired_difference(candidate.solved, reference.solved, clusters=candidate.clusters)


def _pp(d: PairedDifference) -> str:
    return f"{100 * d.delta:+.0f}pp [{100 * d.ci_low:+.0f}, {100 * d.ci_high:+.0f}]"


def promotion(candidate: Eval, evals: Sequence[Eval], promoted: Checkpoint | None) -> Promotion:
    """Promote a checkpoint when, on the validation split and paired on the same tasks, it is clearly better
    than the baseline (the 95% CI of the difference above 0) with no more unsafe calls, clearly better than
    the SFT-only policy when there is one (a GRPO checkpoint must show what RL added), and more successful
    than the checkpoint promoted so far. Evals stored before per-task results fall back to point estimates."""
    if candidate.split != "validation":
        return Promotion(False, "test-split evals never decide promotion")
    greedy = [e for e in evals if e.mode == "greedy"]
    base = baseline(greedy)
    if base is None:
        return Promotion(False, "no baseline eval to compare with")
    if (candidate.metric("unsafe_rate") or 0.0) > (base.metric("unsafe_rate") or 0.0):
        return Promotion(False, "more unsafe calls than the baseline")
    reasons = []
    vs_base = _paired(candidate, base)
    if vs_base is None:
        if not beats(candidate.metrics, base.metrics):
            return Promotion(False, "success not above the baseline's")
        reasons.append("success above the baseline's")
    elif not vs_base.clearly_better:
        return Promotion(False, f"vs base {_pp(vs_base)}: not clearly better")
    else:
        reasons.append(f"vs base {_pp(vs_base)}")
    sft = sft_only(greedy)
    if sft is not None and sft.id != candidate.id and sft.checkpoint_id != candidate.checkpoint_id:
        vs_sft = _paired(candidate, sft)
        if vs_sft is not None and not vs_sft.clearly_better:
            return Promotion(False, f"vs SFT-only {_pp(vs_sft)}: not clearly better than the warm-up")
        if vs_sft is not None:
            reasons.append(f"vs SFT-only {_pp(vs_sft)}")
    current = next(
        (e for e in greedy if promoted and e.checkpoint_id == promoted.id and e.split == "validation"), None
    )
    if current is not None and (candidate.success or 0.0) <= (current.success or 0.0):
        return Promotion(False, f"not above the promoted checkpoint (step {current.step})")
    return Promotion(True, "; ".join(reasons))


def should_promote(candidate: Eval, evals: Sequence[Eval], promoted: Checkpoint | None) -> bool:
    return promotion(candidate, evals, promoted).promote

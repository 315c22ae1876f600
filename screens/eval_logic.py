"""Reading evaluations: the best checkpoint, and warning flags that training is going wrong."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from screens.curves import metric_points
from workbench.eval import paired_difference

# Differences smaller than these are noise at the held-out sizes we run (tens of tasks).
REWARD_RISE = 0.05
SUCCESS_FALL = 0.05
LENGTH_DRIFT = 0.5
JSON_REGRESSION = 0.05


@dataclass(frozen=True)
class Flag:
    kind: str
    message: str


def _m(e: dict[str, Any], key: str) -> float | None:
    v = (e.get("metrics") or {}).get(key)
    return float(v) if isinstance(v, (int, float)) else None


def baseline(evals: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    return next((e for e in evals if e.get("is_baseline")), None)


def best_eval(evals: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The non-baseline eval with the highest success rate; ties go to fewer unsafe calls, then earlier."""
    scored = [e for e in evals if not e.get("is_baseline") and _m(e, "success_rate") is not None]
    if not scored:
        return None
    return min(scored, key=lambda e: (-_m(e, "success_rate"), _m(e, "unsafe_rate") or 0.0, e["step"], e["id"]))


def _mean_around(xs: list[float], ys: list[float], step: float, window: int = 5) -> float | None:
    vals = [y for x, y in zip(xs, ys, strict=True) if step - window < x <= step]
    return sum(vals) / len(vals) if vals else None


def eval_flags(steps: Sequence[dict[str, Any]], evals: Sequence[dict[str, Any]]) -> list[Flag]:
    flags: list[Flag] = []
    base = baseline(evals)
    checks = sorted((e for e in evals if not e.get("is_baseline")), key=lambda e: (e["step"], e["id"]))
    # 1. Train reward up while held-out success goes down, between the last two evals.
    xs, ys = metric_points(steps, "reward")
    if len(checks) >= 2 and xs:
        prev, last = checks[-2], checks[-1]
        r0, r1 = _mean_around(xs, ys, prev["step"]), _mean_around(xs, ys, last["step"])
        s0, s1 = _m(prev, "success_rate"), _m(last, "success_rate")
        if None not in (r0, r1, s0, s1) and r1 - r0 > REWARD_RISE and s0 - s1 > SUCCESS_FALL:
            flags.append(Flag(
                "overfit",
                f"train reward rose {r0:+.2f} → {r1:+.2f} while held-out success fell "
                f"{100 * s0:.0f}% → {100 * s1:.0f}% (steps {prev['step']}→{last['step']}): overfitting or reward hacking",
            ))
    # 2. Completion length drifting away from where it started.
    lx, ly = metric_points(steps, "completions/mean_length")
    if len(ly) >= 4:
        k = max(1, min(5, len(ly) // 3))
        early, late = sum(ly[:k]) / k, sum(ly[-k:]) / k
        if early > 0 and abs(late - early) / early > LENGTH_DRIFT:
            flags.append(Flag(
                "length",
                f"completion length drifted {early:.0f} → {late:.0f} tokens ({(late - early) / early:+.0%} vs the first {k} steps)",
            ))
    # 3. Invalid JSON more often than the untrained model: the policy found reward elsewhere.
    if base is not None and checks:
        b, last = _m(base, "valid_json_rate"), _m(checks[-1], "valid_json_rate")
        if b is not None and last is not None and b - last > JSON_REGRESSION:
            flags.append(Flag(
                "json",
                f"invalid-JSON rate {100 * (1 - last):.0f}% at step {checks[-1]['step']} vs {100 * (1 - b):.0f}% "
                "at baseline: possible reward hacking",
            ))
    # 4. The best GRPO checkpoint not clearly above the SFT warm-up it started from, paired on the same tasks
    #    (two overlapping CIs say little; the paired difference is what decides whether GRPO helped).
    sft = next((e for e in checks if e["step"] == 0 and e.get("mode", "greedy") == "greedy"), None)
    best = best_eval([e for e in checks if e["step"] > 0 and sft and e.get("mode", "greedy") == "greedy"])
    solved = lambda e: (e.get("metrics") or {}).get("solved")  # noqa: E731
    if sft and best and solved(sft) and solved(best):
        d = paired_difference(solved(best), solved(sft))
        if d is not None and not d.clearly_better:
            flags.append(Flag(
                "vs_sft",
                f"best GRPO checkpoint (step {best['step']}) vs SFT-only: {100 * d.delta:+.0f}pp on the same "
                f"{d.n_tasks} tasks (95% CI {100 * d.ci_low:+.0f}…{100 * d.ci_high:+.0f}pp): not clearly better "
                "than the warm-up",
            ))
    return flags

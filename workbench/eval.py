"""Held-out evaluation: the seed article's metrics, greedy and sampled, with a bootstrap CI for success.

`evaluate` runs rollouts on tasks the policy never trains on and classifies each reply (valid JSON, right
tool, right args, success, unsafe); `beats` is the promotion rule against the baseline.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from workbench.rollout.base import RolloutEngine
from workbench.rollout.runner import Rollout, Sampling, run_rollouts
from workbench.types import Task
from workbench.verifiers.metrics import classify

METRIC_NAMES = ("valid_json_rate", "correct_tool_rate", "correct_args_rate", "success_rate", "unsafe_rate")


def bootstrap_ci(values: list[float], *, reps: int = 2000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of 0/1 (or any) values; deterministic for a seed."""
    if not values:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    lo = means[int(alpha / 2 * reps)]
    hi = means[min(reps - 1, int((1 - alpha / 2) * reps))]
    return (lo, hi)


@dataclass
class EvalResult:
    metrics: dict[str, float]
    rollouts: list[Rollout] = field(default_factory=list)
    flags: list[dict[str, bool]] = field(default_factory=list)


def summarize(rollouts: list[Rollout], flags: list[dict[str, bool]]) -> dict[str, float]:
    n = len(rollouts)
    if n == 0:
        return {"n": 0}
    rate = lambda key: sum(1.0 for f in flags if f[key]) / n  # noqa: E731
    success = [1.0 if f["success"] else 0.0 for f in flags]
    lo, hi = bootstrap_ci(success)
    return {
        "n": n,
        "valid_json_rate": rate("valid_json"),
        "correct_tool_rate": rate("correct_tool"),
        "correct_args_rate": rate("correct_args"),
        "success_rate": sum(success) / n,
        "success_ci_low": lo,
        "success_ci_high": hi,
        "unsafe_rate": rate("unsafe"),
        "mean_latency_s": sum(r.latency_s for r in rollouts) / n,
        "mean_tokens": sum(r.completion_tokens for r in rollouts) / n,
        "truncated_rate": sum(1.0 for r in rollouts if r.truncated) / n,
    }


def evaluate(
    engine: RolloutEngine,
    tokenizer: Any,
    env: Any,
    tasks: list[Task],
    *,
    max_new_tokens: int,
    samples: int = 0,
    temperature: float = 1.0,
    stop_token_ids: list[int] | None = None,
    seed: int = 0,
    batch_tasks: int = 16,
) -> EvalResult:
    """Greedy (samples == 0: one reply per task at temperature 0) or sampled (`samples` replies per task)."""
    n = max(1, samples)
    sampling = Sampling(max_new_tokens=max_new_tokens, temperature=temperature if samples else 0.0)
    rollouts: list[Rollout] = []
    for i in range(0, len(tasks), batch_tasks):
        groups = run_rollouts(
            engine, tokenizer, env, tasks[i : i + batch_tasks], n, sampling, stop_token_ids=stop_token_ids,
            seed=seed + i,
        )
        rollouts += [r for g in groups for r in g]
    flags = [classify(r.output, r.task) for r in rollouts]
    return EvalResult(summarize(rollouts, flags), rollouts, flags)


def beats(candidate: dict[str, float], baseline: dict[str, float]) -> bool:
    """Promotion rule: strictly higher success and no more unsafe actions than the baseline."""
    return candidate.get("success_rate", 0.0) > baseline.get("success_rate", 0.0) and candidate.get(
        "unsafe_rate", 0.0
    ) <= baseline.get("unsafe_rate", 0.0)

"""Held-out evaluation: the seed article's metrics, greedy and sampled, with a bootstrap CI for success.

`evaluate` runs rollouts on tasks the policy never trains on and classifies each reply (valid JSON, right
tool, right args, success, unsafe; no-call accuracy and parallel-call success for those task families);
`beats` is the promotion rule against the baseline.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.rollout.base import RolloutEngine
from workbench.rollout.runner import Rollout, Sampling, run_rollouts
from workbench.skills import breakdown
from workbench.types import Task
from workbench.verifiers.metrics import classify


def bootstrap_ci(
    values: list[float], *, reps: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of 0/1 (or any) values; deterministic for a seed."""
    if not values:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    lo = means[int(alpha / 2 * reps)]
    hi = means[min(reps - 1, int((1 - alpha / 2) * reps))]
    return (lo, hi)


def cluster_bootstrap_ci(
    values: dict[str, float],
    clusters: dict[str, str],
    *,
    reps: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile CI of the mean over tasks, resampling whole clusters (phrasing templates): tasks made from one
    template are not independent draws, so a CI over tasks alone is too narrow for "new phrasings". None when
    fewer than 2 clusters (nothing to resample)."""
    groups: dict[str, list[float]] = {}
    for task, v in values.items():
        groups.setdefault(clusters.get(task, task), []).append(v)
    if len(groups) < 2:
        return None
    sums = [(sum(g), len(g)) for g in groups.values()]
    rng = random.Random(seed)
    k = len(sums)
    means = []
    for _ in range(reps):
        total = n = 0.0
        for _ in range(k):
            s, c = sums[rng.randrange(k)]
            total += s
            n += c
        means.append(total / n)
    means.sort()
    return means[int(alpha / 2 * reps)], means[min(reps - 1, int((1 - alpha / 2) * reps))]


@dataclass
class EvalResult:
    metrics: dict[str, Any]
    rollouts: list[Rollout] = field(default_factory=list)
    flags: list[dict[str, bool]] = field(default_factory=list)


def summarize(rollouts: list[Rollout], flags: list[dict[str, bool]]) -> dict[str, Any]:
    n = len(rollouts)
    if n == 0:
        return {"n": 0}
    rate = lambda key: sum(1.0 for f in flags if f[key]) / n  # noqa: E731
    solved = solved_by_task(rollouts, flags)
    # The CI resamples tasks, not completions: a task's samples are not independent draws of the policy's skill.
    lo, hi = bootstrap_ci(list(solved.values()))
    tasks = {r.task.id: r.task for r in rollouts}
    clusters = {tid: t.template for tid, t in tasks.items() if getattr(t, "template", None)}
    by_cluster = cluster_bootstrap_ci(solved, clusters) if clusters else None
    extra: dict[str, Any] = {"by_skill": breakdown(tasks.values(), solved)}
    if by_cluster is not None:
        extra.update(
            success_ci_cluster_low=by_cluster[0], success_ci_cluster_high=by_cluster[1], clusters=clusters
        )
    # The two task families success_rate blurs together (classify marks them); None when the split has none, so
    # a split without them never reads as 0.
    no_call = [f for f in flags if f.get("no_call_task")]
    parallel = [f for f in flags if f.get("parallel_task")]
    return {
        "n": n,
        "valid_json_rate": rate("valid_json"),
        "correct_tool_rate": rate("correct_tool"),
        "correct_args_rate": rate("correct_args"),
        # a well-formed call in the wrong wrapper (a fence, bare JSON where tags are expected): a format failure
        "wrong_wrapper_rate": sum(1.0 for f in flags if f.get("wrong_wrapper")) / n,
        "success_rate": sum(1.0 for f in flags if f["success"]) / n,
        "success_ci_low": lo,
        "success_ci_high": hi,
        "unsafe_rate": rate("unsafe"),
        # expected_tool null: the reply made no call (classify's correct_tool there is exactly that)
        "no_call_accuracy": sum(1.0 for f in no_call if f["correct_tool"]) / len(no_call)
        if no_call
        else None,
        "no_call_n": len(no_call),
        "parallel_success": sum(1.0 for f in parallel if f["success"]) / len(parallel) if parallel else None,
        "parallel_n": len(parallel),
        "mean_latency_s": sum(r.latency_s for r in rollouts) / n,
        "mean_tokens": sum(r.completion_tokens for r in rollouts) / n,
        "truncated_rate": sum(1.0 for r in rollouts if r.truncated) / n,
        "solved": solved,  # task id -> fraction of its samples solved: what paired comparisons are made of
        **extra,  # by_skill; with templates known, the CI over templates and task id -> template
    }


def solved_by_task(rollouts: list[Rollout], flags: list[dict[str, bool]]) -> dict[str, float]:
    """Each task's success rate over its samples (0 or 1 for a greedy eval), in the order first seen."""
    hits: dict[str, list[float]] = {}
    for r, f in zip(rollouts, flags, strict=True):
        hits.setdefault(r.task.id, []).append(1.0 if f["success"] else 0.0)
    return {tid: sum(v) / len(v) for tid, v in hits.items()}


@dataclass
class PairedDifference:
    delta: float  # mean over the shared tasks of (candidate - reference) success
    ci_low: float
    ci_high: float
    n_tasks: int
    only_candidate: (
        int  # tasks the candidate solves and the reference does not (greedy: the discordant pairs)
    )
    only_reference: int
    cluster_ci: tuple[float, float] | None = None  # the CI resampling phrasing templates, when they are known

    @property
    def clearly_better(self) -> bool:
        return self.ci_low > 0.0


def paired_difference(
    candidate: dict[str, float],
    reference: dict[str, float],
    *,
    reps: int = 2000,
    seed: int = 0,
    clusters: dict[str, str] | None = None,
) -> PairedDifference | None:
    """Candidate minus reference success on the tasks both were evaluated on, with a bootstrap CI that
    resamples tasks (both policies answer the same tasks, so the pairing removes the task-difficulty noise
    that makes two unpaired CIs overlap). None when they share no task (evals stored before per-task results
    were kept have none)."""
    shared = [t for t in candidate if t in reference]
    if not shared:
        return None
    diffs = [candidate[t] - reference[t] for t in shared]
    lo, hi = bootstrap_ci(diffs, reps=reps, seed=seed)
    by_cluster = (
        cluster_bootstrap_ci(dict(zip(shared, diffs, strict=True)), clusters, reps=reps, seed=seed)
        if clusters
        else None
    )
    return PairedDifference(
        delta=sum(diffs) / len(diffs),
        ci_low=lo,
        ci_high=hi,
        n_tasks=len(shared),
        only_candidate=sum(1 for d in diffs if d > 0),
        only_reference=sum(1 for d in diffs if d < 0),
        cluster_ci=by_cluster,
    )


def evaluate(
    engine: RolloutEngine,
    tokenizer: Any,
    env: Any,
    tasks: list[Task],
    *,
    max_new_tokens: int,
    samples: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    stop_token_ids: list[int] | None = None,
    seed: int = 0,
    batch_tasks: int = 16,
    on_tokens: Callable[[int], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> EvalResult:
    """Greedy (samples == 0: one reply per task at temperature 0) or sampled (`samples` replies per task, at
    `temperature` and `top_p`, as training samples). `on_tokens`: the safe point inside decoding
    (`run_rollouts`); `on_progress(tasks_done, tasks)` after each batch of tasks (and once at 0)."""
    n = max(1, samples)
    sampling = Sampling(
        max_new_tokens=max_new_tokens,
        temperature=temperature if samples else 0.0,
        top_p=top_p if samples else 1.0,
    )
    rollouts: list[Rollout] = []
    if on_progress is not None:
        on_progress(0, len(tasks))
    for i in range(0, len(tasks), batch_tasks):
        groups = run_rollouts(
            engine,
            tokenizer,
            env,
            tasks[i : i + batch_tasks],
            n,
            sampling,
            stop_token_ids=stop_token_ids,
            seed=seed + i,
            on_tokens=on_tokens,
        )
        rollouts += [r for g in groups for r in g]
        if on_progress is not None:
            on_progress(min(i + batch_tasks, len(tasks)), len(tasks))
    flags = [classify(r.output, r.task) for r in rollouts]
    return EvalResult(summarize(rollouts, flags), rollouts, flags)


def beats(candidate: dict[str, float], baseline: dict[str, float]) -> bool:
    """Promotion rule: strictly higher success and no more unsafe actions than the baseline."""
    return candidate.get("success_rate", 0.0) > baseline.get("success_rate", 0.0) and candidate.get(
        "unsafe_rate", 0.0
    ) <= baseline.get("unsafe_rate", 0.0)

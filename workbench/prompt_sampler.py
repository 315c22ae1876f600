"""Which training prompts a GRPO step samples: uniformly, or those whose group is likely to teach something.

A group teaches only when its rewards differ (GRPO's advantage is the reward minus the group's mean): a
prompt the policy always solves, or always fails, costs G generations for a zero gradient. `SpreadSampler`
weights each prompt by the estimated chance that its group has reward spread, from two sources:
- the latest held-out eval: per skill (workbench/skills.py), the greedy success rate p of the policy; a
  prompt's success is taken as its weakest skill's. A prompt's own success chance q is not p: success is
  bimodal per prompt (all G samples right, or none), so q is drawn from a Beta with mean p and small
  concentration `OVERDISPERSION`, and a group of G has spread with probability 1 - E[q^G] - E[(1-q)^G]
  (the prior). Independent samples (q = p for every prompt) called nearly every skill likely to spread
  after SFT, so the weights stayed near uniform (docs/benchmarks.md);
- the run's own groups so far: for the prompt itself, for its phrasing family (the generator's template,
  else its tool) and for its tool, how many groups had spread. Family evidence counts for at most
  `FAMILY_WEIGHT` groups and tool evidence for at most `TOOL_WEIGHT`, so the thousands of prompts a step
  never draws twice still inherit what their family and tool showed (a run of a few steps sees a handful of
  groups per tool, but few families twice).
A prompt's weight never falls below `floor`: solved prompts are revisited, rarely (the policy may forget).
The draw is weighted sampling without replacement (Efraimidis-Spirakis keys) on weight^`SHARPNESS`, so the
prompts likeliest to spread are drawn first, from the caller's seeded RNG; every input comes from the store,
so a resumed run draws the same prompts.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from workbench.skills import task_skills
from workbench.types import Task

PRIOR_WEIGHT = 2.0  # the eval prior counts as this many groups
FAMILY_WEIGHT = 4.0  # a family's observed spread rate counts as at most this many groups
TOOL_WEIGHT = 8.0  # a tool's observed spread rate counts as at most this many groups
# The Beta concentration of a prompt's success chance around its skill's eval success: small is bimodal. 2
# matches the demo's logged groups (skills at eval success 0.70 / 0.86 / 0.97 spread in 0.73 / 0.33-0.61 /
# 0.07 of their groups; independent samples predict 0.94 / 0.70 / 0.22).
OVERDISPERSION = 2.0
SHARPNESS = 2.0  # the draw's weights are the estimates to this power: likely spread drawn first
DEFAULT_FLOOR = 0.05


def family(task: Task) -> str:
    """Prompts that share a phrasing template (generated tasks), else a tool: they succeed and fail together."""
    return getattr(task, "template", None) or f"tool:{task.expected_tool}"


def spread_probability(p: float, group_size: int, concentration: float | None = None) -> float:
    """The chance a group of `group_size` samples has both outcomes, when the prompt's success chance is p
    (`concentration` None) or is drawn from Beta(p c, (1 - p) c) around a skill's mean p (beta-binomial:
    small c, bimodal prompts)."""
    p = min(1.0, max(0.0, p))
    if concentration is None or p in (0.0, 1.0):
        return 1.0 - p**group_size - (1.0 - p) ** group_size
    a, b = p * concentration, (1.0 - p) * concentration
    all_right = all_wrong = 1.0
    for i in range(group_size):  # E[q^G] = prod (a + i) / (a + b + i), likewise for 1 - q
        all_right *= (a + i) / (concentration + i)
        all_wrong *= (b + i) / (concentration + i)
    return 1.0 - all_right - all_wrong


@dataclass(frozen=True)
class GroupSeen:
    """One rollout group the run has scored: its prompt and whether its rewards differed."""

    task_key: str
    spread: bool


class SpreadSampler:
    """Draws prompts weighted by their estimated chance of a group with reward spread."""

    def __init__(
        self, tasks: Sequence[Task], keys: Sequence[str], group_size: int, *, floor: float = DEFAULT_FLOOR
    ) -> None:
        if len(tasks) != len(keys):
            raise ValueError("one key per task")
        self.tasks, self.keys, self.group_size, self.floor = list(tasks), list(keys), group_size, floor
        self._families = [family(t) for t in self.tasks]
        self._tools = [f"tool:{t.expected_tool}" for t in self.tasks]
        self._skills = [task_skills(t) for t in self.tasks]

    def weights(self, seen: Iterable[GroupSeen], skill_success: Mapping[str, float]) -> list[float]:
        """Each task's weight: the posterior mean of "its group has spread", at least `floor`."""
        by_task: dict[str, list[int]] = {}
        for g in seen:
            n_m = by_task.setdefault(g.task_key, [0, 0])
            n_m[0] += 1
            n_m[1] += int(g.spread)
        by_family = _pooled(by_task, self.keys, self._families)
        by_tool = _pooled(by_task, self.keys, self._tools)
        out = []
        for key, fam, tool, skills in zip(self.keys, self._families, self._tools, self._skills, strict=True):
            known = [skill_success[s] for s in skills if s in skill_success]
            prior = spread_probability(min(known), self.group_size, OVERDISPERSION) if known else 0.5
            n_t, m_t = by_task.get(key, (0, 0))
            groups, spread = n_t + PRIOR_WEIGHT, m_t + PRIOR_WEIGHT * prior  # pseudo-counts
            shared = [(by_family.get(fam), FAMILY_WEIGHT)]
            if tool != fam:  # a task with no template is its tool's family: one count, not two
                shared.append((by_tool.get(tool), TOOL_WEIGHT))
            for n_m, cap in shared:
                if n_m:  # a shared rate counts as at most `cap` groups
                    w = min(float(n_m[0]), cap)
                    groups, spread = groups + w, spread + w * n_m[1] / n_m[0]
            out.append(max(self.floor, spread / groups))
        return out

    def draw(
        self, rng: random.Random, k: int, weights: Sequence[float], exclude: set[int] = frozenset()
    ) -> list[Task]:
        """k tasks without replacement, each with probability growing with its weight; `exclude`: indexes of
        tasks the step already used."""
        keyed = [(rng.random() ** (1.0 / w**SHARPNESS), i) for i, w in enumerate(weights) if i not in exclude]
        keyed.sort(reverse=True)
        return [self.tasks[i] for _, i in keyed[:k]]


def _pooled(
    by_task: Mapping[str, list[int]], keys: Sequence[str], labels: Sequence[str]
) -> dict[str, list[int]]:
    """label -> [groups, groups with spread] over the tasks seen that carry it."""
    pooled: dict[str, list[int]] = {}
    for key, label in zip(keys, labels, strict=True):
        if key in by_task:
            n_m = pooled.setdefault(label, [0, 0])
            n_m[0] += by_task[key][0]
            n_m[1] += by_task[key][1]
    return pooled


def skill_success_from_eval(metrics: Mapping[str, object] | None) -> dict[str, float]:
    """skill -> greedy success, from an eval's `by_skill` metrics (empty when there is none)."""
    by_skill = (metrics or {}).get("by_skill") if metrics else None
    if not isinstance(by_skill, Mapping):
        return {}
    return {
        k: float(v["success"])
        for k, v in by_skill.items()
        if isinstance(v, Mapping) and isinstance(v.get("success"), (int, float))
    }

"""Which training prompts a GRPO step samples: uniformly, or those whose group is likely to teach something.

A group teaches only when its rewards differ (GRPO's advantage is the reward minus the group's mean): a
prompt the policy always solves, or always fails, costs G generations for a zero gradient. `SpreadSampler`
weights each prompt by the estimated chance that its group has reward spread, from two sources:
- the latest held-out eval: per skill (workbench/skills.py), the greedy success rate p of the policy; a
  prompt's success is taken as its weakest skill's, and a group of G samples then has spread with
  probability 1 - p^G - (1-p)^G (the prior);
- the run's own groups so far: for the prompt itself and for its phrasing family (the generator's template,
  else its tool), how many groups had spread. Family evidence counts for at most `FAMILY_WEIGHT` groups, so
  the thousands of prompts a step never draws twice still inherit what their family showed.
A prompt's weight never falls below `floor`: solved prompts are revisited, rarely (the policy may forget).
The draw is weighted sampling without replacement (Efraimidis-Spirakis keys) from the caller's seeded RNG, and
every input comes from the store, so a resumed run draws the same prompts.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from workbench.skills import task_skills
from workbench.types import Task

PRIOR_WEIGHT = 2.0  # the eval prior counts as this many groups
FAMILY_WEIGHT = 4.0  # a family's observed spread rate counts as at most this many groups
DEFAULT_FLOOR = 0.05


def family(task: Task) -> str:
    """Prompts that share a phrasing template (generated tasks), else a tool: they succeed and fail together."""
    return getattr(task, "template", None) or f"tool:{task.expected_tool}"


def spread_probability(p: float, group_size: int) -> float:
    """The chance a group of `group_size` samples with success probability p has both outcomes."""
    p = min(1.0, max(0.0, p))
    return 1.0 - p**group_size - (1.0 - p) ** group_size


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
        self._skills = [task_skills(t) for t in self.tasks]

    def weights(self, seen: Iterable[GroupSeen], skill_success: Mapping[str, float]) -> list[float]:
        """Each task's weight: the posterior mean of "its group has spread", at least `floor`."""
        by_task: dict[str, list[int]] = {}
        for g in seen:
            n_m = by_task.setdefault(g.task_key, [0, 0])
            n_m[0] += 1
            n_m[1] += int(g.spread)
        by_family: dict[str, list[int]] = {}
        for key, fam in zip(self.keys, self._families, strict=True):
            if key in by_task:
                n_m = by_family.setdefault(fam, [0, 0])
                n_m[0] += by_task[key][0]
                n_m[1] += by_task[key][1]
        out = []
        for key, fam, skills in zip(self.keys, self._families, self._skills, strict=True):
            known = [skill_success[s] for s in skills if s in skill_success]
            prior = spread_probability(min(known), self.group_size) if known else 0.5
            n_t, m_t = by_task.get(key, (0, 0))
            n_f, m_f = by_family.get(fam, (0, 0))
            w_f = min(float(n_f), FAMILY_WEIGHT)
            rate_f = m_f / n_f if n_f else 0.0
            estimate = (m_t + w_f * rate_f + PRIOR_WEIGHT * prior) / (n_t + w_f + PRIOR_WEIGHT)
            out.append(max(self.floor, estimate))
        return out

    def draw(
        self, rng: random.Random, k: int, weights: Sequence[float], exclude: set[int] = frozenset()
    ) -> list[Task]:
        """k tasks without replacement, each with probability growing with its weight; `exclude`: indexes of
        tasks the step already used."""
        keyed = [(rng.random() ** (1.0 / w), i) for i, w in enumerate(weights) if i not in exclude]
        keyed.sort(reverse=True)
        return [self.tasks[i] for _, i in keyed[:k]]


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

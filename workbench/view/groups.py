"""Rollout groups: the G samples of one prompt at one step, the unit GRPO learns from. A group whose
rewards do not spread (all equal) gives every sample a zero advantage: it teaches nothing, so the live
pane shows each group's spread beside its mean."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from workbench.view.records import Trajectory

GroupKey = tuple[int, str, int, int | None]  # (step, split, group_idx, eval_id): store.group_members' key


def group_key(row: Trajectory) -> GroupKey:
    return (row.step, row.split, row.group_idx, row.eval_id)


@dataclass
class RolloutGroup:
    """The members of one group seen so far (they may arrive over several polls), in sample order."""

    key: GroupKey
    members: list[Trajectory] = field(default_factory=list)

    def add(self, row: Trajectory) -> None:
        if all(m.id != row.id for m in self.members):
            self.members.append(row)
            self.members.sort(key=lambda m: (m.sample_idx, m.id))

    @property
    def rewards(self) -> list[float]:
        return [m.reward for m in self.members if m.reward is not None and not math.isnan(m.reward)]

    @property
    def mean(self) -> float | None:
        r = self.rewards
        return sum(r) / len(r) if r else None

    @property
    def spread(self) -> float | None:
        """The rewards' standard deviation (Bessel-corrected, as GRPO scales advantages); None below 2."""
        r = self.rewards
        if len(r) < 2:
            return None
        m = sum(r) / len(r)
        return math.sqrt(sum((x - m) ** 2 for x in r) / (len(r) - 1))

    @property
    def best(self) -> Trajectory:
        """The highest-rewarded member (the first of equals): what the row shows and Enter opens."""
        return max(
            self.members, key=lambda m: (m.reward if m.reward is not None else -math.inf, -m.sample_idx)
        )

    @property
    def task_id(self) -> int | None:
        return self.members[0].task_id if self.members else None


def group_rows(rows: Iterable[Trajectory]) -> list[RolloutGroup]:
    """Rows gathered into groups, in the order each group was first seen."""
    out: dict[GroupKey, RolloutGroup] = {}
    for r in rows:
        out.setdefault(group_key(r), RolloutGroup(group_key(r))).add(r)
    return list(out.values())

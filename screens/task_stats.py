"""Per-task statistics kept current without rescanning: one full `store.tasks.task_stats` at start (in a
thread), then every live row past that snapshot's last id is folded in as it streams by."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from screens.format import FULL_REWARD

SORTS = ("mean reward", "success", "attempts", "task")


@dataclass
class TaskRow:
    task_id: int
    split: str
    prompt: str = ""
    expected_tool: str | None = None
    attempts: int = 0
    rewarded: int = 0  # rows with a reward (AVG ignores NULLs, COUNT(*) does not)
    reward_sum: float = 0.0
    successes: int = 0

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.attempts if self.attempts else None


class TaskStats:
    def __init__(self) -> None:
        self.rows: dict[tuple[int, str], TaskRow] = {}
        self.boundary: int | None = None  # the snapshot's last trajectory id; None until loaded
        self._pending: list[dict[str, Any]] = []

    @property
    def loaded(self) -> bool:
        return self.boundary is not None

    def load(self, stats: Iterable[dict[str, Any]], boundary: int) -> None:
        """Take a task_stats snapshot that covers every row with id <= boundary."""
        self.rows = {}
        for s in stats:
            n = int(s["attempts"])
            mean = s.get("mean_reward")
            row = TaskRow(
                s["task_id"], s["split"], s.get("prompt") or "", s.get("expected_tool"), attempts=n,
                rewarded=n if mean is not None else 0, reward_sum=(mean or 0.0) * n,
                successes=round((s.get("success_rate") or 0.0) * n),
            )
            self.rows[(row.task_id, row.split)] = row
        self.boundary = boundary
        pending, self._pending = self._pending, []
        self.add(pending)

    def add(self, rows: Iterable[dict[str, Any]]) -> None:
        if self.boundary is None:
            self._pending.extend(rows)
            return
        for r in rows:
            if r["id"] <= self.boundary or r.get("superseded") or r.get("task_id") is None:
                continue
            key = (r["task_id"], r["split"])
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = TaskRow(r["task_id"], r["split"])
            row.attempts += 1
            if r.get("reward") is not None:
                row.rewarded += 1
                row.reward_sum += float(r["reward"])
                if r["reward"] >= FULL_REWARD:
                    row.successes += 1

    def sorted(self, sort: str) -> list[TaskRow]:
        rows = list(self.rows.values())
        if sort == "task":
            return sorted(rows, key=lambda r: (r.task_id, r.split))
        if sort == "attempts":
            return sorted(rows, key=lambda r: (-r.attempts, r.task_id))
        if sort == "success":
            return sorted(rows, key=lambda r: (-(r.success_rate or 0.0), r.task_id))
        return sorted(rows, key=lambda r: (-(r.mean_reward if r.mean_reward is not None else -9), r.task_id))

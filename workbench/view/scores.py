"""What the verifier-scores and tasks panes show, computed from typed records with the engine's own rules:
failure shares through `verifiers.metrics.aggregate` over each episode's stored classification, each reward
part's mean over steps, and per-task attempts / mean reward / success kept current from the live feed."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from workbench.verifiers.metrics import aggregate
from workbench.view.records import Step, Trajectory

PART_NAMES = ("valid_json", "tool", "args", "safe", "unsafe")  # the built-in verifier's parts, shown first
FULL_REWARD = 0.999  # colour only (green at the verifier's full score): success is the stored outcome


@dataclass(frozen=True)
class FailureShares:
    """One step's episodes by what went wrong, from `verifiers.metrics.aggregate`: invalid_json (no call
    parsed), wrong_tool, wrong_args (right tool), unsafe (counted on its own: an unsafe call can be otherwise
    right). `errors`: the verifier failed on them; `unclassified`: stored before outcomes were kept."""

    n: int = 0
    rates: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    unclassified: int = 0

    def share(self, name: str) -> float | None:
        return None if self.n == 0 else self.rates.get(name)


def failure_shares(rows: Sequence[Trajectory]) -> FailureShares:
    outcomes = [r.outcome for r in rows if r.outcome is not None]
    rates = aggregate(outcomes)
    return FailureShares(len(outcomes), rates, sum(1 for r in rows if r.error),
                         sum(1 for r in rows if r.outcome is None))


def part_series(steps: Sequence[Step]) -> dict[str, list[tuple[int, float]]]:
    """{part name: [(step, mean)]} from step metrics' "parts/<name>" keys, in step order; known parts first."""
    series: dict[str, list[tuple[int, float]]] = {}
    for s in steps:
        for key in s.metrics:
            if key.startswith("parts/") and (value := s.metric(key)) is not None:
                series.setdefault(key[6:], []).append((s.step, value))
    known = [p for p in PART_NAMES if p in series]
    return {name: series[name] for name in known + sorted(set(series) - set(known))}


SORTS = ("mean reward", "success", "attempts", "task")


@dataclass
class TaskRow:
    task_id: int
    split: str
    prompt: str = ""
    expected_tool: str | None = None
    attempts: int = 0
    rewarded: int = 0  # rows with a reward (the verifier may have failed on some)
    reward_sum: float = 0.0
    classified: int = 0  # rows with a stored outcome
    successes: int = 0

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.classified if self.classified else None


class TaskStats:
    """Per-task statistics kept current without rescanning: one snapshot (`View.task_stats`, in a thread),
    then every live row past that snapshot's last id is folded in as it streams by."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, str], TaskRow] = {}
        self.boundary: int | None = None  # the snapshot's last trajectory id; None until loaded
        self._pending: list[Trajectory] = []

    @property
    def loaded(self) -> bool:
        return self.boundary is not None

    def load(self, snapshot: Iterable[TaskRow], boundary: int) -> None:
        """Take a snapshot that covers every row with id <= boundary."""
        self.rows = {(r.task_id, r.split): r for r in snapshot}
        self.boundary = boundary
        pending, self._pending = self._pending, []
        self.add(pending)

    def add(self, rows: Iterable[Trajectory]) -> None:
        if self.boundary is None:
            self._pending.extend(rows)
            return
        for r in rows:
            if r.id <= self.boundary or r.superseded or r.task_id is None:
                continue
            key = (r.task_id, r.split)
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = TaskRow(r.task_id, r.split)
            row.attempts += 1
            if r.reward is not None:
                row.rewarded += 1
                row.reward_sum += r.reward
            if r.success is not None:
                row.classified += 1
                row.successes += int(r.success)

    def merge(self, counts: Iterable[TaskRow]) -> None:
        """Fold in counts of rows past the snapshot that were aggregated rather than streamed (a feed that
        skipped a backlog: `View.feed`); the caller makes sure no row is counted twice."""
        for c in counts:
            row = self.rows.get((c.task_id, c.split))
            if row is None:
                row = self.rows[(c.task_id, c.split)] = TaskRow(c.task_id, c.split, c.prompt, c.expected_tool)
            row.attempts += c.attempts
            row.rewarded += c.rewarded
            row.reward_sum += c.reward_sum
            row.classified += c.classified
            row.successes += c.successes

    def sorted(self, sort: str) -> list[TaskRow]:
        rows = list(self.rows.values())
        if sort == "task":
            return sorted(rows, key=lambda r: (r.task_id, r.split))
        if sort == "attempts":
            return sorted(rows, key=lambda r: (-r.attempts, r.task_id))
        if sort == "success":
            return sorted(rows, key=lambda r: (-(r.success_rate or 0.0), r.task_id))
        return sorted(rows, key=lambda r: (-(r.mean_reward if r.mean_reward is not None else -9), r.task_id))

"""What the verifier-scores and tasks panes show, computed from typed records with the engine's own rules:
failure shares through `verifiers.metrics.aggregate` over each episode's stored classification, each reward
part's mean over steps, and per-task attempts / mean reward / success kept current from the live feed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from workbench.verifiers.metrics import aggregate
from workbench.view.records import Checkpoint, Eval, Step, Trajectory

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
    return FailureShares(
        len(outcomes), rates, sum(1 for r in rows if r.error), sum(1 for r in rows if r.outcome is None)
    )


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
TRAINING = "training"  # the policy of rows outside any eval: the one being trained, at every step

TaskKey = tuple[int, str, int | None]  # (task, split, eval): one policy's rows of a task


def policy_labels(evals: Iterable[Eval], checkpoints: Iterable[Checkpoint]) -> dict[int, str]:
    """eval id -> the policy its rows came from, as the Tasks pane names it: "base" (the baseline), "sft" (what
    the SFT warm-up left), "step N" (a later checkpoint), in that order. A sampled eval adds " smp": it measures
    the same policy another way, so its rows are counted apart from the greedy ones."""
    kinds = {c.id: c.kind for c in checkpoints}
    labels: dict[int, str] = {}
    for e in sorted(evals, key=lambda e: (not e.is_baseline, e.step, e.id)):
        if e.is_baseline:
            name = "base"
        elif e.checkpoint_id is not None and kinds.get(e.checkpoint_id) == "sft":
            name = "sft"
        else:
            name = f"step {e.step}"
        labels[e.id] = name if e.mode == "greedy" else f"{name} smp"
    return labels


@dataclass
class TaskRow:
    """One task's rows of one split and one policy: an eval's (`eval_id`), or the training rollouts of every
    step (`eval_id` None)."""

    task_id: int
    split: str
    prompt: str = ""
    expected_tool: str | None = None
    attempts: int = 0
    rewarded: int = 0  # rows with a reward (the verifier may have failed on some)
    reward_sum: float = 0.0
    classified: int = 0  # rows with a stored outcome
    successes: int = 0
    eval_id: int | None = None

    @property
    def key(self) -> TaskKey:
        return (self.task_id, self.split, self.eval_id)

    def policy(self, labels: Mapping[int, str]) -> str:
        """The policy these rows came from (`policy_labels`); an eval not read yet by its id."""
        return TRAINING if self.eval_id is None else labels.get(self.eval_id, f"eval {self.eval_id}")

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
        self.rows: dict[TaskKey, TaskRow] = {}
        self.boundary: int | None = None  # the snapshot's last trajectory id; None until loaded
        self._pending: list[Trajectory] = []

    @property
    def loaded(self) -> bool:
        return self.boundary is not None

    def load(self, snapshot: Iterable[TaskRow], boundary: int) -> None:
        """Take a snapshot that covers every row with id <= boundary."""
        self.rows = {r.key: r for r in snapshot}
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
            key = (r.task_id, r.split, r.eval_id)
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = TaskRow(r.task_id, r.split, eval_id=r.eval_id)
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
            row = self.rows.get(c.key)
            if row is None:
                row = self.rows[c.key] = TaskRow(
                    c.task_id, c.split, c.prompt, c.expected_tool, eval_id=c.eval_id
                )
            row.attempts += c.attempts
            row.rewarded += c.rewarded
            row.reward_sum += c.reward_sum
            row.classified += c.classified
            row.successes += c.successes

    def sorted(self, sort: str, policies: Iterable[int] = ()) -> list[TaskRow]:
        """Ties (and the "task" sort) go by task, split, then policy: the training rows, then the evals in the
        order of `policies` (eval ids: `policy_labels`' keys, by step), any other after them by id."""
        rank = {eval_id: i for i, eval_id in enumerate(policies)}

        def policy(r: TaskRow) -> tuple[int, int]:
            return (-1, 0) if r.eval_id is None else (rank.get(r.eval_id, len(rank)), r.eval_id)

        rows = sorted(self.rows.values(), key=lambda r: (r.task_id, r.split, policy(r)))
        if sort == "attempts":
            rows.sort(key=lambda r: -r.attempts)
        elif sort == "success":
            rows.sort(key=lambda r: -(r.success_rate or 0.0))
        elif sort != "task":
            rows.sort(key=lambda r: -(r.mean_reward if r.mean_reward is not None else -9))
        return rows

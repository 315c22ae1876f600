"""Where a run's learning is written: trajectory rows, evals with their rows and promotion, checkpoints.

One writer for the trainer, the ranks (only the primary writes rows and decides promotion) and the probe.
An eval of one checkpoint (validation greedy, its rows, the promotion decision, the sampled eval and the test
eval) is computed first and written in ONE transaction: a kill leaves it wholly there or not at all, and a
resume redoes what is not there (`missing_parts`). Rows written before this rule may be half there:
`missing_parts` finds them too, and the resume supersedes them before it redoes the eval.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlite_utils

import store
from store.db import write_txn
from workbench import trajectory_rows
from workbench.run.promotion import promotion
from workbench.run.records import Checkpoint, Eval
from workbench.types import Score, Task

if TYPE_CHECKING:
    from workbench.rollout.runner import Rollout

_TASK_FIELDS_V1 = (
    "id",
    "prompt",
    "expected_tool",
    "expected_args",
    "tools",
    "split",
    "dataset",
    "initial_state",
    "expected_state",
)


def task_row(task: Task) -> dict[str, Any]:
    """The task's row; its key holds a content hash so an edited tasks file never rewrites the tasks older
    runs point at. Fields added to Task later count only when set: a resumed older run finds its keys."""
    content = {k: v for k, v in task.to_dict().items() if k in _TASK_FIELDS_V1 or v is not None}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:10]
    return {
        "key": f"{task.dataset}/{task.split}/{task.id}/{digest}",
        "dataset": task.dataset,
        "split": task.split,
        "prompt": task.prompt,
        "expected_tool": task.expected_tool,
        "expected_args": task.expected_args,
        "tools": task.tools,
        "extra": task.to_dict(),
    }


@dataclass
class Scored:
    """One episode and the score its verifier gave it."""

    rollout: Rollout
    score: Score


@dataclass
class EvalPart:
    """One eval of a checkpoint, computed and scored, not yet written."""

    mode: str  # "greedy" | "sampled"
    split: str  # the rows' split: "held_out" (validation: decides promotion) | "test" (reported only)
    tasks: dict[str, Any]  # what was evaluated: source, split, n
    metrics: dict[str, Any]
    episodes: list[Scored] = field(default_factory=list)
    per_task: int = 1  # samples per task (group_idx = task, sample_idx = sample)

    @property
    def decides(self) -> bool:
        return self.mode == "greedy" and self.split == "held_out"

    @property
    def name(self) -> str:
        return f"{self.split} {self.mode}"


@dataclass(frozen=True)
class Recorded:
    """What `record_evals` wrote: the eval ids by part name and the promotion decision (None: not asked)."""

    ids: dict[str, int]
    promoted: bool | None = None
    reason: str = ""


def expected_parts(*, sampled: bool, test: bool) -> list[str]:
    """The parts a complete eval of one checkpoint has, by `EvalPart.name`."""
    return ["held_out greedy"] + (["held_out sampled"] if sampled else []) + (["test greedy"] if test else [])


def part_name(e: Eval) -> str:
    """The stored eval's `EvalPart.name`: its rows' split ("test", else validation's "held_out") and mode."""
    return f"{'test' if e.split == 'test' else 'held_out'} {e.mode}"


def missing_parts(db: sqlite_utils.Database, evals: Sequence[Eval], expected: Sequence[str]) -> list[str]:
    """Which of the `expected` parts these live evals (of one checkpoint, or the baseline) lack, counting a part
    whose rows are not all there (written before evals were atomic) as missing."""
    by_name = {part_name(e): e for e in evals}
    rows = store.metrics.eval_row_counts(db, [e.id for e in evals])
    missing = []
    for name in expected:
        e = by_name.get(name)
        n = e.tasks.get("n") if e is not None and isinstance(e.tasks, dict) else None
        if e is None or rows.get(e.id, 0) == 0 or (isinstance(n, int) and rows.get(e.id, 0) < n):
            missing.append(name)
    return missing


class Recorder:
    """The run's writer. `primary` False (a rank other than 0): evals are kept as metrics only, in that
    rank's scratch store, and no rows or promotion are written."""

    def __init__(
        self,
        db: sqlite_utils.Database,
        run_id: int,
        task_ids: dict[str, int],
        *,
        primary: bool = True,
        log: Callable[[str], None] = lambda msg: None,
    ) -> None:
        self.db, self.run_id, self.task_ids, self.primary, self.log = db, run_id, task_ids, primary, log

    def task_id(self, task: Task) -> int:
        """The task's row id, added on first sight (the TRL callback meets its tasks as TRL samples them)."""
        row = task_row(task)
        if row["key"] not in self.task_ids:
            self.task_ids.update(store.tasks.add_tasks(self.db, [row]))
        return self.task_ids[row["key"]]

    def row(self, s: Scored, verifier_id: int | None, **fields: Any) -> dict[str, Any]:
        """A trajectory row of one of our rollouts: the episode, its tokens, its score and `fields`."""
        r = s.rollout
        return self.episode_row(
            r.output,
            r.task,
            s.score,
            verifier_id,
            token_trace=trajectory_rows.token_trace(r),
            prompt_tokens=r.prompt_tokens,
            tokens=r.completion_tokens,
            truncated=int(r.truncated),
            latency=r.latency_s,
            **fields,
        )

    def episode_row(
        self, output: Any, task: Task, score: Score, verifier_id: int | None, **fields: Any
    ) -> dict[str, Any]:
        """A trajectory row from an episode's output and score, whoever sampled it (our rollouts, TRL's):
        where it belongs and what is known of its tokens come in `fields`."""
        return {
            "run_id": self.run_id,
            "task_id": self.task_id(task),
            "messages": output.messages,
            "completion": output.text,
            "outcome": trajectory_rows.outcome(output, task),
            "tool_calls": [
                dataclasses.replace(c, id=c.id or f"call_{i}").to_dict()
                for i, c in enumerate(output.tool_calls)
            ],
            "reward": None if score.error else score.total,
            "reward_parts": score.parts,
            "explanation": score.explanation,
            "verifier_id": verifier_id,
            "error": score.error,
            **fields,
        }

    def store_rows(self, rows: list[dict[str, Any]]) -> list[int]:
        """Rows inserted together (a step, a probe): one transaction, the shared prefix kept once."""
        if not self.primary or not rows:
            return []
        return store.trajectories.insert_trajectories(self.db, trajectory_rows.add_sharing_hints(rows))

    def record_evals(
        self,
        parts: Sequence[EvalPart],
        *,
        step: int,
        verifier_id: int | None,
        checkpoint_id: int | None,
        is_baseline: bool,
    ) -> Recorded:
        """Every part of one checkpoint's eval, its rows and (with a checkpoint) the promotion decision, in one
        transaction. The decision reads the evals as they will be once this commits."""
        ids: dict[str, int] = {}
        decision = None
        with write_txn(self.db):
            for part in parts:
                eid = store.metrics.record_eval(
                    self.db,
                    self.run_id,
                    step=step,
                    tasks=part.tasks,
                    mode=part.mode,
                    metrics=part.metrics,
                    checkpoint_id=checkpoint_id,
                    is_baseline=is_baseline,
                )
                ids[part.name] = eid
                if self.primary:
                    n = max(1, part.per_task)
                    self.store_rows(
                        [
                            self.row(
                                s,
                                verifier_id,
                                step=step,
                                split=part.split,
                                group_idx=i // n,
                                sample_idx=i % n,
                                eval_id=eid,
                                checkpoint_id=checkpoint_id,
                            )
                            for i, s in enumerate(part.episodes)
                        ]
                    )
            deciding = ids.get("held_out greedy")
            if self.primary and checkpoint_id is not None and deciding is not None:
                decision = self._decide(checkpoint_id, deciding, step)
        if decision is None:
            return Recorded(ids)
        verdict = "promoted" if decision.promote else "not promoted"
        self.log(f"checkpoint at step {step} {verdict}: {decision.reason}")
        return Recorded(ids, decision.promote, decision.reason)

    def _decide(self, checkpoint_id: int, eval_id: int, step: int) -> Any:
        """The promotion rule is workbench.run.promotion's (the report and the UI show the same)."""
        evals = [Eval.from_row(e) for e in store.metrics.list_evals(self.db, self.run_id)]
        promoted = store.metrics.promoted_checkpoint(self.db, self.run_id)
        candidate = next(e for e in evals if e.id == eval_id)
        decision = promotion(candidate, evals, promoted and Checkpoint.from_row(promoted))
        if decision.promote:
            store.metrics.promote_checkpoint(self.db, checkpoint_id)
        verdict = "promoted" if decision.promote else "not promoted"
        store.runs.add_event(
            self.db,
            self.run_id,
            "promotion",
            f"step {step}: {verdict}: {decision.reason}",
            {"checkpoint_id": checkpoint_id, "eval_id": eval_id, "promoted": decision.promote},
        )
        return decision

    def record_checkpoint(self, *, step: int, kind: str, path: str) -> int:
        return store.metrics.record_checkpoint(self.db, self.run_id, step=step, kind=kind, path=path)

    def supersede_evals(self, evals: Sequence[Eval], why: str) -> None:
        """Hide (never delete) evals that will be redone, with their rows; an event says why."""
        if not evals or not self.primary:
            return
        ids = [e.id for e in evals]
        store.metrics.supersede_evals(self.db, ids)
        store.runs.add_event(
            self.db, self.run_id, "eval", f"evals {ids} superseded: {why}", {"eval_ids": ids}
        )
        self.log(f"evals {ids} superseded: {why}")

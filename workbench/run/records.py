"""The store rows the engine reads, as typed records: a run, its steps, evals and checkpoints (what the
promotion rule decides on, `workbench.run.promotion`), its tasks and trajectories. `workbench.view`
re-exports them to its readers. `pick` and `number` are how every record is built from a row, these and the
view layer's own (`workbench.view.records`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import workbench.types
from workbench.types import ToolCall

R = TypeVar("R")


_NAMES: dict[
    type, frozenset[str]
] = {}  # a record class's field names: `fields()` per row was a third of a read


def pick(cls: type[R], row: dict[str, Any], **overrides: Any) -> R:
    """A `cls` from the row's fields it knows (the rest ignored: a column added later breaks no reader)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls(**{**{k: v for k, v in row.items() if k in names}, **overrides})


def number(value: Any) -> float | None:
    """A stored number as a float; None for anything else (bools included)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Checkpoint:
    id: int
    run_id: int
    step: int
    kind: str
    path: str
    created: float = 0.0
    promoted: bool = False
    metrics: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Checkpoint:
        return pick(cls, {**row, "promoted": bool(row.get("promoted"))})


@dataclass(frozen=True)
class Eval:
    """One held-out evaluation. `metrics` holds the seed metrics (valid_json_rate, ..., success_rate with its
    CI) and `solved` (task id -> success fraction), what paired comparisons are made of."""

    id: int
    run_id: int
    step: int
    mode: str
    is_baseline: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    checkpoint_id: int | None = None
    tasks: dict[str, Any] | None = None
    created: float = 0.0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Eval:
        return pick(
            cls, {**row, "is_baseline": bool(row.get("is_baseline")), "metrics": row.get("metrics") or {}}
        )

    def metric(self, key: str) -> float | None:
        return number(self.metrics.get(key))

    @property
    def success(self) -> float | None:
        return self.metric("success_rate")

    @property
    def solved(self) -> dict[str, float] | None:
        solved = self.metrics.get("solved")
        return solved if isinstance(solved, dict) and solved else None

    @property
    def split(self) -> str:
        """ "test" for an eval of the test split (reported, decides nothing), else "validation"."""
        return "test" if isinstance(self.tasks, dict) and self.tasks.get("split") == "test" else "validation"

    @property
    def clusters(self) -> dict[str, str] | None:
        """Task id -> phrasing template, where known: what cluster-bootstrap CIs resample."""
        clusters = self.metrics.get("clusters")
        return clusters if isinstance(clusters, dict) and clusters else None

    @property
    def by_skill(self) -> dict[str, dict[str, float]]:
        """Skill -> {"n", "success"} (workbench.skills), {} for evals stored before skills were kept."""
        got = self.metrics.get("by_skill")
        return got if isinstance(got, dict) else {}


@dataclass(frozen=True)
class Run:
    id: int
    name: str
    model: str
    status: str
    config: dict[str, Any] = field(default_factory=dict)
    status_reason: str | None = None
    error: str | None = None
    created: float = 0.0
    updated: float = 0.0
    worker_pid: int | None = None
    worker_host: str | None = None
    heartbeat: float | None = None
    lock_held: bool = False
    last_step: int | None = None  # filled by listings only
    # The lock holder ran on this host and its process is gone (kill -9): no live worker, whatever the
    # heartbeat says. A local check (store.runs.local_worker_gone), so `View` fills it, not from_row.
    worker_gone: bool = False
    lock_token: str | None = None  # which worker holds the lock: a new one means a new worker took the run
    harness: dict[str, Any] | None = None  # what the environment put around each request (None: not stored)

    @classmethod
    def from_row(cls, row: dict[str, Any], last_step: int | None = None, *, worker_gone: bool = False) -> Run:
        return pick(
            cls,
            {**row, "config": row.get("config") or {}},
            lock_held=bool(row.get("lock_token")),
            last_step=last_step,
            worker_gone=worker_gone,
        )

    @property
    def max_steps(self) -> int | None:
        value = self.config.get("max_steps")
        return int(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Step:
    step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Step:
        return pick(cls, {**row, "metrics": row.get("metrics") or {}})

    def metric(self, key: str) -> float | None:
        value = number(self.metrics.get(key))
        return None if value is None or value != value else value  # NaN reads as missing


@dataclass(frozen=True)
class Task:
    id: int
    key: str
    dataset: str
    split: str
    prompt: str
    expected_tool: str | None = None
    expected_args: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        return pick(cls, row)

    @property
    def short_key(self) -> str:
        """The key without its dataset prefix: every task of a run shares it, it only costs columns."""
        prefix = f"{self.dataset}:"
        return (
            self.key[len(prefix) :]
            if self.key.startswith(prefix) and len(self.key) > len(prefix)
            else self.key
        )

    def as_task(self) -> workbench.types.Task:
        """The task the run loaded: `extra` holds its `to_dict()` (workbench.run.recorder.task_row)."""
        return workbench.types.Task.from_dict(self.extra or {})


@dataclass(frozen=True)
class Trajectory:
    """One episode as stored. List reads leave `messages` out (it is large); `View.trajectory` fills it."""

    id: int
    run_id: int
    step: int
    split: str
    completion: str
    task_id: int | None = None
    group_idx: int = 0
    sample_idx: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    reward: float | None = None
    reward_parts: dict[str, float] = field(default_factory=dict)
    explanation: str | None = None
    verifier_id: int | None = None
    advantage: float | None = None
    prompt_tokens: int | None = None
    tokens: int | None = None
    truncated: bool = False
    latency: float | None = None
    error: str | None = None
    # The eval's classification (valid_json, ..., success) and `parse_error` (why the reply was no call); None before v3
    outcome: dict[str, Any] | None = None
    superseded: bool = False
    checkpoint_id: int | None = None
    eval_id: int | None = None
    created: float = 0.0
    messages: tuple[dict[str, Any], ...] | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Trajectory:
        messages = row.get("messages")
        return pick(
            cls,
            row,
            **{
                "tool_calls": tuple(ToolCall.from_dict(c) for c in row.get("tool_calls") or []),
                "reward_parts": row.get("reward_parts") if isinstance(row.get("reward_parts"), dict) else {},
                "truncated": bool(row.get("truncated")),
                "superseded": bool(row.get("superseded")),
                "messages": tuple(messages) if isinstance(messages, list) else None,
                "outcome": row.get("outcome") if isinstance(row.get("outcome"), dict) else None,
            },
        )

    @property
    def first_call(self) -> ToolCall | None:
        return self.tool_calls[0] if self.tool_calls else None

    @property
    def success(self) -> bool | None:
        """Whether the episode solved its task (the eval's rule, stored with it); None when unknown."""
        return None if self.outcome is None else bool(self.outcome.get("success"))

    @property
    def parse_error(self) -> str | None:
        """Why the last reply was not (or not only) a tool call, as the parser said; None when it parsed."""
        err = (self.outcome or {}).get("parse_error")
        return err if isinstance(err, str) else None

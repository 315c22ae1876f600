"""Typed, read-only records built once from store rows: what the screens and `workbench report` hold.

A store row is a dict with JSON columns decoded; each record here takes the fields it knows and ignores
the rest, so a column added by a later migration never breaks an older reader (`workbench.run.records.pick`).
`Eval` and `Checkpoint` are the engine's (`workbench.run.records`: the promotion rule decides on them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.run.records import Checkpoint as Checkpoint  # re-exported for readers
from workbench.run.records import Eval as Eval
from workbench.run.records import number as _number
from workbench.run.records import pick as _pick
from workbench.types import ToolCall


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

    @classmethod
    def from_row(cls, row: dict[str, Any], last_step: int | None = None, *, worker_gone: bool = False) -> Run:
        return _pick(cls, {**row, "config": row.get("config") or {}}, lock_held=bool(row.get("lock_token")),
                     last_step=last_step, worker_gone=worker_gone)

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
        return _pick(cls, {**row, "metrics": row.get("metrics") or {}})

    def metric(self, key: str) -> float | None:
        value = _number(self.metrics.get(key))
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
        return _pick(cls, row)

    @property
    def short_key(self) -> str:
        """The key without its dataset prefix: every task of a run shares it, it only costs columns."""
        prefix = f"{self.dataset}:"
        return self.key[len(prefix):] if self.key.startswith(prefix) and len(self.key) > len(prefix) else self.key


@dataclass(frozen=True)
class Turn:
    """One message of an episode; an assistant turn that is a tool call carries it parsed."""

    role: str
    text: str
    tool_call: ToolCall | None = None


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
        return _pick(cls, row, **{
            "tool_calls": tuple(ToolCall.from_dict(c) for c in row.get("tool_calls") or []),
            "reward_parts": row.get("reward_parts") if isinstance(row.get("reward_parts"), dict) else {},
            "truncated": bool(row.get("truncated")), "superseded": bool(row.get("superseded")),
            "messages": tuple(messages) if isinstance(messages, list) else None,
            "outcome": row.get("outcome") if isinstance(row.get("outcome"), dict) else None,
        })

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


@dataclass(frozen=True)
class VerifierVersion:
    id: int
    name: str
    version: int
    code: str
    sha256: str = ""
    run_id: int | None = None
    created: float = 0.0
    note: str | None = None
    active: bool = False
    dry_run: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> VerifierVersion:
        return _pick(cls, {**row, "active": bool(row.get("active"))})

    @property
    def title(self) -> str:
        return f"{self.name} v{self.version}"


@dataclass(frozen=True)
class Label:
    id: int
    trajectory_id: int
    verdict: str
    note: str | None = None
    created: float = 0.0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Label:
        return _pick(cls, row)


@dataclass(frozen=True)
class Event:
    """A line of the run's log: status changes with their reasons, resumes, verifier swaps, pauses."""

    id: int
    kind: str
    message: str
    created: float
    data: Any = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Event:
        return _pick(cls, row)


@dataclass(frozen=True)
class Command:
    id: int
    kind: str
    status: str
    payload: dict[str, Any] | None = None
    result: Any = None
    created: float = 0.0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Command:
        return _pick(cls, row)

    @property
    def answered(self) -> bool:
        return self.status in ("done", "failed")


@dataclass(frozen=True)
class DryRunRow:
    trajectory_id: int
    old_reward: float | None = None
    new_reward: float | None = None
    new_parts: dict[str, Any] | None = None
    explanation: str | None = None
    error: str | None = None
    label: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DryRunRow:
        return _pick(cls, row)

    @property
    def delta(self) -> float | None:
        return None if self.old_reward is None or self.new_reward is None else self.new_reward - self.old_reward

    @property
    def changed(self) -> bool:
        return bool(self.error) or abs((self.new_reward or 0.0) - (self.old_reward or 0.0)) > 1e-9


@dataclass(frozen=True)
class Progress:
    """A worker's progress report (workbench.progress): its phase, how far (done of total), and a line."""

    phase: str
    text: str
    created: float
    done: int | None = None
    total: int | None = None
    step: int | None = None
    eta_s: float | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_event(cls, event: Event) -> Progress:
        d = event.data if isinstance(event.data, dict) else {}
        ints = {k: int(d[k]) if isinstance(d.get(k), (int, float)) else None for k in ("done", "total", "step")}
        return cls(phase=str(d.get("phase", "")), text=event.message, created=event.created, eta_s=_number(d.get("eta_s")),
                   data=d, **ints)

"""Typed, read-only records built once from store rows: what the screens and `workbench report` hold.

A store row is a dict with JSON columns decoded; each record here takes the fields it knows and ignores
the rest, so a column added by a later migration never breaks an older reader (`workbench.run.records.pick`).
The records the engine reads too (`Run`, `Step`, `Task`, `Trajectory`, `Eval`, `Checkpoint`) are
`workbench.run.records`' and re-exported here; the rest only readers need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.run.records import Checkpoint as Checkpoint  # re-exported for readers
from workbench.run.records import Eval as Eval
from workbench.run.records import Run as Run
from workbench.run.records import Step as Step
from workbench.run.records import Task as Task
from workbench.run.records import Trajectory as Trajectory
from workbench.run.records import number as _number
from workbench.run.records import pick as _pick
from workbench.types import ToolCall


@dataclass(frozen=True)
class Turn:
    """One message of an episode; an assistant turn that is a tool call carries it parsed."""

    role: str
    text: str
    tool_call: ToolCall | None = None


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
        return (
            None if self.old_reward is None or self.new_reward is None else self.new_reward - self.old_reward
        )

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
        ints = {
            k: int(d[k]) if isinstance(d.get(k), (int, float)) else None for k in ("done", "total", "step")
        }
        return cls(
            phase=str(d.get("phase", "")),
            text=event.message,
            created=event.created,
            eta_s=_number(d.get("eta_s")),
            data=d,
            **ints,
        )

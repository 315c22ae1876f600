"""A run's evals and checkpoints as typed records, built from store rows: what the promotion rule decides on
(`workbench.run.promotion`) and what `workbench.view` hands its readers. `pick` and `number` are how every
record is built from a row, these and the view layer's own (`workbench.view.records`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

R = TypeVar("R")


_NAMES: dict[type, frozenset[str]] = {}  # a record class's field names: `fields()` per row was a third of a read


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
        return pick(cls, {**row, "is_baseline": bool(row.get("is_baseline")), "metrics": row.get("metrics") or {}})

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
        """"test" for an eval of the test split (reported, decides nothing), else "validation"."""
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

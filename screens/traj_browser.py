"""A window of trajectory summaries around the one being viewed, grown a keyset page at a time in either
direction, so stepping through a million rows never loads more than a few pages."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from workbench.view import Trajectory, TrajectoryFilter, View, effective_order, page_key

PAGE = 50
MAX_WINDOW = 400  # rows kept in memory; the far end is dropped as the window grows
ORDERS = (("id", True), ("reward", True), ("reward", False))  # newest first, best first, worst first
Direction = Literal["forward", "backward"]


@dataclass
class FetchRequest:
    direction: Direction | Literal["start"]
    flt: TrajectoryFilter
    order: str
    descending: bool
    after: tuple | None
    generation: int


@dataclass
class Browser:
    flt: TrajectoryFilter
    order: str = "id"
    descending: bool = True
    rows: list[Trajectory] = field(default_factory=list)
    index: int = 0
    generation: int = 0  # bumped on every re-query, so late pages of an old query are ignored
    at_end: bool = False
    at_start: bool = False

    @property
    def current(self) -> Trajectory | None:
        return self.rows[self.index] if self.rows else None

    def key(self, row: Trajectory) -> tuple:
        # Under a step filter an id order walks (step, id): the cursor must be the one the page gives.
        return page_key(row, effective_order(self.flt, self.order))

    def restart(self, *, anchor: Trajectory | None = None) -> FetchRequest:
        """Re-query from the top, or from `anchor` (inclusive) if given."""
        self.generation += 1
        self.rows, self.index, self.at_end, self.at_start = [], 0, False, anchor is None
        after = None
        if anchor is not None and (self.order == "id" or getattr(anchor, self.order) is not None):
            k = self.key(anchor)
            # Cursors are exclusive: nudge the id one past the anchor so the anchor itself comes first.
            after = (*k[:-1], k[-1] + (1 if self.descending else -1))
        return FetchRequest(
            "start", dataclasses.replace(self.flt), self.order, self.descending, after, self.generation
        )

    def step(self, delta: int) -> FetchRequest | None:
        """Move by one; returns a fetch to run when the window's edge is reached (index unchanged then)."""
        if not self.rows:
            return None
        target = self.index + delta
        if 0 <= target < len(self.rows):
            self.index = target
            return None
        if delta > 0 and not self.at_end:
            return FetchRequest(
                "forward", self.flt, self.order, self.descending, self.key(self.rows[-1]), self.generation
            )
        if delta < 0 and not self.at_start:
            return FetchRequest(
                "backward", self.flt, self.order, not self.descending, self.key(self.rows[0]), self.generation
            )
        return None

    def apply(self, req: FetchRequest, rows: list[Trajectory]) -> bool:
        """Merge a fetched page; returns whether the current row moved."""
        if req.generation != self.generation:
            return False
        if req.direction == "start":
            self.rows, self.index = rows, 0
            self.at_end = len(rows) < PAGE
            if req.after is None:
                self.at_start = True
            return bool(rows)
        if req.direction == "forward":
            if len(rows) < PAGE:
                self.at_end = True
            if not rows:
                return False
            self.rows.extend(rows)
            self.index += 1
            if len(self.rows) > MAX_WINDOW:
                drop = len(self.rows) - MAX_WINDOW
                self.rows, self.index, self.at_start = self.rows[drop:], self.index - drop, False
            return True
        # backward: the page came in reverse order; it precedes the window
        if len(rows) < PAGE:
            self.at_start = True
        if not rows:
            return False
        rows = list(reversed(rows))
        self.rows = rows + self.rows
        self.index = len(rows) - 1
        if len(self.rows) > MAX_WINDOW:
            self.rows, self.at_end = self.rows[:MAX_WINDOW], False
        return True


def fetch(view: View, req: FetchRequest) -> list[Trajectory]:
    """Run a FetchRequest (in a thread worker, on that thread's own View)."""
    return view.page(req.flt, order=req.order, descending=req.descending, after=req.after, limit=PAGE).rows


def describe(flt: TrajectoryFilter, order: str, descending: bool) -> str:
    parts = []
    if flt.reward_min is not None or flt.reward_max is not None:
        low, high = ("…" if v is None else v for v in (flt.reward_min, flt.reward_max))
        parts.append(f"reward {low}..{high}")
    if flt.step_min is not None or flt.step_max is not None:
        low, high = ("…" if v is None else v for v in (flt.step_min, flt.step_max))
        parts.append(f"step {low}..{high}")
    for label, value in (("task", flt.task_id), ("verifier", flt.verifier_id), ("split", flt.split)):
        if value is not None:
            parts.append(f"{label} {value}")
    if flt.errors_only:
        parts.append("errors only")
    if flt.text:
        parts.append(f"“{flt.text}”")
    sort = "newest first" if order == "id" else ("best first" if descending else "worst first")
    return " · ".join([*parts, sort]) if parts else f"all · {sort}"

"""Progress of the phase a worker is in, for the status bar and the headless log.

Every long phase reports here (loading the model, the baseline eval, SFT, a GRPO step's rollouts and
update, each eval). The store gets an event of kind "progress" (the UI reads the newest one: the same door
as the rest of the log, see `workbench.view.View.progress`), at most once a second, and at once when the
phase changes; the headless log gets a line when the phase changes and every `log_every_s` within one.

Each report of a phase with done/total also carries the phase's rate (items a second since the phase began,
time spent paused left out: `pause()` / `resume()`) and its ETA (`phase_eta_s`), so every phase shows how
fast it goes and when it ends, not only GRPO steps (whose run ETA the trainer gives as `eta_s`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlite_utils

import store
from workbench.safe_points import Throttle

PROGRESS_KIND = "progress"  # the events' kind; the event log and `report` leave these out

# What each phase is called in the status bar and the log.
PHASES = {"load": "loading the model", "eval": "eval", "sft": "SFT", "rollout": "rollout", "update": "update"}
UNITS = {"eval": "tasks", "sft": "steps", "rollout": "tok"}  # what a phase's done/total counts


def eval_label(*, is_baseline: bool, sft_only: bool, step: int, requested: bool = False) -> str:
    """What an eval is: base (the untrained policy), SFT-only (after the warm-up), or a GRPO step's."""
    if is_baseline:
        return "base"
    if sft_only:
        return "SFT-only"
    return f"GRPO step {step}" + (" (requested)" if requested else "")


def pace(data: dict[str, Any]) -> str:
    """', 0.42 steps/s, 5 min left' for a report that has a rate (none before a phase's second report)."""
    rate, left = data.get("rate"), data.get("phase_eta_s")
    if not isinstance(rate, (int, float)) or rate <= 0:
        return ""
    unit = UNITS.get(data.get("phase", ""), "")
    out = f", {rate:.2g} {unit}/s" if unit else f", {rate:.2g}/s"
    return out + (f", {_minutes(left)} left" if isinstance(left, (int, float)) else "")


def describe(data: dict[str, Any]) -> str:
    """One line for a progress record: 'SFT 3/15 loss 0.842', 'step 4/20 rollout 24/48 tok', ..., with the
    phase's rate and time left once it has them ('SFT 6/160 loss 0.126, 0.16 steps/s, 16 min left')."""
    phase = data.get("phase", "")
    done, total = data.get("done"), data.get("total")
    frac = f" {done}/{total}" if done is not None and total else ""
    if phase == "load":
        return data.get("label") or PHASES["load"]
    if phase == "eval":
        batch = (
            f", batch at {data['tokens']}/{data['max_tokens']} tok"
            if data.get("tokens") is not None and data.get("max_tokens")
            else ""
        )
        return f"eval ({data.get('label', '')}){frac} tasks" + batch + pace(data)
    if phase == "sft":
        loss = data.get("loss")
        return f"SFT{frac}" + (f" loss {loss:.3f}" if isinstance(loss, (int, float)) else "") + pace(data)
    if phase in ("rollout", "update"):
        steps = f"/{data['max_steps']}" if data.get("max_steps") else ""
        what = f"{phase}{frac} tok" if phase == "rollout" and frac else phase
        if phase == "rollout" and data.get("refill"):  # dynamic sampling's extra rounds restart the count
            what += f" (refill {data['refill']}/{data.get('refills', '?')})"
        eta = data.get("eta_s")
        return f"step {data.get('step', '?')}{steps} {what}" + (f", ETA {_minutes(eta)}" if eta else "")
    return phase


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


class Progress:
    """Throttled progress reports of one run (the trainer owns one; `log` is the headless log)."""

    def __init__(
        self,
        db: sqlite_utils.Database | None,
        run_id: int | None,
        log: Callable[[str], None],
        *,
        every_s: float = 1.0,
        log_every_s: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.db, self.run_id, self.log = db, run_id, log
        kw = {"clock": clock} if clock is not None else {}
        self._store = Throttle(every_s, **kw)
        self._log = Throttle(log_every_s, **kw)
        self._key: tuple[Any, ...] | None = None  # (phase, label, step): a new one is written at once
        self.last: dict[str, Any] | None = None
        self.clock = clock or time.monotonic
        self._start: tuple[float, int] | None = None  # (active time, done) at the phase's first report
        self._paused_at: float | None = None
        self._paused_s = 0.0  # time spent paused since the worker started: not counted in any rate

    def pause(self) -> None:
        """The run paused (a safe point waits): from now until `resume()` no phase's rate or ETA counts."""
        if self._paused_at is None:
            self._paused_at = self.clock()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._paused_s += self.clock() - self._paused_at
            self._paused_at = None

    @property
    def paused_s(self) -> float:
        """Seconds spent paused so far (a pause in progress counts up to now)."""
        ongoing = self.clock() - self._paused_at if self._paused_at is not None else 0.0
        return self._paused_s + ongoing

    def _active(self) -> float:
        """The clock less the time spent paused (frozen while paused)."""
        now = self._paused_at if self._paused_at is not None else self.clock()
        return now - self._paused_s

    def _pace(self, data: dict[str, Any], changed: bool) -> None:
        done, total = data.get("done"), data.get("total")
        if not isinstance(done, int) or not isinstance(total, int) or total <= 0:
            self._start = None
            return
        if changed or self._start is None or done < self._start[1]:  # a new phase (or a refill round)
            self._start = (self._active(), done)
            return
        t0, d0 = self._start
        elapsed = self._active() - t0
        if done > d0 and elapsed > 0:
            rate = (done - d0) / elapsed
            data["rate"] = rate
            data["phase_eta_s"] = max(0.0, (total - done) / rate)

    def report(self, phase: str, done: int | None = None, total: int | None = None, **extra: Any) -> None:
        data = {"phase": phase, "done": done, "total": total, **extra}
        key = (phase, extra.get("label"), extra.get("step"))
        changed = key != self._key
        self._key = key
        self._pace(data, changed)
        self.last = data
        if changed:
            self._store.reset()
            if phase not in ("rollout", "update"):  # every step has both: its own line says how it went
                self._log.reset()
        final = done is not None and total is not None and done >= total
        if (self._store.ready() or final) and self.db is not None and self.run_id is not None:
            store.runs.add_event(self.db, self.run_id, PROGRESS_KIND, describe(data), data)
        if self._log.ready():
            self.log(describe(data))

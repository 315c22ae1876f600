"""What state a run is in and what a person may do to it now: one home for run statuses, worker liveness
and the table of allowed actions that the key bindings, the footer, the command palette and the help
screen all read (so a key and its palette entry can never disagree). The actions are the command table's
(`workbench.run.commands`: its names and keys) with the UI's words and rules added, plus "start worker"."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from store.runs import STATUSES  # the status column's values: the store checks every write against them
from workbench.run.commands import COMMAND_BY_NAME, COMMANDS, StepSetting
from workbench.run.session import ERROR_BUDGET_PAUSE, STALE_AFTER_S  # the lock's and the worker's
from workbench.view.records import Run

LIVE_STATUSES = ("starting", "running", "pausing", "stopping")  # a worker is (or should be) at work
ENDED_STATUSES = ("stopped", "crashed", "finished")
PAUSED_STATUSES = ("paused", "pausing")
IDLE_STATUSES = ("created", "paused", *ENDED_STATUSES)  # no step is being taken

WorkerState = Literal["alive", "stale", "none"]

__all__ = [
    "ACTIONS",
    "ENDED_STATUSES",
    "IDLE_STATUSES",
    "LIVE_STATUSES",
    "PAUSED_STATUSES",
    "STALE_AFTER_S",
    "STATUSES",
    "ERROR_BUDGET_PAUSE",
    "Action",
    "RunState",
    "WorkerState",
    "heartbeat_age",
    "paused_by_errors",
    "started_again",
    "worker_state",
]


def worker_state(run: Run, now: float, stale_after_s: float = STALE_AFTER_S) -> WorkerState:
    """alive: holds the lock with a fresh heartbeat; stale: holds it but went quiet; none: no worker (or
    the holder ran on this host and its process is gone: `run.worker_gone`, the lock's own rule)."""
    if not run.lock_held or run.heartbeat is None or run.worker_gone:
        return "none"
    return "alive" if now - run.heartbeat < stale_after_s else "stale"


def started_again(
    before: str | None, now: str, before_lock: str | None = None, now_lock: str | None = None
) -> bool:
    """A worker took the run up again (a resume may have restarted from a checkpoint and superseded
    later rows, so a reader should take a fresh snapshot). Seen in the status (an idle one, or "starting",
    turning into starting/running: a worker supersedes rows between its "starting" and "running"), or in
    the lock token when the statuses in between were missed (a killed worker still reads "running", and
    `workbench train --resume` in another terminal took its lock: running -> running)."""
    if before in IDLE_STATUSES and now in ("starting", "running"):
        return True
    if before == "starting" and now == "running":
        return True
    return before_lock is not None and now_lock is not None and before_lock != now_lock


def paused_by_errors(run: Run) -> bool:
    """The worker paused the run because its verifier failed past the error budget (the reason says how)."""
    return run.status == "paused" and (run.status_reason or "").startswith(ERROR_BUDGET_PAUSE)


def heartbeat_age(run: Run, now: float) -> float | None:
    return None if run.heartbeat is None else max(0.0, now - run.heartbeat)


@dataclass(frozen=True)
class RunState:
    """A run's status and its worker's liveness at one moment (the app's clock, so tests can freeze it)."""

    status: str
    worker: WorkerState

    @classmethod
    def of(cls, run: Run, now: float) -> RunState:
        return cls(run.status, worker_state(run, now))

    @property
    def alive(self) -> bool:
        return self.worker == "alive"

    @property
    def crashed(self) -> bool:
        return self.status == "crashed"

    @property
    def live_without_worker(self) -> bool:
        """The status says a worker is at work but none answers: the banner shouts, r starts one."""
        return self.status in LIVE_STATUSES and not self.alive


@dataclass(frozen=True)
class Action:
    """A run control: its key, the palette's wording, and when it is allowed."""

    name: str
    key: str
    title: str
    help: str
    when: str  # the rule in words, for the help screen
    allowed: Callable[[RunState], bool]
    needs_value: bool = False  # the palette asks for a number first


def _can_start(s: RunState) -> bool:
    return not s.alive and s.status != "finished"


def _live(s: RunState) -> bool:
    return s.alive


# The UI's words and rule for each command of the table: (title, help, when in words, allowed).
_RULES: dict[str, tuple[str, str, str, Callable[[RunState], bool]]] = {
    "pause": (
        "Pause training",
        "pause at the next safe point",
        "while running, with a live worker",
        lambda s: s.status in ("running", "starting") and s.alive,
    ),
    "resume": (
        "Resume training",
        "continue from where it paused",
        "while paused or pausing, with a live worker",
        lambda s: s.status in PAUSED_STATUSES and s.alive,
    ),
    "checkpoint": ("Save checkpoint now", "adapter, optimizer, RNG and step", "with a live worker", _live),
    "eval": ("Run held-out eval now", "evaluate the current policy", "with a live worker", _live),
    "set_lr": ("Set learning rate…", "from the next step", "with a live worker", _live),
    "set_temperature": ("Set sampling temperature…", "from the next step", "with a live worker", _live),
    "sample": (
        "Sample 8 completions of the selected task",
        "the worker samples it",
        "with a live worker and a task selected",
        _live,
    ),
    "set_verifier": (
        "Apply the edited verifier",
        "after an ok dry run, from the next step",
        "unless the run has finished or is stopping (a worker started later picks it up)",
        lambda s: s.status not in ("finished", "stopping"),
    ),
    "stop": (
        "Stop run",
        "checkpoint and exit the worker, after a confirm",
        "with a live worker, or while the status says one is at work or paused",
        lambda s: s.alive or s.status in (*LIVE_STATUSES, "paused"),
    ),
}
# Not a command: r starts a worker when none answers (the resume key's other meaning).
_START_WORKER = Action(
    "start_worker",
    COMMAND_BY_NAME["resume"].key,
    "Start worker",
    "spawn the training worker for this run (it resumes from the last checkpoint)",
    "when no live worker holds the run and it has not finished",
    _can_start,
)


def _actions() -> tuple[Action, ...]:
    out: list[Action] = []
    for spec in COMMANDS:
        title, help_text, when, rule = _RULES[spec.name]  # a KeyError here: a new command needs its words
        needs_value = spec.payload is not None and issubclass(spec.payload, StepSetting)
        out.append(Action(spec.name, spec.key, title, help_text, when, rule, needs_value))
        if spec.name == "resume":
            out.append(_START_WORKER)
    return tuple(out)


ACTIONS: tuple[Action, ...] = _actions()
ACTION_BY_NAME = {a.name: a for a in ACTIONS}


def allowed(name: str, state: RunState | None) -> bool:
    """Whether the run control `name` may be used now (False without a run)."""
    return state is not None and ACTION_BY_NAME[name].allowed(state)


def key_action(key_name: str, state: RunState | None) -> str | None:
    """The control a key triggers now (r: resume a live worker, or start one), None when none is allowed."""
    for a in ACTIONS:
        if (a.name == key_name or (key_name == "resume" and a.name == "start_worker")) and allowed(
            a.name, state
        ):
            return a.name
    return None

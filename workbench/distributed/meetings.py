"""The ranks' meetings: commands are claimed by rank 0 and their outcome reaches every rank at the same point.

Commands are read by rank 0 at the meetings only: the trainer's outer safe points (after a round of
rollout groups, before the update, after the step, after each SFT step). There rank 0 broadcasts the
outcome (stop, learning rate, temperature, verifier), so every rank applies it at the same point. A pause or
stop taken anywhere else (inside decoding, an eval or an update, as one process does) would hold or end
rank 0 inside a phase while the others ran on into a collective it never joins; so with ranks a pause waits
for the next meeting (the UI shows "pausing" till then). A paused rank 0 holds the meeting open: every
PAUSE_BEAT_S it broadcasts "still paused", so the others wait in short meetings, not in one collective that
would time out after TIMEOUT_S; a resume or a stop ends the meeting for every rank at once. What rank 0 runs
for a command (an eval, a probe, a checkpoint) it runs alone (`Collective.alone`), the others waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workbench.distributed.collective import RankCollective
from workbench.safe_points import Throttle
from workbench.trainer import Hooks, Trainer
from workbench.verifiers import load_verifier_code

PAUSE_BEAT_S = 2.0  # a paused rank 0 tells the others this often that it still is
MEETINGS = ("after_group", "before_update", "after_step", "sft_step")  # every rank reaches these together


class RankHooks(Hooks):
    """Wraps rank 0's driver (the worker's hooks); on the other ranks there is none (`inner` None) and the
    meetings deliver what rank 0 decided. Every rank's `should_stop` is the stop agreed at the last meeting,
    so all leave at the same point."""

    def __init__(
        self, inner: Hooks | None, collective: RankCollective, log: Callable[[str], None] = lambda m: None
    ) -> None:
        self.inner, self.collective, self.log = inner, collective, log
        self.stop = False
        self._beat = Throttle(PAUSE_BEAT_S)
        if inner is not None and hasattr(inner, "while_paused"):  # the worker's hooks: its pause loop beats
            inner.while_paused = self._still_paused

    def inner_safe_point(self, trainer: Trainer, phase: str) -> None:
        """Nothing with ranks: commands wait for the next meeting (see the module's docstring)."""

    def safe_point(self, trainer: Trainer, where: str) -> None:
        if where not in MEETINGS:
            return
        state = None
        if self.collective.is_main:
            if self.inner is not None:
                self._beat.reset()
                with self.collective.alone():  # claims the commands; holds here while paused, beating
                    self.inner.safe_point(trainer, where)
            v = trainer.verifier
            state = {
                "held": False,
                "stop": bool(self.inner and self.inner.should_stop(trainer)),
                "lr": trainer.lr,
                "temperature": trainer.temperature,
                "verifier_id": trainer.verifier_id,
                "verifier": (getattr(v, "code", None), getattr(v, "name", None)),
            }
        state = self.collective.broadcast(state, f"the safe point {where!r}")
        if not self.collective.is_main:
            if state["held"]:
                self.log(f"paused by rank 0 at {where} of step {trainer.step + 1}")
            while state["held"]:  # one short meeting per beat until rank 0 resumes or stops
                state = self.collective.broadcast(None, f"the pause at {where!r}")
            self._apply(trainer, state, where)
        self.stop = state["stop"]

    def _still_paused(self, trainer: Trainer, where: str) -> None:
        """Rank 0, paused at a meeting (called every few hundred ms by the worker's pause loop)."""
        if self._beat.ready():
            self.collective.broadcast({"held": True}, f"the pause at {where!r}")

    def _apply(self, trainer: Trainer, state: dict[str, Any], where: str) -> None:
        rank = self.collective.rank
        for key in ("lr", "temperature"):
            if getattr(trainer, key) != state[key]:
                setattr(trainer, key, state[key])
                self.log(f"[rank {rank}] {key} {state[key]} at {where} of step {trainer.step + 1}")
        if state["verifier_id"] != trainer.verifier_id:
            code, name = state["verifier"]
            trainer.verifier, trainer.verifier_id = load_verifier_code(code, name), state["verifier_id"]
            self.log(f"[rank {rank}] verifier {state['verifier_id']} at {where}")

    def should_stop(self, trainer: Trainer) -> bool:
        return self.stop

    def pause(self, trainer: Trainer, reason: str) -> bool:
        # The error budget (every rank sees the same step): rank 0's driver pauses at the next meeting, after
        # the step, and the others wait for it there.
        return self.inner.pause(trainer, reason) if self.inner is not None else True

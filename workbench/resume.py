"""Resuming a run, one job: which checkpoint to continue from (the newest whole one; a torn one is skipped and
named), loading it into the policy and optimizer (with the RNG states it holds; first the SFT checkpoint
when the KL reference is the SFT policy), and what resuming writes: later rows and evals superseded, the
prompt sampler's state read back from the live rows, and whether the checkpoint's scheduled eval must be
redone. The trainer calls these in order and keeps the state they return.

Beside the trainer, not in workbench/run/ (torch-free): loading a checkpoint loads torch tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlite_utils

import store
from workbench import checkpoint as ckpt
from workbench.learn import grpo
from workbench.prompt_sampler import GroupSeen, skill_success_from_eval
from workbench.run.evaluation import CheckpointEval, live_evals
from workbench.run.recorder import Recorder
from workbench.run.records import Checkpoint


class Resume:
    """Run `run_id`'s resume against its store (rank 0's: `point` and `record` run there alone).
    `kl_to_sft`: the KL reference is the SFT policy, so the SFT checkpoint is pinned first."""

    def __init__(
        self,
        cfg: Any,
        db: sqlite_utils.Database,
        run_id: int,
        *,
        recorder: Recorder,
        evaluation: CheckpointEval,
        task_ids: dict[str, int],
        kl_to_sft: bool,
        log: Callable[[str], None] = lambda msg: None,
    ) -> None:
        self.cfg, self.db, self.run_id = cfg, db, run_id
        self.recorder, self.evaluation, self.task_ids = recorder, evaluation, task_ids
        self.kl_to_sft, self.log = kl_to_sft, log

    def point(self) -> tuple[Checkpoint | None, Checkpoint | None]:
        """The newest whole checkpoint and, when the KL reference is the SFT policy, the whole SFT one to pin
        it from. (None, None): none is left, and the run starts over (what it had done is superseded here)."""
        checkpoints = [Checkpoint.from_row(c) for c in store.metrics.list_checkpoints(self.db, self.run_id)]
        last = self.newest_whole(checkpoints)
        if last is None:
            store.trajectories.mark_superseded(self.db, self.run_id, after_step=0)
            # Starting over: only the baseline still measures a policy the run will have (the base model).
            self.recorder.supersede_evals(
                [e for e in live_evals(self.db, self.run_id) if not e.is_baseline],
                "no whole checkpoint is left: the run starts over from the base model",
            )
            return None, None
        if not self.kl_to_sft:
            return last, None
        # The newest whole checkpoint may itself be the SFT one: already verified, not hashed again.
        sft = last if last.kind == "sft" else self.newest_whole([c for c in checkpoints if c.kind == "sft"])
        if sft is None:
            raise ckpt.CheckpointError(
                f"run {self.run_id}: the KL reference is the SFT policy (reference: sft, beta "
                f"{self.cfg.beta}) but no whole SFT checkpoint is left (see the events above); "
                "nothing was resumed"
            )
        return last, sft

    def newest_whole(self, checkpoints: list[Checkpoint]) -> Checkpoint | None:
        """The newest of these checkpoints that is whole. A torn or missing one (a kill or a full disk
        mid-write) is skipped for the one before it, and named in the log and the run's events."""
        for c in sorted(checkpoints, key=lambda c: (c.step, c.id), reverse=True):
            ckpt.recover(Path(c.path))
            problem = ckpt.verify(Path(c.path))
            if problem is None:
                return c
            msg = f"checkpoint #{c.id} (step {c.step}, {c.kind}) is not usable: {problem}; skipped"
            self.log(msg)
            store.runs.add_event(
                self.db, self.run_id, "checkpoint", msg, {"checkpoint_id": c.id, "problem": problem}
            )
        return None

    @staticmethod
    def load(last: Checkpoint, sft: Checkpoint | None, *, policy: Any, optimizer: Any) -> dict[str, Any]:
        """Checkpoint `last` into the policy and optimizer (and the RNGs); its state (step, lr, temperature,
        sft_done). With `sft`, the KL reference is pinned from it first. Both were verified by `point`."""
        if sft is not None:
            policy.load_adapter(Path(sft.path) / "adapter")
            policy.set_reference_to_current()
        return ckpt.load(Path(last.path), policy=policy, optimizer=optimizer, scheduler=None, check=False)

    def record(self, last: Checkpoint, step: int) -> tuple[list[GroupSeen], dict[str, float], bool]:
        """What resuming from checkpoint `last` (at `step`) writes: later rows and evals superseded, and the
        checkpoint's own eval superseded when it is not whole. Returns the prompt sampler's state as of
        `step` and whether the checkpoint's scheduled eval must be redone now."""
        n = store.trajectories.mark_superseded(self.db, self.run_id, after_step=step)
        groups_seen, eval_skills = self.sampler_state(step)
        store.runs.add_event(
            self.db,
            self.run_id,
            "resume",
            f"resumed from step {step} ({n} rows superseded)",
            {"checkpoint_id": last.id, "superseded": n},
        )
        live = [e for e in live_evals(self.db, self.run_id) if not e.is_baseline]
        # Evals of checkpoints newer than the one resumed from (torn ones, skipped above) measured a policy
        # the run no longer continues from.
        self.recorder.supersede_evals(
            [e for e in live if (e.checkpoint_id or 0) > last.id],
            f"the run resumed from checkpoint #{last.id}, before them",
        )
        scheduled = last.kind in ("sft", "final") or step % self.cfg.eval_interval == 0
        if not scheduled:
            return groups_seen, eval_skills, False
        # killed between a checkpoint and its scheduled eval, or (old rows) inside the eval
        own = [e for e in live if e.checkpoint_id == last.id]
        missing = self.evaluation.missing(own)
        if own and missing:
            self.recorder.supersede_evals(own, f"checkpoint #{last.id}'s eval lacks {', '.join(missing)}")
        return groups_seen, eval_skills, bool(missing)

    def sampler_state(self, step: int) -> tuple[list[GroupSeen], dict[str, float]]:
        """What the prompt sampler had learnt by `step`, read back from the live rows: the groups seen and
        the latest validation eval's skills."""
        rewards: dict[tuple[int, int], list[float]] = {}
        keys: dict[tuple[int, int], str] = {}
        key_of = {v: k for k, v in self.task_ids.items()}
        for s, group, task_id, reward in store.trajectories.train_group_rewards(self.db, self.run_id, step):
            keys[(s, group)] = key_of.get(task_id, f"task:{task_id}")
            if reward is not None:
                rewards.setdefault((s, group), []).append(reward)
        groups_seen = [GroupSeen(keys[g], grpo.has_spread(rewards.get(g, []))) for g in keys]
        validation = [
            e for e in live_evals(self.db, self.run_id, mode="greedy") if e.step <= step and e.split != "test"
        ]
        return groups_seen, skill_success_from_eval(validation[-1].metrics) if validation else {}

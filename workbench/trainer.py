"""The step loop of DESIGN.md, writing everything to the store.

    baseline eval -> SFT warm-up (optional) -> GRPO steps -> held-out eval + checkpoint every N steps

Per step: sample prompts, one rollout group per prompt (a safe point after each), score every episode,
group advantages, insert the step's trajectories in one transaction, safe point, policy update, step
metrics row, safe point. The worker plugs command handling into `hooks.safe_point`; headless runs use
the no-op default. All randomness a step uses derives from (seed, step), so a resumed run reproduces the
next step exactly (the model and optimizer come back from the checkpoint).

With data-parallel ranks every rank runs this same trainer with its `collective`
(workbench.distributed.collective): which groups and eval tasks are its own, the sums, and what rank 0 alone
writes or decides. In one process (`OneProcess`, the default) each of those calls is the identity.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlite_utils
import torch

import store
from workbench import checkpoint as ckpt
from workbench import metric_log
from workbench.config import Config
from workbench.distributed.collective import Collective, OneProcess
from workbench.envs import bind_tokenizer, env_for_config
from workbench.learn import grpo
from workbench.learn.sft import run_sft
from workbench.learn.sft_native import env_sft_examples, native_sft_rows
from workbench.learn.update import policy_update, update_items
from workbench.models import Policy, load_policy
from workbench.preflight import check_loaded
from workbench.progress import Progress, eval_label
from workbench.prompt_sampler import GroupSeen, SpreadSampler, skill_success_from_eval
from workbench.resume import Resume
from workbench.rollout.runner import Rollout, Sampling, run_rollouts
from workbench.run.evaluation import CheckpointEval
from workbench.run.inputs import new_run, prepare
from workbench.run.recorder import Recorder, Scored, task_row
from workbench.run.records import Run, Step
from workbench.safe_points import Interrupted, layer_safe_points
from workbench.types import Score, Task
from workbench.verifiers import Verifier, get_verifier, load_verifier_code


class Hooks:
    """What a driver (the worker) can plug into the loop. The default does nothing."""

    def safe_point(self, trainer: Trainer, where: str) -> None:
        """Called after each rollout group, before the update and after the step; may block (pause)."""

    def inner_safe_point(self, trainer: Trainer, phase: str) -> None:
        """Called every few tokens inside decoding, and per model layer inside prefill, SFT and the update
        (workbench.safe_points): must be cheap; may block (pause). After it, a stop ends the phase
        (`Interrupted`) except in the update, which then finishes first."""

    def should_stop(self, trainer: Trainer) -> bool:
        return False

    def pause(self, trainer: Trainer, reason: str) -> bool:
        """Pause at the next safe point with this reason (the error budget asks, after a step); False when
        the driver cannot pause (this default): the trainer then ends the run loop after the step."""
        return False


def make_engine(cfg: Config, policy: Policy, work_dir: Path | None = None) -> Any:
    if cfg.rollout in ("hf", "hf_generate"):  # in-process; transformers' generate where our sampler cannot go
        from workbench.rollout.hf_generate import local_engine

        return local_engine(policy, cfg.rollout)
    from workbench.rollout import vllm  # optional extra, imported lazily; fails with a message naming it

    return vllm.make(cfg, policy, work_dir=work_dir)


def run_dir_for(cfg: Config, run_id: int, created: float) -> Path:
    """The run's folder (checkpoints, TensorBoard): its creation time in the name, so run 1 of another database
    never shares it."""
    return Path(cfg.output_dir).resolve() / f"run-{run_id}-{int(created)}"


class Trainer:
    """Owns the policy, the optimizer and the RNG of one run; everything it learns goes to the store."""

    def __init__(
        self,
        cfg: Config,
        db: sqlite_utils.Database,
        run_id: int | None = None,
        *,
        hooks: Hooks | None = None,
        policy: Policy | None = None,
        log: Callable[[str], None] = lambda msg: None,
        collective: Collective | None = None,
    ) -> None:
        self.cfg = cfg
        self.db = db
        self.hooks = hooks or Hooks()
        self.collective: Collective = collective or OneProcess()
        self.log = log
        self.env = env_for_config(cfg)
        self.harness = self.env.harness
        inputs = prepare(cfg)  # what preflight checked, read the same way (workbench/run/inputs.py)
        self.train_tasks = inputs.train
        # GRPO samples from rl_tasks, the warm-up imitates sft_tasks: all of train unless grpo_holdout splits it
        # (and grpo_skills narrows GRPO's side; sft_skill_weights repeats some of SFT's)
        self.sft_tasks, self.rl_tasks = inputs.sft, inputs.rl
        if cfg.grpo_skills:
            self.log(
                f"GRPO samples {len(self.rl_tasks)} of {len(self.train_tasks)} train tasks (grpo_skills: "
                f"{', '.join(cfg.grpo_skills)})"
            )
        self.eval_tasks, self.test_tasks, split_warnings = inputs.validation, inputs.test, inputs.warnings
        if run_id is None:
            run_id = new_run(db, cfg)
        self.run_id = run_id
        self.progress = Progress(db, run_id, log)
        self.task_ids = store.tasks.add_tasks(
            db, [task_row(t) for t in self.train_tasks + self.eval_tasks + self.test_tasks]
        )
        # One writer of rows, evals and promotion: rank 0 (the others' stores are scratch ones)
        self.recorder = Recorder(db, run_id, self.task_ids, primary=self.collective.is_main, log=log)
        for w in split_warnings:
            self._warn(w)
        self.verifier, self.verifier_id = self._load_verifier()
        if policy is None:
            self.progress.report("load", label=f"loading {cfg.model} (converted once on first use)")
        self.policy = policy or load_policy(
            cfg.model,
            adapter=cfg.adapter,
            lora_r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=cfg.lora.target_modules,
            dtype=cfg.dtype,
            seed=cfg.seed,
            device=cfg.device,
        )
        if self.policy.trained_tokens:
            self._warn(
                f"{cfg.model}: {', '.join(self.policy.trained_tokens)} in its chat template are untrained tokens "
                "in this checkpoint (their rows equal the vocabulary's unused ones), so no adapter on the linear "
                "layers could make the model write them; their embedding and LM-head rows train with the adapter"
            )
        self.collective.broadcast_params(self.policy.trainable_parameters())
        if cfg.tool_format == "native":  # the call format is read from the model's own chat template
            bind_tokenizer(self.env, cfg, self.policy.tokenizer)  # in place: MCP servers start once
        # Every prompt leaves the model room to answer, a step fits the memory: the first place with the model
        check_loaded(cfg, self.env, self.policy, inputs, warn=self._warn)
        if cfg.adapter == "full" and cfg.beta > 0 and not self._kl_to_sft:
            # KL to the initial weights: copy them now, before an SFT warm-up, a step or a resume's checkpoint
            # changes them (a reference taken lazily later would be whatever the policy is then).
            self.policy.prepare_reference()
        self.run_dir = self.collective.from_main(self._run_dir, "the run folder")
        self.engine = make_engine(cfg, self.policy, work_dir=self._engine_dir())
        # Another engine's sampling log-probs differ from ours (kernels, dtype): correct for it in the loss.
        self.is_correction = cfg.rollout not in ("hf", "hf_generate")
        self.optimizer = torch.optim.AdamW(
            self.policy.trainable_parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay
        )
        self.lr = cfg.learning_rate  # live values: the worker may change them between steps
        self.temperature = cfg.temperature
        self._step_temperature: float | None = (
            None  # the running step's, read by its update (train_step sets them)
        )
        self._step_lr: float | None = None
        # `prompt_sampler: spread`: prompts drawn by their chance of a group with reward spread; what it learns
        # from (groups seen, the latest validation eval's skills) is kept here and rebuilt from the store on resume
        self.sampler = (
            SpreadSampler(
                self.rl_tasks, [task_row(t)["key"] for t in self.rl_tasks], cfg.num_generations_per_prompt
            )
            if cfg.prompt_sampler == "spread"
            else None
        )
        self.groups_seen: list[GroupSeen] = []
        self._refill_round = 0  # the dynamic-sampling round a step's rollouts are in (0: the first draw)
        self._mine: list[int] = []  # the step's groups rolled out here (with ranks, the update's)
        self.eval_skills: dict[str, float] = {}
        self.step = 0  # GRPO steps completed
        self.sft_done = cfg.sft_steps == 0
        self.halted: str | None = None  # past the verifier error budget, with no driver that can pause
        # Two whole jobs of their own: the checkpoint eval (workbench/run/evaluation.py), the resume
        # (workbench/resume.py)
        self.evaluation = CheckpointEval(
            cfg,
            self.env,
            self.policy,
            self.eval_tasks,
            self.test_tasks,
            collective=self.collective,
            recorder=self.recorder,
            report=self.progress.report,
            inside=self._inside,
            score=self.score,
            log=log,
        )
        self.resuming = Resume(
            cfg,
            db,
            run_id,
            recorder=self.recorder,
            evaluation=self.evaluation,
            task_ids=self.task_ids,
            kl_to_sft=self._kl_to_sft,
            log=log,
        )

    def _warn(self, warning: str) -> None:
        """A warning about the run's inputs: in the log and the run's events."""
        self.log(f"warning: {warning}")
        store.runs.add_event(self.db, self.run_id, "warning", warning)

    def _run_dir(self) -> Path:
        run = Run.from_row(store.runs.get_run(self.db, self.run_id))
        return run_dir_for(self.cfg, self.run_id, run.created)

    def _engine_dir(self) -> Path:
        """Where a separate engine (vLLM) keeps the adapters it loads: each rank its own folder."""
        return self.run_dir / ("engine" if self.collective.is_main else f"engine-rank{self.collective.rank}")

    # ----- verifier -------------------------------------------------------------------------------------
    def _load_verifier(self) -> tuple[Verifier, int]:
        """The run's active verifier version; with ranks, rank 0's (its store has the run), sent as code."""
        if self.collective.is_main:
            v, vid = self._active_verifier()
            self.collective.broadcast((v.code, v.name, vid), "the verifier")
            return v, vid
        code, name, vid = self.collective.broadcast(None, "the verifier")
        return load_verifier_code(code, name), vid

    def _active_verifier(self) -> tuple[Verifier, int]:
        row = store.verifiers.active_verifier(self.db, self.run_id)
        if row is not None:  # resumed (or edited in the UI): the stored version wins over the config
            return load_verifier_code(row["code"], row["name"]), row["id"]
        v = get_verifier(self.cfg.reward)
        vid = store.verifiers.add_verifier_version(
            self.db, self.run_id, v.name, v.code, note="from config", active=True
        )
        return v, vid

    def set_verifier(self, verifier_id: int) -> None:
        row = store.verifiers.get_verifier(self.db, verifier_id)
        if row is None or row["run_id"] != self.run_id:
            raise ValueError(f"verifier {verifier_id} is not a version of run {self.run_id}")
        self.verifier = load_verifier_code(row["code"], row["name"])
        self.verifier_id = verifier_id
        store.verifiers.activate_verifier(self.db, verifier_id)

    # ----- the whole run --------------------------------------------------------------------------------
    def run(self) -> None:
        """Baseline, SFT, GRPO to max_steps, with evals and checkpoints; resumable at any point. A stop
        inside an eval drops that eval (a resume redoes it: see `resume`)."""
        with contextlib.suppress(Interrupted):
            self._run()

    def _run(self) -> None:
        if self.collective.from_main(self.evaluation.needs_baseline, "the baseline decision"):
            self.log("baseline eval on held-out tasks")
            self.run_eval(is_baseline=True)
        if not self.sft_done:
            self.run_sft_phase()
            if not self.sft_done:
                return
        while self.step < self.cfg.max_steps and not self.hooks.should_stop(self) and self.halted is None:
            if self.train_step() is None:  # stopped mid-step: its rows are superseded on resume
                return
            last = self.step == self.cfg.max_steps
            eval_due = self.step % self.cfg.eval_interval == 0 or last
            if eval_due or self.step % self.cfg.checkpoint_every == 0:
                ck = self.save_checkpoint("final" if last else "periodic")  # every eval has its checkpoint
                if eval_due:
                    self.run_eval(checkpoint_id=ck)

    def run_sft_phase(self) -> None:
        distinct = len({id(t) for t in self.sft_tasks})  # sft_skill_weights repeats the same Task objects
        multi = sum(1 for t in self.train_tasks if t.expected_state is not None)  # no gold path: GRPO's alone
        held = len(self.train_tasks) - distinct - multi
        why = [f"{held} kept for GRPO alone: grpo_holdout"] * bool(held) + [
            f"{multi} multi-step, learnt by GRPO from the final state"
        ] * bool(multi)
        self.log(
            f"SFT warm-up: {self.cfg.sft_steps} steps"
            + (f" on {distinct} train tasks ({'; '.join(why)})" if why else "")
        )
        if self.cfg.sft_skill_weights:
            weights = ", ".join(f"{k} x{w}" for k, w in self.cfg.sft_skill_weights.items())
            self.log(
                f"SFT draws from {len(self.sft_tasks)} examples of {distinct} tasks (sft_skill_weights: {weights})"
            )
        examples = env_sft_examples(self.env, self.sft_tasks)  # in the run's tool format (json or native)

        def on_step(i: int, loss: float) -> bool:
            store.runs.add_event(
                self.db,
                self.run_id,
                "sft_step",
                f"SFT step {i + 1}: loss {loss:.4f}",
                {"step": i + 1, "loss": loss},
            )
            self.progress.report("sft", i + 1, self.cfg.sft_steps, loss=loss)
            self.hooks.safe_point(self, "sft_step")
            return not self.hooks.should_stop(self)

        self.progress.report("sft", 0, self.cfg.sft_steps)
        try:
            with self._inside("sft"):  # safe points per layer, forward and backward: a pause waits < 1 s
                losses = run_sft(
                    self.policy,
                    examples,
                    self.cfg.sft_steps,
                    lr=self.cfg.sft_learning_rate,
                    batch_size=self.cfg.sft_batch_size,
                    seed=self.cfg.seed,
                    prefill=self.harness.prefill,
                    on_step=on_step,
                    sync=self.collective,
                    schedule=self.cfg.sft_lr_schedule,
                    autocast=torch.bfloat16 if self.cfg.sft_autocast == "bfloat16" else None,
                    rows_fn=native_sft_rows if self.cfg.tool_format == "native" else None,
                )
        except Interrupted:  # stopped inside a step: that step never reached its optimizer step
            losses = []
        self.collective.broadcast_params(self.policy.trainable_parameters())  # no rank drifts by a rounding
        self.engine.update_weights(self.policy)  # a separate engine (vLLM) must see the warmed-up weights
        if len(losses) < self.cfg.sft_steps:  # stopped part-way: a resume redoes the warm-up
            return
        self.sft_done = True
        self._pin_sft_reference()
        ck = self.save_checkpoint("sft")
        self.run_eval(checkpoint_id=ck)

    # ----- one GRPO step --------------------------------------------------------------------------------
    @property
    def _kl_to_sft(self) -> bool:
        return self.cfg.beta > 0 and self.cfg.reference == "sft" and self.cfg.sft_steps > 0

    def _pin_sft_reference(self) -> None:
        if self._kl_to_sft:
            self.policy.set_reference_to_current()

    def _step_tasks(self, step: int) -> list[Task]:
        rng = random.Random(self.cfg.seed * 1_000_003 + step)
        k = min(self.cfg.prompts_per_step, len(self.rl_tasks))
        if self.sampler is None:
            return rng.sample(self.rl_tasks, k)
        return self.sampler.draw(rng, k, self.sampler.weights(self.groups_seen, self.eval_skills))

    def _seen(self, groups: list[list[Scored]]) -> list[GroupSeen]:
        return [
            GroupSeen(task_row(grp[0].rollout.task)["key"], self._informative(grp)) for grp in groups if grp
        ]

    def score(self, rollout: Rollout) -> Score:
        return self.score_many([rollout])[0]

    def score_many(self, rollouts: list[Rollout]) -> list[Score]:
        """A group at once: a user verifier runs in a worker process (workbench.verifiers.isolated), one
        round trip per group; a row that hangs or crashes there costs that row only. An episode the environment
        failed (`Output.error`: an MCP server died or hung) is an error row, not scored."""
        ok = [r for r in rollouts if getattr(r.output, "error", None) is None]
        scores = iter(
            self.verifier.score_many([(r.output, r.task) for r in ok], timeout_s=self.cfg.verifier_timeout_s)
            if ok
            else []
        )
        return [
            next(scores)
            if getattr(r.output, "error", None) is None
            else Score(total=0.0, error=f"environment: {r.output.error}")
            for r in rollouts
        ]

    def train_step(self) -> dict[str, Any] | None:
        """One GRPO step; None when a stop was requested part-way (nothing updated, rows to supersede)."""
        step = self.step + 1
        t0 = time.perf_counter()
        paused0 = self.progress.paused_s  # time paused inside the step is not the step's: the ETA reads it
        # What shapes the step is read once, here: the update uses the temperature the step sampled with and
        # the learning rate it started with, whatever a driver changes at a safe point meanwhile.
        sampling = Sampling(self.cfg.max_completion_length, self.temperature, self.cfg.top_p)
        lr = self._step_lr = self.lr
        self._step_temperature = sampling.temperature
        groups: list[list[Scored]] = []
        self._mine = []
        self._refill_round = 0
        tasks = self._step_tasks(step)
        if not self._roll_out(step, tasks, sampling, groups):
            return None
        refill: dict[str, float] = {}
        if self.cfg.dynamic_sampling:
            first = len(groups)
            if not self._refill(step, tasks, sampling, groups):
                return None
            refill = {
                "dynamic_sampling/extra_groups": float(len(groups) - first),
                "dynamic_sampling/extra_generations": float(sum(len(grp) for grp in groups[first:])),
            }
        rollout_s = time.perf_counter() - t0
        flat = [grp for grp in groups if not self._informative(grp)]
        refill["sampler/zero_spread_groups"] = float(len(flat))
        refill["sampler/zero_spread_generations"] = float(sum(len(grp) for grp in flat))
        self.groups_seen += self._seen(groups)
        advantages, group_metrics, keep = self._advantages(groups)
        n_rows = sum(len(grp) for grp in groups)
        errors = int(group_metrics["verifier_errors"])
        over_budget = errors > self.cfg.max_verifier_error_frac * n_rows  # see _report_step
        self._store_step(step, groups, advantages)
        self.hooks.safe_point(self, "before_update")
        if self.hooks.should_stop(self):
            return None
        t1 = time.perf_counter()
        if over_budget:  # a verifier this broken scores a biased few rows at best: no update from them
            update_metrics: dict[str, float] = {"loss": 0.0, "update_skipped": 1.0}
        else:
            self.progress.report("update", step=step, max_steps=self.cfg.max_steps, eta_s=self._eta_s(step))
            # A pause waits inside the update; a stop lets it finish (its optimizer steps are all or none).
            mine = self._mine  # with ranks, each trains on the groups it rolled out (gradients summed)
            with self._inside("update", interruptible=False):
                update_metrics = self._update(
                    [groups[i] for i in mine], [advantages[i] for i in mine], [keep[i] for i in mine]
                )
        update_s = time.perf_counter() - t1
        self.step = step
        tokens = sum(s.rollout.completion_tokens for grp in groups for s in grp)
        metrics = {
            **group_metrics,
            **update_metrics,
            **self._completion_metrics(groups),
            **refill,
            "learning_rate": self._lr_at(step, lr),
            "temperature": sampling.temperature,
            "step_time_s": time.perf_counter() - t0 - (self.progress.paused_s - paused0),
            "rollout_time_s": rollout_s,
            "update_time_s": update_s,
            "tokens_per_s": tokens / rollout_s if rollout_s > 0 else 0.0,
            "verifier_id": self.verifier_id,
            "verifier_error_frac": errors / n_rows if n_rows else 0.0,
        }
        store.metrics.append_step(self.db, self.run_id, step, metrics)
        if self.collective.is_main:
            metric_log.log_step(
                self.cfg, self.run_dir, step, metrics
            )  # TensorBoard, when `log_to` asks for it
        self.log(self._report_step(step, groups, metrics, over_budget))
        self.hooks.safe_point(self, "after_step")
        return metrics

    def _report_step(
        self, step: int, groups: list[list[Scored]], metrics: dict[str, Any], over_budget: bool
    ) -> str:
        """The step's log line; past the error budget (more than `max_verifier_error_frac` of the step's rows
        failed: its update was skipped) it also asks the driver to pause with the reason (the worker does),
        and without one that can, ends the run loop after this step (`self.halted`). Verifier errors are
        counted, with the commonest error, never shown as "reward nan"."""
        failed = [s.score.error for grp in groups for s in grp if s.score.error is not None]
        n = sum(len(grp) for grp in groups)
        counts = collections.Counter(failed).most_common()
        what = ""
        if counts:
            top = counts[0][0] if len(counts[0][0]) <= 100 else counts[0][0][:99] + "…"
            more = len(counts) - 1
            what = f" ({top}" + (f", and {more} other kind{'s' if more > 1 else ''}" if more else "") + ")"
        tail = f"loss {metrics.get('loss', 0):.4f} ({metrics['step_time_s']:.1f} s)"
        if over_budget:
            limit = f"more than {self.cfg.max_verifier_error_frac:.0%} of the step's rewards failed"
            reason = f"step {step}: {len(failed)}/{n} verifier errors{what}; {limit}, its update was skipped"
            if self.hooks.pause(self, reason):
                return (
                    f"step {step}: {len(failed)}/{n} verifier errors{what} — paused: {limit}; fix the verifier "
                    "(v in the UI) and resume"
                )
            self.halted = reason
            return (
                f"step {step}: {len(failed)}/{n} verifier errors{what} — stopped: {limit}; fix the verifier"
            )
        if len(failed) == n:  # a budget of 1.0 lets a step without a single reward through
            return f"step {step}: {n}/{n} verifier errors{what}, no reward, update skipped ({tail})"
        errs = f" ({len(failed)}/{n} verifier errors)" if failed else ""  # which ones: the rows say (UI)
        return f"step {step}: reward {metrics['reward']:.3f}{errs} {tail}"

    def _roll_out(self, step: int, tasks: list[Task], sampling: Sampling, groups: list[list[Scored]]) -> bool:
        """One scored rollout group per task, appended to `groups`: all the tasks' groups decode together
        (one batch: ~2x the tokens/s of a group at a time, bench/rollout_batching.py), with safe points inside
        decoding and one after the groups are scored; False when a stop was requested (then nothing of the
        step is kept or written). With ranks each rolls out its deal of the tasks and every rank gets the
        groups in task order. The generation seed derives from (seed, step, the first group's index, rank)."""
        picks = self.collective.deal(len(tasks))
        g0 = len(groups) + 100_003 * self.collective.rank  # a rank must not draw rank 0's random numbers
        eta = self._eta_s(step)

        rounds = (
            {"refill": self._refill_round, "refills": self.cfg.dynamic_sampling_max_refills}
            if self._refill_round
            else {}
        )

        def on_tokens(done: int) -> None:
            self.progress.report(
                "rollout",
                done,
                sampling.max_new_tokens,
                step=step,
                max_steps=self.cfg.max_steps,
                eta_s=eta,
                **rounds,
            )
            point()

        self.progress.report(
            "rollout",
            0,
            sampling.max_new_tokens,
            step=step,
            max_steps=self.cfg.max_steps,
            eta_s=eta,
            **rounds,
        )
        try:
            with self._inside("rollout") as point:
                per_task = run_rollouts(
                    self.engine,
                    self.policy.tokenizer,
                    self.env,
                    [tasks[j] for j in picks],
                    self.cfg.num_generations_per_prompt,
                    sampling,
                    stop_token_ids=self.policy.eos_token_ids,
                    seed=self.cfg.seed * 7_919 + step * 131 + g0,
                    on_tokens=on_tokens,
                )
        except Interrupted:
            return False
        scores = iter(self.score_many([r for rollouts in per_task for r in rollouts]))
        local = [[Scored(r, self._train_score(r, next(scores))) for r in rollouts] for rollouts in per_task]
        self.hooks.safe_point(self, "after_group")  # with ranks, a meeting: rank 0's stop reaches every rank
        if self.hooks.should_stop(self):
            return False
        self._mine += [len(groups) + j for j in picks]
        groups.extend(self.collective.undeal(local, len(tasks), "the rollout gather"))
        return True

    @contextlib.contextmanager
    def _inside(self, phase: str, *, interruptible: bool = True) -> Iterator[Callable[[], None]]:
        """Safe points inside a long phase (per model layer; decoding adds one every few tokens): the driver
        may pause there; a stop raises `Interrupted` unless the phase must finish (the update)."""

        def point() -> None:
            self.hooks.inner_safe_point(self, phase)
            if interruptible and self.hooks.should_stop(self):
                raise Interrupted(phase)

        with layer_safe_points(self.policy.model, point):
            yield point

    def _eta_s(self, step: int) -> float | None:
        """Seconds to max_steps at the mean time of the last (up to 5) steps; None before the first."""
        steps = [Step.from_row(s) for s in store.metrics.steps_since(self.db, self.run_id, step - 6)]
        times = [t for t in (s.metric("step_time_s") for s in steps) if t is not None][-5:]
        return (self.cfg.max_steps - step + 1) * sum(times) / len(times) if times else None

    def _train_score(self, rollout: Rollout, score: Score) -> Score:
        """The verifier's score plus, with `overlong_buffer`, DAPO's soft overlong penalty (its own part) on the
        longest assistant turn (each turn is generated up to max_completion_length)."""
        if self.cfg.overlong_buffer <= 0 or score.error is not None:
            return score
        longest = max((len(seg.completion.token_ids) for seg in rollout.segments), default=0)
        penalty = grpo.overlong_penalty(longest, self.cfg.max_completion_length, self.cfg.overlong_buffer)
        return dataclasses.replace(
            score, total=score.total + penalty, parts={**score.parts, "overlong": penalty}
        )

    @staticmethod
    def _informative(grp: list[Scored]) -> bool:
        """A group the update learns from under dynamic sampling (as `_advantages` decides `keep`)."""
        return grpo.has_spread([s.score.total for s in grp if s.score.error is None])

    def _refill(self, step: int, tasks: list[Task], sampling: Sampling, groups: list[list[Scored]]) -> bool:
        """DAPO dynamic sampling: zero-variance groups are dropped from the update, so roll out prompts the step
        has not used until it has its prompt count of informative groups, for at most
        `dynamic_sampling_max_refills` rounds (each round samples only the missing count). Deterministic in
        (seed, step, round), so a resume redoes the same refills. False when a stop was requested."""
        used = {id(t) for t in tasks}
        for rnd in range(1, self.cfg.dynamic_sampling_max_refills + 1):
            rows = [s for grp in groups for s in grp]
            if sum(s.score.error is not None for s in rows) > self.cfg.max_verifier_error_frac * len(rows):
                break  # a broken verifier: more groups would only cost time before the error budget pauses
            missing = len(tasks) - sum(self._informative(grp) for grp in groups)
            pool = [t for t in self.rl_tasks if id(t) not in used]
            if missing <= 0 or not pool:
                break
            rng = random.Random((self.cfg.seed * 1_000_003 + step) * 1_009 + rnd)
            if self.sampler is None:
                more = rng.sample(pool, min(missing, len(pool)))
            else:  # what this step's groups just showed counts too: a family that came back flat is avoided
                weights = self.sampler.weights(self.groups_seen + self._seen(groups), self.eval_skills)
                more = self.sampler.draw(
                    rng, missing, weights, exclude={i for i, t in enumerate(self.rl_tasks) if id(t) in used}
                )
            used.update(id(t) for t in more)
            self._refill_round = rnd
            if not self._roll_out(step, more, sampling, groups):
                return False
        return True

    def _advantages(
        self, groups: list[list[Scored]]
    ) -> tuple[list[list[float | None]], dict[str, float], list[bool]]:
        """Advantages per group over its members the verifier scored (errors get none and no gradient), the
        groups the update keeps (learn.grpo.step_advantages), and the step's reward metrics."""
        rewards = [[s.score.total if s.score.error is None else None for s in grp] for grp in groups]
        # the config has its algorithm's presets applied (config.py): dapo drops flat groups
        advantages, keep = grpo.step_advantages(
            rewards, self.cfg.scale_rewards, self.cfg.leave_one_out, drop_flat=bool(self.cfg.dynamic_sampling)
        )
        all_rewards = [r for grp in rewards for r in grp if r is not None]
        valid_groups = [v for v in ([r for r in grp if r is not None] for grp in rewards) if len(v) >= 2]
        stds = [float(torch.tensor(v).std()) for v in valid_groups]
        metrics = {
            "reward": sum(all_rewards) / len(all_rewards) if all_rewards else float("nan"),
            "reward_std": sum(stds) / len(stds) if stds else 0.0,
            "frac_reward_zero_std": sum(1.0 for s in stds if s < 1e-8) / len(stds) if stds else 1.0,
            "verifier_errors": sum(1 for grp in groups for s in grp if s.score.error is not None),
            "groups_kept": sum(keep),
        }
        parts: dict[str, list[float]] = {}
        for grp in groups:
            for s in grp:
                for name, v in s.score.parts.items():
                    parts.setdefault(name, []).append(v)
        metrics.update({f"parts/{k}": sum(v) / len(v) for k, v in parts.items()})
        return advantages, metrics, keep

    def _completion_metrics(self, groups: list[list[Scored]]) -> dict[str, float]:
        lengths = [s.rollout.completion_tokens for grp in groups for s in grp]
        trunc = [s.rollout.truncated for grp in groups for s in grp]
        return {
            "completions/mean_length": sum(lengths) / len(lengths),
            "completions/max_length": max(lengths),
            "clipped_ratio": sum(trunc) / len(trunc),
        }

    def _store_step(
        self, step: int, groups: list[list[Scored]], advantages: list[list[float | None]]
    ) -> None:
        self.recorder.store_rows(
            [
                self.recorder.row(
                    s, self.verifier_id, step=step, split="train", group_idx=g, sample_idx=i, advantage=a
                )
                for g, (grp, adv) in enumerate(zip(groups, advantages, strict=True))
                for i, (s, a) in enumerate(zip(grp, adv, strict=True))
            ]
        )

    def _lr_at(self, step: int, lr: float) -> float:
        """The learning rate at `step`: `lr` through the warm-up."""
        warm = self.cfg.warmup_steps
        return lr * (min(1.0, step / warm) if warm > 0 else 1.0)

    def _update(
        self,
        groups: list[list[Scored]],
        advantages: list[list[float | None]],
        keep: list[bool],
        micro_batch: int = 16,
        skip_zero_advantage: bool = True,
    ) -> dict[str, float]:
        """num_iterations optimizer steps on the kept groups' episodes (workbench.learn.update), with the step's
        temperature and learning rate (what it sampled and started with, set by train_step)."""
        rows = [
            (s.rollout, a)
            for grp, adv, k in zip(groups, advantages, keep, strict=True)
            if k
            for s, a in zip(grp, adv, strict=True)
        ]
        items, n_seqs = update_items(rows, self.cfg)
        temperature = self.temperature if self._step_temperature is None else self._step_temperature
        lr = self.lr if self._step_lr is None else self._step_lr
        out = policy_update(
            self.policy,
            self.optimizer,
            self.cfg,
            items,
            n_seqs,
            temperature=temperature,
            lr=self._lr_at(self.step + 1, lr),
            is_correction=self.is_correction,
            micro_batch=micro_batch,
            skip_zero_advantage=skip_zero_advantage,
            sync=self.collective,
            on_skip=lambda norm: self.log(
                f"step {self.step + 1}: non-finite gradient norm ({norm}); optimizer step skipped"
            ),
        )
        if out.get("update_skipped") != 1.0:
            self.engine.update_weights(self.policy)
        return out

    # ----- eval and checkpoints ------------------------------------------------------------------------
    def run_eval(
        self, *, is_baseline: bool = False, checkpoint_id: int | None = None, label: str | None = None
    ) -> dict[str, Any]:
        """Held-out eval(s) of the current policy (workbench.run.evaluation: validation greedy, sampled, test,
        recorded whole with the promotion decision; a stop inside raises `Interrupted` and records nothing);
        `label` says what is evaluated (default: base, SFT-only or "GRPO step k"). The validation metrics."""
        label = label or eval_label(
            is_baseline=is_baseline,
            sft_only=self.step == 0 and self.sft_done and self.cfg.sft_steps > 0,
            step=self.step,
        )
        metrics = self.evaluation.run(
            self.engine,
            step=self.step,
            temperature=self.temperature,
            verifier_id=self.verifier_id,
            label=label,
            checkpoint_id=checkpoint_id,
            is_baseline=is_baseline,
        )
        self.eval_skills = skill_success_from_eval(metrics)
        return metrics

    def save_checkpoint(self, kind: str) -> int:
        """Rank 0 writes the files; every rank records it (the others in their scratch store: their evals
        point at it)."""
        path = self.run_dir / f"step-{self.step:05d}-{kind}"
        if self.collective.is_main:
            ckpt.save(
                path,
                policy=self.policy,
                optimizer=self.optimizer,
                scheduler=None,
                state={
                    "step": self.step,
                    "lr": self.lr,
                    "temperature": self.temperature,
                    "sft_done": self.sft_done,
                },
            )
        return self.recorder.record_checkpoint(step=self.step, kind=kind, path=str(path))

    def resume(self) -> int | None:
        """Continue from the run's latest whole checkpoint (workbench.resume): later steps' rows are marked
        superseded, not deleted. Returns the step resumed from, or None when the run has no checkpoint (it
        starts over). With ranks, rank 0 picks the checkpoint and writes what resuming writes; every rank
        loads the same one."""
        last, sft = self.collective.from_main(self.resuming.point, "the resume")
        if last is None:
            return None
        state = self.resuming.load(last, sft, policy=self.policy, optimizer=self.optimizer)
        self.step, self.lr, self.temperature = state["step"], state["lr"], state["temperature"]
        self.sft_done = state["sft_done"]
        self.engine.update_weights(self.policy)
        if self.collective.is_main:
            with self.collective.alone():  # its catch-up eval, if any, runs here while the others wait
                self.groups_seen, self.eval_skills, redo = self.resuming.record(last, self.step)
                if redo:
                    self.run_eval(checkpoint_id=last.id)
        # The prompt sampler's state is read from rank 0's store, and every rank must draw alike.
        self.groups_seen, self.eval_skills = self.collective.broadcast(
            (self.groups_seen, self.eval_skills), "the prompt sampler"
        )
        return self.step

"""TRL's GRPOTrainer streaming into the workbench store, and obeying its commands at step boundaries.

    from workbench.integrations.trl import WorkbenchCallback, workbench_reward
    cb = WorkbenchCallback("workbench.db", name="my-trl-run")
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=ds,
                          reward_funcs=[workbench_reward(cb)], callbacks=[cb])
    with cb.watch():          # marks the run crashed (and frees its lock) if training raises
        trainer.train()
    # meanwhile: workbench tui --db workbench.db --run <cb.run_id>

What it writes: the run (status, lock, heartbeat), the tasks, every completion of each step as a trajectory
(prompt + completion messages, reward, reward parts, verifier version, advantage, tokens, outcome), a step
row per step (TRL's logged metrics, names mapped to the UI's), a checkpoint row for each TRL save.

What it obeys, at TRL's step boundaries only (`on_step_end`): pause / resume (blocks the training loop,
heartbeat alive), stop (`control.should_training_stop`), checkpoint (`control.should_save`), set_lr (the
optimizer's param groups, the scheduler's base scaled so its schedule continues from the new value),
set_verifier (activates the version; the next step's rewards use it). eval, sample and set_temperature are
answered as failed: TRL owns sampling and evaluation. The lock, heartbeat, statuses and the claiming and
answering of commands are `workbench.run`'s (shared with the worker); which commands TRL obeys is a column of
its command table.

Rewards: `workbench_reward(cb)` is a TRL reward function scoring through the run's ACTIVE verifier version
in the store (read at every call, so the UI's editor dry run + apply reaches a TRL run). A row the verifier
fails on (raised, timed out, NaN) returns None; TRL 1.16 turns None into NaN, and a row where every reward
function gave NaN is "unscorable": it leaves the group's nanmean/nanstd baseline and gets advantage 0 (no
gradient). (With other reward functions beside ours, TRL's nansum counts our NaN as 0 instead.) We store
such a row with its error, reward NULL and no advantage, like our own trainer.

Advantages are recomputed here from the step's rewards exactly as TRL 1.16 does for
`multi_objective_aggregation="sum_then_normalize"` (the default): total = weighted nansum of the reward
functions, baseline = group nanmean over `num_generations` consecutive rows, scaled by the group's
(`scale_rewards="group"`) or the whole generation batch's (`"batch"`) Bessel-corrected nanstd + 1e-4, not
scaled for `"none"`. TRL does not hand its advantages to callbacks; this is the same arithmetic on the
same numbers (up to float32 vs float64 rounding). Other reward functions' values can be recorded as parts
with `cb.track(fn)`: wrap them and pass them to GRPOTrainer in the same order as `args.reward_weights`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from transformers import TrainerCallback

import store
from workbench.envs import Harness, SingleTurnEnv
from workbench.run.commands import SetLr, SetVerifier
from workbench.run.loop import CommandLoop
from workbench.run.recorder import Recorder
from workbench.run.session import RunSession
from workbench.types import Task
from workbench.verifier_edit import applicable_version
from workbench.verifiers import get_verifier, load_verifier_code

REWARD_NAME = "workbench"
# TRL's log names -> the names our trainer writes (the UI's curves read these); TRL's own names are kept too.
METRIC_ALIASES = {"completions/clipped_ratio": "clipped_ratio", "step_time": "step_time_s"}


# What TRL's step boundary hands a command handler.
class _At(NamedTuple):
    args: Any
    state: Any
    control: Any
    kw: dict[str, Any]


def _workbench_config(args: Any, model: str, name: str, verifier: str, harness: Harness) -> dict[str, Any]:
    """The run's config as a workbench Config (what `config_from_dict` reads, e.g. the verifier editor's
    dry run); TRL's full GRPOConfig goes into the run's events ("trl_config")."""
    from workbench.config import Config, HarnessConfig

    scale = {True: "group", False: "none"}.get(args.scale_rewards, args.scale_rewards)
    loss = args.loss_type if args.loss_type in ("grpo", "bnpo", "dr_grpo", "dapo") else None
    cfg = Config(
        model=model,
        name=name,
        reward=verifier,
        num_generations_per_prompt=int(args.num_generations or 8),
        learning_rate=float(args.learning_rate),
        beta=float(args.beta),
        epsilon=float(args.epsilon),
        epsilon_high=float(args.epsilon_high or args.epsilon),
        scale_rewards=scale if scale in ("group", "batch", "none") else None,
        loss_type=loss,
        num_iterations=int(args.num_iterations),
        max_completion_length=int(args.max_completion_length),
        temperature=float(args.temperature),
        top_p=float(args.top_p),
        max_steps=max(1, int(args.max_steps)),
        seed=int(args.seed),
        max_grad_norm=float(args.max_grad_norm),
        weight_decay=float(args.weight_decay),
        harness=HarnessConfig(
            system_prompt=harness.system_prompt,
            include_example=harness.include_example,
            prefill=harness.prefill,
        ),
        output_dir=str(args.output_dir),
    )
    return cfg.to_dict()


def _nanmean(xs: list[float]) -> float:
    v = [x for x in xs if not math.isnan(x)]
    return sum(v) / len(v) if v else math.nan


def _nanstd(xs: list[float]) -> float:
    """TRL's nanstd: Bessel-corrected over the non-NaN values; NaN with fewer than 2."""
    v = [x for x in xs if not math.isnan(x)]
    if len(v) < 2:
        return math.nan
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def trl_advantages(
    totals: list[float], num_generations: int, scale_rewards: str | bool
) -> list[float | None]:
    """TRL 1.16's advantages (sum_then_normalize) for one generation batch; None where the reward is NaN
    (TRL gives those 0 and no gradient)."""
    scale = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)  # type: ignore[arg-type]
    g = max(1, num_generations)
    out: list[float | None] = []
    batch_std = _nanstd(totals) if len(totals) > 1 else 0.0
    for start in range(0, len(totals), g):
        grp = totals[start : start + g]
        mean = _nanmean(grp)
        std = batch_std if scale == "batch" else (_nanstd(grp) if g > 1 else 0.0)
        for r in grp:
            if math.isnan(r):
                out.append(None)
                continue
            a = r - mean
            if scale != "none":
                a = a / (std + 1e-4)
            out.append(None if math.isnan(a) else a)
    return out


def _text(completion: Any) -> str:
    """A completion's text: a plain string, or the assistant turn(s) of a chat-format completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        parts = [
            m.get("content") or ""
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        ]
        return "".join(
            p if isinstance(p, str) else "".join(c.get("text", "") for c in p if isinstance(c, dict))
            for p in parts
        )
    return str(completion)


def _jsonish(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def task_columns(task: Task, harness: Harness | None = None, tokenizer: Any = None) -> dict[str, Any]:
    """A dataset row for a task: `prompt` (the harness's chat messages; with a tokenizer, the rendered text
    ending in the harness's prefill, the regime where small models emit the format), `task` (the Task as
    JSON, what the reward wrapper reads back), `expected_tool`, `expected_args` (JSON text)."""
    harness = harness or Harness()
    messages = harness.messages(task)
    prompt: Any = messages
    if tokenizer is not None:
        prompt = (
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            + harness.prefill
        )
    return {
        "prompt": prompt,
        "task": json.dumps(task.to_dict()),
        "expected_tool": task.expected_tool,
        "expected_args": json.dumps(task.expected_args),
    }


def _task_of(i: int, prompt: Any, kw: dict[str, Any]) -> Task:
    if "task" in kw and kw["task"][i] is not None:
        t = _jsonish(kw["task"][i])
        if isinstance(t, dict):
            return Task.from_dict(t)
    if isinstance(prompt, list):  # chat: the last user turn is the request
        users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
        request = str(users[-1]) if users else ""
    else:
        request = str(prompt)
    args = _jsonish(kw["expected_args"][i]) if "expected_args" in kw else {}
    tools = _jsonish(kw["tools"][i]) if "tools" in kw else None
    key = json.dumps(
        [request, kw.get("expected_tool", [None] * (i + 1))[i], args], sort_keys=True, default=str
    )
    return Task(
        id=str(abs(hash(key)) % 10**12),
        prompt=request,
        expected_tool=str((kw.get("expected_tool") or [""] * (i + 1))[i] or ""),
        expected_args=args if isinstance(args, dict) else {},
        tools=tools,
        dataset="trl",
    )


class WorkbenchCallback(TrainerCallback):
    """Opens (or re-attaches to, with `run_id`) a workbench run and streams a TRL GRPO run into it."""

    def __init__(
        self,
        db_path: str = "workbench.db",
        *,
        run_id: int | None = None,
        name: str = "trl",
        model_name: str | None = None,
        verifier: str = "tool_call_gated",
        harness: Harness | None = None,
        log: Callable[[str], None] | None = None,
        verifier_timeout_s: float = 5.0,
    ) -> None:
        self.db_path, self.run_id, self.name, self.model_name = str(db_path), run_id, name, model_name
        self.verifier_name, self.harness = verifier, harness or Harness()
        self.env = SingleTurnEnv(self.harness)
        self.log = log or (lambda m: None)
        self.verifier_timeout_s = verifier_timeout_s
        self.db: Any = None
        self.session: RunSession | None = None  # the run's lock, heartbeat and status writes
        self.loop: CommandLoop | None = (
            None  # the run's commands (which of them TRL obeys: the command table)
        )
        self._verifier: tuple[int, Any] | None = None  # (id, loaded verifier)
        self._task_ids: dict[str, int] = {}
        self._batches: dict[
            int, dict[str, Any]
        ] = {}  # id(prompts list) -> a generation batch's buffered rows
        self._tracked: list[str] = []
        self.step_offset = 0
        self._block_at: str | None = None
        self._step_stats: dict[str, Any] = {}
        self._status: str | None = None  # kept after the session ends

    @property
    def status(self) -> str | None:
        """The last status this callback wrote."""
        return self.session.status if self.session is not None else self._status

    @property
    def paused(self) -> bool:
        return self.loop is not None and self.loop.paused

    @property
    def stop_requested(self) -> bool:
        return self.loop is not None and self.loop.stop_requested

    # ----- the run --------------------------------------------------------------------------------------
    def _open(self, args: Any, model: Any) -> None:
        self.db = store.open_db(self.db_path)
        model_name = self.model_name or str(
            getattr(getattr(model, "config", None), "_name_or_path", "") or "trl-model"
        )
        if self.run_id is None:
            self.run_id = store.runs.create_run(
                self.db,
                name=self.name,
                model=model_name,
                config=_workbench_config(args, model_name, self.name, self.verifier_name, self.harness),
                harness=self.harness.to_dict(),
            )
        self.session = RunSession(
            self.db, self.db_path, self.run_id
        ).start()  # fails a dead worker's claims too
        self.recorder = Recorder(self.db, self.run_id, self._task_ids)
        self.loop = CommandLoop(
            self.db,
            self.run_id,
            "trl",
            {
                "pause": self._pause,
                "resume": self._resume,
                "stop": self._stop,
                "checkpoint": self._checkpoint,
                "set_verifier": self._set_verifier,
                "set_lr": self._set_lr,
            },
            lock_lost=self.session.lock_lost,
            set_status=self.session.set_status,
            on_lock_lost="this TRL run stops",
        )
        store.runs.add_event(
            self.db,
            self.run_id,
            "trl_config",
            "TRL GRPOConfig",
            {"model": model_name, "trl": json.loads(json.dumps(args.to_dict(), default=str))},
        )
        if store.verifiers.active_verifier(self.db, self.run_id) is None:
            v = get_verifier(self.verifier_name)
            store.verifiers.add_verifier_version(
                self.db, self.run_id, v.name, v.code, note="from the TRL callback", active=True
            )
            if hasattr(v, "close"):
                v.close()

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        if self.db is None:
            self._open(args, model)
        last = store.metrics.last_step(self.db, self.run_id)
        # Re-attached without TRL's own resume: continue the run's step numbers instead of writing step 1 again.
        self.step_offset = last if (last is not None and state.global_step == 0) else 0
        self.session.set_status(
            "running",
            f"TRL GRPOTrainer, {args.max_steps} steps"
            + (f" (from step {self.step_offset + 1})" if self.step_offset else ""),
        )
        self.log(
            f"workbench run {self.run_id}: watch it with `workbench tui --db {self.db_path} --run {self.run_id}`"
        )

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.db is None:
            return
        self._flush(args, state)
        status = "stopped" if self.stop_requested else "finished"
        self._close(status, f"at step {self.step_offset + state.global_step}")

    def _close(self, status: str, reason: str) -> None:
        with contextlib.suppress(sqlite3.Error, store.StoreError):
            self.session.set_status(status, reason)
        self._release()

    def _release(self) -> None:
        self.session.release()
        self._status, self.session = self.session.status, None
        self.db.close()
        self.db = None
        if self._verifier is not None and hasattr(self._verifier[1], "close"):
            self._verifier[1].close()
        self._verifier = None

    @contextlib.contextmanager
    def watch(self) -> Iterator[WorkbenchCallback]:
        """`with cb.watch(): trainer.train()`: a crash marks the run crashed with the traceback and frees the
        lock (TRL calls no callback when training raises)."""
        try:
            yield self
        except BaseException as exc:
            if self.db is not None:
                self.session.crashed(exc)  # the one crash classification (workbench.run.session)
                self._release()
            raise

    # ----- rewards --------------------------------------------------------------------------------------
    def _active_verifier(self) -> tuple[int, Any]:
        row = store.verifiers.active_verifier(self.db, self.run_id)
        if row is None:
            raise store.StoreError(f"run {self.run_id} has no active verifier")
        if self._verifier is None or self._verifier[0] != row["id"]:
            if self._verifier is not None and hasattr(self._verifier[1], "close"):
                self._verifier[1].close()
            self._verifier = (row["id"], load_verifier_code(row["code"], row["name"]))
        return self._verifier

    def _batch(self, prompts: list[Any], kw: dict[str, Any]) -> dict[str, Any]:
        state = kw.get("trainer_state")
        step = self.step_offset + (state.global_step if state is not None else 0) + 1
        return self._batches.setdefault(
            id(prompts), {"step": step, "n": len(prompts), "values": {}, "rows": None, "prompts": prompts}
        )

    def score(self, prompts: list[Any], completions: list[Any], **kw: Any) -> list[float | None]:
        """The reward function body (see `workbench_reward`)."""
        if self.db is None:
            raise RuntimeError("WorkbenchCallback is not attached: pass it in GRPOTrainer(callbacks=[...])")
        vid, verifier = self._active_verifier()
        pairs, rows = [], []
        ids = kw.get("completion_ids")
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            task = _task_of(i, prompt, kw)
            episode = self.env.start(task)
            text = _text(completion)
            prefill = self.harness.prefill
            # A text prompt ending in the prefill: TRL's completion is what follows it (the episode prepends it).
            if not (isinstance(prompt, str) and prefill and prompt.endswith(prefill)):
                episode.prefill = ""
            episode.step(text)
            out = episode.output()
            if isinstance(
                prompt, list
            ):  # chat format: TRL's prompt messages + the completion as the assistant turn
                out.messages = [dict(m) for m in prompt] + [{"role": "assistant", "content": out.text}]
            pairs.append((out, task))
            rows.append({"task": task, "output": out, "tokens": len(ids[i]) if ids is not None else None})
        scores = verifier.score_many(pairs, timeout_s=self.verifier_timeout_s)
        for row, s in zip(rows, scores, strict=True):
            row["score"], row["verifier_id"] = s, vid
        batch = self._batch(prompts, kw)
        batch["rows"] = rows
        rewards = [None if s.error else s.total for s in scores]
        batch["values"][REWARD_NAME] = [math.nan if r is None else r for r in rewards]
        return rewards

    def track(
        self, fn: Callable[..., list[float | None]], name: str | None = None
    ) -> Callable[..., list[float | None]]:
        """Wrap another TRL reward function so its values land in the rows' reward parts (under its name)."""
        label = name or getattr(fn, "__name__", f"reward_{len(self._tracked)}")
        self._tracked.append(label)

        @functools.wraps(fn)
        def wrapped(prompts: list[Any], completions: list[Any], **kw: Any) -> list[float | None]:
            values = fn(prompts=prompts, completions=completions, **kw)
            if self.db is not None:
                self._batch(prompts, kw)["values"][label] = [
                    math.nan if v is None else float(v) for v in values
                ]
            return values

        return wrapped

    # ----- writing a step -------------------------------------------------------------------------------
    def _flush(self, args: Any, state: Any) -> None:
        batches, self._batches = list(self._batches.values()), {}
        order = [REWARD_NAME, *self._tracked]
        weights = list(args.reward_weights or [])
        for b in batches:
            if b["rows"] is None:
                continue
            names = [n for n in order if n in b["values"]]
            w = weights if len(weights) == len(names) else [1.0] * len(names)
            totals = []
            for i in range(b["n"]):
                vals = [b["values"][n][i] for n in names]
                totals.append(
                    math.nan
                    if all(math.isnan(v) for v in vals)
                    else sum(wi * v for wi, v in zip(w, vals, strict=True) if not math.isnan(v))
                )
            adv = trl_advantages(totals, int(args.num_generations or 1), args.scale_rewards)
            g = max(1, int(args.num_generations or 1))
            out_rows = []
            for i, row in enumerate(b["rows"]):
                s, out, task = row["score"], row["output"], row["task"]
                parts = dict(s.parts)
                parts.update(
                    {
                        n: b["values"][n][i]
                        for n in names
                        if n != REWARD_NAME and not math.isnan(b["values"][n][i])
                    }
                )
                tokens = row["tokens"]
                # The same row as the trainer's (workbench.run.recorder), with TRL's weighted total as reward.
                out_rows.append(
                    self.recorder.episode_row(
                        out,
                        task,
                        s,
                        row["verifier_id"],
                        step=b["step"],
                        split="train",
                        group_idx=i // g,
                        sample_idx=i % g,
                        reward=None if math.isnan(totals[i]) else totals[i],
                        reward_parts=parts,
                        advantage=adv[i],
                        tokens=tokens,
                        truncated=int(tokens is not None and tokens >= args.max_completion_length),
                    )
                )
            self.recorder.store_rows(out_rows)
            errors = sum(1 for r in out_rows if r["error"])
            self._step_stats = {
                "verifier_id": out_rows[-1]["verifier_id"] if out_rows else None,
                "verifier_errors": errors,
                "verifier_error_frac": errors / len(out_rows) if out_rows else 0.0,
                "success_rate_train": sum(r["outcome"]["success"] for r in out_rows) / max(1, len(out_rows)),
            }
            part_vals: dict[str, list[float]] = {}
            for r in out_rows:
                for k, v in (r["reward_parts"] or {}).items():
                    part_vals.setdefault(k, []).append(v)
            self._step_stats.update({f"parts/{k}": sum(v) / len(v) for k, v in part_vals.items()})
            valid = [t for t in totals if not math.isnan(t)]
            self._step_stats["_reward"] = sum(valid) / len(valid) if valid else math.nan

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.db is None:
            return
        self.loop.check_lock()
        self._flush(args, state)
        step = self.step_offset + state.global_step
        if not control.should_log:  # a step TRL does not log still gets its row (the UI's curves)
            stats = {k: v for k, v in self._step_stats.items() if not k.startswith("_")}
            store.metrics.append_step(
                self.db, self.run_id, step, {"reward": self._step_stats.get("_reward", math.nan), **stats}
            )
        self.loop.drain(_At(args, state, control, kw), "step_end")
        # Pause after this step's metrics row and checkpoint are written (they come after on_step_end in TRL).
        self._block_at = "save" if control.should_save else ("log" if control.should_log else None)
        if self.paused and self._block_at is None:
            self._hold(_At(args, state, control, kw))

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if self.db is None or not logs:
            return
        if "train_runtime" in logs:  # the end-of-training summary, not a step
            store.runs.add_event(
                self.db,
                self.run_id,
                "trl_summary",
                "TRL training summary",
                {k: v for k, v in logs.items() if isinstance(v, (int, float))},
            )
            return
        metrics = {k: v for k, v in logs.items() if isinstance(v, (int, float)) or v is None}
        for trl_name, ours in METRIC_ALIASES.items():
            if trl_name in metrics:
                metrics[ours] = metrics[trl_name]
        metrics.update({k: v for k, v in self._step_stats.items() if not k.startswith("_")})
        metrics = {k: (math.nan if v is None else v) for k, v in metrics.items()}
        store.metrics.append_step(self.db, self.run_id, self.step_offset + state.global_step, metrics)
        if self.paused and self._block_at == "log":
            self._hold(_At(args, state, control, kw))

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.db is None:
            return
        import os

        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        path = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        store.metrics.record_checkpoint(
            self.db,
            self.run_id,
            step=self.step_offset + state.global_step,
            kind="trl",
            path=path,
            metrics={"trl_global_step": state.global_step},
        )
        if self.paused and self._block_at == "save":
            self._hold(_At(args, state, control, kw))

    # ----- commands (which TRL obeys, and how they are claimed and answered: workbench.run) ---------------
    def _step(self, at: _At) -> int:
        return self.step_offset + at.state.global_step

    def _hold(self, at: _At) -> None:
        self.loop.hold(at, "step_end", f"paused after step {self._step(at)} (TRL)")

    def _pause(self, at: _At, payload: None, where: str) -> dict[str, Any]:
        self.loop.paused = True
        return {"message": f"paused after step {self._step(at)}", "step": self._step(at)}

    def _resume(self, at: _At, payload: None, where: str) -> dict[str, Any]:
        was, self.loop.paused = self.loop.paused, False
        return {"message": "resumed" if was else "was not paused", "resumed": was}

    def _stop(self, at: _At, payload: None, where: str) -> dict[str, Any]:
        self.loop.request_stop()
        at.control.should_training_stop = True
        return {"message": f"TRL stops after step {self._step(at)}", "step": self._step(at)}

    def _checkpoint(self, at: _At, payload: None, where: str) -> dict[str, Any]:
        at.control.should_save = True
        return {"message": f"TRL saves a checkpoint at step {self._step(at)}", "step": self._step(at)}

    def _set_lr(self, at: _At, payload: SetLr, where: str) -> dict[str, Any]:
        lr = payload.lr
        opt, sched = at.kw.get("optimizer"), at.kw.get("lr_scheduler")
        if opt is None:
            raise ValueError("TRL passed no optimizer to the callback")
        for i, group in enumerate(opt.param_groups):
            base = sched.base_lrs[i] if sched is not None and hasattr(sched, "base_lrs") else None
            factor = group["lr"] / base if base else 1.0
            group["lr"] = lr
            if base is not None:  # the schedule continues from the new value (else its next step resets it)
                sched.base_lrs[i] = lr / factor if factor > 0 else lr
        if sched is not None and hasattr(sched, "_last_lr"):  # what TRL logs as the next step's learning_rate
            sched._last_lr = [g["lr"] for g in opt.param_groups]
        return {"message": f"learning rate {lr:g} from step {self._step(at) + 1}", "lr": lr, "applied": True}

    def _set_verifier(self, at: _At, payload: SetVerifier, where: str) -> dict[str, Any]:
        step = self._step(at)
        row = applicable_version(self.db, self.run_id, payload.verifier_id)
        vid = int(row["id"])
        try:  # it dry-ran in the UI, but loading can still fail here: then the previous version stays
            v = load_verifier_code(row["code"], row["name"])
        except Exception as exc:
            raise ValueError(
                f"verifier {vid} could not be loaded ({type(exc).__name__}: {exc}); "
                "the previous one stays active"
            ) from exc
        if self._verifier is not None and hasattr(self._verifier[1], "close"):
            self._verifier[1].close()
        self._verifier = (vid, v)
        store.verifiers.activate_verifier(self.db, vid)
        store.runs.add_event(self.db, self.run_id, "verifier", f"verifier {vid} active from step {step + 1}")
        return {"message": f"verifier {vid} scores from step {step + 1}", "verifier_id": vid, "applied": True}


def workbench_reward(
    callback: WorkbenchCallback, name: str = REWARD_NAME
) -> Callable[..., list[float | None]]:
    """A TRL reward function, `fn(prompts, completions, **dataset_columns) -> list[float | None]`, scoring with
    the run's active verifier version. Dataset columns it reads: `task` (a Task as JSON, see `task_columns`),
    else `expected_tool`, `expected_args` (dict or JSON), `tools`, with the request taken from the prompt."""

    def reward(prompts: list[Any], completions: list[Any], **kw: Any) -> list[float | None]:
        return callback.score(prompts, completions, **kw)

    reward.__name__ = name
    return reward

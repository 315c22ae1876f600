"""A checkpoint's held-out eval, one job: validation greedy, then sampled (`eval_samples`), then test
(reported beside validation, never read by promotion). Every part is computed and scored first, then the
`Recorder` writes them all with the promotion decision in one transaction; a stop inside (`Interrupted`,
raised by the safe points the caller lends) records nothing of the eval, and a resume redoes it (`missing`,
`needs_baseline`).

With data-parallel ranks each rank evaluates a contiguous share of the tasks (`collective.share`), the shares
are gathered in rank order and the primary writer records the whole. Torch-free: the model is reached through
the engine and the safe points the trainer passes in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import sqlite_utils

import store
from workbench.eval import EvalResult, evaluate, summarize
from workbench.run.recorder import EvalPart, Recorder, Scored, expected_parts, missing_parts
from workbench.run.records import Eval
from workbench.types import Score, Task

if TYPE_CHECKING:
    from workbench.rollout.runner import Rollout

# phase -> a context whose value is the safe point to call every few tokens (the trainer's `_inside`)
Inside = Callable[[str], AbstractContextManager[Callable[[], None]]]


def live_evals(db: sqlite_utils.Database, run_id: int, mode: str | None = None) -> list[Eval]:
    """The run's live evals (of `mode`, when given), oldest first."""
    return [Eval.from_row(e) for e in store.metrics.list_evals(db, run_id, mode=mode)]


class CheckpointEval:
    """The held-out evals of one run's policy. `policy` gives the tokenizer and stop tokens, `report` is
    the run's progress report (`Progress.report`), `score` the active verifier's score of one episode,
    `inside` the safe points of the eval phase. What changes between evals (the engine, step, temperature, verifier) is
    passed to each call."""

    def __init__(
        self,
        cfg: Any,
        env: Any,
        policy: Any,
        validation: list[Task],
        test: list[Task],
        *,
        collective: Any,
        recorder: Recorder,
        report: Callable[..., None],
        inside: Inside,
        score: Callable[[Rollout], Score],
        log: Callable[[str], None] = lambda msg: None,
    ) -> None:
        self.cfg, self.env, self.policy = cfg, env, policy
        self.validation, self.test = validation, test
        self.collective, self.recorder = collective, recorder
        self.report, self.inside, self.score, self.log = report, inside, score, log

    @property
    def expected_parts(self) -> list[str]:
        return expected_parts(sampled=self.cfg.eval_samples > 0, test=bool(self.test))

    def missing(self, evals: Sequence[Eval]) -> list[str]:
        """The parts these live evals (of one checkpoint, or the baseline) lack (`missing_parts`)."""
        return missing_parts(self.recorder.db, evals, self.expected_parts)

    def needs_baseline(self) -> bool:
        """No whole baseline eval: redo it (a part-written one, from before evals were atomic, is
        superseded)."""
        base = [e for e in live_evals(self.recorder.db, self.recorder.run_id) if e.is_baseline]
        if base and self.missing(base):
            self.recorder.supersede_evals(base, "the baseline eval was not wholly recorded; redone")
            return True
        return not base

    def run(
        self,
        engine: Any,
        *,
        step: int,
        temperature: float,
        verifier_id: int | None,
        label: str,
        checkpoint_id: int | None = None,
        is_baseline: bool = False,
    ) -> dict[str, Any]:
        """Every part of the eval, computed, scored and then recorded; the validation greedy metrics."""
        at = {"step": step, "temperature": temperature}
        held_out = {"source": self.cfg.held_out_eval, "n": len(self.validation)}
        validation = self.part(
            self.evaluate(engine, samples=0, label=label, **at), "held_out", held_out, samples=0
        )
        parts = [validation]
        if self.cfg.eval_samples > 0:
            n = self.cfg.eval_samples
            parts.append(
                self.part(
                    self.evaluate(engine, samples=n, label=label, **at), "held_out", held_out, samples=n
                )
            )
        if self.test:
            parts.append(
                self.part(
                    self.evaluate(engine, samples=0, label=f"{label} (test)", tasks=self.test, **at),
                    "test",
                    {"source": self.cfg.test_tasks, "split": "test", "n": len(self.test)},
                    samples=0,
                )
            )
        self.recorder.record_evals(
            parts, step=step, verifier_id=verifier_id, checkpoint_id=checkpoint_id, is_baseline=is_baseline
        )
        metrics = validation.metrics
        if self.test:
            self.log(f"test at step {step}: {label}: success {parts[-1].metrics.get('success_rate', 0):.3f}")
        self.log(
            f"eval at step {step}: {label}: success {metrics.get('success_rate', 0):.3f} "
            f"valid JSON {metrics.get('valid_json_rate', 0):.3f}"
        )
        return metrics

    def part(self, result: EvalResult, split: str, tasks: dict[str, Any], *, samples: int) -> EvalPart:
        """An eval's result with each row scored by the active verifier (the primary writer only: the other
        ranks keep the metrics alone)."""
        episodes = [Scored(r, self.score(r)) for r in result.rollouts] if self.recorder.primary else []
        return EvalPart(
            mode="sampled" if samples else "greedy",
            split=split,
            tasks=tasks,
            metrics=dict(result.metrics),
            episodes=episodes,
            per_task=max(1, samples),
        )

    def evaluate(
        self,
        engine: Any,
        *,
        samples: int,
        step: int,
        temperature: float,
        label: str = "",
        tasks: list[Task] | None = None,
    ) -> EvalResult:
        """`tasks` (validation by default), greedy or `samples` per task. With ranks each evaluates a
        contiguous share and every rank gets the whole result (rank 0 records it; the others' evals go on
        in step, writing only to their scratch store)."""
        label += " sampled" if samples else ""
        tasks = self.validation if tasks is None else tasks
        first, stop = self.collective.share(len(tasks))
        local = self._evaluate_share(engine, tasks, first, stop, samples, label, step, temperature)
        parts = self.collective.gather((local.rollouts, local.flags), "the eval gather")
        if len(parts) == 1:
            return local
        rollouts = [r for part in parts for r in part[0]]  # rank order is task order (contiguous shares)
        flags = [f for part in parts for f in part[1]]
        return EvalResult(summarize(rollouts, flags), rollouts, flags)

    def _evaluate_share(
        self,
        engine: Any,
        tasks: list[Task],
        first: int,
        stop: int,
        samples: int,
        label: str,
        step: int,
        temperature: float,
    ) -> EvalResult:
        """tasks[first:stop] of the eval's list: the seed of each batch of tasks derives from where it starts
        in the whole list. Progress is reported for the whole list (with ranks, this share's stands for the
        others', which run alike)."""
        share = tasks[first:stop]
        done_tasks = [0]

        def report(done: int, total: int, **tokens: int) -> None:
            done_tasks[0] = done
            whole = done * len(tasks) // total if total else len(tasks)
            self.report("eval", whole, len(tasks), label=label, step=step, **tokens)

        with self.inside("eval") as point:

            def on_tokens(k: int) -> None:  # tasks count when their batch ends; the tokens say how far it is
                report(done_tasks[0], len(share), tokens=k, max_tokens=self.cfg.max_completion_length)
                point()

            return evaluate(
                engine,
                self.policy.tokenizer,
                self.env,
                share,
                max_new_tokens=self.cfg.max_completion_length,
                samples=samples,
                temperature=temperature,
                top_p=self.cfg.top_p,
                stop_token_ids=self.policy.eos_token_ids,
                seed=self.cfg.seed + 17 + first,
                on_tokens=on_tokens,
                on_progress=report,
            )

"""Issue 19: time per TRL GRPO step with and without WorkbenchCallback (same seed and config, alternating runs).

    python bench/trl_overhead.py tiny 8 4     # model (tiny | smollm2-135m | HF folder), steps per run, repetitions

The baseline scores with the same verifier in process and writes no store. A step is timed from one
on_step_begin to the next, so it includes the callback's on_step_end, on_log and store writes; the first
step of each run is dropped (warm-up).
"""

from __future__ import annotations

import sys
import tempfile
import time

from datasets import Dataset
from transformers import AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from workbench.envs import Harness, SingleTurnEnv
from workbench.integrations.trl import WorkbenchCallback, _task_of, task_columns, workbench_reward
from workbench.models import resolve_model
from workbench.tasks import load_task_source
from workbench.testing import tiny_model_dir
from workbench.verifiers import get_verifier


class Timer(TrainerCallback):
    def __init__(self) -> None:
        self.t: float | None = None
        self.times: list[float] = []

    def on_step_begin(self, *a, **k):
        now = time.perf_counter()
        if self.t is not None:
            self.times.append(now - self.t)
        self.t = now


def main() -> None:
    model_arg, steps, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    work = tempfile.mkdtemp()
    model_dir = str(tiny_model_dir(work) if model_arg == "tiny" else resolve_model(model_arg))
    tok = AutoTokenizer.from_pretrained(model_dir)
    h = Harness()
    ds = Dataset.from_list(
        [task_columns(t, h, tok) for t in load_task_source("builtin:calendar", "train")[:8]]
    )
    ver, env = get_verifier("tool_call_gated"), SingleTurnEnv(h)

    def plain_reward(prompts, completions, **kw):  # the same verifier, no store: the baseline
        pairs = []
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            t = _task_of(i, p, kw)
            e = env.start(t)
            e.step(c)
            pairs.append((e.output(), t))
        return [None if s.error else s.total for s in ver.score_many(pairs)]

    plain_reward.__name__ = "workbench"
    res: dict[str, list[float]] = {"with": [], "without": []}
    for rep in range(reps):
        for mode in ("with", "without") if rep % 2 == 0 else ("without", "with"):
            timer = Timer()
            cfg = GRPOConfig(
                output_dir=f"{work}/out",
                use_cpu=True,
                num_generations=4,
                per_device_train_batch_size=4,
                max_completion_length=16,
                max_steps=steps,
                report_to=[],
                logging_steps=1,
                save_strategy="no",
                seed=0,
                disable_tqdm=True,
            )
            if mode == "with":
                cb = WorkbenchCallback(f"{work}/wb.db", model_name=model_arg, harness=h)
                rf, cbs = workbench_reward(cb), [cb, timer]
            else:
                rf, cbs = plain_reward, [timer]
            GRPOTrainer(
                model=model_dir,
                args=cfg,
                train_dataset=ds,
                processing_class=tok,
                reward_funcs=[rf],
                callbacks=cbs,
            ).train()
            res[mode] += timer.times[1:]
    for k, v in res.items():
        v = sorted(v)
        print(f"{k}: {len(v)} steps, mean {sum(v) / len(v):.4f} s, median {v[len(v) // 2]:.4f} s")


if __name__ == "__main__":
    main()

"""SFT warm-up steps and a greedy eval, one process vs data-parallel ranks (gloo), on tiny random models.

    .venv/bin/python bench/sft_ranks.py [--steps 4] [--batch 8] [--eval-tasks 16] [--json out.json]

The calendar harness (the JSON tool format, its system prompt and prefill), the run's SFT examples and its
held-out tasks, LoRA r 8. Each layout runs in fresh processes: 1 process with 1 and with 2 threads, and 2
ranks of 1 thread each (`workbench.learn.sft.run_sft(sync=...)`, and the eval split into contiguous shares as
`workbench.run.evaluation.CheckpointEval.evaluate` does with ranks). Times are rank 0's wall time after a
barrier, per SFT step (the first, warm-up step not counted) and for the whole eval (its results gathered on
every rank).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = {
    "tiny (hidden 32, the test fixture)": {},
    "small (hidden 256)": {"hidden_size": 256, "num_heads": 4},
}
LAYOUTS = [("1 process", 1, 1), ("1 process", 1, 2), ("2 ranks", 2, 1)]  # name, ranks, threads per rank


def _rank(rank: int, world: int, port: int, threads: int, model_dir: str, args: Any, out: str) -> None:
    import torch
    import torch.distributed as dist

    from workbench.config import Config
    from workbench.distributed.collective import RankCollective, Ranks, shard
    from workbench.envs import env_for_config
    from workbench.eval import evaluate
    from workbench.learn.sft import run_sft
    from workbench.learn.sft_native import env_sft_examples
    from workbench.models import load_policy
    from workbench.rollout.hf_generate import local_engine
    from workbench.tasks import load_task_source

    torch.set_num_threads(threads)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    barrier = dist.barrier if world > 1 else (lambda: None)
    cfg = Config()
    env = env_for_config(cfg)
    policy = load_policy(model_dir, adapter="lora", lora_r=8, lora_alpha=16, seed=0)
    sync = RankCollective(Ranks(rank, world, rank), torch.device("cpu")) if world > 1 else None
    examples = env_sft_examples(env, load_task_source(cfg.tasks, "train"))
    stamps: list[float] = []

    def on_step(i: int, loss: float) -> None:
        stamps.append(time.perf_counter())

    barrier()
    t0 = time.perf_counter()
    run_sft(
        policy,
        examples,
        args.steps + 1,
        batch_size=args.batch,
        seed=0,
        prefill=env.harness.prefill,
        on_step=on_step,
        sync=sync,
    )
    steps = [b - a for a, b in zip([t0, *stamps], stamps, strict=False)][1:]

    tasks = load_task_source(cfg.held_out_eval, "held_out")[: args.eval_tasks]
    first, stop = shard(len(tasks), Ranks(rank, world, rank))
    engine = local_engine(policy, "hf")
    barrier()
    t1 = time.perf_counter()
    res = evaluate(
        engine,
        policy.tokenizer,
        env,
        tasks[first:stop],
        max_new_tokens=args.new_tokens,
        stop_token_ids=policy.eos_token_ids,
        seed=17 + first,
    )
    if world > 1:
        parts: list[Any] = [None] * world
        dist.all_gather_object(parts, len(res.rollouts))
        n = sum(parts)
    else:
        n = len(res.rollouts)
    eval_s = time.perf_counter() - t1
    if rank == 0:
        Path(out).write_text(
            json.dumps(
                {"sft_step_s": steps, "eval_s": eval_s, "eval_tasks": n, "eval_tasks_rank0": stop - first}
            )
        )
    if world > 1:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--eval-tasks", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from workbench.distributed.launch import _free_port
    from workbench.testing import tiny_model_dir

    ctx = mp.get_context("spawn")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, shape in MODELS.items():
            model_dir = str(tiny_model_dir(tmp, **shape))
            for name, world, threads in LAYOUTS:
                out = Path(tmp) / "out.json"
                port = _free_port()
                procs = [
                    ctx.Process(target=_rank, args=(r, world, port, threads, model_dir, args, str(out)))
                    for r in range(world)
                ]
                for p in procs:
                    p.start()
                for p in procs:
                    p.join()
                    if p.exitcode != 0:
                        raise SystemExit(f"{model} {name}: a rank exited with {p.exitcode}")
                r = {
                    "model": model,
                    "layout": name,
                    "ranks": world,
                    "threads": threads,
                    **json.loads(out.read_text()),
                }
                results.append(r)
                steps = ", ".join(f"{s:.3f}" for s in r["sft_step_s"])
                print(
                    f"{model:36s} {name:10s} x{threads} thread(s): SFT s/step {steps}; eval {r['eval_s']:.2f} s "
                    f"({r['eval_tasks']} tasks, rank 0 did {r['eval_tasks_rank0']})",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

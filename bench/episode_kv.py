"""Multi-step episodes with and without each episode's keys/values kept between its turns (episode_kv).

    .venv/bin/python bench/episode_kv.py [--model smollm2-135m] [--tasks 16] [--g 4] [--reps 2]

The agent recipe's environment (workbench/data/agent.yaml: multi_turn, max_turns 6, the JSON harness) on the
first `--tasks` validation tasks of builtin:calendar_agent, untrained policy, the shared-prefix reuse on in
both arms. Two workloads: the greedy eval (one episode a task) and a GRPO rollout (`--g` episodes a task,
temperature 0.8, seeded). Arms: "kept" (the engine keeps each row's keys/values for its next turn) and "not
kept" (each turn prefills its conversation past the shared prefix again), `--reps` rounds with the order
reversed every other round.

Printed per arm: the fastest wall and CPU seconds (`time.process_time`: both cores' work), every wall time, the
tokens forwarded outside decoding (a hook's count: the prefill work, unmoved by the box's load), turns per
episode, and whether the two arms sampled the same tokens.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from prefix_reuse import Forwarded  # noqa: E402  (bench/ is the script's own folder on sys.path)

from workbench.config import config_from_dict, load_config  # noqa: E402
from workbench.envs import env_for_config  # noqa: E402
from workbench.models import load_policy  # noqa: E402
from workbench.rollout.hf import HFEngine  # noqa: E402
from workbench.rollout.prefix_kv import PREFIX_REUSE_ENV  # noqa: E402
from workbench.rollout.runner import Sampling, run_rollouts  # noqa: E402
from workbench.tasks import load_task_source  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--g", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    os.environ[PREFIX_REUSE_ENV] = "on"
    print(f"load average before: {os.getloadavg()}; torch threads {torch.get_num_threads()}", flush=True)
    cfg = load_config(ROOT / "workbench" / "data" / "agent.yaml").to_dict()
    cfg["model"] = args.model
    cfg = config_from_dict(cfg)
    policy = load_policy(args.model, seed=0)
    forwarded = Forwarded(policy.model)
    env = env_for_config(cfg, policy.tokenizer)
    tasks = load_task_source("builtin:calendar_agent", "held_out")[: args.tasks]
    engine = HFEngine(policy)
    stops = policy.eos_token_ids
    length = cfg.max_completion_length
    workloads = {
        "eval": lambda: run_rollouts(
            engine, policy.tokenizer, env, tasks, 1, Sampling(length, 0.0), stop_token_ids=stops, seed=0
        ),
        "rollout": lambda: run_rollouts(
            engine, policy.tokenizer, env, tasks, args.g, Sampling(length, 0.8), stop_token_ids=stops, seed=0
        ),
    }
    for name, work in workloads.items():
        runs: dict[str, list[tuple[float, float, int]]] = {"kept": [], "not kept": []}
        outputs: dict[str, list[list[list[int]]]] = {"kept": [], "not kept": []}
        turns: Counter[int] = Counter()
        arms = list(runs)
        for rep in range(args.reps):
            for arm in arms if rep % 2 == 0 else arms[::-1]:
                engine.keeps_kv = arm == "kept"
                engine.update_weights(policy)  # each run starts cold: nothing kept from the other arm
                before = forwarded.tokens
                wall, cpu = time.perf_counter(), time.process_time()
                groups = work()
                runs[arm].append(
                    (time.perf_counter() - wall, time.process_time() - cpu, forwarded.tokens - before)
                )
                outputs[arm].append([s.completion.token_ids for g in groups for r in g for s in r.segments])
                if arm == "kept" and rep == 0:
                    turns.update(len(r.segments) for g in groups for r in g)
        best = {arm: (min(r[0] for r in rs), min(r[1] for r in rs)) for arm, rs in runs.items()}
        print(f"{name}: {len(tasks)} tasks, turns per episode {dict(sorted(turns.items()))}")
        for arm, rs in runs.items():
            walls = ", ".join(f"{r[0]:.1f}" for r in rs)
            print(
                f"{name:8s} {arm:9s} wall {best[arm][0]:7.1f} s ({walls})  CPU {best[arm][1]:7.1f} s  "
                f"prefill tokens {sorted({r[2] for r in rs})}"
            )
        k, nk = best["kept"], best["not kept"]
        prefill = min(r[2] for r in runs["kept"]) / max(1, min(r[2] for r in runs["not kept"]))
        print(
            f"{name:8s} kept / not kept: wall {k[0] / nk[0]:.2f}, CPU {k[1] / nk[1]:.2f}, prefill {prefill:.2f}"
        )
        a, b = outputs["kept"][0], outputs["not kept"][0]
        same = sum(x == y for x, y in zip(a, b, strict=False))
        print(f"{name:8s} turns sampled alike in both arms: {same} of {max(len(a), len(b))}", flush=True)
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()

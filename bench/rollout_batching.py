"""Rollout tokens/s of one GRPO step: a group (G rows) at a time, as the trainer did, vs all of the step's
groups decoded together, as it does now, side by side in one run on the same model and prompts.

    .venv/bin/python bench/rollout_batching.py [--rounds 3] [--prompts 4] [--json out.json]

The demo recipe (SmolLM2-135M, LoRA r=16, fp32, the calendar harness, G = 8, max 48 new tokens at
temperature 0.8), the step's prompts drawn as the trainer draws them. Each round runs both ways, the order
alternating between rounds (the machine is shared: interleaving spreads its load over both); the variant
"together" runs with the trainer's safe points on (a callback every 4 tokens, hooks on every layer), so
their cost is in the number. tokens/s = completion tokens / wall time of `run_rollouts` (prefill included).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from workbench.config import load_config  # noqa: E402
from workbench.envs import env_for_config  # noqa: E402
from workbench.models import load_policy  # noqa: E402
from workbench.rollout.hf import HFEngine  # noqa: E402
from workbench.rollout.runner import Sampling, run_rollouts  # noqa: E402
from workbench.safe_points import layer_safe_points  # noqa: E402
from workbench.tasks import load_task_source  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "workbench" / "data" / "demo.yaml"


def tokens(groups: list[list[Any]]) -> int:
    return sum(r.completion_tokens for g in groups for r in g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=None, help="prompts a step (default: the demo's)")
    ap.add_argument("--json")
    args = ap.parse_args()
    cfg = load_config(DEMO)
    k = args.prompts or cfg.prompts_per_step
    policy = load_policy(
        cfg.model,
        adapter=cfg.adapter,
        lora_r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        target_modules=cfg.lora.target_modules,
        dtype=cfg.dtype,
        seed=cfg.seed,
    )
    env = env_for_config(cfg)
    train = load_task_source(cfg.tasks, "train")
    engine = HFEngine(policy)
    sampling = Sampling(cfg.max_completion_length, cfg.temperature, cfg.top_p)
    G = cfg.num_generations_per_prompt
    kw = dict(stop_token_ids=policy.eos_token_ids)
    result: dict[str, list[float]] = {"per_group": [], "together": []}
    calls = [0]

    def point() -> None:
        calls[0] += 1

    for rnd in range(args.rounds + 1):  # round 0 warms up (allocator, oneDNN packing): not counted
        tasks = random.Random(rnd).sample(train, k)

        def per_group(tasks: list = tasks, rnd: int = rnd) -> float:
            t = time.perf_counter()
            groups = [
                run_rollouts(engine, policy.tokenizer, env, [task], G, sampling, seed=rnd * 100 + g, **kw)[0]
                for g, task in enumerate(tasks)
            ]
            return tokens(groups) / (time.perf_counter() - t)

        def together(tasks: list = tasks, rnd: int = rnd) -> float:
            t = time.perf_counter()
            with layer_safe_points(policy.model, point):
                groups = run_rollouts(
                    engine,
                    policy.tokenizer,
                    env,
                    tasks,
                    G,
                    sampling,
                    seed=rnd * 100,
                    on_tokens=lambda n: point(),
                    **kw,
                )
            return tokens(groups) / (time.perf_counter() - t)

        order = [("per_group", per_group), ("together", together)]
        for name, fn in order if rnd % 2 == 0 else order[::-1]:
            tps = fn()
            if rnd:
                result[name].append(tps)
                print(f"round {rnd}: {name:9s} {tps:6.1f} tok/s", flush=True)
    med = {k: statistics.median(v) for k, v in result.items()}
    out = {
        "date": time.strftime("%Y-%m-%d"),
        "torch_threads": torch.get_num_threads(),
        "prompts": k,
        "G": G,
        "max_new_tokens": sampling.max_new_tokens,
        "rounds": args.rounds,
        "tokens_per_s": {k: [round(x, 1) for x in v] for k, v in result.items()},
        "median_tokens_per_s": {k: round(v, 1) for k, v in med.items()},
        "ratio": round(med["together"] / med["per_group"], 2),
        "safe_point_calls": calls[0],
    }
    print(
        f"median: a group at a time {med['per_group']:.1f} tok/s, the step's {k} groups together "
        f"{med['together']:.1f} tok/s: {out['ratio']:.2f}x"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

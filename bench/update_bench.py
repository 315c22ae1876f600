"""The update's forward+backward on one GRPO step's batch: packed rows (TRL's layout) vs the shared-prefix
pass, alternating in one run on the same inputs.

    .venv/bin/python bench/update_bench.py [--prompts 4] [--g 8] [--tokens 40] [--reps 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from workbench.domains.calendar import builtin_tasks  # noqa: E402
from workbench.envs.harness import Harness  # noqa: E402
from workbench.learn.logprobs import completion_logprobs, shared_prefix_logprobs  # noqa: E402
from workbench.models import load_policy  # noqa: E402
from workbench.rollout.prompt import render_prompt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--g", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    policy = load_policy("smollm2-135m", seed=0)
    tok = policy.tokenizer
    h = Harness()
    tasks = builtin_tasks("train")[: args.prompts]
    rng = random.Random(0)
    prompts, comps = [], []
    for t in tasks:
        p = render_prompt(tok, h.messages(t), h.prefill)
        for _ in range(args.g):
            prompts.append(p)
            comps.append(
                [rng.randrange(1000, 20000) for _ in range(rng.randint(args.tokens // 2, args.tokens))]
            )
    model = policy.model
    model.train()
    mb = args.micro_batch

    def step(fn) -> float:
        t = time.perf_counter()
        model.zero_grad(set_to_none=True)
        for i in range(0, len(prompts), mb):
            logp, mask = fn(model, prompts[i : i + mb], comps[i : i + mb], 1.0, pad_token_id=tok.pad_token_id)
            (-(logp.sum()) / mask.sum()).backward()
        return time.perf_counter() - t

    times: dict[str, list[float]] = {"packed": [], "shared_prefix": []}
    for _ in range(args.reps):
        times["packed"].append(step(completion_logprobs))
        times["shared_prefix"].append(step(shared_prefix_logprobs))
    p_len = len(prompts[0])
    print(
        f"batch: {args.prompts} prompts x G={args.g}, prompt ~{p_len} tokens, completions <= {args.tokens}, "
        f"micro-batch {mb}, torch threads {torch.get_num_threads()}"
    )
    for k, v in times.items():
        print(f"{k:14} median {statistics.median(v):6.2f} s  runs {[round(x, 2) for x in v]}")
    ratio = statistics.median(times["shared_prefix"]) / statistics.median(times["packed"])
    print(f"ratio shared_prefix / packed: {ratio:.3f}")


if __name__ == "__main__":
    main()

"""The rows of untrained template tokens (workbench.token_rows) on the real Qwen2.5-Coder-0.5B: what they cost.

    .venv/bin/python bench/token_rows.py [--eval 16] [--sft 4] [--tokens 48] [--reps 2]

The 0.5B's `<tool_call>` and `</tool_call>` rows train with its LoRA. Three arms, one process, the same inputs:

- "none": the LoRA alone (no token rows): what the engine cost before them;
- "peft": the token rows with peft's own forward, which builds the merged embedding and LM-head matrices on
  every call (and so never uses the sampler's packed head);
- "ours": the token rows with `token_rows.fast_rows`' forward (the rows written over the output).

Workloads: a greedy eval batch of `eval` held-out tasks (native prompts, `tokens` new at most, after an
untimed batch of other tasks so the common prefix's keys/values are kept, as in every eval batch after the
first), and one SFT step on `sft` native examples at lr 0 (forward and backward). Each round runs the arms in
turn, the order reversed every other round; printed: every wall time, the fastest per arm, the ratios, and
whether the arms gave the same tokens and losses (the rows start equal to the base model's).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from workbench import token_rows  # noqa: E402
from workbench.config import config_from_dict  # noqa: E402
from workbench.domains.calendar import builtin_tasks  # noqa: E402
from workbench.envs import env_for_config  # noqa: E402
from workbench.learn.sft import sft_step  # noqa: E402
from workbench.learn.sft_native import env_sft_examples, native_sft_rows  # noqa: E402
from workbench.models import load_policy  # noqa: E402
from workbench.rollout.hf import HFEngine  # noqa: E402
from workbench.rollout.runner import Sampling, run_rollouts  # noqa: E402

MODEL = "qwen2.5-coder-0.5b"


def peft_forward(policy) -> None:
    """Give the token-rows layers back peft's own forward (the instance attribute fast_rows set goes)."""
    from peft.tuners.trainable_tokens.layer import TrainableTokensLayer

    for m in policy.model.modules():
        if isinstance(m, TrainableTokensLayer) and "forward" in m.__dict__:
            del m.forward


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--sft", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}; torch threads {torch.get_num_threads()}", flush=True)
    ours = load_policy(MODEL, target_modules="all-linear", seed=0)
    peft = load_policy(MODEL, target_modules="all-linear", seed=0)
    peft_forward(peft)
    real = token_rows.untrained_template_tokens
    token_rows.untrained_template_tokens = lambda model, tok: []
    none = load_policy(MODEL, target_modules="all-linear", seed=0)
    token_rows.untrained_template_tokens = real
    print(f"token rows: ours {ours.trained_tokens}, peft {peft.trained_tokens}, none {none.trained_tokens}")
    tok = ours.tokenizer
    env = env_for_config(config_from_dict({"model": MODEL, "tool_format": "native"}), tok)
    held = builtin_tasks("held_out")
    timed, earlier = held[: args.eval], held[args.eval : 2 * args.eval]
    examples = env_sft_examples(env, builtin_tasks("train")[100 : 100 + args.sft])
    arms = {"none": none, "peft": peft, "ours": ours}
    engines = {name: HFEngine(p) for name, p in arms.items()}
    times: dict[str, dict[str, list[float]]] = {"eval": {a: [] for a in arms}, "sft": {a: [] for a in arms}}
    tokens: dict[str, list] = {}
    losses: dict[str, float] = {}

    def greedy(name: str, tasks: list) -> list:
        sampling = Sampling(args.tokens, 0.0, 1.0)
        return run_rollouts(
            engines[name], tok, env, tasks, 1, sampling, stop_token_ids=arms[name].eos_token_ids, seed=0
        )

    for r in range(args.reps):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            greedy(name, earlier)  # untimed: the common prefix's keys/values kept, as after any first batch
            t = time.perf_counter()
            out = greedy(name, timed)
            times["eval"][name].append(time.perf_counter() - t)
            tokens[name] = [s.completion.token_ids for g in out for ro in g for s in ro.segments]
            opt = torch.optim.SGD(arms[name].trainable_parameters(), lr=0.0)
            t = time.perf_counter()
            loss = sft_step(arms[name], opt, examples, rows_fn=native_sft_rows)
            times["sft"][name].append(time.perf_counter() - t)
            losses[name] = round(float(loss), 6)
            print(
                f"round {r} {name}: eval {times['eval'][name][-1]:.1f} s, sft {times['sft'][name][-1]:.1f} s",
                flush=True,
            )
    for work, by_arm in times.items():
        best = {a: min(v) for a, v in by_arm.items()}
        print(
            f"{work}: fastest { ({a: round(v, 1) for a, v in best.items()}) }, all {by_arm}; "
            f"peft/none {best['peft'] / best['none']:.2f}, ours/none {best['ours'] / best['none']:.2f}, "
            f"ours/peft {best['ours'] / best['peft']:.2f}"
        )
    same = tokens["ours"] == tokens["peft"] == tokens["none"]
    print(f"same eval tokens in all arms: {same}; sft losses {losses}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

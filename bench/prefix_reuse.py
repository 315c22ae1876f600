"""Issue 32 item 2: the prompts' common prefix paid once, on the real Qwen2.5-Coder-0.5B, native tool format.

    nice -n 5 .venv/bin/python bench/prefix_reuse.py [--prompts 4] [--g 8] [--tokens 64] [--eval 16] [--sft 4]

One process, the same policy and inputs, each comparison back to back with $WORKBENCH_PREFIX_REUSE set per
mode (workbench.rollout.prefix_kv.prefix_reuse):

- rollout: a GRPO step's first turn (`prompts` train tasks x `g` samples, `tokens` new at most, T=1,
  seeded, EOS stops), through `run_rollouts` and HFEngine: "call" (the common prefix prefilled once per
  call: the path before the keys/values were kept), "on" cold (the first call of a policy version: the same
  work) and "on" warm (the same call again in the same version: its whole common prefix kept; another
  batch would prefill its part after the harness, a few tokens at batch 1).
- eval: a greedy batch of `eval` held-out tasks: "call" vs "on" warm (after an earlier batch of other
  held-out tasks, untimed, as every eval batch after the first finds it).
- update: `policy_update` on the rollout's rows (advantages +-1, micro-batch 16, lr 0 so every mode trains
  the same weights): "call" (the prefix once per micro-batch) vs "on" (once for all micro-batches).
- SFT: one `sft_step` on `sft` examples (native rows, lr 0): "off" (packed rows: every example runs its whole
  prompt) vs "on" (the prefix once for the batch; "call" is the same for SFT, one forward per step).

Printed: wall and CPU (`time.process_time`, both cores' work) seconds per mode, the on/other ratios, and the
load average before and after (the box is shared).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from workbench.config import Config, config_from_dict  # noqa: E402
from workbench.domains.calendar import builtin_tasks  # noqa: E402
from workbench.envs import env_for_config  # noqa: E402
from workbench.learn.sft import sft_step  # noqa: E402
from workbench.learn.sft_native import env_sft_examples, native_sft_rows  # noqa: E402
from workbench.learn.update import policy_update  # noqa: E402
from workbench.models import load_policy  # noqa: E402
from workbench.rollout.hf import HFEngine  # noqa: E402
from workbench.rollout.prefix_kv import PREFIX_REUSE_ENV  # noqa: E402
from workbench.rollout.prompt import common_prefix_len  # noqa: E402
from workbench.rollout.runner import Sampling, run_rollouts  # noqa: E402
from workbench.rollout.turn_tokens import first_prompt  # noqa: E402

MODEL = "qwen2.5-coder-0.5b"


def timed(mode: str, fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall s, CPU s, result) of `fn()` with the prefix reuse set to `mode`."""
    os.environ[PREFIX_REUSE_ENV] = mode
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def tokens_of(groups: list) -> list[list[int]]:
    return [s.completion.token_ids for g in groups for r in g for s in r.segments]


def same(section: str, outputs: list[list[list[int]]]) -> None:
    """Whether every mode produced the same completions (sampling is seeded, so it should, up to a draw that
    float rounding moves)."""
    differ = sum(any(o[i] != outputs[0][i] for o in outputs[1:]) for i in range(len(outputs[0])))
    print(f"{section}: {len(outputs[0]) - differ} of {len(outputs[0])} completions identical across modes")


def report(section: str, rows: list[tuple[str, float, float]], base: str) -> None:
    ref = next((w, c) for m, w, c in rows if m == base)
    for mode, wall, cpu in rows:
        ratio = "" if mode == base else f"  on/{base}: wall {wall / ref[0]:.2f}, CPU {cpu / ref[1]:.2f}"
        print(f"{section:8s} {mode:8s} wall {wall:7.1f} s  CPU {cpu:7.1f} s{ratio}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--g", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--sft", type=int, default=4)
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: rollout,eval,update,sft")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"load average before: {os.getloadavg()}; torch threads {torch.get_num_threads()}", flush=True)
    policy = load_policy(MODEL, seed=0)
    tok = policy.tokenizer
    env = env_for_config(config_from_dict({"model": MODEL, "tool_format": "native"}), tok)
    train, held = builtin_tasks("train")[: args.prompts], builtin_tasks("held_out")[: args.eval]
    earlier = builtin_tasks("held_out")[args.eval : 2 * args.eval]  # an earlier eval batch, same version
    prompts = [first_prompt(tok, env.start(t)) for t in train]
    eval_prompts = [first_prompt(tok, env.start(t)) for t in held]
    print(
        f"prompt tokens: train {[len(p) for p in prompts]}, common prefix {common_prefix_len(prompts)}; "
        f"eval mean {sum(map(len, eval_prompts)) / len(eval_prompts):.0f}, "
        f"common {common_prefix_len(eval_prompts)}"
    )
    engine = HFEngine(policy)
    stops = policy.eos_token_ids

    def rollout() -> list:
        return run_rollouts(
            engine, tok, env, train, args.g, Sampling(args.tokens, 1.0, 1.0), stop_token_ids=stops, seed=0
        )

    def evaluate(tasks: list = held) -> list:
        return run_rollouts(
            engine, tok, env, tasks, 1, Sampling(args.tokens, 0.0, 1.0), stop_token_ids=stops, seed=0
        )

    groups = None
    if "rollout" not in skip:
        rows, outputs = [], []
        for mode, label in (("call", "call"), ("on", "on cold"), ("on", "on warm")):
            if label != "on warm":
                engine.update_weights(policy)  # a new policy version: nothing kept
            wall, cpu, groups = timed(mode, rollout)
            rows.append((label, wall, cpu))
            outputs.append(tokens_of(groups))
        print(f"rollout: {len(outputs[0])} completions, {sum(map(len, outputs[0]))} new tokens")
        same("rollout", outputs)
        report("rollout", rows, "call")
    if "eval" not in skip:
        engine.update_weights(policy)
        os.environ[PREFIX_REUSE_ENV] = "on"
        evaluate(earlier)  # untimed: it leaves the harness's keys/values kept, as an earlier batch does
        rows, outputs = [], []
        for mode in ("call", "on"):
            wall, cpu, out = timed(mode, evaluate)
            rows.append((mode if mode == "call" else "on warm", wall, cpu))
            outputs.append(tokens_of(out))
        print(f"eval: {len(outputs[0])} completions, {sum(map(len, outputs[0]))} new tokens")
        same("eval", outputs)
        report("eval", rows, "call")
    if "update" not in skip:
        if groups is None:
            os.environ[PREFIX_REUSE_ENV] = "on"
            groups = rollout()
        rng = random.Random(0)
        items = [
            (s.prompt_ids, s.completion.token_ids, rng.choice([-1.0, 1.0]), s.completion.logprobs, 1.0)
            for g in groups
            for r in g
            for s in r.segments
            if s.completion.token_ids
        ]
        rows = []
        for mode in ("call", "on"):
            opt = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
            wall, cpu, out = timed(
                mode,
                lambda opt=opt: policy_update(
                    policy, opt, Config(), items, len(items), temperature=1.0, lr=0.0, micro_batch=16
                ),
            )
            rows.append((mode, wall, cpu))
            print(f"update {mode}: loss {out['loss']:.6f}, grad norm {out['grad_norm']:.6f}")
        tokens = sum(len(it[1]) for it in items)
        print(f"update: {len(items)} rows, {tokens} completion tokens, micro-batch 16")
        report("update", rows, "call")
    if "sft" not in skip:
        examples = env_sft_examples(env, builtin_tasks("train")[100 : 100 + args.sft])
        rows = []
        for mode in ("off", "on"):
            opt = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
            wall, cpu, loss = timed(
                mode, lambda opt=opt: sft_step(policy, opt, examples, rows_fn=native_sft_rows)
            )
            rows.append((mode, wall, cpu))
            print(f"sft {mode}: loss {loss:.6f}")
        report("sft", rows, "off")
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()

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

Each comparison runs `reps` rounds, the order reversed every other round. Printed per mode: the fastest
wall and CPU (`time.process_time`, both cores' work) seconds, every wall time, the tokens forwarded outside
decoding (a hook's count: the work the reuse saves, unmoved by the box's load), the ratios of the fastest
times; whether the modes produced the same tokens / losses; the load average before and after.
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


class Forwarded:
    """Tokens through the model outside decoding (every forward of more than one token a row: prefixes,
    prompt suffixes, the training passes), counted by a hook: what the reuse saves, free of the box's load."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.tokens = 0
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        base.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module: object, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[-1] > 1:
            self.tokens += ids.numel()


FORWARDED: Forwarded | None = None


def timed(mode: str, fn: Callable[[], object]) -> tuple[float, float, int, object]:
    """(wall s, CPU s, tokens forwarded, result) of `fn()` with the prefix reuse set to `mode`."""
    assert FORWARDED is not None
    os.environ[PREFIX_REUSE_ENV] = mode
    before = FORWARDED.tokens
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, FORWARDED.tokens - before, out


def tokens_of(groups: list) -> list[list[int]]:
    return [s.completion.token_ids for g in groups for r in g for s in r.segments]


def same(section: str, outputs: list[list[list[int]]]) -> None:
    """Whether every mode produced the same completions (sampling is seeded, so it should, up to a draw that
    float rounding moves)."""
    differ = sum(any(o[i] != outputs[0][i] for o in outputs[1:]) for i in range(len(outputs[0])))
    print(f"{section}: {len(outputs[0]) - differ} of {len(outputs[0])} completions identical across modes")


def compare(
    section: str, cases: list[tuple[str, str, Callable[[], object]]], base: str, reps: int
) -> dict[str, list[object]]:
    """Time each (label, mode, fn) `reps` times, the order reversed every other round; print each label's
    fastest wall and CPU time (the run least disturbed by the other jobs on the box), every wall time, the
    tokens forwarded, and the ratios of the fastest times to `base`'s. Returns the results per label."""
    runs: dict[str, list[tuple[float, float, int]]] = {label: [] for label, _, _ in cases}
    results: dict[str, list[object]] = {label: [] for label, _, _ in cases}
    for rep in range(reps):
        for label, mode, fn in cases if rep % 2 == 0 else cases[::-1]:
            wall, cpu, tokens, out = timed(mode, fn)
            runs[label].append((wall, cpu, tokens))
            results[label].append(out)
    best = {label: (min(r[0] for r in rs), min(r[1] for r in rs)) for label, rs in runs.items()}
    for label, rs in runs.items():
        walls = ", ".join(f"{r[0]:.1f}" for r in rs)
        ratio = (
            ""
            if label == base
            else (
                f"  /{base}: wall {best[label][0] / best[base][0]:.2f}, "
                f"CPU {best[label][1] / best[base][1]:.2f}"
            )
        )
        print(
            f"{section:8s} {label:8s} wall {best[label][0]:7.1f} s ({walls})  CPU {best[label][1]:7.1f} s  "
            f"forwarded {sorted({r[2] for r in rs})}{ratio}",
            flush=True,
        )
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--g", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--sft", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2, help="rounds of each comparison (medians reported)")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: rollout,eval,update,sft")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"load average before: {os.getloadavg()}; torch threads {torch.get_num_threads()}", flush=True)
    global FORWARDED
    policy = load_policy(MODEL, seed=0)
    FORWARDED = Forwarded(policy.model)
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

        def fresh_rollout() -> list:
            engine.update_weights(policy)  # a new policy version: nothing kept
            return rollout()

        # "on warm" finds the last "on" call's prefix kept: the cold one's (round 1), its own (round 2)
        cold_warm = [("on cold", "on", fresh_rollout), ("on warm", "on", rollout)]
        out = compare("rollout", [("call", "call", fresh_rollout), *cold_warm], "call", args.reps)
        outputs = [tokens_of(g) for runs in out.values() for g in runs]
        groups = out["call"][0]
        print(f"rollout: {len(outputs[0])} completions, {sum(map(len, outputs[0]))} new tokens")
        same("rollout", outputs)
    if "eval" not in skip:
        engine.update_weights(policy)
        os.environ[PREFIX_REUSE_ENV] = "on"
        evaluate(earlier)  # untimed: it leaves the harness's keys/values kept, as an earlier batch does
        out = compare("eval", [("call", "call", evaluate), ("on warm", "on", evaluate)], "call", args.reps)
        outputs = [tokens_of(g) for runs in out.values() for g in runs]
        print(f"eval: {len(outputs[0])} completions, {sum(map(len, outputs[0]))} new tokens")
        same("eval", outputs)
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

        def update() -> dict[str, float]:
            opt = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
            return policy_update(
                policy, opt, Config(), items, len(items), temperature=1.0, lr=0.0, micro_batch=16
            )

        tokens = sum(len(it[1]) for it in items)
        print(f"update: {len(items)} rows, {tokens} completion tokens, micro-batch 16")
        out = compare("update", [("call", "call", update), ("on", "on", update)], "call", args.reps)
        for label, runs in out.items():
            print(
                f"update {label}: loss {[round(r['loss'], 6) for r in runs]}, "
                f"grad norm {[round(r['grad_norm'], 6) for r in runs]}"
            )
    if "sft" not in skip:
        examples = env_sft_examples(env, builtin_tasks("train")[100 : 100 + args.sft])

        def sft() -> float:
            opt = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
            return sft_step(policy, opt, examples, rows_fn=native_sft_rows)

        out = compare("sft", [("off", "off", sft), ("on", "on", sft)], "off", args.reps)
        for label, runs in out.items():
            print(f"sft {label}: loss {[round(r, 6) for r in runs]}")
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()

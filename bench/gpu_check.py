"""GRPO steps on random-initialised models of real sizes, for a bare GPU machine (scripts/gpu_check.sh).

Needs only torch, transformers and peft (no store, UI, vLLM or network): the model is built from a config
(SmolLM2-135M's shape; a 1.5B-class shape like Qwen2.5-1.5B's, as a Llama), the tokenizer is the test
suite's tiny BPE (ids it does not know decode to nothing, so replies are short garbage: this measures speed,
not learning), and each step is the trainer's own path: HF engine rollouts of G samples for each prompt,
the built-in verifier, group advantages, `policy_update` with LoRA. Rewards get a little seeded noise
so that every group has a spread and the update runs on every row, as in a learning run.

    python bench/gpu_check.py --models smollm2-135m,1.5b --steps 5 --out gpu_check/grpo.json
    python bench/gpu_check.py --smoke        (tiny model, CPU, 2 steps: what the test suite runs)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

SHAPES = {  # LlamaConfig keywords
    "smoke": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=512),
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936),
}


def build_policy(shape: str, device: torch.device, dtype: torch.dtype, lora_r: int):
    from peft import LoraConfig, get_peft_model
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from workbench.models import Policy
    from workbench.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    cfg = LlamaConfig(**SHAPES[shape], max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=10000.0,
                      bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"), eos_token_id=eos, pad_token_id=eos)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos)
    model = get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=2 * lora_r, target_modules=["q_proj", "k_proj",
                                                                                               "v_proj", "o_proj"]))
    model.to(device).eval()
    return Policy(model, tok, f"random-{shape}", "lora")


def run(shape: str, steps: int, device: torch.device, dtype: torch.dtype, prompts: int, group: int,
        max_tokens: int) -> dict:
    from workbench import grpo
    from workbench.config import Config
    from workbench.envs import env_for_config
    from workbench.rollout.hf import HFEngine
    from workbench.rollout.runner import Sampling, run_rollouts
    from workbench.tasks import load_task_source
    from workbench.update import policy_update, update_items
    from workbench.verifiers import get_verifier

    t0 = time.perf_counter()
    policy = build_policy(shape, device, dtype, lora_r=16)
    build_s = time.perf_counter() - t0
    cfg = Config(num_generations_per_prompt=group, prompts_per_step=prompts, max_completion_length=max_tokens)
    env, engine = env_for_config(cfg), HFEngine(policy)
    verifier = get_verifier(cfg.reward)
    tasks = load_task_source(cfg.tasks, "train")
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-5)
    rng = random.Random(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rows = []
    for step in range(1, steps + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t1 = time.perf_counter()
        groups = run_rollouts(engine, policy.tokenizer, env, rng.sample(tasks, prompts), group,
                              Sampling(max_tokens, 1.0, 1.0), stop_token_ids=policy.eos_token_ids, seed=step)
        t2 = time.perf_counter()
        episodes = []
        for grp in groups:
            scores = verifier.score_many([(r.output, r.task) for r in grp], timeout_s=5.0)
            rewards = torch.tensor([s.total + rng.gauss(0, 0.1) for s in scores], dtype=torch.float64)
            adv = grpo.group_advantages(rewards, len(grp)).tolist()
            episodes += list(zip(grp, adv, strict=True))
        items, n_seqs = update_items(episodes, cfg)
        out = policy_update(policy, opt, cfg, items, n_seqs, temperature=1.0, lr=1e-5)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t3 = time.perf_counter()
        tokens = sum(r.completion_tokens for grp in groups for r in grp)
        rows.append({"step": step, "step_s": t3 - t1, "rollout_s": t2 - t1, "update_s": t3 - t2,
                     "completion_tokens": tokens, "rollout_tokens_per_s": tokens / (t2 - t1),
                     "loss": out.get("loss"), "update_tokens": out.get("update_tokens")})
        print(f"{shape} step {step}: {t3 - t1:.2f} s (rollout {t2 - t1:.2f}, update {t3 - t2:.2f}), "
              f"{tokens} tokens, {tokens / (t2 - t1):.0f} tok/s", flush=True)
    later = rows[1:] or rows  # the first step pays the warm-up (kernels, allocator)
    return {
        "model": shape, "params": sum(p.numel() for p in policy.model.parameters()),
        "trainable": policy.num_trainable, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
        "prompts_per_step": prompts, "group": group, "max_completion_length": max_tokens, "build_s": build_s,
        "mean_step_s": sum(r["step_s"] for r in later) / len(later),
        "mean_rollout_tokens_per_s": sum(r["rollout_tokens_per_s"] for r in later) / len(later),
        "peak_cuda_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "steps": rows,
    }


def main(argv: list[str] | None = None) -> int:
    from workbench.devices import resolve_device, resolve_dtype

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m,1.5b", help=f"comma-separated, of {sorted(SHAPES)}")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU, 2 steps (the test suite's check)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.smoke:
        args.models, args.steps, args.device, args.prompts, args.group, args.max_tokens = "smoke", 2, "cpu", 2, 2, 8
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    results = []
    for shape in args.models.split(","):
        results.append(run(shape, args.steps, device, dtype, args.prompts, args.group, args.max_tokens))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
              "results": results}
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    for r in results:
        mem = f", peak CUDA {r['peak_cuda_mem_gib']:.2f} GiB" if r["peak_cuda_mem_gib"] is not None else ""
        print(f"{r['model']}: {r['params'] / 1e6:.0f}M params on {r['device']} ({r['dtype']}): "
              f"{r['mean_step_s']:.2f} s/step, {r['mean_rollout_tokens_per_s']:.0f} rollout tok/s{mem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Decode tokens/s of the rollout engine against the machine's memory-bandwidth limit.

A decode step reads every weight once (the batch shares it) plus each row's KV cache, so

    limit tok/s (batch B) = B x read bandwidth / (weight bytes + B x KV bytes per row at that context)

and the compute roofline is peak matmul FLOP/s / (2 x params) tokens/s. Both the bandwidth (a large
tensor sum, best of several) and the FLOP/s (a large fp32 and bf16 matmul) are measured here, on this
machine, in this run. Decode time is the engine's time for 1 + `new` tokens minus its time for one (the
prefill and the first token), stops disabled, on the demo's first training prompt as the model sees it (the
JSON harness, ~400 tokens, for SmolLM2; a native-format model's own template with the tools); medians over
`reps` rounds, the variants interleaved within each round. The sampling step and the lm_head are also timed
alone (best of 20), since those are the pieces changed or tried.

Variants (one run, same prompt), on the training configuration (LoRA r=16 on q,k,v,o, unmerged, fp32):
the engine as it was (`torch.multinomial`, the lm_head through MKL), with inverse-CDF sampling only, with
the frozen lm_head through a prepacked oneDNN copy too, and as it is now (also: the rows attend to one copy
of the prompt's keys/values, `shared_attention`): the before/after ratios. Then the LoRA merged away
(`merge_and_unload`, what an engine with its own weight copy samples from), the merged model in bf16, and
with --compile the merged model's forward under torch.compile. `--variants` picks some by name prefix.

Usage: python bench/decode_limit.py [--model smollm2-135m] [--batches 1,8,32] [--new 64] [--compile]
       [--variants now,before] [--json docs/decode_limit.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

import workbench.rollout.hf as hf
from workbench.config import config_from_dict, load_config
from workbench.envs import env_for_config
from workbench.models import load_policy
from workbench.rollout.hf import HFEngine
from workbench.rollout.turn_tokens import first_prompt
from workbench.tasks import load_task_source

DEMO = Path(__file__).resolve().parents[1] / "workbench" / "data" / "demo.yaml"
SAMPLER = hf.inverse_cdf_sample


def best_of(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def read_bandwidth(gib: float = 1.0, reps: int = 7) -> float:
    """Bytes/s of streaming a tensor far larger than the caches through a reduction (reads only)."""
    a = torch.ones(int(gib * 2**30 / 4))
    a.sum()
    return a.numel() * 4 / best_of(a.sum, reps)


def matmul_flops(dtype: torch.dtype, n: int = 2048, reps: int = 5) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    return 2 * n**3 / best_of(lambda: a @ b, reps)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes a decode step reads: every distinct parameter tensor once (tied embeddings counted once; the
    embedding's row lookup is tiny but the tied lm_head reads the whole matrix)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def kv_bytes_per_row(model: torch.nn.Module, context: int, dtype: torch.dtype) -> int:
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return (
        2
        * cfg.num_hidden_layers
        * kv_heads
        * head_dim
        * context
        * torch.tensor([], dtype=dtype).element_size()
    )


def decode_times(engine: HFEngine, prompt: list[int], batch: int, new: int) -> tuple[float, float]:
    """(seconds for the prefill + 1 token, seconds for the prefill + 1 + `new` tokens), `batch` rows."""

    def run(k: int) -> float:
        t = time.perf_counter()
        [group] = engine.generate(
            [prompt], batch, max_new_tokens=k, temperature=1.0, seed=0, stop_token_ids=[]
        )
        assert all(len(c.token_ids) == k for c in group)
        return time.perf_counter() - t

    return run(1), run(new + 1)


def multinomial_sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """The engine's sampler before inverse-CDF sampling."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def variants(args: argparse.Namespace) -> list[tuple[str, Any, Any, dict[str, Any]]]:
    """(name, policy, sampler, engine kwargs) for every variant, all loaded up front to interleave them."""

    def merged(dtype: str, compiled: bool = False) -> Any:
        policy = load_policy(args.model, seed=0, dtype=dtype)
        policy.model = policy.model.merge_and_unload()
        if compiled:
            policy.model.forward = torch.compile(policy.model.forward, dynamic=True)
        return policy

    lora = load_policy(args.model, seed=0)  # the engine variants share one model
    per_row = {"shared_prefix": False}
    wanted = [w.strip() for w in args.variants.split(",") if w.strip()]
    out = [
        (
            "before: multinomial, MKL head",
            lambda: lora,
            multinomial_sample,
            {"onednn_head": False, **per_row},
        ),
        ("inverse-cdf, MKL head", lambda: lora, SAMPLER, {"onednn_head": False, **per_row}),
        ("oneDNN head, prefix per row", lambda: lora, SAMPLER, per_row),
        ("now: + one prefix copy", lambda: lora, SAMPLER, {}),
        ("merged fp32 (now's engine)", lambda: merged("float32"), SAMPLER, {}),
        ("merged bf16", lambda: merged("bfloat16"), SAMPLER, {}),
    ]
    if args.compile:
        out.append(("merged fp32 + torch.compile", lambda: merged("float32", compiled=True), SAMPLER, {}))
    picked = [v for v in out if not wanted or any(v[0].startswith(w) for w in wanted)]
    return [(name, make(), sampler, kw) for name, make, sampler, kw in picked]


def component_times(policy: Any, reps: int = 20) -> dict[str, dict[int, float]]:
    """Milliseconds of the two pieces changed or tried, alone: one sampling step and one lm_head call."""
    head = policy.model.get_base_model().lm_head
    onednn = hf.OneDNNHead(head)
    out: dict[str, dict[int, float]] = {
        "sample multinomial": {},
        "sample inverse-cdf": {},
        "lm_head MKL": {},
        "lm_head oneDNN": {},
    }
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for b in (1, 8, 32):
            logits = torch.randn(b, head.weight.shape[0])
            x = torch.randn(b, 1, head.weight.shape[1])
            for name, fn in (("sample multinomial", multinomial_sample), ("sample inverse-cdf", SAMPLER)):
                hf.inverse_cdf_sample = fn
                out[name][b] = best_of(lambda lg=logits: hf.sample_next(lg, 0.8, 1.0, g), reps) * 1e3
            out["lm_head MKL"][b] = best_of(lambda x=x: head(x), reps) * 1e3
            out["lm_head oneDNN"][b] = best_of(lambda x=x: onednn(x), reps) * 1e3
    hf.inverse_cdf_sample = SAMPLER
    return out


def lora_of(loaded: list[tuple[str, Any, Any, dict[str, Any]]]) -> Any:
    """The unmerged (LoRA) policy among the variants, for timing the pieces alone."""
    return next((p for _, p, _, _ in loaded if hasattr(p.model, "get_base_model")), loaded[0][1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--variants", default="", help="comma-separated name prefixes (default: all)")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    bw = read_bandwidth()
    peak = {"float32": matmul_flops(torch.float32), "bfloat16": matmul_flops(torch.bfloat16)}
    print(
        f"threads {torch.get_num_threads()}, read bandwidth {bw / 1e9:.1f} GB/s, matmul fp32 "
        f"{peak['float32'] / 1e9:.0f} GFLOP/s, bf16 {peak['bfloat16'] / 1e9:.0f} GFLOP/s"
    )

    cfg = config_from_dict({**load_config(DEMO).to_dict(), "model": args.model})  # its own tool format
    task = load_task_source(cfg.tasks, "train")[0]
    loaded = variants(args)
    env = env_for_config(cfg, loaded[0][1].tokenizer)
    parts = component_times(lora_of(loaded))
    for name, per_batch in parts.items():
        print(f"{name:20s} " + "  ".join(f"batch {b}: {ms:6.2f} ms" for b, ms in per_batch.items()))
    prompt = first_prompt(loaded[0][1].tokenizer, env.start(task))
    engines = [(name, HFEngine(policy, **kw), sampler) for name, policy, sampler, kw in loaded]
    times: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _name, engine, sampler in engines:  # warm-up (and torch.compile, if asked)
        hf.inverse_cdf_sample = sampler
        decode_times(engine, prompt, 2, 2)
    for _ in range(args.reps):  # interleaved: a slow spell of the machine hits every variant alike
        for b in batches:
            for name, engine, sampler in engines:
                hf.inverse_cdf_sample = sampler
                times.setdefault((name, b), []).append(decode_times(engine, prompt, b, args.new))
    hf.inverse_cdf_sample = SAMPLER
    results: list[dict[str, Any]] = []
    for name, policy, _, _ in loaded:
        dtype = next(policy.model.parameters()).dtype
        wb = weight_bytes(policy.model)
        params = sum(p.numel() for p in {p.data_ptr(): p for p in policy.model.parameters()}.values())
        for b in batches:
            first = statistics.median(t[0] for t in times[(name, b)])
            whole = statistics.median(t[1] for t in times[(name, b)])
            per_step = (whole - first) / args.new
            rate = b / per_step
            context = len(prompt) + args.new // 2  # the KV read grows over the decode: its mean length
            step_bytes = wb + b * kv_bytes_per_row(policy.model, context, dtype)
            bw_limit = b * bw / step_bytes
            flop_limit = peak.get(str(dtype).removeprefix("torch."), peak["float32"]) / (
                2 * params
            )  # FLOP/token
            row = {
                "variant": name,
                "batch": b,
                "tok_s": round(rate, 1),
                "ms_per_step": round(per_step * 1e3, 2),
                "bandwidth_limit_tok_s": round(bw_limit, 1),
                "of_bandwidth_limit": round(rate / bw_limit, 3),
                "compute_limit_tok_s": round(flop_limit, 1),
                "of_roofline": round(rate / min(bw_limit, flop_limit), 3),
                "weight_mb": round(wb / 1e6, 1),
                "prompt_tokens": len(prompt),
            }
            results.append(row)
            print(
                f"{name:32s} batch {b:3d}: {rate:7.1f} tok/s ({per_step * 1e3:6.1f} ms/step) | bandwidth "
                f"limit {bw_limit:7.1f} ({rate / bw_limit:5.1%}) | compute limit {flop_limit:7.1f} | "
                f"of roofline {row['of_roofline']:5.1%}"
            )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "date": time.strftime("%Y-%m-%d"),
                    "machine": f"{platform.processor() or platform.machine()}, "
                    f"{torch.get_num_threads()} threads",
                    "torch": torch.__version__,
                    "read_bandwidth_gb_s": round(bw / 1e9, 2),
                    "matmul_gflop_s": {k: round(v / 1e9, 1) for k, v in peak.items()},
                    "new_tokens": args.new,
                    "reps": args.reps,
                    "components_ms": parts,
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()

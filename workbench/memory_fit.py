"""A step too big for the machine, refused before the run trains: the memory a GRPO step will need against
what the device has free.

What grows with the config's sizes is the rollout's KV cache (every sequence of a step decodes at once:
prompts_per_step x num_generations_per_prompt sequences, each its prompt plus max_completion_length tokens a
turn) and the update's float32 logits for a micro-batch (vocabulary x completion tokens). Both are estimated from the
loaded model's config; the check runs in `Trainer.__init__` right after the model loads (the first place that
knows the model's shape) and refuses with the keys to lower. An estimate, not a bound: activations, the
optimizer and the allocator's slack come on top, so it only refuses what cannot possibly fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GIB = 1 << 30


def step_memory_bytes(
    model_config: Any,
    *,
    sequences: int,
    tokens: int,
    dtype_bytes: int,
    micro_batch: int,
    completion_tokens: int | None = None,
) -> dict[str, int]:
    """Bytes of the rollout's KV cache (`tokens` a sequence) and of the update's logits (float32, log-softmax
    beside them), which only the completion positions reach (`logits_to_keep`, workbench/learn/logprobs.py)."""
    layers = int(getattr(model_config, "num_hidden_layers", 0) or 0)
    heads = int(getattr(model_config, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(model_config, "num_key_value_heads", None) or heads)
    hidden = int(getattr(model_config, "hidden_size", 0) or 0)
    head_dim = int(getattr(model_config, "head_dim", None) or (hidden // heads if heads else 0))
    vocab = int(getattr(model_config, "vocab_size", 0) or 0)
    kv = 2 * layers * kv_heads * head_dim * dtype_bytes * sequences * tokens
    logit_tokens = tokens if completion_tokens is None else completion_tokens
    logits = 2 * 4 * min(micro_batch, sequences) * logit_tokens * vocab
    return {"kv_cache": kv, "update_logits": logits}


def available_bytes(device: Any) -> int | None:
    """Free memory where the step runs: the GPU's free memory, or the host's MemAvailable; None if unknown."""
    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    meminfo = Path("/proc/meminfo")
    if not meminfo.is_file():
        return None
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def check_step_fits(model: Any, cfg: Any, prompt_tokens: int, device: Any, *, micro_batch: int = 16) -> None:
    """ConfigError naming the keys to lower when a step's estimated memory exceeds what is free."""
    from workbench.config import ConfigError

    free = available_bytes(device)
    if free is None:
        return
    turns = cfg.max_turns if cfg.env in ("multi_turn", "mcp") else 1
    sequences = cfg.prompts_per_step * cfg.num_generations_per_prompt
    tokens = prompt_tokens + turns * cfg.max_completion_length
    dtype_bytes = next(model.parameters()).element_size()
    need = step_memory_bytes(
        model.config,
        sequences=sequences,
        tokens=tokens,
        dtype_bytes=dtype_bytes,
        micro_batch=micro_batch,
        completion_tokens=turns * cfg.max_completion_length,
    )
    total = sum(need.values())
    if total > free:
        raise ConfigError(
            f"a GRPO step needs about {total / GIB:.1f} GiB ({sequences} sequences of ~{tokens} tokens: KV cache "
            f"{need['kv_cache'] / GIB:.1f} GiB, update logits {need['update_logits'] / GIB:.1f} GiB) but "
            f"{free / GIB:.1f} GiB is free on {device}: lower num_generations_per_prompt "
            f"({cfg.num_generations_per_prompt}), prompts_per_step ({cfg.prompts_per_step}) or "
            f"max_completion_length ({cfg.max_completion_length})"
        )

"""Whether a model's cache is a plain attention KV cache, the one our own sampler and shared-prefix pass know.

`workbench.rollout.hf` and `workbench.learn.logprobs.shared_prefix_logprobs` grow, repeat and select rows of a
key/value cache per layer. A hybrid model (Mamba-2 layers between attention layers: Nemotron-H, Jamba,
Bamba, Zamba...) keeps a recurrent state and a conv state per Mamba layer instead, and sliding-window
layers keep only a window: those go through transformers' own `generate` (workbench.rollout.hf_generate)
and the packed log-prob pass. The layer kinds are transformers' own reading of the config (what
`DynamicCache(config=...)` builds), so a new architecture is classified without a list of names here.
"""

from __future__ import annotations

from typing import Any

PLAIN_KV = frozenset({"full_attention"})


def cache_layer_kinds(model: Any) -> list[str]:
    """The cache layer kind of each decoder layer ("full_attention", "linear_attention", "dummy", ...)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config.get_text_config(decoder=True)
    kinds, _ = get_layer_types_and_kwargs(config)
    return list(kinds)


def has_plain_kv_cache(model: Any) -> bool:
    """True when every layer caches plain attention keys/values (Llama, Qwen, SmolLM2, ...). A config that
    transformers cannot classify counts as not plain: `generate` is slower but right for every model."""
    try:
        kinds = cache_layer_kinds(model)
    except Exception:  # an unusual config (no layer fields): the safe path
        return False
    return bool(kinds) and set(kinds) <= PLAIN_KV

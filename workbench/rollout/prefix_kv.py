"""The prompts' common prefix, paid once: the switch that says how far it is shared, and the sampler's cache
of its keys/values across `generate` calls.

Every request of a run starts with the same system prompt (with a native tool format, the model's template
puts the tool specs there: hundreds of tokens). `HFEngine` prefills the common prefix of one call's prompts
once; `PrefixKV` keeps that prefix's keys/values (batch 1) so a later call of the same policy version (the
next eval batch, the next turn of a multi-turn rollout, the next chunk) starts from them and prefills only
what it does not share. The keys/values depend on the weights: the engine clears the cache in
`update_weights`, and the cache also checks a fingerprint of the weights (in-place writes bump a tensor's
`_version`: optimizer steps, `load_state_dict`), so weights changed behind the engine's back are never
served stale keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

import torch
from transformers.cache_utils import DynamicCache

from workbench.rollout.kv_cache import growing_cache
from workbench.rollout.prompt import common_prefix_len

PREFIX_REUSE_ENV = "WORKBENCH_PREFIX_REUSE"
Reuse = Literal["on", "call", "off"]


def prefix_reuse() -> Reuse:
    """How far the prompts' common prefix is shared, from $WORKBENCH_PREFIX_REUSE (read on every call):

    - "on" (default): its keys/values kept across the sampler's calls of one policy version (`PrefixKV`), and
      one prefix pass for all micro-batches of an update (`workbench.learn.logprobs.BatchPrefix`);
    - "call": once per sampler call (chunk) and once per micro-batch;
    - "off": not across prompts at all (each prompt prefills its whole prompt, the log-prob pass is packed);
      the samples of one prompt still share its prefill.

    For measuring (bench/prefix_reuse.py) and for ruling the sharing out when something looks wrong."""
    value = os.environ.get(PREFIX_REUSE_ENV, "on").strip().lower() or "on"
    if value not in ("on", "call", "off"):
        raise ValueError(f"{PREFIX_REUSE_ENV}={value!r}: use on, call or off")
    return value  # type: ignore[return-value]


def weights_key(model: Any) -> tuple:
    """What the cached keys/values depend on besides the tokens: each parameter (identity and in-place write
    count) and where and in what dtype the model runs."""
    params = list(model.parameters())
    return (params[0].device, params[0].dtype, tuple((id(p), p._version) for p in params))


class PrefixKV:
    """The keys/values (batch 1) of the last common prefix the sampler prefilled, with its tokens."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.tokens: list[int] = []
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.key: tuple | None = None

    def cache_for(
        self, model: Any, prefix: list[int], prefill: Callable[[list[int], int, DynamicCache], DynamicCache]
    ) -> DynamicCache:
        """A growing cache of batch 1 holding `prefix`'s keys/values. The kept prefix's longest common part
        with `prefix` is copied in, `prefill(tokens, start, cache)` runs the rest on it, and the result
        replaces what is kept when it computed anything."""
        key = weights_key(model)
        hit = common_prefix_len([self.tokens, prefix]) if key == self.key and self.tokens else 0
        cache = growing_cache()
        if hit:
            for i, (k, v) in enumerate(self.layers):
                cache.update(k[..., :hit, :], v[..., :hit, :], i)  # copied into the cache's own buffer
        if hit < len(prefix):
            cache = prefill(prefix[hit:], hit, cache)
            self.tokens, self.key = list(prefix), key
            self.layers = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
        return cache

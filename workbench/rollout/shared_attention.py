"""Attention over a prefix every row shares, read once: the sampler's rows attend to one batch-1 copy of the
common prefix's keys/values instead of a copy per row.

A GRPO step samples G completions of several prompts that all begin with the same harness (hundreds of tokens
of system prompt and tools). Repeating the prefix's keys/values per row, as a plain cache must, costs a copy of
rows x prefix at the start of every call and, worse, makes every decode step read the prefix once per row:
attention then streams rows x prefix x layers of keys/values from memory for a one-token query (on the demo
at 32 rows, about a fifth of a decode step: docs/benchmarks.md). Here the cache holds only each row's own
tokens; the prefix (batch 1, per layer) is passed with the forward (`shared_prefix=`), and the attention
computes the scores against it as one matrix product per key/value head for all rows and query heads
together, then against the row's own keys with the mask, and takes one softmax over both.

Registered as the attention implementation `ATTENTION` (with SDPA's mask); `shared_attention(model)` switches a
model to it for the sampler's forwards and back. A forward without `shared_prefix` is plain SDPA, so the
switch is harmless to any forward that does not pass one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "workbench_shared_prefix"
PrefixLayers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [1, kv heads, prefix, dim]


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    shared_prefix: PrefixLayers | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of `query` [rows, heads, q, dim] over the layer's shared prefix (every row may see all of
    it) and then `key`/`value` [rows, kv heads, own, dim], the rows' own tokens, masked by `attention_mask`
    (SDPA's: boolean, True where a query may look; or None, then causal). Returns [rows, q, heads, dim]."""
    if shared_prefix is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    prefix_k, prefix_v = shared_prefix[module.layer_idx]
    rows, heads, q_len, dim = query.shape
    kv_heads, prefix_len = prefix_k.shape[1], prefix_k.shape[2]
    group = heads // kv_heads
    scale = dim**-0.5 if scaling is None else scaling
    # [kv heads, rows * group * q, dim]: the query heads that share a key/value head, all rows together
    grouped = query.reshape(rows, kv_heads, group * q_len, dim).transpose(0, 1).reshape(kv_heads, -1, dim)
    on_prefix = torch.bmm(grouped, prefix_k[0].transpose(1, 2)).mul_(scale)
    on_prefix = on_prefix.view(kv_heads, rows, group * q_len, prefix_len).transpose(0, 1)
    own_q = query.reshape(rows, kv_heads, group * q_len, dim)
    on_own = torch.matmul(own_q, key.transpose(-1, -2)).mul_(scale)  # [rows, kv heads, group * q, own]
    own_len = key.shape[2]
    if attention_mask is None:  # no padding: causal within the row's own tokens
        ahead = (
            torch.arange(own_len, device=query.device)[None]
            > torch.arange(own_len - q_len, own_len, device=query.device)[:, None]
        )
        on_own.view(rows, kv_heads, group, q_len, own_len).masked_fill_(ahead, float("-inf"))
    else:
        mask = attention_mask[..., -own_len:]  # [rows, 1, q, own]
        blocked = ~mask if mask.dtype == torch.bool else mask < -1e30
        on_own.view(rows, kv_heads, group, q_len, own_len).masked_fill_(blocked[:, :, None], float("-inf"))
    weights = torch.cat([on_prefix, on_own], dim=-1).softmax(dim=-1)
    out_prefix = torch.bmm(
        weights[..., :prefix_len].transpose(0, 1).reshape(kv_heads, -1, prefix_len), prefix_v[0]
    )
    out = torch.matmul(weights[..., prefix_len:], value)  # [rows, kv heads, group * q, dim]
    out += out_prefix.view(kv_heads, rows, group * q_len, dim).transpose(0, 1)
    return out.view(rows, heads, q_len, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, shared_prefix_attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def supports_shared_attention(model: Any) -> bool:
    """Plain SDPA models on the CPU (where it was measured): their attention can be switched to this one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    device = next(base.parameters()).device
    return device.type == "cpu" and getattr(base.config, "_attn_implementation", None) in ("sdpa", ATTENTION)


@contextmanager
def shared_attention(model: Any) -> Iterator[None]:
    """The model's attention is `ATTENTION` inside the block (forwards then accept `shared_prefix=`)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    before = base.config._attn_implementation
    base.config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        base.config._attn_implementation = before

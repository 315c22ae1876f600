"""The training forward pass: per-token log-probs of completions under the current (or reference) policy.

- `token_logprobs`: log-probs (and entropy) of target tokens from per-row logits, one row at a time.
- `completion_logprobs`: the packed pass, one forward over [left-padded prompt | right-padded completion]
  rows (TRL's layout).
- `shared_prefix_logprobs`: the same maths with the prompts' common prefix run once. Every sample of a GRPO
  step starts with the same harness (system prompt with the tool specs, the worked example), and the G
  samples of a group share their whole prompt. Packing runs that prefix once per row, forward and backward:
  with a 400-token harness and 48-token replies that is most of the update's compute. Here the prefix runs
  once *with autograd*; its KV cache is repeated per row (`repeat_interleave` is differentiable, so every
  row's gradient flows back through the one prefix pass into the LoRA weights), and only each row's own
  tokens (rest of its prompt, then its completion) run per row. Same maths as `completion_logprobs`, to
  float rounding.
- `BatchPrefix`: the common prefix of a whole update's rows run once for all its micro-batches (each
  micro-batch's `shared_prefix_logprobs` continues from its keys/values); its gradient is gathered at those
  keys/values and taken through the prefix pass once (`BatchPrefix.backward`).
- `sequence_logprobs`: what the trainer and SFT call; the shared-prefix pass when there is a shared
  prefix, else the packed one ($WORKBENCH_PREFIX_REUSE=off: always the packed one).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from workbench.rollout.cache_kind import has_plain_kv_cache
from workbench.rollout.hf import base_forward_params, cache_of
from workbench.rollout.prefix_kv import prefix_reuse
from workbench.rollout.prompt import common_prefix_len

__all__ = [
    "BatchPrefix",
    "batch_prefix",
    "completion_logprobs",
    "sequence_logprobs",
    "shared_prefix_logprobs",
    "token_logprobs",
]


def _pack(
    prompt_ids_list: list[list[int]], completion_ids_list: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """Left-pad prompts and right-pad completions so every completion starts at the same column."""
    if len(prompt_ids_list) != len(completion_ids_list):
        raise ValueError("need one prompt per completion")
    p_width = max(len(p) for p in prompt_ids_list)
    t_width = max((len(c) for c in completion_ids_list), default=0)
    rows = len(prompt_ids_list)
    # Built on the CPU (row writes are cheap there), then one copy each to the model's device.
    ids = torch.full((rows, p_width + t_width), pad_id, dtype=torch.long, device="cpu")
    attn = torch.zeros((rows, p_width + t_width), dtype=torch.long, device="cpu")
    for r, (p, c) in enumerate(zip(prompt_ids_list, completion_ids_list, strict=True)):
        if not p:
            raise ValueError("every prompt needs at least one token")
        ids[r, p_width - len(p) : p_width] = torch.tensor(p, device="cpu")
        ids[r, p_width : p_width + len(c)] = torch.tensor(c, dtype=torch.long, device="cpu")
        attn[r, p_width - len(p) : p_width + len(c)] = 1
    return ids.to(device), attn.to(device), attn[:, p_width:].bool().to(device), p_width, t_width


def completion_logprobs(
    model: Any,
    prompt_ids_list: list[list[int]],
    completion_ids_list: list[list[int]],
    temperature: float = 1.0,
    *,
    pad_token_id: int = 0,
    return_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs [N, T] of each completion token given its prompt, with a mask [N, T] of real tokens.

    One forward over [left-padded prompt | right-padded completion] rows, so completions share columns and
    only the T completion positions go through the LM head (`logits_to_keep`): the [N, L, V] logits of the
    prompt are never built. Logits are divided by `temperature` (as TRL does) so the values match the
    sampler's (`sample_next`); temperature 0 means greedy sampling, scored at temperature 1. Runs with
    autograd on (this is the training pass): wrap in `torch.no_grad()` for old/reference log-probs.
    Padded positions hold 0. With `return_entropy`, also the entropy [N, T] of each position's distribution.
    """
    device = next(model.parameters()).device
    ids, attn, mask, p_width, t_width = _pack(prompt_ids_list, completion_ids_list, pad_token_id, device)
    rows = ids.shape[0]
    if t_width == 0:
        empty = torch.zeros((rows, 0), device=device)
        return (empty, mask, empty.clone()) if return_entropy else (empty, mask)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        use_cache=False,
        logits_to_keep=t_width + 1,
    )
    logits = out.logits[:, :-1, :]  # position j predicts completion token j: [N, T, V]
    return token_logprobs(
        [logits[r] for r in range(rows)], ids[:, p_width:], mask, temperature, return_entropy
    )


def token_logprobs(
    row_logits: list[torch.Tensor],
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    return_entropy: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Log-probs of `targets` [N, T] under each row's logits [T, V] at `temperature` (0 counts as 1), one
    row at a time so the temporaries are [T, V], not [N, T, V]. Entropy (no grad) as -E_p[log p], which
    stays exact when fp32 softmax does not sum to 1 (lse - E_p[x] was off by 6e-4 at logits ~37)."""
    scale = temperature if temperature > 0 else 1.0
    logps, entropies = [], []
    for r, logits in enumerate(row_logits):
        row = logits.float() / scale
        lse = torch.logsumexp(row, -1)
        logps.append(row.gather(-1, targets[r][:, None]).squeeze(-1) - lse)
        if return_entropy:
            with torch.no_grad():
                probs = torch.softmax(row, -1)
                entropies.append(-(probs * (row - lse[..., None])).sum(-1))
    logp = torch.stack(logps) * mask
    if return_entropy:
        return logp, mask, torch.stack(entropies) * mask
    return logp, mask


class BatchPrefix:
    """The common prefix of all the prompts of an update (every micro-batch's), run once.

    It stops one token short of the shortest prompt, so every row has a prompt token of its own and the
    prefix's logits are never needed. Each micro-batch continues from its keys/values
    (`shared_prefix_logprobs(..., prefix=this)`). With autograd on, those keys/values are leaves: each
    micro-batch's backward stops there and adds its gradient to theirs, and `backward()` takes the sum through
    the prefix pass once, into the weights. The same gradient as a prefix pass per micro-batch (the chain
    rule is linear), for one forward and one backward of the prefix; its graph lives until `backward()`."""

    def __init__(self, model: Any, prompt_ids_list: list[list[int]]) -> None:
        length = min(common_prefix_len(prompt_ids_list), min(len(p) for p in prompt_ids_list) - 1)
        if length < 1:
            raise ValueError("the prompts share no prefix short of the shortest one")
        self.tokens = list(prompt_ids_list[0][:length])
        device = next(model.parameters()).device
        out = model(
            input_ids=torch.tensor([self.tokens], dtype=torch.long, device=device),
            use_cache=True,
            logits_to_keep=1,
        )
        cache = cache_of(out)
        self._computed = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in self._computed)
        self._kv = [t.detach().requires_grad_() for t in self._computed] if grad else self._computed

    def cache(self) -> DynamicCache:
        """A fresh cache of batch 1 holding the prefix's keys/values, for one micro-batch to continue from."""
        return DynamicCache(ddp_cache_data=list(zip(self._kv[0::2], self._kv[1::2], strict=True)))

    def backward(self) -> None:
        """Take the gradient gathered at the prefix's keys/values through its pass (once, after every
        micro-batch's backward), then free the pass."""
        pairs = [
            (t, kv.grad)
            for t, kv in zip(self._computed, self._kv, strict=True)
            if kv is not t and t.requires_grad and kv.grad is not None
        ]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        self._computed, self._kv = [], []


def batch_prefix(model: Any, prompt_ids_list: list[list[int]]) -> BatchPrefix | None:
    """One prefix pass for an update's micro-batches, or None where there is none to share (no common prefix,
    a model whose cache is not plain keys/values, $WORKBENCH_PREFIX_REUSE other than on)."""
    if prefix_reuse() != "on" or not prompt_ids_list or not has_plain_kv_cache(model):
        return None
    if min(common_prefix_len(prompt_ids_list), min(len(p) for p in prompt_ids_list) - 1) < 1:
        return None
    return BatchPrefix(model, prompt_ids_list)


def shared_prefix_logprobs(
    model: Any,
    prompt_ids_list: list[list[int]],
    completion_ids_list: list[list[int]],
    temperature: float = 1.0,
    *,
    pad_token_id: int = 0,
    return_entropy: bool = False,
    prefix: BatchPrefix | None = None,
) -> tuple[torch.Tensor, ...]:
    """(logps [N, T], mask [N, T]) (+ entropy [N, T]) of each completion given its prompt; drop-in for
    `completion_logprobs` that runs the prompts' common prefix once. With `prefix` (the whole update's, which
    these prompts start with), only the part of the common prefix after it runs here."""
    if len(prompt_ids_list) != len(completion_ids_list) or not prompt_ids_list:
        raise ValueError("need one prompt per completion, and at least one")
    device = next(model.parameters()).device
    n = len(prompt_ids_list)
    # A row whose prompt is the whole prefix (all of a group's rows) has its first completion token
    # predicted by the prefix's last logits (`head` below).
    p = common_prefix_len(prompt_ids_list)
    if p == 0:
        raise ValueError("prompts share no prefix token; use completion_logprobs")
    start = 0 if prefix is None else len(prefix.tokens)
    if prefix is not None and (p < start or prompt_ids_list[0][:start] != prefix.tokens):
        raise ValueError("the prompts do not start with the batch's prefix")
    rests = [pr[p:] for pr in prompt_ids_list]
    r_width = max(len(r) for r in rests)
    t_width = max((len(c) for c in completion_ids_list), default=0)
    if t_width == 0:
        empty = torch.zeros((n, 0), device=device)
        mask = torch.zeros((n, 0), dtype=torch.bool, device=device)
        return (empty, mask, empty.clone()) if return_entropy else (empty, mask)
    # Rows as [left-padded rest of the prompt | right-padded completion], so every completion starts at column
    # r_width and only the completion columns go through the LM head (`logits_to_keep`): a multi-turn row's
    # rest is its whole history, and its [rest, V] logits were most of the pass's memory and a fifth of its
    # compute (docs/benchmarks.md).
    ids = torch.full((n, r_width + t_width), pad_token_id, dtype=torch.long, device="cpu")
    attn = torch.zeros((n, r_width + t_width), dtype=torch.long, device="cpu")
    targets = torch.full((n, t_width), pad_token_id, dtype=torch.long, device="cpu")
    for r, (rest, comp) in enumerate(zip(rests, completion_ids_list, strict=True)):
        row = rest + comp
        if row:
            start_col = r_width - len(rest)
            ids[r, start_col : start_col + len(row)] = torch.tensor(row, dtype=torch.long, device="cpu")
            attn[r, start_col : start_col + len(row)] = 1
        if comp:
            targets[r, : len(comp)] = torch.tensor(comp, dtype=torch.long, device="cpu")
    ids, attn, targets = ids.to(device), attn.to(device), targets.to(device)
    mask = attn[:, r_width:].bool()
    cache_kw = "cache" if "cache" in base_forward_params(model) else "past_key_values"
    cache, head = (prefix.cache(), None) if prefix is not None else (None, None)
    if p > start:  # the common prefix (after the batch's), once
        given = {cache_kw: cache} if cache is not None else {}
        first = model(
            input_ids=torch.tensor([prompt_ids_list[0][start:p]], dtype=torch.long, device=device),
            position_ids=torch.arange(start, p, device=device)[None],
            use_cache=True,
            logits_to_keep=1,
            **given,
        )
        cache, head = cache_of(first), first.logits[0, -1:, :]  # [1, V]: predicts a row's first own token
    cache.batch_repeat_interleave(n)
    full_attn = torch.cat([torch.ones((n, p), dtype=torch.long, device=device), attn], dim=-1)
    positions = p + (attn.cumsum(-1) - 1).clamp(min=0)  # real tokens at p, p+1, ...; pads anywhere valid
    # Column r_width - 1 + j predicts completion token j: the last rest column, then the completion's.
    keep = t_width + 1 if r_width else t_width
    out = model(
        input_ids=ids,
        attention_mask=full_attn,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=keep,
        **{cache_kw: cache},
    ).logits
    rows = []
    for r, rest in enumerate(rests):
        if r_width == 0:  # no row has a prompt token of its own: the prefix's last logits predict token 0
            rows.append(torch.cat([head, out[r, : t_width - 1]]))
        elif not rest:  # this row's column r_width - 1 is padding: the prefix's last logits predict token 0
            rows.append(torch.cat([head, out[r, 1:t_width]]))
        else:
            rows.append(out[r, :t_width])
    return token_logprobs(rows, targets, mask, temperature, return_entropy)


def sequence_logprobs(
    model: Any,
    prompt_ids_list: list[list[int]],
    completion_ids_list: list[list[int]],
    temperature: float = 1.0,
    **kw: Any,
) -> tuple[torch.Tensor, ...]:
    """`shared_prefix_logprobs` when the prompts share a prefix (always, with one harness), else the
    packed `completion_logprobs`; always the packed one for a model whose cache is not plain attention
    keys/values (a hybrid Mamba model's recurrent state cannot be repeated per row), and with
    $WORKBENCH_PREFIX_REUSE=off. `prefix=` (a `BatchPrefix` of the whole update) goes to the shared pass."""
    if kw.get("prefix") is not None:
        return shared_prefix_logprobs(model, prompt_ids_list, completion_ids_list, temperature, **kw)
    kw.pop("prefix", None)
    shared = prefix_reuse() != "off" and common_prefix_len(prompt_ids_list) > 0 and has_plain_kv_cache(model)
    fn = shared_prefix_logprobs if shared else completion_logprobs
    return fn(model, prompt_ids_list, completion_ids_list, temperature, **kw)

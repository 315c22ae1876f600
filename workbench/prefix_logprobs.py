"""The training forward pass with a shared prefix: the common start of the prompts runs once.

Every sample of a GRPO step starts with the same harness (system prompt with the tool specs, the worked
example), and the G samples of a group share their whole prompt. Packing [prompt | completion] rows (what
TRL does) runs that prefix once per row, forward and backward: with a 400-token harness and 48-token
replies that is most of the update's compute. Here the prefix runs once *with autograd*; its KV cache is
repeated per row (`repeat_interleave` is differentiable, so every row's gradient flows back through the
one prefix pass into the LoRA weights), and only each row's own tokens (rest of its prompt, then its
completion) run per row. Same maths as `completion_logprobs`, to float rounding.
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.logprobs import completion_logprobs, token_logprobs
from workbench.rollout.hf import _base_forward_params, _cache_of
from workbench.rollout.prompt import common_prefix_len

__all__ = ["common_prefix_len", "sequence_logprobs", "shared_prefix_logprobs"]


def shared_prefix_logprobs(
    model: Any,
    prompt_ids_list: list[list[int]],
    completion_ids_list: list[list[int]],
    temperature: float = 1.0,
    *,
    pad_token_id: int = 0,
    return_entropy: bool = False,
) -> tuple[torch.Tensor, ...]:
    """(logps [N, T], mask [N, T]) (+ entropy [N, T]) of each completion given its prompt; drop-in for
    `completion_logprobs` that runs the prompts' common prefix once."""
    if len(prompt_ids_list) != len(completion_ids_list) or not prompt_ids_list:
        raise ValueError("need one prompt per completion, and at least one")
    device = next(model.parameters()).device
    n = len(prompt_ids_list)
    # A row whose prompt is the whole prefix (all of a group's rows) has its first completion token
    # predicted by the prefix's last logits (combined index 0 below).
    p = common_prefix_len(prompt_ids_list)
    if p == 0:
        raise ValueError("prompts share no prefix token; use completion_logprobs")
    rests = [pr[p:] for pr in prompt_ids_list]
    t_width = max((len(c) for c in completion_ids_list), default=0)
    width = max(len(r) + len(c) for r, c in zip(rests, completion_ids_list, strict=True))
    ids = torch.full((n, max(width, 1)), pad_token_id, dtype=torch.long, device=device)
    attn = torch.zeros((n, max(width, 1)), dtype=torch.long, device=device)
    targets = torch.full((n, t_width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((n, t_width), dtype=torch.bool, device=device)
    # Row r's completion token j is predicted at combined index len(rest_r) + j of [prefix_last | row tokens].
    src = torch.zeros((n, t_width), dtype=torch.long, device=device)
    for r, (rest, comp) in enumerate(zip(rests, completion_ids_list, strict=True)):
        row = rest + comp
        if row:
            ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            attn[r, : len(row)] = 1
        if comp:
            targets[r, : len(comp)] = torch.tensor(comp, dtype=torch.long)
            mask[r, : len(comp)] = True
        src[r] = len(rest) + torch.arange(t_width, device=device)
    if t_width == 0:
        empty = torch.zeros((n, 0), device=device)
        return (empty, mask, empty.clone()) if return_entropy else (empty, mask)
    prefix = torch.tensor([prompt_ids_list[0][:p]], dtype=torch.long, device=device)
    first = model(input_ids=prefix, use_cache=True, logits_to_keep=1)
    cache = _cache_of(first)
    cache.batch_repeat_interleave(n)
    cache_kw = "cache" if "cache" in _base_forward_params(model) else "past_key_values"
    full_attn = torch.cat([torch.ones((n, p), dtype=torch.long, device=device), attn], dim=-1)
    positions = torch.arange(p, p + ids.shape[1], device=device).expand(n, -1)
    rest_out = model(input_ids=ids, attention_mask=full_attn, position_ids=positions, use_cache=True,
                     **{cache_kw: cache})
    combined = torch.cat([first.logits[:, -1:, :].expand(n, 1, -1), rest_out.logits], dim=1)
    src = src.clamp(max=combined.shape[1] - 1)  # padded positions point anywhere valid; masked below
    return token_logprobs([combined[r, src[r]] for r in range(n)], targets, mask, temperature, return_entropy)


def sequence_logprobs(
    model: Any,
    prompt_ids_list: list[list[int]],
    completion_ids_list: list[list[int]],
    temperature: float = 1.0,
    **kw: Any,
) -> tuple[torch.Tensor, ...]:
    """`shared_prefix_logprobs` when the prompts share a prefix (always, with one harness), else the
    packed `completion_logprobs`."""
    fn = shared_prefix_logprobs if common_prefix_len(prompt_ids_list) > 0 else completion_logprobs
    return fn(model, prompt_ids_list, completion_ids_list, temperature, **kw)

"""The training forward pass for one GRPO group: the prompt once, its KV cache shared by the G completions.

A group's G completions continue the same prompt. Packing G copies of [prompt | completion] (what TRL does)
runs the prompt G times forward and backward; with a 400-token harness prompt and 48-token replies that is
~90% of the update's compute. Here the prompt runs once *with autograd*, its cache is repeated G times
(`repeat_interleave` is differentiable: gradients from every completion flow back into the one prompt
pass and on into the LoRA weights), and only the completion tokens run per sample. Same maths as
`completion_logprobs`, to float rounding.
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.rollout.hf import _base_forward_params, _cache_of


def group_logprobs(
    model: Any,
    prompt_ids: list[int],
    completion_ids_list: list[list[int]],
    temperature: float = 1.0,
    *,
    pad_token_id: int = 0,
    return_entropy: bool = False,
) -> tuple[torch.Tensor, ...]:
    """(logps [G, T], mask [G, T]) (+ entropy [G, T]) of each completion after the shared prompt."""
    if not prompt_ids:
        raise ValueError("the prompt needs at least one token")
    device = next(model.parameters()).device
    g = len(completion_ids_list)
    width = max((len(c) for c in completion_ids_list), default=0)
    mask = torch.zeros((g, width), dtype=torch.bool, device=device)
    ids = torch.full((g, width), pad_token_id, dtype=torch.long, device=device)
    for r, c in enumerate(completion_ids_list):
        ids[r, : len(c)] = torch.tensor(c, dtype=torch.long)
        mask[r, : len(c)] = True
    if width == 0:
        empty = torch.zeros((g, 0), device=device)
        return (empty, mask, empty.clone()) if return_entropy else (empty, mask)
    p = len(prompt_ids)
    prompt = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    first = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
    cache = _cache_of(first)
    cache.batch_repeat_interleave(g)
    cache_kw = "cache" if "cache" in _base_forward_params(model) else "past_key_values"
    attn = torch.cat([torch.ones((g, p), dtype=torch.long, device=device), mask.long()], dim=-1)
    positions = torch.arange(p, p + width, device=device).expand(g, width)
    rest = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, **{cache_kw: cache})
    # Position j's logits predict completion token j: the prompt's last logits, then completion logits [:-1].
    logits = torch.cat([first.logits[:, -1:, :].expand(g, 1, -1), rest.logits[:, :-1, :]], dim=1)
    scale = temperature if temperature > 0 else 1.0
    logps, entropies = [], []
    for r in range(g):  # one row at a time: temporaries are [T, V], not [G, T, V]
        row = logits[r].float() / scale
        lse = torch.logsumexp(row, -1)
        logps.append(row.gather(-1, ids[r][:, None]).squeeze(-1) - lse)
        if return_entropy:
            with torch.no_grad():
                probs = torch.softmax(row, -1)
                entropies.append(lse - (probs * row).sum(-1))
    logp = torch.stack(logps) * mask
    if return_entropy:
        return logp, mask, torch.stack(entropies) * mask
    return logp, mask

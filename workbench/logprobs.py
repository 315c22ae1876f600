"""The training forward pass: per-token log-probs of completions under the current (or reference) policy."""

from __future__ import annotations

from typing import Any

import torch


def _pack(
    prompt_ids_list: list[list[int]], completion_ids_list: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """Left-pad prompts and right-pad completions so every completion starts at the same column."""
    if len(prompt_ids_list) != len(completion_ids_list):
        raise ValueError("need one prompt per completion")
    p_width = max(len(p) for p in prompt_ids_list)
    t_width = max((len(c) for c in completion_ids_list), default=0)
    rows = len(prompt_ids_list)
    ids = torch.full((rows, p_width + t_width), pad_id, dtype=torch.long)
    attn = torch.zeros((rows, p_width + t_width), dtype=torch.long)
    for r, (p, c) in enumerate(zip(prompt_ids_list, completion_ids_list, strict=True)):
        if not p:
            raise ValueError("every prompt needs at least one token")
        ids[r, p_width - len(p) : p_width] = torch.tensor(p)
        ids[r, p_width : p_width + len(c)] = torch.tensor(c, dtype=torch.long)
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
    return token_logprobs([logits[r] for r in range(rows)], ids[:, p_width:], mask, temperature, return_entropy)


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

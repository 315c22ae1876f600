"""The policy update of one GRPO step: the scored episodes' turns as rows, then `num_iterations` optimizer
steps over them, micro-batched and exactly normalised (the trainer decides what is kept and when).

Without a KL term a row whose advantage is 0 (every member of a zero-variance group) has loss 0 and gradient
0 under every loss type, so it gets no forward or backward pass; the normalisers still count it, so the
gradient is the whole batch's. Late in a run most groups are such (all 1.0). The per-token metrics
(entropy, clip ratios) are then over the rows that carry gradient.

Each assistant turn is a row. With `multi_turn_weighting: episode` an episode's turns weigh as one sequence,
as TRL's single masked sequence would: grpo weights each turn's token mean by its share of the episode's
tokens, and grpo and dr_grpo count episodes, not turns (token-level dapo and bnpo are the same either way);
`turn` weighs each turn as a sequence. Single-turn runs are identical. With `mask_truncated_completions` a
truncated episode has no loss and no pass: it still counts as a sequence (as in TRL) but its tokens are out
of the token normalisers. A non-finite gradient norm skips that optimizer step (the gradients are dropped)
and is counted in `skipped_nonfinite_grad`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from workbench.config import Config
from workbench.learn import grpo
from workbench.learn.logprobs import BatchPrefix, batch_prefix, sequence_logprobs
from workbench.rollout.prompt import common_prefix_len
from workbench.rollout.runner import Rollout

# prompt ids, completion ids, advantage, sampling logps, and the row's weight: 0 for a row without loss
# (overlong filtering), else 1, or its share of the episode's tokens (multi-turn, episode weighting, grpo)
Item = tuple[list[int], list[int], float, list[float], float]


def truncated_is_weights(
    trainer_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance sampling for an engine that is not the trainer (vLLM), as TRL does.

    The engine sampled from p_engine, the loss is for p_trainer: weight each token by
    min(p_trainer / p_engine, cap). Also returns the mismatch as metrics: `mismatch_kl`, the k3 estimate
    of KL(p_engine || p_trainer) over the sampled tokens (r - 1 - log r), the ratio's mean and the share cut."""
    log_r = (trainer_logps - sampling_logps) * mask
    ratio = log_r.exp()
    n = mask.sum().clamp(min=1.0)
    metrics = {
        "mismatch_kl": float(((ratio - 1 - log_r) * mask).sum() / n),
        "is_ratio/mean": float((ratio * mask).sum() / n),
        "is_ratio/clipped_frac": float(((ratio > cap) & (mask > 0)).sum() / n),
    }
    return ratio.clamp(max=cap) * mask, metrics


def _chunks(items: list[Item], size: int) -> list[list[Item]]:
    """Micro-batches for the update: of two orders, the one that runs fewer padded token positions.

    Step order keeps a group's samples together, so what they share beyond the harness (their whole prompt,
    single-turn) runs once per micro-batch. By prompt length (equal prompts still adjacent) suits multi-turn
    rows, whose histories run from a few tokens to hundreds: mixed in step order, every row of a micro-batch
    is padded to its longest (2.3x the real tokens on one stored agent step, docs/benchmarks.md). Every
    prompt of a step starts with the same harness, which runs once for all the micro-batches
    (`BatchPrefix`). The loss is a sum over micro-batches, so the order changes only float rounding."""
    step_order = [items[i : i + size] for i in range(0, len(items), size)]
    by_length = sorted(items, key=lambda it: (len(it[0]), it[0], len(it[1])))
    by_length_chunks = [by_length[i : i + size] for i in range(0, len(by_length), size)]
    return min(step_order, by_length_chunks, key=padded_positions)


def padded_positions(chunks: list[list[Item]]) -> int:
    """Token positions the micro-batches run beyond what each one's prompts share: rows x the longest row."""
    total = 0
    for ch in chunks:
        shared = common_prefix_len([it[0] for it in ch])
        total += len(ch) * max(len(it[0]) - shared + len(it[1]) for it in ch)
    return total


def _padded(rows: list[list[float]], like: torch.Tensor) -> torch.Tensor:
    """Per-token values right-padded with 0 to `like`'s [N, T] (the completion layout of the log-prob pass)."""
    out = torch.zeros_like(like, dtype=like.dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r[: like.shape[1]], dtype=like.dtype, device=like.device)
    return out


def update_items(episodes: Sequence[tuple[Rollout, float | None]], cfg: Config) -> tuple[list[Item], int]:
    """(the rows of the episodes that have an advantage, the sequence count grpo and dr_grpo average over)."""
    by_episode = cfg.multi_turn_weighting == "episode"
    items: list[Item] = []
    n_seqs = 0
    for rollout, a in episodes:
        if a is None:
            continue
        segs = [seg for seg in rollout.segments if seg.completion.token_ids]  # an empty one has no token
        if not segs:
            continue
        n_seqs += 1 if by_episode else len(segs)
        masked = cfg.mask_truncated_completions and rollout.truncated
        ep_tokens = sum(len(seg.completion.token_ids) for seg in segs)
        for seg in segs:
            ids = seg.completion.token_ids
            w = 0.0 if masked else (len(ids) / ep_tokens if by_episode and cfg.loss_type == "grpo" else 1.0)
            items.append((seg.prompt_ids, ids, a, seg.completion.logprobs, w))
    return items, n_seqs


def policy_update(
    policy: Any,
    optimizer: torch.optim.Optimizer,
    cfg: Config,
    items: list[Item],
    n_seqs: int,
    *,
    temperature: float,
    lr: float,
    is_correction: bool = False,
    micro_batch: int = 16,
    skip_zero_advantage: bool = True,
    on_skip: Callable[[float], None] = lambda grad_norm: None,
    sync: Any = None,
) -> dict[str, float]:
    """`cfg.num_iterations` optimizer steps at learning rate `lr` on `items`; the step's metrics.

    `sync` (workbench.distributed.collective) with data-parallel ranks, each holding its share of the step's
    rows: the decisions (nothing to train, all advantages zero) and the normalisers are the whole step's,
    the gradients are summed over ranks before clipping, so every rank takes the 1-process optimizer step."""
    live = [it for it in items if it[4] > 0]  # rows with a loss (overlong filtering drops the others)
    nonzero = [it for it in live if it[2] != 0.0] if skip_zero_advantage and cfg.beta == 0 else live
    counts = [
        len(live),
        len(nonzero),
        sum(len(it[1]) for it in live),
        sum(len(it[1]) for it in nonzero),
        n_seqs,
    ]
    if sync is not None:
        counts = [int(c) for c in sync.sum_floats(counts)]
    if counts[0] == 0:
        return {"loss": 0.0, "update_skipped": 1.0}
    loss_type, level = cfg.loss_type, cfg.importance_sampling_level
    model = policy.model
    pad = policy.tokenizer.pad_token_id or 0
    temp = temperature if temperature > 0 else 1.0
    total_tokens, n_seqs = counts[2], counts[4]  # normalisers: over every row with a loss, skipped or not
    # all zero (on every rank): run them anyway, so the optimizer step is the same as ever
    work, work_tokens = (nonzero, counts[3]) if counts[1] else (live, total_tokens)
    chunks = _chunks(work, micro_batch)

    def logprobs(m: Any, ch: list[Item], entropy: bool = False, prefix: BatchPrefix | None = None) -> tuple:
        prompts, comps = [it[0] for it in ch], [it[1] for it in ch]
        return sequence_logprobs(
            m, prompts, comps, temp, pad_token_id=pad, return_entropy=entropy, prefix=prefix
        )

    def shared(m: Any) -> BatchPrefix | None:
        """The harness every micro-batch starts with, run once for all of them (a lone micro-batch
        shares it anyway)."""
        return batch_prefix(m, [it[0] for it in work]) if len(chunks) > 1 else None

    old: list[torch.Tensor | None] = [None] * len(chunks)
    ref: list[torch.Tensor | None] = [None] * len(chunks)
    model.train()  # old log-probs in the update's own mode (LoRA dropout), so the first ratio is 1
    with torch.no_grad():
        if cfg.num_iterations > 1:
            prefix = shared(model)
            old = [logprobs(model, ch, prefix=prefix)[0] for ch in chunks]
        if cfg.beta > 0:
            with policy.reference() as ref_model:
                prefix = shared(ref_model)
                ref = [logprobs(ref_model, ch, prefix=prefix)[0] for ch in chunks]
    for group in optimizer.param_groups:
        group["lr"] = lr
    model.train()
    sums: dict[str, float] = {}
    grad_norm = 0.0
    skipped = 0
    for _ in range(cfg.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        prefix = shared(model)
        for j, ch in enumerate(chunks):
            logps, mask, ent = logprobs(model, ch, entropy=True, prefix=prefix)
            adv = torch.tensor([it[2] for it in ch], dtype=logps.dtype, device=logps.device)
            seq_w = (
                None
                if all(it[4] == 1.0 for it in ch)
                else torch.tensor([it[4] for it in ch], dtype=logps.dtype, device=logps.device)
            )
            old_j = old[j] if old[j] is not None else logps.detach()
            is_w = None
            if is_correction:
                is_w, is_m = truncated_is_weights(
                    old_j, _padded([it[3] for it in ch], logps), mask.to(logps.dtype), cfg.vllm_is_cap
                )
                for k, v in is_m.items():
                    sums[k] = sums.get(k, 0.0) + v * float(mask.sum()) / work_tokens
            loss, m = grpo.policy_loss(
                logps,
                old_j,
                adv,
                mask.to(logps.dtype),
                loss_type=loss_type,
                importance_sampling_level=level,
                epsilon_low=cfg.epsilon,
                epsilon_high=cfg.epsilon_high,
                beta=cfg.beta,
                ref_logps=ref[j],
                max_completion_length=cfg.max_completion_length,
                entropies=ent.detach(),
                num_items_in_batch=total_tokens if loss_type == "dapo" else None,
                sampling_is_weights=is_w,
                sequence_weights=seq_w,
            )
            chunk_tokens = float(mask.sum())
            # Chunks sum to the whole batch's loss: each normaliser is linear in its chunk.
            weight = {"dapo": 1.0, "bnpo": chunk_tokens / total_tokens}.get(loss_type, len(ch) / n_seqs)
            (loss * weight).backward()
            tok_w = chunk_tokens / work_tokens
            sums["loss"] = sums.get("loss", 0.0) + float(loss.detach()) * weight
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + v * tok_w
        if prefix is not None:  # the micro-batches' gradients at the harness's keys/values, through it once
            prefix.backward()
        if sync is not None:  # each rank's loss used the step's normalisers: the sum is the step's gradient
            sync.sum_grads(policy.trainable_parameters())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), cfg.max_grad_norm))
        if math.isfinite(grad_norm):
            optimizer.step()
        else:  # NaN/inf would reach every weight (and Adam's moments): drop this step's gradients instead
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            on_skip(grad_norm)
    model.eval()
    if sync is not None:  # each rank's sums are its share of the step's (weighted by the step's totals)
        sums = sync.sum_dict(sums)
    out = {k: v / cfg.num_iterations for k, v in sums.items()}
    out["grad_norm"] = grad_norm if math.isfinite(grad_norm) else -1.0
    out["num_tokens"] = float(total_tokens)
    out["update_tokens"] = float(work_tokens)
    out["skipped_nonfinite_grad"] = float(skipped)
    return out

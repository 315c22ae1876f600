"""The policy update of one GRPO step: the scored episodes as rows, then `num_iterations` optimizer
steps over them, micro-batched and exactly normalised (the trainer decides what is kept and when).

Without a KL term a row whose advantage is 0 (every member of a zero-variance group) has loss 0 and gradient
0 under every loss type, so it gets no forward or backward pass; the normalisers still count it, so the
gradient is the whole batch's. Late in a run most groups are such (all 1.0). The per-token metrics
(entropy, clip ratios) are then over the rows that carry gradient.

With `multi_turn_weighting: episode` an episode's turns weigh as one sequence, as TRL's single masked sequence
would: grpo takes the token mean over the whole episode, and grpo and dr_grpo count episodes, not turns
(token-level dapo and bnpo are the same either way). An episode is then one row, its sampled turns trained and
the tool results between them masked (`episode_row`), so its history runs once, not once a turn; with `turn`
(or sequence-level ratios) each assistant turn is a row and weighs as a sequence. Single-turn runs are
identical. With `mask_truncated_completions` a truncated episode has no loss and no pass: it still counts as a
sequence (as in TRL) but its tokens are out of the token normalisers. A non-finite gradient norm skips that
optimizer step (the gradients are dropped) and is counted in `skipped_nonfinite_grad`.
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

# prompt ids, completion ids, advantage, sampling logps, the row's weight (0 for a row without loss (overlong
# filtering), else 1, or its share of the episode's tokens (multi-turn, episode weighting, grpo, turns as rows)),
# and optionally which completion positions are trained: a whole episode as one row (`episode_row`) also holds
# the tool results and turn templates between its sampled turns, which carry no loss.
Item = (
    tuple[list[int], list[int], float, list[float], float]
    | tuple[list[int], list[int], float, list[float], float, list[bool]]
)

# Padded token positions one micro-batch may run (rows x longest row past their shared prompt), besides its row
# cap: single-turn steps stay far below it (16 rows x ~80 positions); an agent step's long histories would
# otherwise run 16 x ~550, and the activations the backward keeps grow with the positions (docs/benchmarks.md).
POSITION_BUDGET = 4096


def trained_mask(item: Item) -> list[bool] | None:
    """Which completion positions carry loss; None when all do."""
    return item[5] if len(item) > 5 else None  # type: ignore[misc]


def trained_tokens(item: Item) -> int:
    mask = trained_mask(item)
    return len(item[1]) if mask is None else sum(mask)


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


def _chunks(items: list[Item], size: int, budget: int = POSITION_BUDGET) -> list[list[Item]]:
    """Micro-batches for the update: of three orders, the one that runs fewest padded token positions, each
    micro-batch at most `size` rows and (unless one row alone is more) `budget` padded positions.

    Step order keeps a group's samples together: a micro-batch of one group runs their shared prompt once (a
    micro-batch shares only what all its prompts share). Multi-turn rows differ in length by hundreds of
    tokens: turns as rows by their history, whole episodes as rows (which share their first prompt) by their
    turns. Mixed in step order, every row of a micro-batch is padded to its longest (2.3x the real tokens on
    one stored agent step, docs/benchmarks.md). Every prompt of a step starts with the same harness, which runs
    once for all the micro-batches (`BatchPrefix`). The loss is a sum over micro-batches, so the order changes
    only float rounding."""
    orders = (
        items,
        sorted(items, key=lambda it: (len(it[0]), it[0], len(it[1]))),  # turns as rows: by history
        sorted(items, key=lambda it: (len(it[0]) + len(it[1]), it[0])),  # episodes as rows: by episode length
    )
    return min((_fill(order, size, budget) for order in orders), key=padded_positions)


def _fill(order: list[Item], size: int, budget: int) -> list[list[Item]]:
    """Consecutive rows of `order` into micro-batches, each closed before a row would break its caps."""
    chunks: list[list[Item]] = []
    chunk: list[Item] = []
    shared = longest = 0  # the chunk's common prompt prefix, its longest prompt + completion
    for it in order:
        total = len(it[0]) + len(it[1])
        if chunk:
            s = min(shared, common_prefix_len([chunk[0][0], it[0]]))
            if len(chunk) < size and (len(chunk) + 1) * (max(longest, total) - s) <= budget:
                chunk.append(it)
                shared, longest = s, max(longest, total)
                continue
            chunks.append(chunk)
        chunk, shared, longest = [it], len(it[0]), total
    return chunks + [chunk] if chunk else chunks


def padded_positions(chunks: list[list[Item]]) -> int:
    """Token positions the micro-batches run beyond what each one's prompts share: rows x the longest row."""
    total = 0
    for ch in chunks:
        shared = common_prefix_len([it[0] for it in ch])
        total += len(ch) * max(len(it[0]) - shared + len(it[1]) for it in ch)
    return total


def _trained(chunk: list[Item], mask: torch.Tensor) -> torch.Tensor:
    """The log-prob pass's mask of real completion tokens [N, T], less the positions that carry no loss."""
    masks = [trained_mask(it) for it in chunk]
    if all(m is None for m in masks):
        return mask
    keep = torch.ones_like(mask)
    for i, m in enumerate(masks):
        if m is not None:
            keep[i, : len(m)] = torch.tensor(m, dtype=torch.bool, device=mask.device)
    return mask & keep


def _padded(rows: list[list[float]], like: torch.Tensor) -> torch.Tensor:
    """Per-token values right-padded with 0 to `like`'s [N, T] (the completion layout of the log-prob pass)."""
    out = torch.zeros_like(like, dtype=like.dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r[: like.shape[1]], dtype=like.dtype, device=like.device)
    return out


def update_items(episodes: Sequence[tuple[Rollout, float | None]], cfg: Config) -> tuple[list[Item], int]:
    """(the rows of the episodes that have an advantage, the sequence count grpo and dr_grpo average over).

    With episode weighting and token-level ratios, a multi-turn episode is one row (`episode_row`): the same
    loss as its turns as rows, for one pass over its history instead of one a turn."""
    by_episode = cfg.multi_turn_weighting == "episode"
    whole = by_episode and cfg.importance_sampling_level == "token"
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
        row = episode_row(segs) if whole and len(segs) > 1 else None
        if row is not None:
            prompt, completion, logps, trained = row
            items.append((prompt, completion, a, logps, 0.0 if masked else 1.0, trained))
            continue
        ep_tokens = sum(len(seg.completion.token_ids) for seg in segs)
        for seg in segs:
            ids = seg.completion.token_ids
            w = 0.0 if masked else (len(ids) / ep_tokens if by_episode and cfg.loss_type == "grpo" else 1.0)
            items.append((seg.prompt_ids, ids, a, seg.completion.logprobs, w))
    return items, n_seqs


def episode_row(segments: Sequence[Any]) -> tuple[list[int], list[int], list[float], list[bool]] | None:
    """A multi-turn episode as one row: (first turn's prompt, everything after it up to the last completion,
    sampling log-probs there (0 between turns), which positions were sampled), or None when a turn's prompt
    does not continue the one before it (its prompt + completion), where the turns stay rows of their own.

    The same maths as a row a turn: a causal model's logits at a position depend on the ids before it alone,
    and each turn's prompt is exactly those ids. Under grpo's episode weighting a turn's token mean weighs
    its share of the episode's tokens, so the turns sum to the episode's token mean: this row's (weight 1);
    the token-level losses (dapo, bnpo, dr_grpo) sum tokens either way."""
    first = list(segments[0].prompt_ids)
    seq = list(first)
    logps: list[float] = []
    trained: list[bool] = []
    for seg in segments:
        prompt = seg.prompt_ids
        if len(prompt) < len(seq) or list(prompt[: len(seq)]) != seq:
            return None
        between = list(prompt[len(seq) :])  # the tool results and the next turn's template
        ids = list(seg.completion.token_ids)
        seq += between + ids
        logps += [0.0] * len(between) + [float(x) for x in seg.completion.logprobs]
        trained += [False] * len(between) + [True] * len(ids)
    return first, seq[len(first) :], logps, trained


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
        sum(trained_tokens(it) for it in live),
        sum(trained_tokens(it) for it in nonzero),
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
            mask = _trained(ch, mask)
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

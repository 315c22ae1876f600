"""GRPO maths as pure functions on tensors: group advantages, the clipped policy loss and its variants
(GRPO, DAPO, Dr. GRPO, BNPO, GSPO). Per-token log-probs come from `workbench.learn.logprobs`.

No model, no store, no UI: the trainer feeds tensors in and logs the returned metrics. The formulas
mirror TRL 1.x's `GRPOTrainer` (`_generate_and_score_completions` for advantages, `_compute_loss` for the
loss) so runs here can be compared with TRL runs number for number; where a behaviour follows TRL
rather than intuition the docstring says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

import torch
from torch import Tensor

from workbench.config import ISLevel, LossType, ScaleRewards

__all__ = [
    "group_advantages",
    "overlong_penalty",
    "policy_loss",
]

# The choices are the config's (one list each, from its Literal types).
_LOSS_TYPES = get_args(LossType)
_IS_LEVELS = get_args(ISLevel)
_SCALES = get_args(ScaleRewards)


# --------------------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------------------


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """View rewards as [B, G]; completions of one prompt must be contiguous (TRL's RepeatSampler order)."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if rewards.numel() % group_size != 0:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    if rewards.dim() == 2 and rewards.shape[1] != group_size:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} do not have group_size={group_size} columns"
        )
    if rewards.dim() not in (1, 2):
        raise ValueError(f"rewards must be [B*G] or [B, G], got shape {tuple(rewards.shape)}")
    return rewards.reshape(-1, group_size)


def _group_std(grouped: Tensor) -> Tensor:
    """Per-group Bessel-corrected std [B]; a group of one has no spread, so 0 (TRL does the same)."""
    if grouped.shape[1] < 2:
        return torch.zeros(grouped.shape[0], dtype=grouped.dtype, device=grouped.device)
    return grouped.std(dim=1)


def group_advantages(
    rewards: Tensor,
    group_size: int,
    scale_rewards: ScaleRewards = "group",
    leave_one_out: bool = False,
    eps: float = 1e-4,
) -> Tensor:
    """Group-relative advantages, returned in the shape of `rewards` ([B*G] or [B, G]).

    advantage = reward - baseline, baseline = the group's mean (TRL) or, with `leave_one_out`, the mean
    of the other G-1 members (RLOO: the baseline does not contain the sample itself, so it is unbiased;
    numerically this is G/(G-1) times the mean-centred value). Then:

    - "group": divide by the group's std (Bessel-corrected, as `torch.std`) + eps. TRL's default.
    - "batch": divide by the std of all rewards in the batch + eps (more robust when groups are tiny).
    - "none":  no scaling (Dr. GRPO: dividing by std up-weights near-uniform groups, a difficulty bias).

    A zero-variance group gets advantage exactly 0 (0 / eps), i.e. no learning signal; the eps keeps that
    finite and also damps groups whose spread is far below eps.
    """
    if scale_rewards not in _SCALES:
        raise ValueError(f"scale_rewards must be one of {_SCALES}, got {scale_rewards!r}")
    grouped = _grouped(rewards, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    if leave_one_out:
        if group_size < 2:
            raise ValueError("leave_one_out needs group_size >= 2 (the baseline is the other members' mean)")
        baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    else:
        baseline = mean
    adv = grouped - baseline
    if scale_rewards == "group":
        adv = adv / (_group_std(grouped).unsqueeze(1) + eps)
    elif scale_rewards == "batch":
        flat = grouped.reshape(-1)
        std = flat.std() if flat.numel() > 1 else flat.new_zeros(())
        adv = adv / (std + eps)
    return adv.reshape(rewards.shape)


def has_spread(rewards: Sequence[float]) -> bool:
    """At least two rewards and not all equal: a group the update learns from (its advantages are not all 0).

    Compared as Python floats, not through a float32 std: eight rewards of 0.866667 have a float32 std of
    ~6e-8 (rounding), which read as spread; dynamic sampling then kept 3 of the demo's 72 groups that teach
    nothing instead of refilling them. The tolerance absorbs the last-bit differences of reward parts summed in
    another order."""
    return len(rewards) >= 2 and max(rewards) - min(rewards) > 1e-8


def step_advantages(
    groups: Sequence[Sequence[float | None]],
    scale_rewards: ScaleRewards,
    leave_one_out: bool = False,
    drop_flat: bool = False,
) -> tuple[list[list[float | None]], list[bool]]:
    """Advantages for a step's groups whose rows may lack a reward (None: the verifier failed on that row; it
    gets no advantage and no gradient), so groups differ in size; and which groups the update keeps (at least
    two rewards, and with `drop_flat`, DAPO's dynamic sampling, some spread). "batch" scaling divides by the
    std of every reward of the step, so it is applied here rather than inside one group's call."""
    every = [r for grp in groups for r in grp if r is not None]
    batch_std = torch.tensor(every).std().item() if len(every) > 1 else 0.0
    advantages: list[list[float | None]] = []
    keep: list[bool] = []
    for grp in groups:
        idx = [i for i, r in enumerate(grp) if r is not None]
        adv: list[float | None] = [None] * len(grp)
        valid = [float(grp[i]) for i in idx]  # type: ignore[arg-type]
        if len(idx) >= 2:
            r = torch.tensor(valid, dtype=torch.float64)
            scale = "none" if scale_rewards == "batch" else scale_rewards
            a = group_advantages(r, len(idx), scale_rewards=scale, leave_one_out=leave_one_out)
            if scale_rewards == "batch":
                a = a / (batch_std + 1e-4)
            for i, v in zip(idx, a.tolist(), strict=True):
                adv[i] = v
        advantages.append(adv)
        keep.append(len(idx) >= 2 and not (drop_flat and not has_spread(valid)))
    return advantages, keep


def overlong_penalty(length: int, max_completion_length: int, buffer: int) -> float:
    """DAPO's soft overlong punishment (TRL's `get_soft_overlong_punishment`), added to the reward: 0 up to
    `max_completion_length - buffer` tokens, then linear down to -1 at `max_completion_length`, -1 past it.
    `buffer` 0 turns it off."""
    if buffer <= 0:
        return 0.0
    start = max_completion_length - buffer
    if length <= start:
        return 0.0
    if length <= max_completion_length:
        return (start - length) / buffer
    return -1.0


# --------------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------------


def policy_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    completion_mask: Tensor,
    *,
    loss_type: LossType = "dapo",
    importance_sampling_level: ISLevel = "token",
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    ref_logps: Tensor | None = None,
    max_completion_length: int | None = None,
    delta: float | None = None,
    sampling_is_weights: Tensor | None = None,
    sequence_weights: Tensor | None = None,
    entropies: Tensor | None = None,
    num_items_in_batch: float | Tensor | None = None,
    num_processes: int = 1,
    gradient_accumulation_steps: int = 1,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate loss of GRPO and its variants, equal to TRL 1.x `GRPOTrainer._compute_loss`.

    Shapes: logps, old_logps, ref_logps, completion_mask [N, T] (N completions, T padded completion
    length); advantages [N]; sampling_is_weights [N, T] or [N, 1] (rollout-engine importance-sampling
    correction, multiplied in before the KL term as TRL does); sequence_weights [N] (each completion's whole
    loss, KL included, is multiplied by it before aggregation; the trainer's multi-turn episode weighting;
    None: all 1); entropies [N, T] (metric only).

    Per token: ratio r = exp(logps - old_logps) ("token") or, for GSPO ("sequence"), the exp of the
    length-normalised sum of log-ratios over the completion, one value per sequence.
    loss_t = -min(r*A, clip(r, 1-epsilon_low, 1+epsilon_high)*A); with `delta` the unclipped branch uses
    min(r, delta) (two-sided clipping, INTELLECT-2), and the clip metrics then see that capped ratio, as
    in TRL. With beta > 0, + beta * k3 KL to the reference: exp(ref - logps) - (ref - logps) - 1.

    Aggregation (why they differ: how much a long completion weighs):
    - "grpo":    mean over each completion's tokens, then over completions (short answers weigh more).
    - "bnpo":    sum over tokens / active tokens of this micro-batch.
    - "dr_grpo": sum / (N * max_completion_length), a constant, so no length bias at all.
    - "dapo":    sum / (num_items_in_batch / num_processes), where num_items_in_batch is the active token
      count of the whole generation batch across processes and accumulation steps (TRL); it defaults to
      this micro-batch's mask.sum() (clamped to 1), the single-process, no-accumulation case.
    grpo/bnpo/dr_grpo are divided by `gradient_accumulation_steps` as in TRL; dapo is not (its
    normaliser already spans the accumulated batch).

    Note: with num_iterations == 1, old_logps == logps.detach(), so r == 1 and nothing is clipped: the
    loss *value* is just -(normalised masked mean of A), ~0 when advantages are centred, but its gradient
    d loss / d logps = -A * mask / normaliser is not zero, so training still moves. Do not read a flat
    ~0 loss curve as "not learning".

    Returns (scalar loss with grad, metrics) with metrics as python floats under TRL's names:
    "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", plus "kl" when beta > 0 and
    "entropy" when `entropies` is given. Clip metrics count tokens with (r < 1-eps_low and A < 0) or
    (r > 1+eps_high and A > 0), i.e. where the clip actually cut the gradient.
    """
    if loss_type not in _LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {_LOSS_TYPES}, got {loss_type!r}")
    if importance_sampling_level not in _IS_LEVELS:
        raise ValueError(
            f"importance_sampling_level must be one of {_IS_LEVELS}, got {importance_sampling_level!r}"
        )
    if logps.dim() != 2 or old_logps.shape != logps.shape or completion_mask.shape != logps.shape:
        raise ValueError(
            "logps, old_logps and completion_mask must share one [N, T] shape, got "
            f"{tuple(logps.shape)}, {tuple(old_logps.shape)}, {tuple(completion_mask.shape)}"
        )
    if beta != 0.0 and ref_logps is None:
        raise ValueError("beta != 0 needs ref_logps")
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError("loss_type 'dr_grpo' needs max_completion_length")
    eps_high = epsilon_low if epsilon_high is None else epsilon_high

    mask = completion_mask.to(logps.dtype)
    adv = advantages.to(logps.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)  # [N, 1] broadcasts over tokens

    log_ratio = logps - old_logps
    if importance_sampling_level == "token":
        log_iw = log_ratio
    else:
        log_iw = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)

    coef_1 = torch.exp(log_iw)
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + eps_high)
    if delta is not None:
        coef_1 = torch.clamp(coef_1, max=delta)
    per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv)
    if sampling_is_weights is not None:
        per_token_loss = per_token_loss * sampling_is_weights.to(logps.dtype)

    per_token_kl = None
    if beta != 0.0:
        assert ref_logps is not None
        d = ref_logps - logps
        per_token_kl = torch.exp(d) - d - 1
        per_token_loss = per_token_loss + beta * per_token_kl
    if sequence_weights is not None:
        per_token_loss = per_token_loss * sequence_weights.to(logps.dtype).unsqueeze(1)

    masked_sum = (per_token_loss * mask).sum()
    if loss_type == "grpo":
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        loss = loss / gradient_accumulation_steps
    elif loss_type == "bnpo":
        loss = masked_sum / mask.sum().clamp(min=1.0) / gradient_accumulation_steps
    elif loss_type == "dr_grpo":
        assert max_completion_length is not None
        loss = masked_sum / (per_token_loss.size(0) * max_completion_length) / gradient_accumulation_steps
    else:  # dapo
        if num_items_in_batch is None:
            normaliser = mask.sum().clamp(min=1.0)
        else:
            normaliser = torch.as_tensor(num_items_in_batch, dtype=logps.dtype, device=logps.device)
        loss = masked_sum / (normaliser / num_processes)

    with torch.no_grad():
        token_count = mask.sum().clamp(min=1.0)

        def masked_batch_mean(x: Tensor) -> float:
            if x.shape[1] == 1:  # sequence-level quantity: one value per completion
                return float(x.to(logps.dtype).mean())
            return float((x.to(logps.dtype) * mask).sum() / token_count)

        is_low = (coef_1 < 1 - epsilon_low) & (adv < 0)
        is_high = (coef_1 > 1 + eps_high) & (adv > 0)
        metrics: dict[str, float] = {
            "clip_ratio/low_mean": masked_batch_mean(is_low),
            "clip_ratio/high_mean": masked_batch_mean(is_high),
            "clip_ratio/region_mean": masked_batch_mean(is_low | is_high),
        }
        if per_token_kl is not None:
            metrics["kl"] = masked_batch_mean(per_token_kl)
        if entropies is not None:
            metrics["entropy"] = masked_batch_mean(entropies)
    return loss, metrics

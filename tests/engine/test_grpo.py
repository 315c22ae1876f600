"""Tests for workbench.learn.grpo: hand-computed values, an independent per-element transcription of TRL's
formulas, gradients at ratio 1, clip metrics. Tiny tensors only (runs in well under 10 s)."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.learn.grpo import (
    group_advantages,
    policy_loss,
)

D = torch.float64


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=D)


# --------------------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------------------

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # group 0 varies, group 1 is all-correct
G0_STD = math.sqrt(4 * 0.25 / 3)  # Bessel: sum of squared deviations / (G - 1)


def test_advantages_group_scaling_and_zero_variance_group():
    adv = group_advantages(t(REWARDS), 4, "group")
    a = 0.5 / (G0_STD + 1e-4)
    assert adv.tolist() == pytest.approx([a, -a, -a, a, 0.0, 0.0, 0.0, 0.0], abs=1e-12)
    assert adv[4:].eq(0).all()  # exactly zero, not just small


def test_advantages_batch_scaling_uses_whole_batch_std():
    adv = group_advantages(t(REWARDS), 4, "batch")
    mean = 6 / 8
    batch_std = math.sqrt((2 * (0 - mean) ** 2 + 6 * (1 - mean) ** 2) / 7)  # two 0s, six 1s
    a = 0.5 / (batch_std + 1e-4)
    assert adv.tolist() == pytest.approx([a, -a, -a, a, 0, 0, 0, 0], abs=1e-12)


def test_advantages_none_is_just_centred():
    adv = group_advantages(t([3.0, 1.0, 2.0, 2.0]), 2, "none")
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0])


def test_advantages_leave_one_out():
    r = [1.0, 0.0, 0.0, 1.0]
    adv = group_advantages(t(r), 4, "none", leave_one_out=True)
    # baseline for a 1 is mean(0, 0, 1) = 1/3; for a 0 it is mean(1, 0, 1) = 2/3
    assert adv.tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    scaled = group_advantages(t(r), 4, "group", leave_one_out=True)
    assert scaled.tolist() == pytest.approx([x / (G0_STD + 1e-4) for x in [2 / 3, -2 / 3, -2 / 3, 2 / 3]])
    assert group_advantages(t([5.0, 5.0, 5.0]), 3, "group", leave_one_out=True).eq(0).all()
    with pytest.raises(ValueError):
        group_advantages(t([1.0, 2.0]), 1, leave_one_out=True)


def test_advantages_eps_is_1e_minus_4_and_damps_tiny_spread():
    # spread 2e-4: std = sqrt(2) * 1e-4, deviation 1e-4 -> 1 / (sqrt(2) + 1), not 1 / sqrt(2)
    adv = group_advantages(t([0.0, 2e-4]), 2, "group")
    assert adv.tolist() == pytest.approx([-1 / (math.sqrt(2) + 1), 1 / (math.sqrt(2) + 1)], rel=1e-9)
    custom = group_advantages(t([0.0, 2e-4]), 2, "group", eps=0.0)
    assert custom.tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], rel=1e-9)


def test_advantages_keep_2d_shape_and_validate():
    r2 = t(REWARDS).view(2, 4)
    assert group_advantages(r2, 4).shape == (2, 4)
    assert torch.allclose(group_advantages(r2, 4).reshape(-1), group_advantages(t(REWARDS), 4))
    with pytest.raises(ValueError):
        group_advantages(t(REWARDS), 3)
    with pytest.raises(ValueError):
        group_advantages(t(REWARDS), 4, "std")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Loss: hand-computed cases
# --------------------------------------------------------------------------------------------------

# Two completions, T=3. Ratios row 0: 1.1, 1.5, 0.5; row 1: 0.7, 1.0, (1.3 padded away). A = [2, -1].
RATIOS = [[1.1, 1.5, 0.5], [0.7, 1.0, 1.3]]
MASK = [[1, 1, 1], [1, 1, 0]]
ADV = [2.0, -1.0]


def _case():
    old = t([[-1.0, -2.0, -0.5], [-0.3, -1.2, -2.2]])
    logps = old + torch.log(t(RATIOS))
    return logps, old, t(ADV), t(MASK)


# Per token, eps_low 0.2 / eps_high 0.28 -> clip range [0.8, 1.28]:
# row 0 (A=2):  min(2.2, 2.2)=2.2 | min(3.0, 2.56)=2.56 | min(1.0, 1.6)=1.0   -> losses -2.2, -2.56, -1.0
# row 1 (A=-1): min(-0.7, -0.8)=-0.8 | min(-1, -1)=-1 | (masked)              -> losses 0.8, 1.0
ROW0 = [-2.2, -2.56, -1.0]
ROW1 = [0.8, 1.0]
TOTAL = sum(ROW0) + sum(ROW1)  # -3.96


@pytest.mark.parametrize(
    ("loss_type", "expected", "extra"),
    [
        ("grpo", (sum(ROW0) / 3 + sum(ROW1) / 2) / 2, {}),
        ("bnpo", TOTAL / 5, {}),
        ("dr_grpo", TOTAL / (2 * 4), {"max_completion_length": 4}),
        ("dapo", TOTAL / 5, {}),
        ("dapo", TOTAL / (20 / 2), {"num_items_in_batch": 20, "num_processes": 2}),
    ],
)
def test_loss_types_by_hand(loss_type, expected, extra):
    logps, old, adv, mask = _case()
    loss, m = policy_loss(logps, old, adv, mask, loss_type=loss_type, epsilon_high=0.28, **extra)
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    # exactly one low-clipped token (row 1, ratio 0.7 < 0.8, A < 0) and one high-clipped (row 0, 1.5)
    assert m["clip_ratio/low_mean"] == pytest.approx(1 / 5)
    assert m["clip_ratio/high_mean"] == pytest.approx(1 / 5)
    assert m["clip_ratio/region_mean"] == pytest.approx(2 / 5)
    assert "kl" not in m and "entropy" not in m


def test_gradient_accumulation_divides_all_but_dapo():
    logps, old, adv, mask = _case()
    for lt in ("grpo", "bnpo", "dapo"):
        one, _ = policy_loss(logps, old, adv, mask, loss_type=lt)
        four, _ = policy_loss(logps, old, adv, mask, loss_type=lt, gradient_accumulation_steps=4)
        assert four.item() == pytest.approx(one.item() if lt == "dapo" else one.item() / 4)


def test_symmetric_clip_default_and_delta_by_hand():
    logps, old, adv, mask = _case()
    # epsilon_high=None -> 0.2: range [0.8, 1.2]; row 0 token 1: min(3.0, 2.4) = 2.4
    loss, m = policy_loss(logps, old, adv, mask, loss_type="bnpo")
    assert loss.item() == pytest.approx((-2.2 - 2.4 - 1.0 + 0.8 + 1.0) / 5)
    assert m["clip_ratio/high_mean"] == pytest.approx(1 / 5)
    # delta caps the unclipped branch: a negative-advantage token with ratio 1.5 -> -min(-1.4, -1.2) = 1.4
    lp, ol = t([[math.log(1.5)]]), t([[0.0]])
    loss, _ = policy_loss(lp, ol, t([-1.0]), t([[1]]), loss_type="bnpo", delta=1.4)
    assert loss.item() == pytest.approx(1.4)
    loss, _ = policy_loss(lp, ol, t([-1.0]), t([[1]]), loss_type="bnpo")
    assert loss.item() == pytest.approx(1.5)
    # TRL's order: the clipped branch comes from the raw ratio, delta caps only the other branch, so a
    # delta below 1 + eps_high gives -min(-1.1, -1.28) = 1.28 (not 1.1), and the clip metrics see the
    # capped ratio 1.1 (a positive-advantage token is then not counted as high-clipped)
    loss, _ = policy_loss(lp, ol, t([-1.0]), t([[1]]), loss_type="bnpo", epsilon_high=0.28, delta=1.1)
    assert loss.item() == pytest.approx(1.28)
    _, m = policy_loss(lp, ol, t([1.0]), t([[1]]), loss_type="bnpo", epsilon_high=0.28, delta=1.1)
    assert m["clip_ratio/high_mean"] == 0.0


def test_sequence_level_by_hand():
    logps, old, adv, mask = _case()
    c0 = (1.1 * 1.5 * 0.5) ** (1 / 3)  # geometric mean of the unmasked ratios
    c1 = (0.7 * 1.0) ** (1 / 2)
    loss, m = policy_loss(
        logps, old, adv, mask, loss_type="grpo", importance_sampling_level="sequence", epsilon_low=0.2
    )
    assert loss.item() == pytest.approx((-2 * c0 + 1 * c1) / 2)  # both ratios inside [0.8, 1.2]
    assert m["clip_ratio/region_mean"] == 0.0
    # a tight range [0.95, 1.05]: row 0 keeps 2*c0 (min picks the lower), row 1 is low-clipped to 0.95
    loss, m = policy_loss(
        logps, old, adv, mask, loss_type="bnpo", importance_sampling_level="sequence", epsilon_low=0.05
    )
    assert loss.item() == pytest.approx((3 * (-2 * c0) + 2 * 0.95) / 5)
    assert m["clip_ratio/low_mean"] == 0.5  # per sequence: 1 of 2 completions
    assert m["clip_ratio/high_mean"] == 0.0


def test_kl_entropy_and_sampling_weights_by_hand():
    logps = t([[-1.0, -2.0]])
    ref = t([[-1.5, -1.0]])
    d = [-0.5, 1.0]
    kl = [math.exp(x) - x - 1 for x in d]
    w = t([[0.5, 2.0]])
    ent = t([[0.3, 0.9]])
    loss, m = policy_loss(
        logps, logps.detach(), t([1.0]), t([[1, 1]]), loss_type="bnpo",
        beta=0.1, ref_logps=ref, sampling_is_weights=w, entropies=ent,
    )  # fmt: skip
    # ratio 1: policy term -A * w per token, then + beta * kl (the weight does not touch the KL term)
    assert loss.item() == pytest.approx(((-0.5 + 0.1 * kl[0]) + (-2.0 + 0.1 * kl[1])) / 2)
    assert m["kl"] == pytest.approx(sum(kl) / 2)
    assert m["entropy"] == pytest.approx(0.6)
    with pytest.raises(ValueError):
        policy_loss(logps, logps, t([1.0]), t([[1, 1]]), beta=0.1)


def test_validation():
    logps, old, adv, mask = _case()
    with pytest.raises(ValueError):
        policy_loss(logps, old, adv, mask, loss_type="dr_grpo")  # needs max_completion_length
    with pytest.raises(ValueError):
        policy_loss(logps, old, adv, mask, loss_type="ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        policy_loss(logps, old, adv, mask, importance_sampling_level="seq")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        policy_loss(logps, old[:, :2], adv, mask)


# --------------------------------------------------------------------------------------------------
# Loss: independent per-element transcription of TRL's _compute_loss, compared on random tensors
# --------------------------------------------------------------------------------------------------


def reference_loss(logps, old, adv, mask, *, loss_type, level, eps_low, eps_high, beta, ref, L, delta, isw):
    """Plain python loops over completions i and tokens j, re-derived from TRL's formulas."""
    n, tt = len(logps), len(logps[0])
    lens = [sum(mask[i]) for i in range(n)]
    coef = [[0.0] * tt for _ in range(n)]
    for i in range(n):
        if level == "sequence":
            s = sum((logps[i][j] - old[i][j]) * mask[i][j] for j in range(tt)) / max(lens[i], 1)
            coef[i] = [math.exp(s)] * tt
        else:
            coef[i] = [math.exp(logps[i][j] - old[i][j]) for j in range(tt)]
    ptl = [[0.0] * tt for _ in range(n)]
    kl = [[0.0] * tt for _ in range(n)]
    low = [[False] * tt for _ in range(n)]
    high = [[False] * tt for _ in range(n)]
    for i in range(n):
        a = adv[i]
        for j in range(tt):
            c1 = coef[i][j]
            c2 = min(max(c1, 1 - eps_low), 1 + eps_high)
            if delta is not None:
                c1 = min(c1, delta)
            low[i][j] = c1 < 1 - eps_low and a < 0
            high[i][j] = c1 > 1 + eps_high and a > 0
            x = -min(c1 * a, c2 * a)
            if isw is not None:
                x *= isw[i][j]
            if beta:
                dd = ref[i][j] - logps[i][j]
                kl[i][j] = math.exp(dd) - dd - 1
                x += beta * kl[i][j]
            ptl[i][j] = x
    total = sum(ptl[i][j] * mask[i][j] for i in range(n) for j in range(tt))
    ntok = sum(lens)
    if loss_type == "grpo":
        loss = sum(sum(ptl[i][j] * mask[i][j] for j in range(tt)) / max(lens[i], 1) for i in range(n)) / n
    elif loss_type in ("bnpo", "dapo"):
        loss = total / max(ntok, 1)
    else:
        loss = total / (n * L)

    def mmean(v):
        if level == "sequence":  # one value per completion
            return sum(float(v[i][0]) for i in range(n)) / n
        return sum(float(v[i][j]) * mask[i][j] for i in range(n) for j in range(tt)) / max(ntok, 1)

    metrics = {
        "clip_ratio/low_mean": mmean(low),
        "clip_ratio/high_mean": mmean(high),
        "clip_ratio/region_mean": mmean([[low[i][j] or high[i][j] for j in range(tt)] for i in range(n)]),
    }
    if beta:
        metrics["kl"] = sum(kl[i][j] * mask[i][j] for i in range(n) for j in range(tt)) / max(ntok, 1)
    return loss, metrics


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize(
    ("beta", "eps_high", "delta", "weights"), [(0.0, None, None, False), (0.04, 0.28, 1.5, True)]
)
def test_matches_reference_transcription(loss_type, level, beta, eps_high, delta, weights):
    seed = sum(map(ord, f"{loss_type}{level}{beta}"))  # deterministic, unlike hash() of a str
    g = torch.Generator().manual_seed(seed)
    n, tt = 6, 5
    old = -torch.rand(n, tt, generator=g, dtype=D) * 3
    logps = (
        old + torch.randn(n, tt, generator=g, dtype=D) * 0.4
    )  # ratios roughly in [0.3, 3]: clipping happens
    ref = old + torch.randn(n, tt, generator=g, dtype=D) * 0.3
    adv = torch.randn(n, generator=g, dtype=D)
    mask = (torch.rand(n, tt, generator=g) > 0.3).to(D)
    mask[0] = 0  # an empty completion
    mask[1] = 1
    isw = torch.rand(n, tt, generator=g, dtype=D) + 0.5 if weights else None
    eh = 0.2 if eps_high is None else eps_high
    kw = {"max_completion_length": 7} if loss_type == "dr_grpo" else {}
    loss, m = policy_loss(
        logps, old, adv, mask, loss_type=loss_type, importance_sampling_level=level, epsilon_low=0.2,
        epsilon_high=eps_high, beta=beta, ref_logps=ref, delta=delta, sampling_is_weights=isw, **kw,
    )  # fmt: skip
    exp_loss, exp_m = reference_loss(
        logps.tolist(), old.tolist(), adv.tolist(), mask.tolist(), loss_type=loss_type, level=level,
        eps_low=0.2, eps_high=eh, beta=beta, ref=ref.tolist(), L=7, delta=delta,
        isw=None if isw is None else isw.tolist(),
    )  # fmt: skip
    assert loss.item() == pytest.approx(exp_loss, abs=1e-6)
    assert set(m) == set(exp_m)
    for k, v in exp_m.items():
        assert m[k] == pytest.approx(v, abs=1e-6), k
    if level == "token":
        assert m["clip_ratio/region_mean"] > 0  # the random case really exercises clipping


# --------------------------------------------------------------------------------------------------
# Gradient at ratio 1 (num_iterations == 1)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_gradient_nonzero_when_ratio_is_one(loss_type, level):
    adv = t([1.5, -0.5, 0.25])
    mask = t([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    logps = (-torch.rand(3, 3, generator=torch.Generator().manual_seed(0), dtype=D)).requires_grad_()
    loss, m = policy_loss(
        logps, logps.detach(), adv, mask, loss_type=loss_type, importance_sampling_level=level,
        max_completion_length=5,
    )  # fmt: skip
    loss.backward()
    # d loss / d logps = -A * mask / normaliser. At ratio 1 the sequence-level ratio exp(mean log-ratio)
    # has d/dlogp_j = mask_j / len_i, and every token of the row carries it, so the length cancels and
    # both IS levels give the same gradient.
    lens = [2, 1, 3]
    for i in range(3):
        for j in range(3):
            norm = {"grpo": 3 * lens[i], "bnpo": 6, "dapo": 6, "dr_grpo": 3 * 5}[loss_type]
            expected = -adv[i].item() * mask[i, j].item() / norm
            assert logps.grad[i, j].item() == pytest.approx(expected, abs=1e-12)
    # the value is only the (normalised) mean advantage: -(1.5 - 0.5 + 0.25) / 3 per completion, or
    # -(1.5*2 - 0.5*1 + 0.25*3) = -3.25 over tokens
    value = {"grpo": -1.25 / 3, "bnpo": -3.25 / 6, "dapo": -3.25 / 6, "dr_grpo": -3.25 / 15}[loss_type]
    assert loss.item() == pytest.approx(value, abs=1e-12)
    assert logps.grad.abs().sum() > 0
    assert m["clip_ratio/region_mean"] == 0.0


def test_step_advantages_skip_failed_rows_scale_over_the_batch_and_drop_flat_groups():
    from workbench.learn.grpo import has_spread, step_advantages

    groups = [[1.0, 0.0, None, 1.0], [0.5, 0.5, 0.5], [None, 2.0]]
    adv, keep = step_advantages(groups, "group")
    assert adv[0][2] is None and adv[2] == [None, None]  # a failed row, and a group of one valid reward
    assert sum(a for a in adv[0] if a is not None) == pytest.approx(0.0, abs=1e-9)
    assert adv[1] == [0.0, 0.0, 0.0] and keep == [True, True, False]
    _, keep = step_advantages(groups, "group", drop_flat=True)
    assert keep == [True, False, False]  # DAPO: a group without spread teaches nothing
    batch, _ = step_advantages(groups, "batch")
    every = torch.tensor([1.0, 0.0, 1.0, 0.5, 0.5, 0.5, 2.0])
    centred = torch.tensor([1.0, 0.0, 1.0]) - 2 / 3
    assert [a for a in batch[0] if a is not None] == pytest.approx((centred / (every.std() + 1e-4)).tolist())
    assert has_spread([1.0, 0.0]) and not has_spread([0.3, 0.3]) and not has_spread([1.0])


def test_equal_rewards_are_no_spread_whatever_their_float32_rounding():
    """Eight equal rewards of 0.866667 (a demo group) have a float32 std of ~6e-8: not spread."""
    from workbench.learn.grpo import has_spread

    rewards = [0.8666666666666667] * 8
    assert float(torch.tensor(rewards).std()) > 1e-8  # the rounding that used to read as spread
    assert not has_spread(rewards)
    assert 0.1 + 0.2 + 0.3 != 0.3 + 0.2 + 0.1
    assert not has_spread([0.1 + 0.2 + 0.3, 0.3 + 0.2 + 0.1])  # the same parts summed in another order
    assert has_spread(rewards[:7] + [0.8666666666666667 - 0.05])

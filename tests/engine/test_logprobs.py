"""Tests for workbench.learn.logprobs: the per-row log-prob/entropy helper against log_softmax, and the
shared-prefix pass against the packed pass (values and gradients)."""

import pytest
import torch

from workbench.learn.logprobs import (
    completion_logprobs,
    sequence_logprobs,
    shared_prefix_logprobs,
    token_logprobs,
)
from workbench.rollout.prompt import common_prefix_len
from workbench.testing import perturb_lora

HARNESS = [5, 17, 33, 8, 91, 12, 7, 44]


@pytest.mark.parametrize(
    "prompts",
    [
        [HARNESS] * 4,  # one group: the whole prompt is shared
        [HARNESS + [60, 61], HARNESS + [70], HARNESS + [60, 61], HARNESS + [80, 81, 82]],  # several groups
        [HARNESS, HARNESS + [70, 71], HARNESS + [72], HARNESS],  # one prompt is the others' prefix
    ],
)
def test_shared_prefix_pass_equals_packed_pass_values_and_gradients(tiny_policy, prompts):
    perturb_lora(tiny_policy, scale=0.5, seed=1)
    model = tiny_policy.model
    comps = [[3, 4, 5, 6], [9], [10, 11, 12], []]
    params = tiny_policy.trainable_parameters()

    def run(fn):
        model.zero_grad(set_to_none=True)
        logp, mask, ent = fn(model, prompts, comps, 0.7, return_entropy=True)
        (logp.sum() * 0.5 + (logp**2).sum() * 0.1).backward()
        return logp.detach(), mask, ent.detach(), [p.grad.detach().clone() for p in params]

    packed, shared = run(completion_logprobs), run(shared_prefix_logprobs)
    assert torch.equal(packed[1], shared[1])
    assert torch.allclose(packed[0], shared[0], atol=1e-5)
    assert torch.allclose(packed[2], shared[2], atol=1e-5)
    for a, b in zip(packed[3], shared[3], strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (a - b).abs().max()
    assert any(g.abs().sum() > 0 for g in shared[3])  # the gradient reached the adapter


def test_common_prefix_len():
    assert common_prefix_len([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_len([[1, 2], [1, 2]]) == 2
    assert common_prefix_len([[1], [2]]) == 0


def test_token_logprobs_matches_log_softmax():
    g = torch.Generator().manual_seed(1)
    full = torch.randn(5, 4, 11, generator=g)
    logits = full[:, :3, :]  # a non-contiguous slice, as model logits[:, :-1] usually are
    ids = torch.randint(0, 11, (5, 3), generator=g)
    mask = torch.ones(5, 3, dtype=torch.bool)
    mask[1, 2] = False
    lp, m, ent = token_logprobs([logits[r] for r in range(5)], ids, mask, 0.7, return_entropy=True)
    assert m is mask
    ls = torch.log_softmax(logits / 0.7, dim=-1)
    assert torch.allclose(lp, ls.gather(-1, ids.unsqueeze(-1)).squeeze(-1) * mask, atol=1e-5)
    assert torch.allclose(ent, -(ls.exp() * ls).sum(-1) * mask, atol=1e-5)
    assert lp[1, 2] == 0 and ent[1, 2] == 0
    assert not ent.requires_grad
    greedy, _ = token_logprobs([logits[r] for r in range(5)], ids, mask, 0.0)  # temperature 0 scores at 1
    assert torch.allclose(
        greedy, torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1) * mask, atol=1e-5
    )


def test_token_logprobs_gradient_and_bf16():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 2, 7, generator=g, requires_grad=True)
    ids = torch.randint(0, 7, (3, 2), generator=g)
    mask = torch.ones(3, 2, dtype=torch.bool)
    out = token_logprobs([logits[r] for r in range(3)], ids, mask, 1.0)
    assert len(out) == 2
    lp = out[0]
    lp.sum().backward()
    ref = logits.detach().clone().requires_grad_()
    torch.log_softmax(ref, -1).gather(-1, ids.unsqueeze(-1)).sum().backward()
    assert torch.allclose(logits.grad, ref.grad, atol=1e-6)
    bf16 = logits.detach().bfloat16()
    lp16, _ = token_logprobs([bf16[r] for r in range(3)], ids, mask, 1.0)
    assert lp16.dtype == torch.float32
    assert torch.allclose(lp16, lp.detach(), atol=3e-2)


def test_sequence_logprobs_picks_the_pass(tiny_policy):
    model = tiny_policy.model
    comps = [[3, 4], [9]]
    with torch.no_grad():
        shared = [HARNESS + [60], HARNESS + [70, 71]]
        assert torch.equal(
            sequence_logprobs(model, shared, comps)[0], shared_prefix_logprobs(model, shared, comps)[0]
        )
        disjoint = [[5, 6], [7]]
        assert torch.equal(
            sequence_logprobs(model, disjoint, comps)[0], completion_logprobs(model, disjoint, comps)[0]
        )
        with pytest.raises(ValueError):
            shared_prefix_logprobs(model, disjoint, comps)

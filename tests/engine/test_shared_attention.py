"""One copy of the common prefix for every row: the attention over a shared batch-1 prefix and the rows' own
keys equals SDPA over each row's whole sequence, and the sampler that uses it samples what the one that
repeats the prefix per row samples."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.sampler_helpers import FIRST_BATCH, SECOND_BATCH, assert_same, render
from workbench.models import Policy
from workbench.rollout.hf import HFEngine
from workbench.rollout.shared_attention import ATTENTION, shared_prefix_attention, supports_shared_attention
from workbench.testing import perturb_lora

ROWS, HEADS, KV_HEADS, DIM, PREFIX = 3, 6, 2, 8, 11


class Layer(torch.nn.Module):
    layer_idx = 0


def reference(query, prefix_k, prefix_v, key, value, allowed) -> torch.Tensor:
    """SDPA over [prefix | own] per row, the prefix repeated per row; `allowed` [rows, 1, q, own]."""
    rows, q_len = query.shape[0], query.shape[2]
    full_k = torch.cat([prefix_k.expand(rows, -1, -1, -1), key], dim=2)
    full_v = torch.cat([prefix_v.expand(rows, -1, -1, -1), value], dim=2)
    mask = torch.cat([torch.ones(rows, 1, q_len, PREFIX, dtype=torch.bool), allowed], dim=-1)
    return F.scaled_dot_product_attention(query, full_k, full_v, attn_mask=mask, enable_gqa=True).transpose(
        1, 2
    )


@pytest.mark.parametrize("q_len", [1, 4])
@pytest.mark.parametrize("masked", [True, False])
def test_attention_over_the_shared_prefix_equals_sdpa_over_each_whole_row(q_len: int, masked: bool) -> None:
    g = torch.Generator().manual_seed(0)
    own = 5
    query = torch.randn(ROWS, HEADS, q_len, DIM, generator=g)
    prefix_k, prefix_v = (torch.randn(1, KV_HEADS, PREFIX, DIM, generator=g) for _ in range(2))
    key, value = (torch.randn(ROWS, KV_HEADS, own, DIM, generator=g) for _ in range(2))
    causal = torch.arange(own)[None] <= torch.arange(own - q_len, own)[:, None]  # [q, own]
    allowed = causal.expand(ROWS, 1, q_len, own).clone()
    if masked:  # left padding: row 1 starts one column late, row 2 two
        allowed[1, ..., :1] = False
        allowed[2, ..., :2] = False
    got, _ = shared_prefix_attention(
        Layer(),
        query,
        key,
        value,
        allowed if masked else None,
        scaling=DIM**-0.5,
        shared_prefix=[(prefix_k, prefix_v)],
    )
    assert got.shape == (ROWS, q_len, HEADS, DIM)
    assert torch.allclose(got, reference(query, prefix_k, prefix_v, key, value, allowed), atol=1e-5)


@pytest.fixture
def policy(tiny_policy: Policy) -> Policy:
    perturb_lora(tiny_policy, scale=0.3, seed=7)
    return tiny_policy


def test_the_sampler_samples_alike_with_one_prefix_copy_or_one_per_row(policy) -> None:
    assert supports_shared_attention(policy.model)
    prompts = render(policy, FIRST_BATCH + SECOND_BATCH)  # different lengths: left pads in the rows' own part
    probe = HFEngine(policy).generate(prompts, 1, max_new_tokens=6, temperature=0.0, stop_token_ids=[])
    stops = [probe[0][0].token_ids[2]]  # some rows stop early and leave the batch
    out, passed = {}, []
    base = policy.model.get_base_model()
    spy = base.register_forward_pre_hook(
        lambda m, args, kw: passed.append(kw.get("shared_prefix") is not None), with_kwargs=True
    )
    for share in (True, False):
        engine = HFEngine(policy, shared_prefix=share)
        passed.clear()
        greedy = engine.generate(prompts, 2, max_new_tokens=8, temperature=0.0, stop_token_ids=stops)
        sampled = engine.generate(prompts, 3, max_new_tokens=8, temperature=1.0, seed=5, stop_token_ids=stops)
        out[share] = [
            [[(c.token_ids, c.logprobs) for c in g] for g in groups] for groups in (greedy, sampled)
        ]
        # the prefix's own pass, then every forward of the rows with the prefix passed (or never)
        assert passed[0] is False and set(passed[1:]) == {share}
    spy.remove()
    for a, b in zip(out[True], out[False], strict=True):
        assert_same(a, b)
    assert base.config._attn_implementation != ATTENTION  # switched back after sampling

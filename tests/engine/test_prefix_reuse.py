"""The prompts' common prefix paid once: the sampler keeps its keys/values across calls of one policy version
(and only then), and the update runs it once for all its micro-batches; outputs, log-probs and gradients are
those of the path that shares less."""

from __future__ import annotations

import pytest
import torch

from tests.sampler_helpers import FIRST_BATCH, SECOND_BATCH, Shapes, assert_same, greedy, render
from workbench.config import Config
from workbench.learn.logprobs import BatchPrefix, batch_prefix, completion_logprobs, shared_prefix_logprobs
from workbench.learn.update import policy_update
from workbench.models import Policy, load_policy
from workbench.rollout.hf import HFEngine
from workbench.rollout.prefix_kv import PREFIX_REUSE_ENV, prefix_reuse
from workbench.rollout.prompt import common_prefix_len
from workbench.testing import perturb_lora


@pytest.fixture
def policy(tiny_policy: Policy) -> Policy:
    perturb_lora(tiny_policy, scale=0.3, seed=7)
    return tiny_policy


def test_the_switch_reads_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(PREFIX_REUSE_ENV, raising=False)
    assert prefix_reuse() == "on"
    monkeypatch.setenv(PREFIX_REUSE_ENV, "call")
    assert prefix_reuse() == "call"
    monkeypatch.setenv(PREFIX_REUSE_ENV, "sometimes")
    with pytest.raises(ValueError, match="on, call or off"):
        prefix_reuse()


def test_a_later_call_prefills_only_what_it_does_not_share_and_greedy_is_unchanged(
    policy, monkeypatch
) -> None:
    first, second = render(policy, FIRST_BATCH), render(policy, SECOND_BATCH)
    assert len({len(p) for p in first + second}) > 1  # prompts of different lengths: padding in between
    harness = common_prefix_len(first + second)
    assert harness >= 16 and common_prefix_len(second) > harness  # the second batch shares a little more

    monkeypatch.setenv(PREFIX_REUSE_ENV, "call")  # the prefix once per call, nothing kept
    per_call = HFEngine(policy)
    want = [greedy(per_call, first, n=2), greedy(per_call, second), greedy(per_call, first[:1])]
    assert per_call.prefix_kv.tokens == []

    monkeypatch.setenv(PREFIX_REUSE_ENV, "on")
    kept = HFEngine(policy)
    with Shapes(policy) as shapes:
        got = [greedy(kept, first, n=2)]
    shared_first = min(common_prefix_len(first), min(len(p) for p in first) - 1)
    assert shapes[0] == (1, shared_first)  # cold: the first call's common prefix, once
    assert kept.prefix_kv.tokens == first[0][:shared_first]
    with Shapes(policy) as shapes:
        got.append(greedy(kept, second))
    shared_second = min(common_prefix_len(second), min(len(p) for p in second) - 1)
    # warm: the harness comes from the kept keys/values; only the second batch's own common part is prefilled
    assert shapes[0] == (1, shared_second - harness)
    assert shapes[1][0] == 2 and shapes[1][1] == max(len(p) for p in second) - shared_second
    with Shapes(policy) as shapes:
        got.append(greedy(kept, first[:1]))  # a lone prompt: its own prefix continues from the kept harness
    assert shapes[0] == (1, len(first[0]) - 1 - harness) and shapes[1] == (1, 1)
    for a, b in zip(got, want, strict=True):
        assert_same(a, b)


def test_prompts_with_no_common_prefix_take_the_padded_batch_path(policy, monkeypatch) -> None:
    prompts = [[5, 9, 17, 40, 41, 42] * 4, [6, 9, 17] * 5 + [50]]  # differ at the first token
    outs, shapes_by_mode = {}, {}
    for mode in ("call", "on"):
        monkeypatch.setenv(PREFIX_REUSE_ENV, mode)
        engine = HFEngine(policy)
        with Shapes(policy) as shapes:
            outs[mode] = greedy(engine, prompts, n=2)
        shapes_by_mode[mode] = shapes
        assert engine.prefix_kv.tokens == []
    assert shapes_by_mode["on"] == shapes_by_mode["call"]
    assert shapes_by_mode["on"][0] == (2, max(len(p) for p in prompts))  # one left-padded prefill
    assert_same(outs["on"], outs["call"])


def test_new_weights_are_never_served_the_old_prefix(policy, monkeypatch) -> None:
    monkeypatch.setenv(PREFIX_REUSE_ENV, "on")
    prompts = render(policy, FIRST_BATCH)
    engine = HFEngine(policy)
    greedy(engine, prompts)
    assert engine.prefix_kv.tokens
    engine.update_weights(policy)  # the trainer's signal after an optimizer step
    assert engine.prefix_kv.tokens == []
    greedy(engine, prompts)
    perturb_lora(policy, scale=0.6, seed=11)  # changed in place without telling the engine
    shared = min(common_prefix_len(prompts), min(len(p) for p in prompts) - 1)
    with Shapes(policy) as shapes:
        stale_guarded = greedy(engine, prompts)
    assert shapes[0] == (1, shared)  # prefilled again, not served from the kept keys/values
    assert_same(stale_guarded, greedy(HFEngine(policy), prompts))


# ---- the update: one prefix pass for all micro-batches -----------------------------------------------------

ROWS_HARNESS = [1, 5, 17, 33, 8, 91, 12, 7, 44, 60, 61]


def update_rows() -> tuple[list[list[int]], list[list[int]]]:
    """Three groups of prompts of different lengths after a common harness; completions of different lengths
    (one empty)."""
    tails = [[70], [70], [80, 81, 82], [80, 81, 82], [90, 91], [90, 91]]
    comps = [[3, 4, 5, 6], [9], [10, 11, 12], [], [13, 14], [15, 16, 17, 18, 19]]
    return [ROWS_HARNESS + t for t in tails], comps


def test_one_prefix_pass_for_all_micro_batches_gives_the_same_values_and_gradients(
    policy, monkeypatch
) -> None:
    monkeypatch.setenv(PREFIX_REUSE_ENV, "on")
    prompts, comps = update_rows()
    model, params = policy.model, policy.trainable_parameters()

    def run(per_chunk, shared_prefix: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        prefix = batch_prefix(model, prompts) if shared_prefix else None
        values = []
        for i in range(0, len(prompts), 2):  # micro-batches of 2: each shares the harness and one more token
            logp, mask, ent = per_chunk(
                model,
                prompts[i : i + 2],
                comps[i : i + 2],
                0.7,
                return_entropy=True,
                **({"prefix": prefix} if prefix is not None else {}),
            )
            (logp.sum() * 0.5 + (logp**2).sum() * 0.1).backward()
            values += [logp.detach(), ent.detach()]
        if prefix is not None:
            prefix.backward()
        return values, [p.grad.detach().clone() for p in params]

    with Shapes(policy) as shapes:
        once = run(shared_prefix_logprobs, True)
    assert shapes.count((1, len(ROWS_HARNESS))) == 1  # the harness ran once, not once per micro-batch
    for other in (run(shared_prefix_logprobs, False), run(completion_logprobs, False)):
        for a, b in zip(once[0], other[0], strict=True):
            assert torch.allclose(a, b, atol=1e-5)
        for a, b in zip(once[1], other[1], strict=True):
            assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (a - b).abs().max()
    assert any(g.abs().sum() > 0 for g in once[1])
    with torch.no_grad():  # old / reference log-probs: no graph, nothing to take back
        assert isinstance(batch_prefix(model, prompts), BatchPrefix)
    assert batch_prefix(model, [[1, 2, 3], [4, 5, 6]]) is None  # nothing in common
    monkeypatch.setenv(PREFIX_REUSE_ENV, "call")
    assert batch_prefix(model, prompts) is None


@pytest.mark.parametrize("cfg_kw", [{}, {"num_iterations": 2, "beta": 0.05}])
def test_the_update_with_one_prefix_pass_equals_a_pass_per_micro_batch_and_the_packed_one(
    tiny_model, monkeypatch, cfg_kw
) -> None:
    prompts, comps = update_rows()
    advantages = [1.0, -1.0, 0.5, -0.5, 0.8, -0.8]
    items = [(p, c, a, [-1.0] * len(c), 1.0) for p, c, a in zip(prompts, comps, advantages, strict=True) if c]
    results = {}
    for mode in ("on", "call", "off"):
        monkeypatch.setenv(PREFIX_REUSE_ENV, mode)
        pol = load_policy(tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
        perturb_lora(pol, scale=0.3, seed=1)
        opt = torch.optim.AdamW(pol.trainable_parameters(), lr=1e-2)
        out = policy_update(
            pol, opt, Config(**cfg_kw), items, len(items), temperature=1.0, lr=1e-2, micro_batch=2
        )
        named = [(n, p) for n, p in pol.model.named_parameters() if p.requires_grad]
        results[mode] = out, {n: p.grad.clone() for n, p in named}, {n: p.detach().clone() for n, p in named}
    for mode in ("call", "off"):
        for key in ("loss", "grad_norm"):
            assert results[mode][0][key] == pytest.approx(results["on"][0][key], abs=1e-5), (mode, key)
        for n, g in results["on"][1].items():
            torch.testing.assert_close(results[mode][1][n], g, atol=1e-5, rtol=1e-4, msg=f"{mode} {n}")
        for n, p in results["on"][2].items():
            torch.testing.assert_close(results[mode][2][n], p, atol=1e-5, rtol=1e-4, msg=f"{mode} {n}")

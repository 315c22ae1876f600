"""SFT warm-up: label masking, tokenisation that matches inference, and a loss that goes down."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.learn.sft import answer_token_ids, default_answer, run_sft, sft_examples, sft_rows, sft_step
from workbench.models import Policy
from workbench.rollout.prompt import render_prompt
from workbench.types import Task

MESSAGES = [
    {
        "role": "system",
        "content": "You can call these tools. Reply with one JSON object: the tool and its args.",
    },
    {"role": "user", "content": "Schedule a meeting with Bob tomorrow at 2 PM about the budget review."},
]
ANSWER = '{"tool": "calendar.create_event", "args": {"title": "Budget review", "date": "2025-03-15", "time": "14:00"}}'
PREFILL = '{"tool": "'


def test_targets_are_the_answer_and_eos_only(tiny_policy: Policy) -> None:
    tok = tiny_policy.tokenizer
    other = [{"role": "user", "content": "Delete my 3 o'clock event."}]
    examples = [(MESSAGES, ANSWER), (other, '{"tool": "calendar.delete_event", "args": {}}')]
    prompts, targets = sft_rows(tok, examples)
    for (messages, answer), prompt, target in zip(examples, prompts, targets, strict=True):
        assert prompt == render_prompt(tok, messages)
        assert target == answer_token_ids(tok, answer) + [tok.eos_token_id]
    assert tok.decode(answer_token_ids(tok, ANSWER)) == ANSWER


def test_loss_equals_hf_causal_lm_loss_with_masked_prompt(tiny_policy: Policy) -> None:
    tok = tiny_policy.tokenizer
    other = [{"role": "user", "content": "Delete my 3 o'clock event."}]
    examples = [(MESSAGES, ANSWER), (other, '{"tool": "calendar.delete_event", "args": {}}')]
    prompts, targets = sft_rows(tok, examples, prefill=PREFILL)
    hf_losses, n_tokens = [], []
    with torch.no_grad():
        for p, t in zip(prompts, targets, strict=True):
            ids = torch.tensor([p + t])
            labels = torch.tensor([[-100] * len(p) + t])
            hf_losses.append(float(tiny_policy.model(input_ids=ids, labels=labels).loss) * len(t))
            n_tokens.append(len(t))
    expected = sum(hf_losses) / sum(n_tokens)
    frozen = torch.optim.SGD(tiny_policy.trainable_parameters(), lr=0.0)  # measure, don't move
    assert sft_step(tiny_policy, frozen, examples, prefill=PREFILL) == pytest.approx(expected, rel=1e-4)


def test_training_tokens_match_the_prefilled_inference_prompt(tiny_policy: Policy) -> None:
    tok = tiny_policy.tokenizer
    at_inference = render_prompt(tok, MESSAGES, prefill=PREFILL)
    prompts, targets = sft_rows(tok, [(MESSAGES, ANSWER)], prefill=PREFILL)
    assert (prompts[0] + targets[0])[: len(at_inference)] == at_inference
    assert tok.decode(answer_token_ids(tok, ANSWER, PREFILL)) == ANSWER


def test_prefill_must_start_the_answer(tiny_policy: Policy) -> None:
    with pytest.raises(ValueError, match="does not start with the prefill"):
        sft_rows(tiny_policy.tokenizer, [(MESSAGES, "Sure! " + ANSWER)], prefill=PREFILL)


def test_sft_examples_from_tasks() -> None:
    task = Task(
        id="t:0", prompt="Weather in Paris?", expected_tool="weather.get", expected_args={"city": "Paris"}
    )
    [(messages, answer)] = sft_examples([task], lambda t: [{"role": "user", "content": t.prompt}])
    assert messages[0]["content"] == "Weather in Paris?"
    assert (
        json.loads(answer)
        == {"tool": "weather.get", "args": {"city": "Paris"}}
        == json.loads(default_answer(task))
    )


def test_sft_reduces_the_loss(tiny_policy: Policy) -> None:
    losses = run_sft(
        tiny_policy, [(MESSAGES, ANSWER)], steps=20, lr=2e-2, batch_size=1, seed=0, prefill=PREFILL
    )
    assert len(losses) == 20
    assert losses[-1] < 0.5 * losses[0], losses


def test_on_step_can_stop_early(tiny_policy: Policy) -> None:
    seen: list[int] = []
    losses = run_sft(
        tiny_policy, [(MESSAGES, ANSWER)], steps=10, lr=1e-3, on_step=lambda s, _: seen.append(s) or s < 2
    )
    assert seen == [0, 1, 2] and len(losses) == 3


def test_cosine_schedule_decays_the_rate_from_lr_towards_zero(tiny_policy: Policy, monkeypatch) -> None:
    import workbench.learn.sft as sft

    rates: list[float] = []
    real_step = sft.sft_step

    def spy(policy, optimizer, *args, **kwargs):
        rates.append(optimizer.param_groups[0]["lr"])
        return real_step(policy, optimizer, *args, **kwargs)

    monkeypatch.setattr(sft, "sft_step", spy)
    run_sft(tiny_policy, [(MESSAGES, ANSWER)], steps=4, lr=1e-3, batch_size=1, schedule="cosine")
    assert rates == pytest.approx([1e-3, 0.5e-3 * (1 + 0.5**0.5), 0.5e-3, 0.5e-3 * (1 - 0.5**0.5)])
    rates.clear()
    run_sft(tiny_policy, [(MESSAGES, ANSWER)], steps=3, lr=1e-3, batch_size=1)
    assert rates == [1e-3] * 3
    with pytest.raises(ValueError, match="linear"):
        run_sft(tiny_policy, [(MESSAGES, ANSWER)], steps=1, schedule="linear")


def _linear_output_dtypes(policy: Policy) -> tuple[list[torch.dtype], object]:
    """Record the output dtype of the first LoRA-wrapped linear layer on every forward."""
    seen: list[torch.dtype] = []
    layer = next(m for name, m in policy.model.named_modules() if name.endswith("q_proj"))
    return seen, layer.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))


def test_bf16_autocast_runs_the_matmuls_in_bf16_and_keeps_float32_weights(tiny_policy: Policy) -> None:
    examples = [(MESSAGES, ANSWER)]
    frozen = torch.optim.SGD(tiny_policy.trainable_parameters(), lr=0.0)  # measure, don't move
    seen, hook = _linear_output_dtypes(tiny_policy)
    full = sft_step(tiny_policy, frozen, examples, prefill=PREFILL)
    in_full = set(seen)
    seen.clear()
    mixed = sft_step(tiny_policy, frozen, examples, prefill=PREFILL, autocast=torch.bfloat16)
    hook.remove()
    assert (in_full, set(seen)) == ({torch.float32}, {torch.bfloat16})
    assert mixed == pytest.approx(full, rel=2e-2)  # bf16 rounding, the same loss
    before = [p.detach().clone() for p in tiny_policy.trainable_parameters()]
    run_sft(tiny_policy, examples, steps=2, lr=1e-2, batch_size=1, prefill=PREFILL, autocast=torch.bfloat16)
    after = list(tiny_policy.trainable_parameters())
    assert all(
        p.dtype == torch.float32 for p in after
    )  # the LoRA weights (and so AdamW's state) stay float32
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))

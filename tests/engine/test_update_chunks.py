"""The update's micro-batches: multi-turn rows grouped by length so few positions are padding, a step's group
kept together where that pads less, and the gradient the same however the rows are chunked."""

from __future__ import annotations

import random

import pytest
import torch

from workbench.config import Config
from workbench.learn.update import _chunks, padded_positions, policy_update
from workbench.models import load_policy
from workbench.testing import perturb_lora

HARNESS = [5, 17, 33, 8, 91, 12, 7, 44]


def item(prompt: list[int], completion: list[int], advantage: float = 1.0):
    return (prompt, completion, advantage, [-1.0] * len(completion), 1.0)


def agent_rows() -> list:
    """Turns of episodes in step order: each episode's later turns carry its growing history."""
    rng = random.Random(0)
    rows = []
    for ep in range(6):
        history = HARNESS + [60 + ep]
        for _turn in range(1 + ep % 3):
            completion = [rng.randrange(100, 120) for _ in range(rng.randint(2, 5))]
            rows.append(item(list(history), completion, 1.0 if ep % 2 else -1.0))
            history += completion + [rng.randrange(120, 140) for _ in range(rng.randint(10, 30))]
    return rows


def test_multi_turn_rows_are_chunked_by_length_and_pad_less() -> None:
    rows = agent_rows()
    step_order = [rows[i : i + 4] for i in range(0, len(rows), 4)]
    chunks = _chunks(rows, 4)
    assert sorted(map(id, (it for ch in chunks for it in ch))) == sorted(map(id, rows))  # each row once
    assert padded_positions(chunks) < padded_positions(step_order)
    widths = [max(len(it[0]) for it in ch) for ch in chunks]
    assert widths == sorted(widths)  # short histories together, long ones together


@pytest.mark.parametrize("seed", range(5))
def test_a_groups_samples_stay_together_and_never_pad_more_than_step_order(seed: int) -> None:
    # single-turn steps: groups of G=4 samples share their whole prompt; prompts of assorted lengths
    rng = random.Random(seed)
    rows = []
    for g in range(6):
        prompt = HARNESS + [60 + g] * rng.randint(1, 12)
        rows += [item(prompt, [1] * rng.randint(1, 9)) for _ in range(4)]
    step_order = [rows[i : i + 8] for i in range(0, len(rows), 8)]
    chunks = _chunks(rows, 8)
    assert padded_positions(chunks) <= padded_positions(step_order)
    order = [tuple(it[0]) for ch in chunks for it in ch]
    runs = [p for i, p in enumerate(order) if i == 0 or order[i - 1] != p]
    assert len(runs) == 6  # each group's rows adjacent


def test_padded_positions_counts_rows_times_the_longest_row_past_the_shared_prompt() -> None:
    chunk = [item(HARNESS + [1, 2, 3], [9]), item(HARNESS + [1], [8, 8, 8, 8, 8])]
    assert padded_positions([chunk]) == 2 * max(2 + 1, 0 + 5)


@pytest.mark.parametrize("cfg_kw", [{}, {"loss_type": "dapo"}, {"loss_type": "dr_grpo"}])
def test_the_update_is_the_same_however_the_rows_are_chunked(tiny_model, cfg_kw) -> None:
    rows = agent_rows()
    results = []
    for micro_batch in (3, len(rows)):  # length-ordered micro-batches vs one micro-batch of every row
        pol = load_policy(tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
        perturb_lora(pol, scale=0.3, seed=1)
        opt = torch.optim.AdamW(pol.trainable_parameters(), lr=1e-2)
        out = policy_update(
            pol, opt, Config(**cfg_kw), rows, len(rows), temperature=1.0, lr=1e-2, micro_batch=micro_batch
        )
        grads = {n: p.grad.clone() for n, p in pol.model.named_parameters() if p.requires_grad}
        results.append((out, grads))
    (chunked, g_chunked), (whole, g_whole) = results
    assert chunked["loss"] == pytest.approx(whole["loss"], abs=1e-5)
    assert chunked["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4)
    assert chunked["grad_norm"] > 0
    for n, g in g_whole.items():
        torch.testing.assert_close(g_chunked[n], g, atol=1e-5, rtol=1e-4, msg=n)

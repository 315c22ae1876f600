"""The update's micro-batches: rows grouped by length so few positions are padding, within a position budget,
and the gradient the same however the rows are chunked."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from workbench.config import Config
from workbench.learn.update import _chunks, padded_positions, policy_update, update_items
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


def single_turn_rows(rng: random.Random, request: tuple[int, int]) -> list:
    """Six groups of G=4 samples, each group's prompt the harness and a request of its own."""
    rows = []
    for g in range(6):
        prompt = HARNESS + [60 + g] * rng.randint(*request)
        rows += [item(prompt, [1] * rng.randint(1, 9)) for _ in range(4)]
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_the_chosen_micro_batches_never_pad_more_than_step_order(seed: int) -> None:
    rows = single_turn_rows(random.Random(seed), (1, 12)) + agent_rows()
    step_order = [rows[i : i + 8] for i in range(0, len(rows), 8)]
    assert padded_positions(_chunks(rows, 8)) <= padded_positions(step_order)


def test_a_micro_batch_of_one_group_runs_its_prompt_once() -> None:
    # G=8 samples of one long prompt fill a micro-batch: only their completions are padded positions
    prompt = HARNESS + [60] * 40
    rows = [item(prompt, [1] * n) for n in (3, 5, 2, 4, 6, 1, 2, 3)] + [item(HARNESS + [61] * 5, [1, 2])] * 8
    chunks = _chunks(rows, 8)
    assert padded_positions(chunks) == 8 * 6 + 8 * 2
    assert {tuple(it[0]) for it in chunks[0]} in ({tuple(prompt)}, {tuple(HARNESS + [61] * 5)})


def test_a_micro_batch_stays_within_the_position_budget() -> None:
    rows = agent_rows()
    chunks = _chunks(rows, 16, budget=120)
    assert len(chunks) > 1
    for ch in chunks:
        assert padded_positions([ch]) <= 120 or len(ch) == 1


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


def episode(turns: list[tuple[list[int], list[int]]], truncated: bool = False):
    """A rollout as the update reads it: each turn's prompt ids and sampled ids (the tool results between
    turns are the ids a later prompt adds)."""
    segs = []
    history = list(HARNESS)
    for between, completion in turns:
        history += between
        segs.append(
            SimpleNamespace(
                prompt_ids=list(history),
                completion=SimpleNamespace(token_ids=completion, logprobs=[-0.5] * len(completion)),
            )
        )
        history += completion
    return SimpleNamespace(segments=segs, truncated=truncated)


EPISODES = [
    (episode([([60, 61], [100, 101, 102]), ([130, 131, 132, 133], [103, 104]), ([134], [105])]), 1.0),
    (episode([([62], [106, 107])]), -1.0),
    (episode([([60, 61], [108]), ([135, 136], [109, 110, 111, 112])]), 0.5),
    (episode([([63, 64, 65], [113, 114])]), -0.5),
]


def test_an_episode_is_one_row_whose_trained_positions_are_its_sampled_turns() -> None:
    items, n_seqs = update_items(EPISODES, Config(multi_turn_weighting="episode"))
    assert n_seqs == 4 and len(items) == 4
    prompt, completion, advantage, logps, weight, trained = items[0]
    assert prompt == HARNESS + [60, 61] and advantage == 1.0 and weight == 1.0
    assert completion == [100, 101, 102, 130, 131, 132, 133, 103, 104, 134, 105]
    assert [c for c, t in zip(completion, trained, strict=True) if t] == [100, 101, 102, 103, 104, 105]
    assert [lp for lp, t in zip(logps, trained, strict=True) if not t] == [0.0] * 5
    assert len(items[1]) == 5  # one turn: a row as ever
    turns, _ = update_items(EPISODES, Config(multi_turn_weighting="turn"))
    assert len(turns) == 7 and all(len(it) == 5 for it in turns)


def test_a_turn_that_does_not_continue_the_one_before_keeps_its_own_row() -> None:
    ep = episode([([60], [100, 101]), ([130], [102])])
    ep.segments[1].prompt_ids = HARNESS + [60, 100, 999, 130]  # re-rendered ids: not the sampled ones
    items, _ = update_items([(ep, 1.0)], Config(multi_turn_weighting="episode"))
    assert [(it[0], it[1]) for it in items] == [(s.prompt_ids, s.completion.token_ids) for s in ep.segments]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_an_episode_as_one_row_trains_as_its_turns_as_rows(tiny_model, loss_type) -> None:
    cfg = Config(multi_turn_weighting="episode", loss_type=loss_type)
    merged, n_seqs = update_items(EPISODES, cfg)
    turns = []  # the rows before episodes were merged: a turn a row, grpo weighting each by its token share
    for rollout, a in EPISODES:
        ep_tokens = sum(len(s.completion.token_ids) for s in rollout.segments)
        for s in rollout.segments:
            ids = s.completion.token_ids
            w = len(ids) / ep_tokens if loss_type == "grpo" else 1.0
            turns.append((s.prompt_ids, ids, a, s.completion.logprobs, w))
    results = []
    for items in (merged, turns):
        pol = load_policy(tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
        perturb_lora(pol, scale=0.3, seed=1)
        opt = torch.optim.AdamW(pol.trainable_parameters(), lr=1e-2)
        out = policy_update(pol, opt, cfg, items, n_seqs, temperature=1.0, lr=1e-2, micro_batch=2)
        grads = {n: p.grad.clone() for n, p in pol.model.named_parameters() if p.requires_grad}
        results.append((out, grads))
    (one_row, g_one), (per_turn, g_turn) = results
    for key in ("loss", "grad_norm", "num_tokens", "entropy"):
        assert one_row[key] == pytest.approx(per_turn[key], abs=1e-5, rel=1e-4), key
    assert one_row["num_tokens"] == 15  # the sampled tokens alone: tool results carry no loss
    for n, g in g_turn.items():
        torch.testing.assert_close(g_one[n], g, atol=1e-5, rtol=1e-4, msg=n)

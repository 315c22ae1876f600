"""An episode's conversation paid once: told its episodes go on, the sampler keeps each row's keys/values, and
the next turn prefills only the tokens it adds; outputs and log-probs are those of the sampler that keeps
nothing, for every mix of rows that continue and rows that start."""

from __future__ import annotations

import pytest
import torch

from tests.sampler_helpers import FIRST_BATCH, SECOND_BATCH, Shapes, assert_same, render
from workbench.config import config_from_dict
from workbench.envs import env_for_config
from workbench.models import Policy
from workbench.rollout.episode_kv import EpisodeKV, Kept
from workbench.rollout.hf import HFEngine
from workbench.rollout.prefix_kv import PREFIX_REUSE_ENV
from workbench.rollout.runner import Sampling, run_rollouts
from workbench.testing import build_tiny_tokenizer, perturb_lora
from workbench.types import Completion, Task

CALL = '<tool_call>\n{"name": "calendar.list_events", "arguments": {"day": "Friday"}}\n</tool_call>'
TOOL_RESULT = [101, 102, 103, 104, 105]  # what a turn adds after the sampled ids (tool results, a header)


@pytest.fixture
def policy(tiny_policy: Policy) -> Policy:
    perturb_lora(tiny_policy, scale=0.3, seed=7)
    return tiny_policy


def sample(engine: HFEngine, prompts: list[list[int]], n: int = 1, *, keep: bool, new: int = 8) -> list:
    groups = engine.generate(prompts, n, max_new_tokens=new, temperature=0.0, stop_token_ids=[], keep_kv=keep)
    return [[(c.token_ids, c.logprobs) for c in g] for g in groups]


def next_turn(prompts: list[list[int]], groups: list, n: int) -> list[list[int]]:
    """Each episode's next prompt: its prompt, its sampled ids, then the tool result."""
    return [prompts[i // n] + list(groups[i // n][i % n][0]) + TOOL_RESULT for i in range(len(prompts) * n)]


def test_the_next_turn_prefills_only_what_it_adds_and_samples_the_same(policy, monkeypatch) -> None:
    monkeypatch.setenv(PREFIX_REUSE_ENV, "on")
    first = render(policy, FIRST_BATCH)
    fresh = HFEngine(policy)
    turn1 = sample(fresh, first, n=2, keep=False)
    second = next_turn(first, turn1, 2)  # six episodes, each its own conversation

    engine = HFEngine(policy)
    assert_same(sample(engine, first, n=2, keep=True), turn1)
    # every row kept, its prompt and every sampled id but the last; greedy, the two of a prompt are one
    # conversation, kept once for both
    assert [k.copies for k in engine.episode_kv.rows.values()] == [2, 2, 2]
    with Shapes(policy) as shapes:
        got = sample(engine, second, keep=True)
    # one prefill of the last sampled id + the tool result a row, nothing of the conversation before
    assert shapes[0] == (6, 1 + len(TOOL_RESULT))
    assert_same(got, sample(HFEngine(policy), second, keep=False))
    # the turn-1 rows were taken, the turn-2 rows kept
    assert sum(k.copies for k in engine.episode_kv.rows.values()) == 6
    want = {tuple(p + ids[:-1]) for p, [(ids, _)] in zip(second, got, strict=True)}
    assert set(engine.episode_kv.rows) == want


def test_rows_that_continue_and_rows_that_start_share_one_batch(policy, monkeypatch) -> None:
    monkeypatch.setenv(PREFIX_REUSE_ENV, "on")
    first = render(policy, FIRST_BATCH[:2])
    engine = HFEngine(policy)
    turn1 = sample(engine, first, keep=True, new=5)
    # a continuing row, a new episode, the other continuing row one token longer than kept + a longer result
    mixed = [
        first[0] + list(turn1[0][0][0]) + TOOL_RESULT,
        render(policy, SECOND_BATCH[:1])[0],
        first[1] + list(turn1[1][0][0]) + TOOL_RESULT * 3,
    ]
    got = sample(engine, mixed, keep=True)
    monkeypatch.setenv(PREFIX_REUSE_ENV, "call")
    assert_same(got, sample(HFEngine(policy), mixed, keep=False))


def test_stopped_rows_are_kept_when_they_stop(policy, monkeypatch) -> None:
    """A row that stops early leaves the batch; what it had fed is kept then, not lost with it."""
    monkeypatch.setenv(PREFIX_REUSE_ENV, "on")
    prompts = render(policy, FIRST_BATCH)
    probe = HFEngine(policy).generate(prompts, 1, max_new_tokens=6, temperature=0.0, stop_token_ids=[])
    stop = probe[0][0].token_ids[2]  # the first row stops at its third token; others may stop too
    engine = HFEngine(policy)
    groups = engine.generate(
        prompts, 1, max_new_tokens=6, temperature=0.0, stop_token_ids=[stop], keep_kv=True
    )
    ids = [g[0].token_ids for g in groups]
    assert groups[0][0].finish_reason == "stop" and len(ids[0]) <= 3
    assert set(engine.episode_kv.rows) == {tuple(p + t[:-1]) for p, t in zip(prompts, ids, strict=True)}
    follow = [p + t + TOOL_RESULT for p, t in zip(prompts, ids, strict=True)]
    with Shapes(policy) as shapes:
        got = sample(engine, follow, keep=True)
    assert shapes[0] == (3, 1 + len(TOOL_RESULT))
    assert_same(got, sample(HFEngine(policy), follow, keep=False))


def test_nothing_is_kept_unless_asked_or_with_the_reuse_off(policy, monkeypatch) -> None:
    prompts = render(policy, FIRST_BATCH)
    monkeypatch.setenv(PREFIX_REUSE_ENV, "on")
    engine = HFEngine(policy)
    sample(engine, prompts, keep=False)
    assert not engine.episode_kv.rows
    for mode in ("call", "off"):
        monkeypatch.setenv(PREFIX_REUSE_ENV, mode)
        sample(engine, prompts, keep=True)
        assert not engine.episode_kv.rows


def test_new_weights_are_never_served_an_old_conversation(policy, monkeypatch) -> None:
    monkeypatch.setenv(PREFIX_REUSE_ENV, "on")
    first = render(policy, FIRST_BATCH)
    engine = HFEngine(policy)
    second = next_turn(first, sample(engine, first, keep=True), 1)
    engine.update_weights(policy)  # the trainer's signal
    assert not engine.episode_kv.rows
    second = next_turn(first, sample(engine, first, keep=True), 1)
    perturb_lora(policy, scale=0.6, seed=11)  # changed in place behind the engine's back
    with Shapes(policy) as shapes:
        got = sample(engine, second, keep=True)
    assert shapes[0][1] > 1 + len(TOOL_RESULT)  # the conversations prefilled again
    assert_same(got, sample(HFEngine(policy), second, keep=False))


def kept_row(tokens: tuple[int, ...], size: int) -> Kept:
    return Kept(tokens, 0, None, [(torch.zeros(1, size, 1), torch.zeros(1, size, 1))])


def test_the_longest_kept_conversation_is_taken_once_and_the_oldest_dropped_past_the_budget() -> None:
    kv = EpisodeKV(budget_bytes=3 * 2 * 4 * 4)  # three rows of 4 tokens (keys and values, 4-byte floats)
    kv.check(torch.nn.Linear(1, 1))
    for tokens in [(1, 2, 3, 4), (1, 2, 3, 5), (1, 2, 3, 4, 6, 7)]:
        kv.keep(kept_row(tokens, 4))
    assert kv.take([1, 2, 3, 4]) is None  # a prompt must add at least one token
    assert kv.take([1, 2, 3, 4, 6, 7, 8]).tokens == (1, 2, 3, 4, 6, 7)  # the longest it extends
    assert kv.take([1, 2, 3, 4, 6, 7, 8]).tokens == (1, 2, 3, 4)  # taken: not served twice
    kv.keep(kept_row((9, 9), 4))
    kv.keep(kept_row((8, 8), 4))
    kv.keep(kept_row((7, 7), 4))  # a fourth row: the oldest, (1, 2, 3, 5), goes
    assert list(kv.rows) == [(9, 9), (8, 8), (7, 7)] and kv.nbytes == 3 * 2 * 4 * 4


class Recording:
    """An engine that says it keeps keys/values, records how it was called, and always calls a tool."""

    keeps_kv = True

    def __init__(self, tokenizer, reply: str) -> None:
        self.tokenizer, self.reply = tokenizer, reply
        self.calls: list[bool] = []
        self.forgotten = 0

    def generate(self, prompts, n, *, keep_kv=False, **kw) -> list[list[Completion]]:
        self.calls.append(keep_kv)
        ids = self.tokenizer(self.reply, add_special_tokens=False)["input_ids"]
        return [
            [Completion(self.reply, ids, [0.0] * len(ids), "stop", list(p)) for _ in range(n)]
            for p in prompts
        ]

    def forget_kv(self) -> None:
        self.forgotten += 1


def test_the_rollout_asks_to_keep_only_for_episodes_that_go_on_and_forgets_at_the_end() -> None:
    tok = build_tiny_tokenizer(512, "qwen2.5")
    for cfg, asked, forgotten in (({"env": "multi_turn", "max_turns": 3}, True, 1), ({}, False, 0)):
        env = env_for_config(config_from_dict({"tool_format": "native", **cfg}), tok)
        engine = Recording(tok, CALL)
        tasks = [Task(t, "What is on Friday?", "calendar.list_events", {"day": "Friday"}) for t in ("a", "b")]
        run_rollouts(engine, tok, env, tasks, 2, Sampling(8))
        assert engine.calls and set(engine.calls) == {asked} and engine.forgotten == forgotten

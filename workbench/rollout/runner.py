"""Rollouts: an engine and an environment together produce G episodes per task.

The first turn of every task's G episodes is one `generate(..., n=G)` call over all tasks, so the engine
shares each prompt's prefill across its group. Later turns (multi-turn envs only) are batched over the
episodes still running, one sample each. Every assistant turn is kept as a `Segment` (its prompt ids and
sampled completion), which is exactly what the policy update trains on. A later turn's prompt is the
earlier prompt + the sampled ids + the rendered delta (`turn_tokens`): token in, token out. An engine that
can keep each episode's keys/values between its turns (`keeps_kv`) is told to when the episodes may go on, and
to forget them when the rollout ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.rollout.base import RolloutEngine
from workbench.rollout.turn_tokens import first_prompt, next_prompt
from workbench.types import Completion, Output, Task


@dataclass
class Sampling:
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class Segment:
    prompt_ids: list[int]
    completion: Completion


@dataclass
class Rollout:
    """One episode: the task, what the environment made of it, and every sampled turn."""

    task: Task
    output: Output
    segments: list[Segment] = field(default_factory=list)
    latency_s: float = 0.0
    retokenized_turns: int = 0  # later turns whose prompt had to be rendered again from text (turn_tokens)

    @property
    def completion_tokens(self) -> int:
        return sum(len(s.completion.token_ids) for s in self.segments)

    @property
    def prompt_tokens(self) -> int:
        return len(self.segments[0].prompt_ids) if self.segments else 0

    @property
    def truncated(self) -> bool:
        return any(s.completion.truncated for s in self.segments)


def run_rollouts(
    engine: RolloutEngine,
    tokenizer: Any,
    env: Any,
    tasks: list[Task],
    n: int,
    sampling: Sampling,
    *,
    stop_token_ids: list[int] | None = None,
    seed: int | None = None,
    on_tokens: Callable[[int], None] | None = None,
) -> list[list[Rollout]]:
    """G = `n` rollouts for each task, grouped by task in task order. `on_tokens` is the engine's safe point
    inside decoding (`RolloutEngine.generate`); passed on only when given, so engines without it still work."""
    t0 = time.perf_counter()
    extra: dict[str, Any] = {"on_tokens": on_tokens} if on_tokens is not None else {}
    episodes = [[env.start(task) for _ in range(n)] for task in tasks]
    if getattr(engine, "keeps_kv", False) and any(getattr(g[0], "max_turns", 1) > 1 for g in episodes):
        extra["keep_kv"] = True
        try:
            return _run(engine, tokenizer, tasks, episodes, n, sampling, stop_token_ids, seed, extra, t0)
        finally:
            engine.forget_kv()
    return _run(engine, tokenizer, tasks, episodes, n, sampling, stop_token_ids, seed, extra, t0)


def _run(
    engine: RolloutEngine,
    tokenizer: Any,
    tasks: list[Task],
    episodes: list[list[Any]],
    n: int,
    sampling: Sampling,
    stop_token_ids: list[int] | None,
    seed: int | None,
    extra: dict[str, Any],
    t0: float,
) -> list[list[Rollout]]:
    segments: list[list[list[Segment]]] = [[[] for _ in range(n)] for _ in tasks]
    ended_at: list[list[float]] = [[0.0] * n for _ in tasks]
    retokenized: list[list[int]] = [[0] * n for _ in tasks]
    kw = dict(
        max_new_tokens=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        stop_token_ids=stop_token_ids,
        **extra,
    )
    # Turn 1: one prompt per task (every episode of a task starts identically), n samples each.
    first_prompts = [first_prompt(tokenizer, group[0]) for group in episodes]
    for t, comps in enumerate(engine.generate(first_prompts, n, seed=seed, **kw)):
        for g, comp in enumerate(comps):
            segments[t][g].append(Segment(first_prompts[t], comp))
            episodes[t][g].step(comp.text)
            if episodes[t][g].done:
                ended_at[t][g] = time.perf_counter() - t0
    turn = 1
    while True:
        active = [(t, g) for t, group in enumerate(episodes) for g, ep in enumerate(group) if not ep.done]
        if not active:
            break
        turn += 1
        prompts = []
        for t, g in active:
            last = segments[t][g][-1]
            ids, exact = next_prompt(tokenizer, last.prompt_ids, last.completion, episodes[t][g])
            prompts.append(ids)
            retokenized[t][g] += 0 if exact else 1
        step_seed = None if seed is None else seed + 7919 * turn
        for (t, g), prompt, comps in zip(
            active, prompts, engine.generate(prompts, 1, seed=step_seed, **kw), strict=True
        ):
            segments[t][g].append(Segment(prompt, comps[0]))
            episodes[t][g].step(comps[0].text)
            if episodes[t][g].done:
                ended_at[t][g] = time.perf_counter() - t0
    return [
        [
            Rollout(task, ep.output(), segs, lat, rt)
            for ep, segs, lat, rt in zip(eps, segs_t, ends, rts, strict=True)
        ]
        for task, eps, segs_t, ends, rts in zip(tasks, episodes, segments, ended_at, retokenized, strict=True)
    ]

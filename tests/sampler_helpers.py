"""Prompts with a common harness, and what the sampler tests check with them: the input shapes of each forward
pass, and greedy outputs equal across engines (shared by the prefix and episode keys/values tests)."""

from __future__ import annotations

import torch

from workbench.models import Policy
from workbench.rollout.hf import HFEngine
from workbench.rollout.prompt import render_prompt

HARNESS = {
    "role": "system",
    "content": "Tools: calendar.create_event(attendee, day, time), "
    "weather.get(city, day). Reply with one JSON object only, no prose, no code fences.",
}
FIRST_BATCH = [
    "Book Alex on Tuesday at 2 PM.",
    "Weather in Oslo tomorrow?",
    "Cancel my Friday meeting with Sam.",
]
SECOND_BATCH = ["Please remind me to call Mum at 6.", "Please say if it rains in Lisbon on Sunday afternoon."]


def render(policy: Policy, users: list[str]) -> list[list[int]]:
    return [render_prompt(policy.tokenizer, [HARNESS, {"role": "user", "content": u}]) for u in users]


class Shapes:
    """The input shapes of every forward pass of the model (its embedding's inputs), while in a `with`."""

    def __init__(self, policy: Policy) -> None:
        self.emb = policy.model.get_input_embeddings()
        self.seen: list[tuple[int, ...]] = []

    def __enter__(self) -> list[tuple[int, ...]]:
        self.handle = self.emb.register_forward_hook(lambda m, i, o: self.seen.append(tuple(i[0].shape)))
        return self.seen

    def __exit__(self, *exc: object) -> None:
        self.handle.remove()


def greedy(engine: HFEngine, prompts: list[list[int]], n: int = 1, new: int = 8) -> list[list[tuple]]:
    groups = engine.generate(prompts, n, max_new_tokens=new, temperature=0.0, stop_token_ids=[])
    return [[(c.token_ids, c.logprobs) for c in g] for g in groups]


def assert_same(a: list, b: list) -> None:
    assert [[toks for toks, _ in g] for g in a] == [[toks for toks, _ in g] for g in b]
    for ga, gb in zip(a, b, strict=True):
        for (_, la), (_, lb) in zip(ga, gb, strict=True):
            assert torch.allclose(torch.tensor(la), torch.tensor(lb), atol=1e-4)

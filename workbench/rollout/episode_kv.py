"""An episode's conversation paid once: the keys/values of each multi-turn episode kept between its turns.

A later turn's prompt is the earlier prompt, the sampled ids and the tool results (`turn_tokens`: token in,
token out), so everything but the tool results and the next header was already through the model when the
earlier turn was sampled. Without this, each turn prefilled the whole conversation again past the shared
system prompt: 78 % of the prefilled tokens of a 6-turn greedy eval on the built-in agent family
(bench/episode_kv.py, docs/benchmarks.md).

When a call is told its episodes go on (`generate(..., keep_kv=True)`), `HFEngine` keeps each row's
keys/values when the row ends: the prompt and every sampled id but the last (that one was never fed). The
next call takes the longest kept conversation its prompt starts with and prefills only the rest. A row's
keys/values are kept in two parts: the common prefix the call shared (one batch-1 tensor, referenced by every
row of that call, not copied) up to `start`, and the row's own part from there. Entries are taken when used
(once per episode that kept them), dropped oldest first beyond a byte budget, and all dropped when the
weights change (the same fingerprint as `PrefixKV`) or the rollout ends (`forget`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

from workbench.rollout.prefix_kv import weights_key

Layers = list[tuple[torch.Tensor, torch.Tensor]]
DEFAULT_BUDGET_BYTES = 1 << 30  # SmolLM2-135M: ~46 KB a token, so ~23k tokens (a 64-episode turn of ~360)


@dataclass
class Kept:
    """One row's keys/values: `prefix`'s first `start` positions (batch 1, shared by reference; None when
    `start` is 0), then `own` (per layer, [kv heads, tokens - start, head dim])."""

    tokens: tuple[int, ...]
    start: int
    prefix: Layers | None
    own: Layers
    copies: int = 1  # episodes with this very conversation (greedy samples of one prompt): each takes it once

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.own)

    def layer(self, i: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Layer i's (key pieces, value pieces) in order, each [kv heads, tokens, head dim]."""
        own_k, own_v = self.own[i]
        if not self.start or self.prefix is None:
            return (own_k,), (own_v,)
        pk, pv = self.prefix[i]
        return (pk[0, :, : self.start], own_k), (pv[0, :, : self.start], own_v)


class EpisodeKV:
    """Kept rows of one policy version, newest last."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.forget()

    def forget(self) -> None:
        self.rows: OrderedDict[tuple[int, ...], Kept] = OrderedDict()
        self.nbytes = 0
        self.key: tuple | None = None

    def check(self, model: Any) -> None:
        """Drop everything kept if the model's weights are not the ones it was kept with (once a call)."""
        key = weights_key(model)
        if self.key != key:
            self.forget()
            self.key = key

    def take(self, prompt: list[int]) -> Kept | None:
        """The longest kept row that `prompt` extends by at least one token, removed from what is kept."""
        best: Kept | None = None
        for tokens, kept in self.rows.items():
            n = len(tokens)
            if n < len(prompt) and (best is None or n > len(best.tokens)) and tuple(prompt[:n]) == tokens:
                best = kept
        if best is not None:
            best.copies -= 1
            if not best.copies:
                del self.rows[best.tokens]
                self.nbytes -= best.nbytes
        return best

    def keep(self, kept: Kept) -> None:
        """Keep a row (one more copy of a row with the same tokens: the same keys/values), then drop the
        oldest beyond the budget. The caller has `check`ed the model this call."""
        same = self.rows.pop(kept.tokens, None)
        if same is not None:
            same.copies += 1
            kept = same
        else:
            self.nbytes += kept.nbytes
        self.rows[kept.tokens] = kept
        while self.nbytes > self.budget_bytes and self.rows:
            _, dropped = self.rows.popitem(last=False)
            self.nbytes -= dropped.nbytes

"""Rollouts through transformers' own `generate`, for models our KV-cache sampler does not handle.

`workbench.rollout.hf.HFEngine` repeats, grows and compacts a per-layer key/value cache by hand; a hybrid
Mamba-2/attention model (Nemotron-H) carries recurrent and conv states instead (workbench.rollout.cache_kind),
which `generate` and the model's own cache class know how to advance. Same contract as every engine
(workbench.rollout.base): n completions per prompt, each token's sampling log-prob log_softmax(logits / T)
over the whole vocabulary (top_p only restricts the draw, as in `sample_next`), the stop token kept.

The log-probs come from a logits processor that is the only one `generate` runs (temperature 1, top_p 1,
top_k off): it sees the raw logits, scales and masks them itself, and keeps one step's log-softmax, from
which the next call (or the end) takes the chosen token's value, so memory is one [rows, vocab] tensor,
not `output_logits`' [steps, rows, vocab]. The draw is generate's (torch.multinomial on the global RNG,
forked and seeded per call when a seed is given): deterministic for a seed, not the same draws as HFEngine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from workbench.rollout.base import check_generate_args
from workbench.rollout.cache_kind import has_plain_kv_cache
from workbench.safe_points import DECODE_EVERY
from workbench.types import Completion


class _Sampler:
    """The logits processor: temperature and top_p applied here, the chosen tokens' log-probs recorded,
    the stop times noted, and the decode safe point called every DECODE_EVERY tokens."""

    def __init__(
        self,
        temperature: float,
        top_p: float,
        width: int,
        stops: torch.Tensor,
        t0: float,
        on_tokens: Callable[[int], None] | None,
    ) -> None:
        self.scale = temperature if temperature > 0 else 1.0  # greedy: log-probs at temperature 1
        self.top_p = top_p if temperature > 0 else 1.0
        self.width = width
        self.stops = stops
        self.t0 = t0
        self.on_tokens = on_tokens
        self.last: torch.Tensor | None = None  # the previous step's log-softmax [rows, vocab]
        self.logps: list[torch.Tensor] = []  # per generated token: [rows]
        self.ended: torch.Tensor | None = None  # per row: seconds at its first stop token, or NaN

    def take(self, tokens: torch.Tensor) -> None:
        """Record the log-probs and stop times of `tokens`, the tokens chosen from `self.last`."""
        assert self.last is not None and self.ended is not None
        self.logps.append(self.last.gather(-1, tokens.to(self.last.device)[:, None]).squeeze(-1).cpu())
        tokens = tokens.cpu()
        newly = torch.isin(tokens, self.stops) & self.ended.isnan()
        self.ended[newly] = time.perf_counter() - self.t0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        done = input_ids.shape[1] - self.width  # tokens generated so far
        if self.ended is None:
            self.ended = torch.full((input_ids.shape[0],), float("nan"))
        if done:
            self.take(input_ids[:, -1])
            if self.on_tokens is not None and done % DECODE_EVERY == 0:
                self.on_tokens(done)
        logp = torch.log_softmax(scores.float() / self.scale, -1)
        self.last = logp  # on the model's device: one [rows, vocab] tensor, no copy per step
        if self.top_p >= 1.0:
            return logp
        sorted_p, order = logp.exp().sort(-1, descending=True)
        outside = (
            sorted_p.cumsum(-1) - sorted_p
        ) > self.top_p  # mass before this token already exceeds top_p
        keep = torch.ones_like(outside).scatter_(-1, order, ~outside)
        return logp.masked_fill(~keep, float("-inf"))


class HFGenerateEngine:
    """Rollouts with the policy's own model through `generate` (in-process: `update_weights` is free).
    `max_batch_size` caps the rows (prompts x n) of one `generate` call."""

    def __init__(self, policy: Any, *, max_batch_size: int = 64) -> None:
        self.policy = policy
        self.max_batch_size = max_batch_size

    def update_weights(self, policy: Any) -> None:
        self.policy = policy

    def close(self) -> None:
        pass

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        stop_token_ids: list[int] | None = None,
        seed: int | None = None,
        on_tokens: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        """See `RolloutEngine.generate`. Deterministic for a given seed (and batch composition)."""
        check_generate_args(prompts, n)
        model = self.policy.model
        stops = list(stop_token_ids) if stop_token_ids is not None else list(self.policy.eos_token_ids)
        per_chunk = max(1, self.max_batch_size // n)
        t0 = time.perf_counter()
        out: list[list[Completion]] = []
        was_training = model.training
        model.eval()
        devices = [next(model.parameters()).device] if next(model.parameters()).device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                if seed is not None:
                    torch.manual_seed(seed)
                for i in range(0, len(prompts), per_chunk):
                    out += self._chunk(
                        model,
                        prompts[i : i + per_chunk],
                        n,
                        max_new_tokens,
                        temperature,
                        top_p,
                        stops,
                        t0,
                        on_tokens,
                    )
        finally:
            model.train(was_training)
        return out

    def _chunk(
        self,
        model: Any,
        prompts: list[list[int]],
        n: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stops: list[int],
        t0: float,
        on_tokens: Callable[[int], None] | None,
    ) -> list[list[Completion]]:
        from transformers import GenerationConfig, LogitsProcessorList

        device = next(model.parameters()).device
        pad_id = self.policy.tokenizer.pad_token_id
        pad_id = pad_id if pad_id is not None else (stops[0] if stops else 0)
        rows = [p for p in prompts for _ in range(n)]  # a group's n samples next to each other
        width = max(len(p) for p in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for r, p in enumerate(rows):  # left padding: every prompt ends at the last column
            ids[r, width - len(p) :] = torch.tensor(p)
            attn[r, width - len(p) :] = 1
        stop_t = torch.tensor(stops, dtype=torch.long)
        sampler = _Sampler(temperature, top_p, width, stop_t, t0, on_tokens)
        # Only our processor shapes the distribution: every warper generate could add is switched off.
        config = GenerationConfig(
            do_sample=temperature > 0,
            temperature=1.0,
            top_p=1.0,
            min_p=None,
            typical_p=1.0,
            repetition_penalty=1.0,
            max_new_tokens=max_new_tokens,
            eos_token_id=stops or None,
            pad_token_id=pad_id,
            return_dict_in_generate=True,
            use_cache=True,
            **({"top_k": 0} if temperature > 0 else {}),  # greedy warns about a top_k it ignores
        )
        result = model.generate(
            input_ids=ids.to(device),
            attention_mask=attn.to(device),
            generation_config=config,
            logits_processor=LogitsProcessorList([sampler]),
        )
        new = result.sequences[:, width:].cpu()
        steps = new.shape[1]
        if len(sampler.logps) < steps:  # the last token's log-prob is still in `sampler.last`
            sampler.take(new[:, steps - 1])
        logps = torch.stack(sampler.logps[:steps], dim=1) if steps else torch.zeros((len(rows), 0))
        now = time.perf_counter() - t0
        decode = self.policy.tokenizer.decode
        groups: list[list[Completion]] = []
        for p_idx, prompt in enumerate(prompts):
            group = []
            for r in range(p_idx * n, (p_idx + 1) * n):
                toks = new[r].tolist()
                hit = next((k for k, t in enumerate(toks) if t in stops), None)
                end = len(toks) if hit is None else hit + 1  # after a stop, generate pads the row
                finish = "length" if hit is None else "stop"
                ended = float(sampler.ended[r]) if sampler.ended is not None else math.nan
                group.append(
                    Completion(
                        text=decode(toks[:end], skip_special_tokens=True),
                        token_ids=toks[:end],
                        logprobs=logps[r, :end].tolist(),
                        finish_reason=finish,
                        prompt_token_ids=list(prompt),
                        latency_s=now if finish == "length" or math.isnan(ended) else ended,
                    )
                )
            groups.append(group)
        return groups


def local_engine(policy: Any, rollout: str = "hf") -> Any:
    """The in-process engine for `rollout` ("hf" or "hf_generate"): our KV-cache sampler (HFEngine) where
    the model's cache is plain attention keys/values, else transformers' generate."""
    if rollout == "hf" and has_plain_kv_cache(policy.model):
        from workbench.rollout.hf import HFEngine

        return HFEngine(policy)
    return HFGenerateEngine(policy)

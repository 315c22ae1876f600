"""The default rollout engine: plain PyTorch/HF, sharing each prompt's prefill across its group.

GRPO samples a group of n completions per prompt. `model.generate(num_return_sequences=n)` runs the prompt's
prefill n times; here the prompts are prefilled once (left-padded in one batch), the KV cache is repeated n
times along the batch, and our own decode loop samples with that cache. Finished rows are dropped from the
batch as they end, so a group where most replies stop early does not pay for the longest one.

The prompts' common prefix (the system prompt with the tools) is prefilled once per call and its keys/values
are kept for the next call of the same policy version (workbench.rollout.prefix_kv): a later eval batch or
turn prefills only what it does not share. Told that its episodes go on (`keep_kv`), it also keeps each row's
own keys/values for the episode's next turn (workbench.rollout.episode_kv).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from workbench.rollout.base import check_generate_args
from workbench.rollout.episode_kv import EpisodeKV, Kept, Layers
from workbench.rollout.kv_cache import growing_cache
from workbench.rollout.prefix_kv import PrefixKV, prefix_reuse
from workbench.rollout.prompt import common_prefix_len
from workbench.rollout.shared_attention import PrefixLayers, shared_attention, supports_shared_attention
from workbench.safe_points import DECODE_EVERY
from workbench.token_rows import runs_fast_rows
from workbench.types import Completion

MIN_SHARED_PREFIX = 16  # below this, one padded prefill is as cheap as a separate prefix pass


def base_forward_params(model: Any) -> set[str]:
    """Parameter names of the (unwrapped, if PEFT) model's `forward`: tells which cache keyword it takes."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(base.forward).parameters)


def cache_of(result: Any) -> Any:
    """The KV cache of a forward's output, under either name (`cache`, or the older `past_key_values`)."""
    cache = getattr(result, "cache", None)
    return cache if cache is not None else result.past_key_values


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row and return (tokens [B], logprobs [B]).

    The log-prob is log_softmax(logits / temperature) at the chosen token, over the whole vocabulary: what
    `completion_logprobs` recomputes in training, so old/new ratios are exactly 1 when nothing changed.
    top_p only restricts what can be drawn (the nucleus, renormalised); the recorded log-prob is not
    renormalised (the true nucleus probability would be higher by -log(kept mass)), as in TRL, whose
    training pass ignores top_p too. temperature == 0 is greedy, with log-probs at temperature 1.

    The draw is by inverse CDF (one uniform per row, a cumsum and a binary search), the same distribution
    as `torch.multinomial`, which on CPU draws an exponential per vocabulary entry: 8.8 ms vs 0.7 ms a
    step for 8 rows x 49k tokens here (bench/decode_limit.py).
    """
    logits = logits.float()
    if temperature <= 0:
        tokens = logits.argmax(-1)
        return tokens, torch.log_softmax(logits, -1).gather(-1, tokens[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / temperature, -1)
    probs = logp.exp()
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        outside = (sorted_p.cumsum(-1) - sorted_p) > top_p  # mass before this token already exceeds top_p
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    tokens = inverse_cdf_sample(probs, generator)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def inverse_cdf_sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of (unnormalised, non-negative) `probs`: the first index whose running sum exceeds
    u x total. `right=True` skips zero-probability entries (their running sum equals the one before)."""
    cdf = probs.cumsum(-1)
    u = (
        torch.rand((probs.shape[0], 1), generator=generator, device=probs.device, dtype=cdf.dtype)
        * cdf[:, -1:]
    )
    idx = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    over = idx >= probs.shape[-1]
    if bool(over.any()):  # u rounded up to the total (p ~ 1e-7): take the row's last token with mass
        idx[over] = (probs[over] > 0).int().cumsum(-1).argmax(-1)
    return idx


class OneDNNHead(torch.nn.Module):
    """The output projection through oneDNN with a prepacked copy of the weight, for sampling on CPU.

    MKL's fp32 GEMM is slow on this shape (49k x 576, a few rows): 19.6 ms vs 9.3 ms a decode step at
    8 rows, about an eighth of the step (bench/decode_limit.py). Logits agree with MKL's to ~1e-5.
    """

    def __init__(self, head: torch.nn.Linear) -> None:
        super().__init__()
        self.head = head
        self.packed = head.weight.detach().to_mkldnn()
        self.packed_bias = (
            head.bias.detach() if head.bias is not None else torch.zeros(head.out_features)
        ).to_mkldnn()
        self.version = head.weight._version  # in-place updates bump it: then the copy is stale

    # Code that reads the head's tensors while it is swapped in (token_rows' forward reads the bias of the
    # columns it writes) gets the original ones.
    @property
    def weight(self) -> torch.nn.Parameter:
        return self.head.weight

    @property
    def bias(self) -> torch.nn.Parameter | None:
        return self.head.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch._C._nn.mkldnn_linear(
            x.reshape(-1, x.shape[-1]).contiguous().to_mkldnn(), self.packed, self.packed_bias
        )
        return y.to_dense().reshape(*x.shape[:-1], -1)


def _head_slot(model: Any) -> tuple[Any, str] | None:
    """(module, attribute) holding the model's LM head as a plain Linear, or None: the HF model's `lm_head`
    (under peft: the base model's), or, where the head's rows of some tokens train (workbench.token_rows),
    the base layer under peft's wrapper (the trained columns are written over its output)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = getattr(base, "lm_head", None)
    if isinstance(head, torch.nn.Linear):
        return base, "lm_head"
    rows = getattr(head, "token_adapter", None)
    if isinstance(getattr(rows, "base_layer", None), torch.nn.Linear) and runs_fast_rows(rows):
        return rows, "base_layer"
    return None


class HFEngine:
    """Rollouts with the policy's own HF model, in-process (no copy of the weights: `update_weights` is free).

    `max_batch_size` caps the sequences decoded together (prompts x n); more prompts are done in chunks.
    `onednn_head`: on CPU in fp32, sample through `OneDNNHead` while the head is frozen (LoRA); a head
    that trains (adapter "full") is used as is. `shared_prefix`: where the model allows it
    (`supports_shared_attention`), the rows of a call attend to one batch-1 copy of their common prefix's
    keys/values instead of a copy each.
    """

    keeps_kv = True  # `generate(..., keep_kv=True)` keeps the episodes' keys/values for their next turn

    def __init__(
        self, policy: Any, *, max_batch_size: int = 64, onednn_head: bool = True, shared_prefix: bool = True
    ) -> None:
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.onednn_head = onednn_head
        self.shared_prefix = shared_prefix  # rows attend to one copy of the common prefix (shared_attention)
        self._packed: OneDNNHead | None = None
        self.prefix_kv = PrefixKV()  # the common prefix's keys/values for this policy version
        self.episode_kv = EpisodeKV()  # each going-on episode's own keys/values (keep_kv calls)

    def _fast_head(self, model: Any, device: torch.device) -> tuple[Any, str, torch.nn.Module] | None:
        """(holder, attribute, the original head) after swapping in the packed head, or None where it does
        not apply."""
        slot = _head_slot(model)
        if not (
            self.onednn_head
            and slot is not None
            and device.type == "cpu"
            and torch.backends.mkldnn.is_available()
        ):
            return None
        holder, attr = slot
        head = getattr(holder, attr)
        if head.weight.requires_grad or head.weight.dtype != torch.float32:
            return None
        if (
            self._packed is None
            or self._packed.head is not head
            or self._packed.version != head.weight._version
        ):
            self._packed = OneDNNHead(head)
        setattr(holder, attr, self._packed)
        return holder, attr, head

    def update_weights(self, policy: Any) -> None:
        self.policy = policy  # same model object: it already samples from the current weights
        self.prefix_kv.clear()  # but the cached prefix's keys/values were the old weights'
        self.episode_kv.forget()

    def forget_kv(self) -> None:
        """The rollout is over: drop the episodes' kept keys/values."""
        self.episode_kv.forget()

    def _prefix_cache(
        self, model: Any, prefix: list[int], device: torch.device, cache_kw: str, keep: bool
    ) -> Any:
        """A growing cache (batch 1) holding `prefix`'s keys/values: from `prefix_kv` as far as it has them
        (`keep`), the rest prefilled here."""

        def prefill(tokens: list[int], start: int, cache: Any) -> Any:
            positions = torch.arange(start, start + len(tokens), device=device)[None]
            out = model(
                input_ids=torch.tensor([tokens], device=device),
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{cache_kw: cache},
            )
            return cache_of(out)

        if not keep:
            return prefill(prefix, 0, growing_cache())
        return self.prefix_kv.cache_for(model, prefix, prefill)

    def _known_cache(
        self,
        model: Any,
        prompts: list[list[int]],
        kept: list[Kept | None],
        device: torch.device,
        cache_kw: str,
        reuse: str,
        share: bool = False,
    ) -> tuple[Any, list[int], list[tuple[int, Layers | None]], PrefixLayers | None]:
        """The cache (one row a prompt) of what is already known of each prompt, how many of its tokens that
        is, and where each row's keys/values begin to be its own (start, the shared prefix before it) for
        keeping. Known: a kept episode's conversation where `kept` has one, else the prompts' common prefix
        (one harness for every prompt: prefilled once, or taken from `prefix_kv`, and repeated per row). Kept
        across calls ("on"), a lone prompt's own prefix is worth splitting off too: the next call starts
        there. Each row keeps at least one token of its own to prefill. None and zeros when nothing is known.
        `share`: a common prefix is not repeated per row but returned (its batch-1 keys/values) with an empty
        cache, for `shared_attention`; then the known columns are not in the cache."""
        lens = [len(p) for p in prompts]
        known = [0] * len(prompts)
        origins: list[tuple[int, Layers | None]] = [(0, None)] * len(prompts)
        prefix = None
        if not all(kept):
            shared = min(common_prefix_len(prompts), min(lens) - 1)
            if shared >= MIN_SHARED_PREFIX and ((len(prompts) > 1 and reuse != "off") or reuse == "on"):
                prefix = self._prefix_cache(model, prompts[0][:shared], device, cache_kw, reuse == "on")
                # the batch-1 keys/values, referenced by the rows kept (the cache's next writes go to the
                # per-row copies made below, never to these)
                shared_layers = [(layer.keys, layer.values) for layer in prefix.layers]
                for r, k in enumerate(kept):
                    if k is None:
                        known[r], origins[r] = shared, (shared, shared_layers)
        for r, k in enumerate(kept):
            if k is not None:
                known[r], origins[r] = len(k.tokens), (k.start, k.prefix)
        if not any(kept):
            if prefix is not None and share:
                return growing_cache(), known, origins, shared_layers
            if prefix is not None:
                prefix.batch_repeat_interleave(len(prompts))
            return prefix, known, origins, None
        return self._assemble(kept, prefix, known), known, origins, None

    @staticmethod
    def _assemble(kept: list[Kept | None], prefix: Any, known: list[int]) -> Any:
        """A growing cache of one row a prompt, each row's known keys/values right-aligned (left pads)."""
        columns = max(known)
        cache = growing_cache()
        some = next(k for k in kept if k is not None)
        for i in range(len(some.own)):
            like = some.own[i][0]
            heads, dim = like.shape[0], like.shape[-1]
            keys = like.new_zeros((len(kept), heads, columns, dim))
            values = like.new_zeros((len(kept), heads, columns, some.own[i][1].shape[-1]))
            for r, k in enumerate(kept):
                at = columns - known[r]
                if k is None:
                    if known[r]:
                        keys[r, :, at:] = prefix.layers[i].keys[0]
                        values[r, :, at:] = prefix.layers[i].values[0]
                    continue
                for piece_k, piece_v in zip(*k.layer(i), strict=True):
                    keys[r, :, at : at + piece_k.shape[1]] = piece_k
                    values[r, :, at : at + piece_v.shape[1]] = piece_v
                    at += piece_k.shape[1]
            cache.update(keys, values, i)
        return cache

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
        keep_kv: bool = False,
    ) -> list[list[Completion]]:
        """See `RolloutEngine.generate`. Deterministic for a given seed (and batch composition).
        `on_tokens(decode_steps_so_far)` is called every `DECODE_EVERY` decode steps: a safe point (it may
        block, or raise to abandon the call). `keep_kv`: the episodes go on, keep each row's keys/values for
        its next turn (with the prefix reuse "on"; `forget_kv` when the rollout ends)."""
        check_generate_args(prompts, n)
        model = self.policy.model
        stops = list(stop_token_ids) if stop_token_ids is not None else list(self.policy.eos_token_ids)
        device = next(model.parameters()).device
        generator = None
        if seed is not None:
            generator = torch.Generator(device=device)
            generator.manual_seed(seed)
        per_chunk = max(1, self.max_batch_size // n)
        t0 = time.perf_counter()
        out: list[list[Completion]] = []
        was_training = model.training
        model.eval()
        swapped = self._fast_head(model, device)
        shares = self.shared_prefix and supports_shared_attention(model)
        try:
            # a forward that passes no `shared_prefix` is plain SDPA under the switch
            with torch.inference_mode(), shared_attention(model) if shares else nullcontext():
                for i in range(0, len(prompts), per_chunk):
                    chunk = prompts[i : i + per_chunk]
                    out += self._generate_chunk(
                        model,
                        chunk,
                        n,
                        max_new_tokens,
                        temperature,
                        top_p,
                        stops,
                        generator,
                        device,
                        t0,
                        on_tokens,
                        keep_kv,
                        shares,
                    )
        finally:
            if swapped is not None:
                setattr(*swapped)
            model.train(was_training)
        return out

    def _generate_chunk(
        self,
        model: Any,
        prompts: list[list[int]],
        n: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stops: list[int],
        generator: torch.Generator | None,
        device: torch.device,
        t0: float,
        on_tokens: Callable[[int], None] | None = None,
        keep_kv: bool = False,
        shares: bool = False,
    ) -> list[list[Completion]]:
        params = base_forward_params(model)
        cache_kw = "cache" if "cache" in params else "past_key_values"  # transformers >= 5.2x renamed it
        pad_id = self.policy.tokenizer.pad_token_id or 0
        lens = torch.tensor([len(p) for p in prompts], device=device)
        reuse = prefix_reuse()
        keep_kv = keep_kv and reuse == "on"
        if keep_kv:
            self.episode_kv.check(model)
        kept = [self.episode_kv.take(p) if keep_kv else None for p in prompts]
        share = shares and len(prompts) * n > 1
        cache, known, origins, shared = self._known_cache(
            model, prompts, kept, device, cache_kw, reuse, share
        )
        # with the prefix shared, the cache and the mask hold only each row's own columns
        fwd = {"shared_prefix": shared} if shared is not None else {}
        dropped = known[0] if shared is not None else 0
        rests = [p[k:] for p, k in zip(prompts, known, strict=True)]
        width = max(len(r) for r in rests)
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
        attn = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
        for r, p in enumerate(rests):  # left padding: every prompt ends at the last column
            input_ids[r, width - len(p) :] = torch.tensor(p, device=device)
            attn[r, width - len(p) :] = 1
        offset = torch.tensor(known, device=device)[:, None]
        positions = offset + (attn.cumsum(-1) - 1).clamp(min=0)
        # the known columns come first, each row's right-aligned: [pads | known | pads | rest]
        if cache is not None and shared is None:
            columns = max(known)
            have = torch.arange(columns, device=device)[None] >= columns - offset
            attn = torch.cat([have.to(attn.dtype), attn], dim=-1)
        result = model(
            input_ids=input_ids,
            attention_mask=attn,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_kw: cache if cache is not None else growing_cache()},
            **fwd,
        )
        cache = cache_of(result)
        logits = result.logits[:, -1, :]
        if n > 1:  # share the prefill: repeat its KV cache, not its compute
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, 0)
            attn = attn.repeat_interleave(n, 0)
            lens = lens.repeat_interleave(n, 0)
        total = len(prompts) * n
        rows = torch.arange(total, device=device)  # active row -> completion index
        next_pos = lens.clone()
        stop_t = torch.tensor(stops, dtype=torch.long, device=device)
        tokens: list[list[int]] = [[] for _ in range(total)]
        logps: list[list[float]] = [[] for _ in range(total)]
        finish: list[str] = ["length"] * total
        ended = [0.0] * total

        def keep(active: list[int]) -> None:
            """Keep these active rows' keys/values: their prompt and every sampled id but the last."""
            for a in active:
                r = int(rows[a])
                prompt = prompts[r // n]
                start, prefix = origins[r // n]
                columns = attn[a].nonzero().squeeze(-1)[start - dropped :]
                own = [(layer.keys[a, :, columns], layer.values[a, :, columns]) for layer in cache.layers]
                self.episode_kv.keep(Kept(tuple(prompt + tokens[r][:-1]), start, prefix, own))

        for step in range(max_new_tokens):
            tok, lp = sample_next(logits, temperature, top_p, generator)
            for r, t, v in zip(rows.tolist(), tok.tolist(), lp.tolist(), strict=True):
                tokens[r].append(t)
                logps[r].append(v)
            done = torch.isin(tok, stop_t) if len(stops) else torch.zeros_like(tok, dtype=torch.bool)
            now = time.perf_counter() - t0
            for r in rows[done].tolist():
                finish[r], ended[r] = "stop", now
            if step == max_new_tokens - 1 or bool(done.all()):
                if keep_kv:
                    keep(list(range(len(rows))))
                break
            if on_tokens is not None and (step + 1) % DECODE_EVERY == 0:
                on_tokens(step + 1)
            if bool(done.any()):  # compact: drop finished rows from the cache and the batch
                if keep_kv:
                    keep(done.nonzero().squeeze(-1).tolist())
                keep_rows = (~done).nonzero().squeeze(-1)
                cache.batch_select_indices(keep_rows)
                rows, tok, attn, next_pos = (
                    rows[keep_rows],
                    tok[keep_rows],
                    attn[keep_rows],
                    next_pos[keep_rows],
                )
            attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
            result = model(
                input_ids=tok[:, None],
                attention_mask=attn,
                position_ids=next_pos[:, None],
                use_cache=True,
                **{cache_kw: cache},
                **fwd,
            )
            cache = cache_of(result)
            logits = result.logits[:, -1, :]
            next_pos = next_pos + 1
        now = time.perf_counter() - t0
        decode = self.policy.tokenizer.decode
        groups: list[list[Completion]] = []
        for p_idx, prompt in enumerate(prompts):
            group = []
            for r in range(p_idx * n, (p_idx + 1) * n):
                group.append(
                    Completion(
                        text=decode(tokens[r], skip_special_tokens=True),
                        token_ids=tokens[r],
                        logprobs=logps[r],
                        finish_reason=finish[r],
                        prompt_token_ids=list(prompt),
                        latency_s=ended[r] if finish[r] == "stop" else now,
                    )
                )
            groups.append(group)
        return groups

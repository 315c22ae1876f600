"""Chat-template tokens a checkpoint never trained: found in its weights, then trained with the adapter.

Some checkpoints ship a chat template whose tool-call markers are tokens of their own that the released weights
never learnt. Qwen2.5-Coder-0.5B-Instruct as packaged here: the input-embedding and LM-head rows of
`<tool_call>` and `</tool_call>` equal, up to the quantizer's rounding, the ~270 unused rows at the end of its
vocabulary. Its logit for `<tool_call>` is then the logit of every unused token, whatever the hidden state, so
no adapter on the linear layers can make it write the tag: the untrained model answers in a ```json fence,
and after an SFT warm-up on gold native calls it wrote `<|im_start|>` or an unrelated token where the tag
belongs, 0 of 150 validation calls parsed (docs/results.md, session 23). So those tokens' rows train with the
adapter (peft's trainable tokens: one row of hidden size per token and module), saved and merged with it.

peft's own forward for those layers builds the whole merged matrix on every call (an index_copy of the
embedding and of the LM head, each decode step: docs/benchmarks.md, "Rows of untrained template tokens", has
what it costs). `fast_rows` replaces it on each such layer with the same sum done on the
output: the base layer's result, then the trained rows written over the positions (embedding) or the columns
(LM head) they own, in place (neither base layer's backward reads its output).
"""

from __future__ import annotations

import types
from typing import Any

import torch

# Cosine at or above which two rows count as the same row. Measured on the packaged Qwen2.5-Coder-0.5B: its
# tags vs its unused rows 0.99999; `<|im_start|>` (a token it was trained on) vs the same rows 0.92.
SAME_ROW = 0.9999
UNUSED_ROWS_COMPARED = 64  # rows past the tokenizer's last id: no token maps to them, so they never trained


def template_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the tokenizer's added tokens that its chat template writes (e.g. `<|im_start|>`, `<tool_call>`)."""
    template = getattr(tokenizer, "chat_template", None)
    texts = list(template.values()) if isinstance(template, dict) else [template] if template else []
    return sorted(
        int(i)
        for i, token in tokenizer.added_tokens_decoder.items()
        if any(isinstance(t, str) and token.content in t for t in texts)
    )


def same_as_another_row(weight: torch.Tensor, candidates: list[int], known: int) -> list[int]:
    """The candidate rows of `weight` that equal another candidate's row or a row past id `known - 1`."""
    unused = list(range(known, min(weight.shape[0], known + UNUSED_ROWS_COMPARED)))
    rows = torch.nn.functional.normalize(weight[candidates + unused].detach().float(), dim=1)
    sims = rows[: len(candidates)] @ rows.T
    sims[range(len(candidates)), range(len(candidates))] = -1.0  # a row is not "another row"
    return [
        c for c, best in zip(candidates, sims.max(dim=1).values.tolist(), strict=True) if best >= SAME_ROW
    ]


def untrained_template_tokens(model: Any, tokenizer: Any) -> list[int]:
    """Ids of the template's tokens whose LM-head row is an untrained one (see the module docstring)."""
    head = model.get_output_embeddings()
    if head is None or getattr(head, "weight", None) is None:
        return []
    candidates = [i for i in template_token_ids(tokenizer) if i < head.weight.shape[0]]
    if not candidates:
        return []
    return same_as_another_row(head.weight, candidates, len(tokenizer))


def trainable_token_indices(model: Any, ids: list[int]) -> dict[str, list[int]] | None:
    """peft's `trainable_token_indices` for `ids`: the input embedding's rows, and the LM head's unless tied to
    it (peft then follows the embedding)."""
    if not ids:
        return None
    names = {id(module): name.rsplit(".", 1)[-1] for name, module in model.named_modules()}
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    indices = {names[id(embedding)]: list(ids)}
    if head is not None and head.weight is not embedding.weight:
        indices[names[id(head)]] = list(ids)
    return indices


def _rows_forward(layer: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """peft's TrainableTokensLayer forward, without building the merged matrix (see the module docstring)."""
    active = [a for a in layer.active_adapters if a in layer.trainable_tokens_delta]
    if layer.disable_adapters or layer.merged or not active:
        return type(layer).forward(layer, x, *args, **kwargs)  # peft's own path: it also unmerges
    layer._check_overlapping_tokens(active)
    out = layer.base_layer(x, *args, **kwargs)
    for name in active:
        delta = layer.trainable_tokens_delta[name]
        index = torch.tensor(layer.token_indices[name], device=out.device)
        if isinstance(layer.base_layer, torch.nn.Embedding):
            hit = torch.isin(x, index)
            if bool(hit.any()):
                which = (x[hit].unsqueeze(-1) == index).int().argmax(dim=-1)
                rows = delta[which].to(out.dtype)
                scale = layer._get_embed_scale()
                out.index_put_((hit,), rows * scale.to(out.dtype) if scale is not None else rows)
        else:  # the LM head: its output's last dimension is the vocabulary
            bias = layer.base_layer.bias  # the sampler's packed head gives its Linear's
            cols = torch.nn.functional.linear(x, delta.to(x.dtype), bias[index] if bias is not None else None)
            out.index_copy_(-1, index, cols.to(out.dtype))  # in place: the head's backward needs no output
    return out


def runs_fast_rows(layer: Any) -> bool:
    """Whether `layer` runs the forward above, which calls its base layer as a module (so a packed copy of the
    head can stand in for it; peft's own forward reads the base layer's weight and checks its type)."""
    return getattr(getattr(layer, "forward", None), "__func__", None) is _rows_forward


def fast_rows(model: Any) -> int:
    """Give every trainable-tokens layer of `model` the forward above; the number of layers changed."""
    from peft.tuners.trainable_tokens.layer import TrainableTokensLayer

    layers = [m for m in model.modules() if isinstance(m, TrainableTokensLayer)]
    for layer in layers:
        layer.forward = types.MethodType(_rows_forward, layer)
    return len(layers)

"""SFT warm-up: teach the policy the reply format on a few gold tool calls before GRPO.

GRPO only learns when some samples of a group are right; a short SFT on the expected tool-call JSON moves a
135M model from "never" into "sometimes". Tokenisation mirrors inference exactly: the prompt ids are
`render_prompt(messages)` and the answer is tokenised separately and appended (never the concatenated
text), so what SFT trains on is what the sampler sees after `render_prompt(messages, prefill)`.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
from collections.abc import Callable, Iterable
from typing import Any

import torch

from workbench.rollout.prompt import render_prompt
from workbench.types import Task

Example = tuple[
    list[dict[str, Any]], str
]  # (prompt messages, reply); a third item, when present, is its prefill
# (the examples of a batch) -> (prompt ids, target ids): how examples become token ids; `sft_rows` by default,
# `workbench.learn.sft_native.native_sft_rows` for tool_format native (the reply rendered by the chat template).
RowsFn = Callable[[Any, list[Any]], tuple[list[list[int]], list[list[int]]]]
NO_CALL_ANSWER = (
    "No tool call is needed for this request."  # the JSON harness's gold reply when none is right
)


def default_answer(task: Task) -> str:
    """The canonical reply for a single-turn task: '{"tool": name, "args": {...}}'; parallel calls one such
    object a line; a plain sentence when the right answer is no call."""
    if task.expected_calls:
        return "\n".join(
            json.dumps({"tool": c["name"], "args": c.get("arguments", {})}) for c in task.expected_calls
        )
    if task.expected_tool is None:
        return NO_CALL_ANSWER
    return json.dumps({"tool": task.expected_tool, "args": task.expected_args})


def sft_examples(
    tasks: Iterable[Task],
    messages_fn: Callable[[Task], list[dict[str, Any]]],
    answer_fn: Callable[[Task], str] = default_answer,
) -> list[Example]:
    """(prompt messages, target reply) pairs: `messages_fn` is the harness (system prompt, tools, example)."""
    return [(messages_fn(t), answer_fn(t)) for t in tasks]


def answer_token_ids(tokenizer: Any, answer: str, prefill: str = "") -> list[int]:
    """Token ids of the target reply (without EOS). With a `prefill` that starts the answer, the prefill is
    tokenised on its own, exactly like `render_prompt(..., prefill)` does at inference, then the rest."""

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    if prefill:
        if not answer.startswith(prefill):
            raise ValueError(f"answer {answer[:40]!r}... does not start with the prefill {prefill!r}")
        return encode(prefill) + encode(answer[len(prefill) :])
    return encode(answer)


def sft_rows(
    tokenizer: Any, examples: list[Example], *, prefill: str = ""
) -> tuple[list[list[int]], list[list[int]]]:
    """(prompt ids, target ids) per example: the target is the answer (prefill included) plus the EOS that
    ends the turn; only target tokens carry loss."""
    eos = tokenizer.eos_token_id
    prompts = [render_prompt(tokenizer, ex[0]) for ex in examples]
    targets = [
        answer_token_ids(tokenizer, ex[1], ex[2] if len(ex) > 2 else prefill) + [eos] for ex in examples
    ]
    return prompts, targets


def sft_step(
    policy: Any,
    optimizer: torch.optim.Optimizer,
    examples: list[Example],
    *,
    prefill: str = "",
    max_grad_norm: float | None = 1.0,
    rows_fn: RowsFn | None = None,
    sync: Any = None,
    autocast: torch.dtype | None = None,
) -> float:
    """One optimizer step on the mean token cross-entropy of the answers; returns the loss.

    `autocast` (e.g. torch.bfloat16): the forward runs under torch.autocast, so the matmuls (and, through
    autograd, their backward) run in that dtype, the logits included (the log-probs are upcast after), while
    the weights, gradients and AdamW keep their own dtype.

    The examples' shared harness prefix runs once (`sequence_logprobs`); the loss equals HF's causal-LM
    loss with labels -100 on the prompt. With `sync` (workbench.distributed.collective: data-parallel ranks)
    every rank passes the whole batch and runs forward and backward on its share (examples rank, rank + N,
    ...), normalised by the batch's token count; the gradients are summed over the ranks before clipping, so
    every rank takes the step one process would take on the whole batch."""
    from workbench.learn.logprobs import sequence_logprobs

    model = policy.model
    was_training = model.training
    model.train()
    if sync is not None:
        examples = examples[sync.rank :: sync.world]
    if not examples:  # a rank whose share is empty (a batch smaller than the ranks) still joins the sums
        prompts, targets = [], []
    elif rows_fn is not None:
        prompts, targets = rows_fn(policy.tokenizer, examples)
    else:
        prompts, targets = sft_rows(policy.tokenizer, examples, prefill=prefill)
    optimizer.zero_grad(set_to_none=True)
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    nll, n_tokens, value = None, 0.0, 0.0
    if prompts:
        mixed = (
            torch.autocast(policy.device.type, dtype=autocast)
            if autocast is not None
            else contextlib.nullcontext()
        )
        with mixed:  # token_logprobs upcasts the logits, so the loss is float32 either way
            logp, mask = sequence_logprobs(model, prompts, targets, 1.0, pad_token_id=pad)
        nll, n_tokens = -logp.sum(), float(mask.sum())
    total = n_tokens if sync is None else sync.sum_floats([n_tokens])[0]  # the whole batch's answer tokens
    if nll is not None:
        loss = nll / max(total, 1.0)
        loss.backward()
        value = float(loss.detach())
    if sync is not None:
        sync.sum_grads(policy.trainable_parameters())
        value = sync.sum_floats([value])[0]
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), max_grad_norm)
    optimizer.step()
    model.train(was_training)
    return value


def run_sft(
    policy: Any,
    examples: list[Example],
    steps: int,
    lr: float = 2e-4,
    batch_size: int = 4,
    seed: int = 0,
    *,
    prefill: str = "",
    on_step: Callable[[int, float], bool | None] | None = None,
    rows_fn: RowsFn | None = None,
    sync: Any = None,
    schedule: str = "constant",
    autocast: torch.dtype | None = None,
) -> list[float]:
    """Run `steps` AdamW steps over shuffled examples (reshuffled each epoch); returns the losses.

    `schedule`: "constant" keeps `lr`; "cosine" decays it from `lr` towards 0 over the steps (a long warm-up
    at a high rate ends on small steps instead of bouncing around the minimum it reached).

    `on_step(step, loss)` is called after each step; returning False stops early (e.g. the UI cancelled).
    With `sync` (data-parallel ranks) every rank draws the same batches and trains on its share of each
    (`sft_step`): N ranks take the steps one process takes, each doing about 1/N of the work.
    `autocast`: mixed precision for the forward and backward (`sft_step`).
    """
    if not examples:
        raise ValueError("run_sft needs at least one example")
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=lr, weight_decay=0.0)
    order: list[int] = []
    losses: list[float] = []
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"unknown SFT schedule {schedule!r}: use 'constant' or 'cosine'")
    for step in range(steps):
        if schedule == "cosine":
            for group in optimizer.param_groups:
                group["lr"] = lr * 0.5 * (1.0 + math.cos(math.pi * step / steps))
        picked = []
        while len(picked) < min(batch_size, len(examples)):
            if not order:
                order = list(range(len(examples)))
                rng.shuffle(order)
            picked.append(examples[order.pop()])
        loss = sft_step(
            policy, optimizer, picked, prefill=prefill, rows_fn=rows_fn, sync=sync, autocast=autocast
        )
        losses.append(loss)
        if on_step is not None and on_step(step, loss) is False:
            break
    return losses

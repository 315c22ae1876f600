"""Rendering a conversation into the prompt token ids the model continues from."""

from __future__ import annotations

from typing import Any


def render_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    prefill: str = "",
    tools: list[dict[str, Any]] | None = None,
) -> list[int]:
    """Token ids of `messages` through the chat template with the assistant turn opened, then `prefill`.

    The prefill (e.g. '{"tool": "') is tokenised on its own and appended, never re-tokenised together with
    the template text. Caveat: BPE may tokenise `template + prefill + reply` as one string differently at
    the boundaries (a merge across them), so re-tokenising the decoded text does not always give back these
    ids. Keep ids, not text: the sampler, the log-prob pass and SFT (`workbench.learn.sft`, which tokenises prompt
    and answer separately the same way) all use these exact ids, so training matches inference.

    `tools` (OpenAI function specs) go to the template (`tool_format: native`); None renders none.
    """
    kw = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if prefill:
        ids += tokenizer(prefill, add_special_tokens=False)["input_ids"]
    return ids


def common_prefix_len(seqs: list[list[int]]) -> int:
    """Length of the longest prefix all sequences share (the harness, for a step's prompts)."""
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        if any(s[i] != first[i] for s in seqs):
            return i
    return n

"""Token in, token out across turns: a later turn's prompt is the earlier prompt, the sampled ids, then only
the rendered delta (the tool results and the next assistant header), never the conversation re-rendered.

Re-rendering the whole conversation each turn re-tokenises the model's own earlier replies from their text,
and BPE need not give back the ids that were sampled (a merge across a boundary; a template that re-serialises
`tool_calls` its own way): the model would then be trained on a context it never produced (TRL #5224,
SkyRL #123). Here the delta is found by rendering the conversation twice with the template, through the
last assistant turn and with the new messages and the generation prompt, and taking the suffix:

    delta_text = bridge + full[len(through_assistant):]

`bridge` is what the template puts after the assistant's end-of-turn token ("\\n" for ChatML, "" for
Llama 3): the sampled ids end with that token when the reply stopped; a truncated reply gets the
end-of-turn text too. The suffix is tokenised alone (it starts after a special token, so there is no merge
across the boundary to lose), then the episode's prefill on its own, as on the first turn.

Guard: when the template is not prefix-stable (the longer render does not start with the shorter one,
e.g. a template that rewrites earlier turns) or the end-of-turn token is not found, the turn falls back to
rendering the whole conversation, says so in the log, and is counted (`Rollout.retokenized_turns`).
"""

from __future__ import annotations

import logging
from typing import Any

from workbench.rollout.prompt import render_prompt
from workbench.types import Completion

log = logging.getLogger("workbench.rollout")


def _render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    generation_prompt: bool,
) -> str:
    kw = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt, **kw
    )


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def first_prompt(tokenizer: Any, episode: Any) -> list[int]:
    """The first turn's prompt ids: the episode's messages (with its tools, if any) and its prefill."""
    return render_prompt(tokenizer, episode.messages, episode.prefill, getattr(episode, "tools", None))


def delta_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    completion: Completion,
    tools: list[dict[str, Any]] | None,
    prefill: str,
) -> tuple[list[int] | None, str | None]:
    """(the ids that follow the sampled completion up to the next reply, None) or (None, why not)."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    if last < 0 or last == len(messages) - 1:
        return None, "no new message after the assistant turn"
    through = _render(tokenizer, messages[: last + 1], tools, False)
    full = _render(tokenizer, messages, tools, True)
    if not full.startswith(through):
        return None, "the chat template is not prefix-stable (it renders earlier turns differently later)"
    ids = completion.token_ids
    stopped = completion.finish_reason == "stop" and bool(ids)
    end_text = (
        tokenizer.decode([ids[-1]], skip_special_tokens=False) if stopped else (tokenizer.eos_token or "")
    )
    at = through.rfind(end_text) if end_text else -1
    if at < 0:
        return None, f"the end-of-turn token {end_text!r} is not in the rendered assistant turn"
    bridge = through[at + len(end_text) :] if stopped else through[at:]
    return _encode(tokenizer, bridge + full[len(through) :]) + _encode(tokenizer, prefill), None


def next_prompt(
    tokenizer: Any, prompt: list[int], completion: Completion, episode: Any
) -> tuple[list[int], bool]:
    """(the next turn's prompt ids, exact): `prompt` + the sampled ids + the rendered delta when the template
    allows it (exact), else the whole conversation rendered again (logged)."""
    tools = getattr(episode, "tools", None)
    delta, why = delta_ids(tokenizer, episode.messages, completion, tools, episode.prefill)
    if delta is not None:
        return list(prompt) + list(completion.token_ids) + delta, True
    log.warning("turn re-rendered from text (token drift possible): %s", why)
    return render_prompt(tokenizer, episode.messages, episode.prefill, tools), False

"""SFT examples in the run's tool format, so the warm-up teaches the format the rollouts are parsed in.

- json: (the harness's messages, the gold JSON reply, the episode's prefill): `workbench.learn.sft.sft_rows`.
  In the built-in multi-turn env a single-call task's gold episode has two assistant turns, the call and,
  after its tool result, `finish` (`FINISH_ANSWER`): both are examples. Without the second, a warm-up on
  single calls never shows how an episode ends, and its policy repeated its call until `max_turns` in every
  multi-step episode (docs/results.md, session 17): GRPO then sampled no group that finished. After a
  listing (`calendar.list_events`, the "builtin:calendar_look" questions) `finish` answers with what was
  found (`finish_answer`): the question's answer is the listing, not "Done.". A task of several calls
  ("builtin:calendar_compound") is one call a turn, then `finish`.
- native: (the episode's messages, its OpenAI tool specs, the gold assistant message with `tool_calls`); the
  target is what the chat template renders for that message after the generation prompt, up to and with
  its end-of-turn token (`native_sft_rows`). The prompt ids are the rollout's first-turn ids exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from workbench.envs.multi_turn import FINISH, MultiTurnEnv
from workbench.envs.native import NativeEnv, assistant_message, call_id
from workbench.learn.sft import NO_CALL_ANSWER, default_answer
from workbench.rollout.prompt import render_prompt
from workbench.types import Task, ToolCall

NativeExample = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]
FINISH_ANSWER = json.dumps({"tool": FINISH, "args": {"answer": "Done."}})


def finish_answer(observation: dict[str, Any]) -> str:
    """The closing turn after a tool's ok result: a listing's events in words (or that there are none), else
    `FINISH_ANSWER`."""
    events = (observation.get("result") or {}).get("events")
    if not isinstance(events, list):
        return FINISH_ANSWER
    said = "; ".join(f"{e['attendee']} on {e['day']} at {e['time']}" for e in events)
    return json.dumps({"tool": FINISH, "args": {"answer": said or "Nothing is scheduled."}})


def gold_message(task: Task) -> dict[str, Any]:
    """The assistant turn that answers a task: its expected call(s) as `tool_calls`, or a plain reply."""
    if task.expected_calls:
        calls = [ToolCall(c["name"], dict(c.get("arguments") or {})) for c in task.expected_calls]
    elif task.expected_tool is None:
        return assistant_message(NO_CALL_ANSWER, [])
    else:
        calls = [ToolCall(task.expected_tool, dict(task.expected_args))]
    return assistant_message("", [ToolCall(c.name, c.args, call_id(1, i)) for i, c in enumerate(calls)])


def env_sft_examples(env: Any, tasks: Iterable[Task]) -> list[Any]:
    """The SFT examples of `tasks` as `env` puts them to the model (its messages, tools and prefill)."""
    out: list[Any] = []
    for t in tasks:
        ep = env.start(t)
        if isinstance(env, NativeEnv):
            out.append((ep.messages, ep.tools, gold_message(ep.task)))
            continue
        if not isinstance(env, MultiTurnEnv):
            out.append((list(ep.messages), default_answer(t), ep.prefill))
            continue
        out += _gold_episode(ep, t)
    return out


def _gold_episode(ep: Any, task: Task) -> list[Any]:
    """A built-in multi-turn episode's examples: each expected call in its own turn (several calls, as in
    "builtin:calendar_compound", one after the other), then, once every call's result was ok, `finish`."""
    answers = [
        json.dumps({"tool": c["name"], "args": c.get("arguments", {})}) for c in task.expected_calls or []
    ]
    answers = answers or [default_answer(task)]
    out: list[Any] = []
    for answer in answers:
        out.append((list(ep.messages), answer, ep.prefill))
        if not answer.startswith(ep.prefill):
            return out  # a plain reply (no call): it ends the episode
        # the simulated World: no side effect anywhere
        if ep.step(answer[len(ep.prefill) :]) is None or not ep.observations[-1].get("ok"):
            return out
    # the conversation re-rendered by the template (the rollout's token-in ids can differ by a BPE merge at
    # the prefill; the turn to learn is the same)
    out.append((list(ep.messages), finish_answer(ep.observations[-1]), ep.prefill))
    return out


def native_sft_rows(tokenizer: Any, examples: list[NativeExample]) -> tuple[list[list[int]], list[list[int]]]:
    """(prompt ids, target ids) per example: the target is the template's rendering of the gold message
    after the generation prompt, through its end-of-turn token (what the sampler stops on)."""
    eos_text, eos = tokenizer.eos_token, tokenizer.eos_token_id
    prompts, targets = [], []
    for messages, tools, gold in examples:
        kw = {"tools": tools} if tools else {}
        head = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
        full = tokenizer.apply_chat_template(
            [*messages, gold], tokenize=False, add_generation_prompt=False, **kw
        )
        if not full.startswith(head):
            raise ValueError(
                "native SFT: the chat template renders the prompt differently once the answer "
                "follows (not prefix-stable); use tool_format: json or fix the template"
            )
        body = full[len(head) :]
        cut = body.rfind(eos_text) if eos_text else -1
        ids = list(tokenizer(body[:cut] if cut >= 0 else body, add_special_tokens=False)["input_ids"])
        prompts.append(render_prompt(tokenizer, messages, "", tools))
        targets.append(ids + [eos])
    return prompts, targets

"""Prompts that cannot fit the model, refused before a run trains on them.

A task whose first prompt (the harness or chat template, its tools, the prefill) is as long as the model's
context leaves no position to generate in: the run would train on cut-off nonsense, or the engine would fail
mid-step. The prompt's length is known only with the model's tokenizer, so the trainer checks every task
right after it loads the model (`Trainer.__init__`), before the baseline eval: the earliest place that has a
tokenizer without loading the model twice (`preflight` resolves no model: a download or a conversion). The
refusal names the task's file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.rollout.turn_tokens import first_prompt
from workbench.tasks import TaskFileError
from workbench.types import Task

# Where a config may keep a model's context length (Llama/Qwen/Mistral, GPT-2, a few others).
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
# Every token of a rendered prompt covers at least one byte of its text (byte-level BPE, SentencePiece with
# byte fallback; special tokens are text too), but for a leading-space marker or two: so a prompt whose text
# has fewer bytes than this much under the limit fits without being tokenized (tokenizing is the slow part).
TOKEN_SLACK = 8


def _surely_fits(tokenizer: Any, episode: Any, limit: int) -> bool:
    tools = getattr(episode, "tools", None)
    kw = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(episode.messages, tokenize=False, add_generation_prompt=True, **kw)
    return len(text.encode("utf-8")) + len(episode.prefill.encode("utf-8")) + TOKEN_SLACK < limit


def model_context(model: Any) -> int | None:
    """The model's number of positions, from its config; None when it does not say (then nothing is checked)."""
    config = getattr(model, "config", None)
    for key in CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def task_lines(sources: list[str]) -> dict[str, tuple[str, int]]:
    """Task id -> (file, line) for the JSONL files among `sources` (config keys; "+" joins several). The
    loader already refused bad lines, so only the ids are read here (an id left out is `stem:line`)."""
    where: dict[str, tuple[str, int]] = {}
    for source in sources:
        for part in str(source).split("+") if not Path(str(source)).is_file() else [str(source)]:
            path = Path(part.strip())
            if not path.is_file():
                continue  # a built-in source: named by its task id
            for lineno, raw in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
                if not raw.strip():
                    continue
                obj = json.loads(raw)
                tid = str(obj["id"]) if isinstance(obj, dict) and "id" in obj else f"{path.stem}:{lineno}"
                where.setdefault(tid, (str(path), lineno))
    return where


def check_prompts_fit(
    env: Any,
    tokenizer: Any,
    tasks: list[Task],
    context: int | None,
    *,
    sources: list[str],
    max_completion_length: int,
) -> list[str]:
    """TaskFileError (file:line: prompt: ...) for every task whose first prompt leaves no position to generate
    in; returns warnings for prompts that fit but leave less than `max_completion_length` (completions cut)."""
    if context is None:
        return []
    start = getattr(env, "prompt_episode", env.start)  # an MCP env renders without taking a server
    lines: dict[str, tuple[str, int]] | None = None
    errors: list[tuple[str, int, str, str]] = []
    short = 0
    seen: set[int] = set()
    for task in tasks:
        if id(task) in seen:  # a task may be listed twice (sft_skill_weights repeats it)
            continue
        seen.add(id(task))
        episode = start(task)
        if _surely_fits(tokenizer, episode, context - max_completion_length):
            continue
        n = len(first_prompt(tokenizer, episode))
        if n >= context:
            lines = task_lines(sources) if lines is None else lines
            path, line = lines.get(task.id, (f"task {task.id}", 0))
            errors.append(
                (
                    path,
                    line,
                    "prompt",
                    f"{n} tokens with the harness and chat template; the model's "
                    f"context is {context} positions: no room to answer",
                )
            )
        elif n + max_completion_length > context:
            short += 1
    if errors:
        raise TaskFileError(errors)
    if short:
        return [
            f"{short} task(s) leave fewer than max_completion_length ({max_completion_length}) of the model's "
            f"{context} positions after their prompt: their completions are cut short"
        ]
    return []

"""Skills a task exercises, read off its prompt and expected call: which tool, and which kinds of argument
(24-hour times, 12-hour times, times in words, relative days, names). Evaluations break success down by
them, so a user sees which skill fails and which one training moved (issue 15).

Works on any task (built-in or a user's file): it looks only at the prompt text and the expected call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from workbench.domains.calendar.agent_tasks import KINDS as AGENT_KINDS
from workbench.domains.calendar.agent_tasks import task_kind
from workbench.types import Task

# A time the user wrote as the tool wants it (14:00), with am/pm (2 PM, 2:30pm), or in words.
_T24 = re.compile(r"\b([01]\d|2[0-3]):[0-5]\d\b(?!\s*(?:am|pm|a\.m\.|p\.m\.))", re.I)
_T12 = re.compile(r"\b(1[0-2]|0?[1-9])(?::[0-5]\d)?\s*(?:am|pm|a\.m\.|p\.m\.)", re.I)
_TWORDS = re.compile(
    r"\b(?:half past|quarter (?:past|to)|(?:ten|twenty|five|twenty-five) (?:past|to)|o'clock|noon|"
    r"midday|midnight)\b",
    re.I,
)
_RELATIVE = re.compile(r"\b(?:tomorrow|day after tomorrow|tonight|in \w+ days)\b", re.I)

SKILL_LABELS = {
    "time_24h": "24-hour times",
    "time_12h": "12-hour times",
    "time_words": "times in words",
    "relative_day": "relative days",
    "name": "names",
    "no_call": "no call expected",
    "multi_step": "multi-step tasks",
    **{f"agent:{k}": f"multi-step: {k.replace('_', ' ')}" for k in AGENT_KINDS},
}


def task_skills(task: Task) -> list[str]:
    """`tool:<name>` plus the argument kinds the prompt asks the model to convert or copy; `multi_step` for a
    task judged on the world's final state, and a calendar_agent task's kind (`agent:<kind>`) in place of
    the rest (its expected tool is the call success requires, not the answer, so `tool:` would mislead)."""
    kind = task_kind(task)
    if kind is not None:
        return ["multi_step", f"agent:{kind}"]
    tool = getattr(task, "expected_tool", None)
    skills = [f"tool:{tool}" if tool else "no_call"]
    text = getattr(task, "prompt", "") or ""
    if _T24.search(text):
        skills.append("time_24h")
    if _T12.search(text):
        skills.append("time_12h")
    if _TWORDS.search(text):
        skills.append("time_words")
    if _RELATIVE.search(text):
        skills.append("relative_day")
    args: Any = getattr(task, "expected_args", None) or {}
    if any(k in args for k in ("attendee", "to", "name")):
        skills.append("name")
    if getattr(task, "expected_state", None) is not None:
        skills.append("multi_step")
    return skills


def breakdown(tasks: Iterable[Task], solved: dict[str, float]) -> dict[str, dict[str, float]]:
    """skill -> {"n": tasks with it, "success": mean solved over them}; tasks without a result are left out."""
    acc: dict[str, list[float]] = {}
    for task in tasks:
        if task.id not in solved:
            continue
        for skill in task_skills(task):
            acc.setdefault(skill, []).append(solved[task.id])
    return {k: {"n": len(v), "success": sum(v) / len(v)} for k, v in sorted(acc.items())}


def is_skill(name: str) -> bool:
    """A name `task_skills` can return: an argument kind, no_call, multi_step, agent:<kind>, or tool:<name>."""
    return name in SKILL_LABELS or (name.startswith("tool:") and len(name) > len("tool:"))


def skill_label(skill: str) -> str:
    return skill.removeprefix("tool:") if skill.startswith("tool:") else SKILL_LABELS.get(skill, skill)

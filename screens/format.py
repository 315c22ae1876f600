"""Small pure presentation helpers shared by the screens: numbers, colours, labels.

Nothing here touches Textual or the store, and no rule lives here (success, liveness and the like are
workbench.view's): only how things look.
"""

from __future__ import annotations

import json
import math
from typing import Any

from workbench.view import FULL_REWARD, STATUSES, Task, ToolCall

STATUS_STYLE = {
    "created": "dim",
    "starting": "cyan",
    "running": "bold green",
    "pausing": "yellow",
    "paused": "bold yellow",
    "stopping": "yellow",
    "stopped": "dim",
    "crashed": "bold red",
    "finished": "bold cyan",
}
assert set(STATUS_STYLE) == set(STATUSES), "a run status without a style"


def reward_style(reward: float | None) -> str:
    """Red below zero, green at full reward, yellow for partial credit, dim when unscored."""
    if reward is None or (isinstance(reward, float) and math.isnan(reward)):
        return "dim"
    if reward < 0:
        return "red"
    if reward >= FULL_REWARD:
        return "green"
    return "yellow"


def num(value: Any, digits: int = 2, *, signed: bool = False) -> str:
    if value is None:
        return "–"
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(x):
        return "nan"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def pct(value: Any, digits: int = 0) -> str:
    return "–" if value is None else f"{100 * float(value):.{digits}f}%"


def duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0 or math.isinf(seconds) or math.isnan(seconds):
        return "–"
    s = int(round(seconds))
    if s >= 86400:
        return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def first_line(text: str | None, limit: int = 200) -> str:
    if not text:
        return ""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    # A traceback's useful line is its last one (the exception); anything else, its first.
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def compact_json(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def call_text(call: ToolCall | None) -> tuple[str, str]:
    """(tool name, args as compact JSON) of a call; ("", "") for none."""
    return ("", "") if call is None else (call.name, compact_json(call.args))


PROMPT_MIN = 12  # a prompt column narrower than this says nothing


def prompt_width(pane_width: int, fixed: int, trailing: int = 0, *, roomy: int = 30) -> int:
    """The prompt column's width in a table whose other columns take `fixed` cells (less a scrollbar),
    leaving the `trailing` column (an id) its room when the prompt still gets `roomy` cells."""
    rest = pane_width - fixed - 1
    return max(PROMPT_MIN, rest - trailing if rest - trailing >= roomy else rest)


def task_label(task: Task | None, task_id: int | None, width: int = 14) -> str:
    if task_id is None:
        return "–"
    return clip(task.short_key if task else f"#{task_id}", width)


SPLIT_SHORT = {"train": "train", "held_out": "held", "probe": "probe"}


def split_short(split: str | None) -> str:
    return SPLIT_SHORT.get(split or "", (split or "")[:5])

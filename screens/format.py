"""Small pure helpers shared by the screens: numbers, colours, tool calls, worker liveness.

Nothing here touches Textual or the store, so it is cheap to test and to reuse.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

# A reward of 1.0 is the verifier's full score; float sums of parts land a hair below it.
FULL_REWARD = 0.999
STALE_AFTER_S = 30.0  # same threshold as store.runs.worker_alive
LIVE_STATUSES = ("starting", "running", "pausing", "stopping")

STATUS_STYLE = {
    "created": "dim", "starting": "cyan", "running": "bold green", "pausing": "yellow", "paused": "bold yellow",
    "stopping": "yellow", "stopped": "dim", "crashed": "bold red", "finished": "bold cyan",
}


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


def first_call(tool_calls: Any) -> tuple[str, str]:
    """(tool name, args as compact JSON) of a row's first tool call; ("", "") when it made none."""
    if not tool_calls or not isinstance(tool_calls, list):
        return "", ""
    call = tool_calls[0]
    if not isinstance(call, dict):
        return str(call), ""
    name = call.get("tool") or call.get("name") or ""
    args = call.get("args", call.get("arguments"))
    return str(name), "" if args is None else compact_json(args)


def content_text(content: Any) -> str:
    """A message's content as text (strings as they are, structured content as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and "text" in p for p in content):
        return "\n".join(str(p["text"]) for p in content)
    return json.dumps(content, ensure_ascii=False, indent=1)


WorkerState = Literal["alive", "stale", "none"]


def worker_state(run: dict[str, Any], now: float, stale_after_s: float = STALE_AFTER_S) -> WorkerState:
    """Like store.runs.worker_alive, but on the app's clock so a test can freeze time."""
    beat = run.get("heartbeat")
    if not run.get("lock_token") or beat is None:
        return "none"
    return "alive" if now - beat < stale_after_s else "stale"


def heartbeat_age(run: dict[str, Any], now: float) -> float | None:
    beat = run.get("heartbeat")
    return None if beat is None else max(0.0, now - beat)


def task_label(task: dict[str, Any] | None, task_id: int | None, width: int = 14) -> str:
    if task_id is None:
        return "–"
    if not task:
        return f"#{task_id}"
    key = str(task.get("key") or f"#{task_id}")
    prefix = f"{task.get('dataset')}:"
    if key.startswith(prefix) and len(key) > len(prefix):
        key = key[len(prefix):]  # every task of a run shares its dataset: the prefix only costs columns
    return clip(key, width)


SPLIT_SHORT = {"train": "train", "held_out": "held", "probe": "probe"}


def split_short(split: str | None) -> str:
    return SPLIT_SHORT.get(split or "", (split or "")[:5])

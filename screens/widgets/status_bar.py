"""The run's one-glance summary line and the banner that shouts when something is wrong."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

from screens.format import LIVE_STATUSES, STATUS_STYLE, duration, first_line, heartbeat_age, num, worker_state

RATE_WINDOW = 10  # steps averaged for steps/s, tokens/s and the ETA


def rates(steps: Sequence[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(steps per second, tokens per second) from the last steps' own timings, not wall clocks, so a
    paused run or a UI attached late still reads the worker's real speed."""
    recent = [s.get("metrics") or {} for s in steps[-RATE_WINDOW:]]
    times = [m["step_time_s"] for m in recent if isinstance(m.get("step_time_s"), (int, float)) and m["step_time_s"] > 0]
    toks = [m["tokens_per_s"] for m in recent if isinstance(m.get("tokens_per_s"), (int, float))]
    sps = len(times) / sum(times) if times else None
    return sps, (sum(toks) / len(toks) if toks else None)


def status_text(
    run: dict[str, Any],
    steps: Sequence[dict[str, Any]],
    *,
    verifier: dict[str, Any] | None,
    checkpoint: dict[str, Any] | None,
    now: float,
    task_note: str = "",
    width: int = 0,
) -> Text:
    """The status line; when `width` is given, wrapped between items, never inside one."""
    status = run.get("status", "?")
    config = run.get("config") or {}
    max_steps = config.get("max_steps")
    step = steps[-1]["step"] if steps else None
    sps, tps = rates(steps)
    items: list[Text] = [Text(f"● {status}", style=STATUS_STYLE.get(status, "")),
                         Text(f"#{run['id']} {run.get('name', '')}", style="bold")]
    item = Text("step ")
    item.append("–" if step is None else str(step), style="bold")
    if max_steps:
        item.append(f"/{max_steps}")
    items += [item, Text(f"{num(sps, 3)} step/s"), Text(f"{num(tps, 0)} tok/s")]
    if max_steps and step is not None and sps and status in LIVE_STATUSES:
        items.append(Text(f"ETA {duration((int(max_steps) - step) / sps)}"))
    if verifier:
        items.append(Text(f"verifier {verifier.get('name', '?')} v{verifier.get('version', '?')}", style="cyan"))
    else:
        items.append(Text("verifier built-in", style="cyan"))
    items.append(Text(f"ckpt @{checkpoint['step']}" if checkpoint else "no ckpt", style="dim"))
    if worker_state(run, now) == "alive":
        items.append(Text("worker ✓", style="green"))
    if task_note:
        items.append(Text(f"[{task_note}]", style="italic magenta"))
    t = Text(no_wrap=True)
    used = 0
    for i, item in enumerate(items):
        if i:
            if width and used + 2 + item.cell_len > width:
                t.append("\n")
                used = 0
            else:
                t.append("  ")
                used += 2
        t.append_text(item)
        used += item.cell_len
    return t


def banner_text(run: dict[str, Any], now: float) -> Text | None:
    """None when all is well; otherwise the one line the user must not miss."""
    status = run.get("status")
    if status == "crashed":
        line = first_line(run.get("error")) or run.get("status_reason") or "no error recorded"
        return Text(f"CRASHED: {line}  (x: full traceback)", style="bold")
    state = worker_state(run, now)
    if status in LIVE_STATUSES and state != "alive":
        age = heartbeat_age(run, now)
        when = f"{duration(age)} ago" if age is not None else "never"
        return Text(f"⚠ No live worker: status {status}, last heartbeat {when}. r starts one.", style="bold")
    return None


class StatusBar(Static):
    def on_resize(self) -> None:
        self._last = None  # the owner re-renders for the new width on its next poll

    def show(self, text: Text) -> None:
        if str(text) != str(getattr(self, "_last", "")):
            self._last = text
            self.update(text)


class Banner(Static):
    def show(self, text: Text | None) -> None:
        self.set_class(text is not None, "-shown")
        if text is not None:
            self.update(text)

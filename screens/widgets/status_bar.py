"""The run's one-glance summary line and the banner that shouts when something is wrong."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from screens.format import STATUS_STYLE, duration, first_line, num
from workbench.view import (
    LIVE_STATUSES,
    Checkpoint,
    Run,
    RunState,
    Step,
    VerifierVersion,
    heartbeat_age,
    paused_by_errors,
)

RATE_WINDOW = 10  # steps averaged for steps/s, tokens/s and the ETA


def rates(steps: Sequence[Step]) -> tuple[float | None, float | None]:
    """(steps per second, tokens per second) from the last steps' own timings, not wall clocks, so a
    paused run or a UI attached late still reads the worker's real speed."""
    recent = steps[-RATE_WINDOW:]
    times = [t for s in recent if (t := s.metric("step_time_s")) is not None and t > 0]
    toks = [t for s in recent if (t := s.metric("tokens_per_s")) is not None]
    sps = len(times) / sum(times) if times else None
    return sps, (sum(toks) / len(toks) if toks else None)


def status_text(
    run: Run,
    state: RunState,
    steps: Sequence[Step],
    *,
    verifier: VerifierVersion | None,
    checkpoint: Checkpoint | None,
    task_note: str = "",
    width: int = 0,
) -> Text:
    """The status line; when `width` is given, wrapped between items, never inside one."""
    status = run.status
    max_steps = run.max_steps
    step = steps[-1].step if steps else None
    sps, tps = rates(steps)
    items: list[Text] = [Text(f"● {status}", style=STATUS_STYLE.get(status, "")),
                         Text(f"#{run.id} {run.name}", style="bold")]
    item = Text("step ")
    item.append("–" if step is None else str(step), style="bold")
    if max_steps:
        item.append(f"/{max_steps}")
    items += [item, Text(f"{num(sps, 3)} step/s"), Text(f"{num(tps, 0)} tok/s")]
    if max_steps and step is not None and sps and status in LIVE_STATUSES:
        items.append(Text(f"ETA {duration((max_steps - step) / sps)}"))
    items.append(Text(f"verifier {verifier.title}" if verifier else "verifier built-in", style="cyan"))
    items.append(Text(f"ckpt @{checkpoint.step}" if checkpoint else "no ckpt", style="dim"))
    if state.alive:
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


def banner_text(run: Run, state: RunState, now: float) -> Text | None:
    """None when all is well; otherwise the one line the user must not miss."""
    if state.crashed:
        line = first_line(run.error) or run.status_reason or "no error recorded"
        return Text(f"CRASHED: {line}  (x: full traceback)", style="bold")
    if state.live_without_worker:
        age = heartbeat_age(run, now)
        when = f"{duration(age)} ago" if age is not None else "never"
        return Text(f"⚠ No live worker: status {run.status}, last heartbeat {when}. r starts one.", style="bold")
    if paused_by_errors(run):
        return Text(f"⚠ PAUSED: {run.status_reason}", style="bold")
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

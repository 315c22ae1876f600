"""The run's one-glance summary line and the banner that shouts when something is wrong."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from screens.format import STATUS_STYLE, duration, first_line, num
from workbench.view import (
    LIVE_STATUSES,
    Checkpoint,
    Progress,
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


def progress_item(progress: Progress | None, status: str) -> Text | None:
    """What the worker is doing now (phase, i/N, loss, the phase's time left), while it works or is paused
    (then frozen where it stopped): 'SFT 3/15 loss 0.842 2m10s left'."""
    if progress is None or status not in (*LIVE_STATUSES, "paused"):
        return None
    p, frac = (
        progress,
        (f" {progress.done}/{progress.total}" if progress.done is not None and progress.total else ""),
    )
    left = p.data.get("phase_eta_s")
    rest = f" {duration(left)} left" if isinstance(left, (int, float)) else ""
    if p.phase == "load":
        text = p.data.get("label") or "loading the model"
    elif p.phase == "eval":
        text = f"eval {p.data.get('label', '')}{frac}{rest}"
    elif p.phase == "sft":
        loss = p.data.get("loss")
        text = f"SFT{frac}" + (f" loss {loss:.3f}" if isinstance(loss, (int, float)) else "") + rest
    elif p.phase == "rollout":
        text = f"rollout{frac} tok" if frac else "rollout"
    else:
        text = p.phase
    if status == "paused":  # the rate and time left do not count while paused: say they are frozen
        return Text(f"⏸ {text}", style="dim yellow")
    return Text(text, style="yellow")


def split_item(steps: Sequence[Step]) -> Text | None:
    """The last step's rollout / update split: where the time goes."""
    if not steps:
        return None
    roll, upd = steps[-1].metric("rollout_time_s"), steps[-1].metric("update_time_s")
    if roll is None or upd is None:
        return None
    return Text(f"roll {duration(roll)} upd {duration(upd)}", style="dim")


def status_text(
    run: Run,
    state: RunState,
    steps: Sequence[Step],
    *,
    verifier: VerifierVersion | None,
    checkpoint: Checkpoint | None,
    task_note: str = "",
    width: int = 0,
    progress: Progress | None = None,
) -> Text:
    """The status line, always one line: when `width` is given, the items that do not fit are left out,
    least important first (the status, the step and what the worker is doing stay)."""
    status = run.status
    max_steps = run.max_steps
    step = steps[-1].step if steps else None
    sps, tps = rates(steps)
    # (priority: lower stays longer, item), in display order
    items: list[tuple[int, Text | None]] = [
        (0, Text(f"● {status}", style=STATUS_STYLE.get(status, ""))),
        (3, Text(f"#{run.id} {run.name}", style="bold")),
    ]
    item = Text("step ")
    item.append("–" if step is None else str(step), style="bold")
    if max_steps:
        item.append(f"/{max_steps}")
    items += [(0, item), (1, progress_item(progress, status))]
    eta = progress.eta_s if progress is not None and progress.phase in ("rollout", "update") else None
    if eta is None and max_steps and step is not None and sps:
        eta = (max_steps - step) / sps
    if eta is not None and status in LIVE_STATUSES:
        items.append((2, Text(f"ETA {duration(eta)}")))
    items += [(7, split_item(steps)), (8, Text(f"{num(sps, 3)} step/s")), (6, Text(f"{num(tps, 0)} tok/s"))]
    items.append((4, Text(f"verifier {verifier.title}" if verifier else "verifier built-in", style="cyan")))
    items.append((5, Text(f"ckpt @{checkpoint.step}" if checkpoint else "no ckpt", style="dim")))
    if state.alive:
        items.append((3, Text("worker ✓", style="green")))
    if task_note:
        items.append((1, Text(f"[{task_note}]", style="italic magenta")))
    shown = [(i, prio, t) for i, (prio, t) in enumerate(items) if t is not None]
    if width:
        keep: set[int] = set()
        used = 0
        for i, _, t in sorted(shown, key=lambda x: (x[1], x[0])):
            cost = t.cell_len + (2 if keep else 0)
            if used + cost <= width:
                keep.add(i)
                used += cost
        shown = [x for x in shown if x[0] in keep]
    out = Text(no_wrap=True, overflow="ellipsis")
    for n, (_, _, t) in enumerate(shown):
        if n:
            out.append("  ")
        out.append_text(t)
    return out


def banner_text(run: Run, state: RunState, now: float) -> Text | None:
    """None when all is well; otherwise the one line the user must not miss."""
    if state.crashed:
        line = first_line(run.error) or run.status_reason or "no error recorded"
        return Text(f"CRASHED: {line}  (x: full traceback)", style="bold")
    if state.live_without_worker:
        age = heartbeat_age(run, now)
        when = f"{duration(age)} ago" if age is not None else "never"
        return Text(
            f"⚠ No live worker: status {run.status}, last heartbeat {when}. r starts one.", style="bold"
        )
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

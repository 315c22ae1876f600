"""How the verifier-scores pane looks: a reward histogram for one step, the failure shares and each reward
part's mean over steps as a sparkline. The numbers come from workbench.view (failure_shares, part_series)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.text import Text

from screens.format import reward_style
from workbench.view import Step, Trajectory, failure_shares, part_series

EPS = 1e-9
SPARK = "▁▂▃▄▅▆▇█"
BLOCKS = " ▁▂▃▄▅▆▇█"


def histogram(values: Iterable[float], bins: int = 11, lo: float = -1.0, hi: float = 1.0) -> list[int]:
    """Counts in `bins` bins centred on evenly spaced points from lo to hi (-1.0, -0.8, ... 1.0 by default),
    so the usual reward values (multiples of 0.2) each get their own bin and full reward stands alone."""
    counts = [0] * bins
    step = (hi - lo) / (bins - 1) if bins > 1 else 1.0
    for v in values:
        if v is None:
            continue
        i = round((v - lo) / step)
        counts[min(bins - 1, max(0, i))] += 1
    return counts


def sparkline(values: Sequence[float], width: int) -> str:
    """The last values squeezed (bucket means) into `width` cells of eighth blocks."""
    if not values or width <= 0:
        return ""
    vals = list(values)
    if len(vals) > width:
        size = len(vals) / width
        vals = [
            sum(chunk) / len(chunk)
            for i in range(width)
            if (chunk := vals[int(i * size) : max(int(i * size) + 1, int((i + 1) * size))])
        ]
    lo, hi = min(vals), max(vals)
    if hi - lo < EPS:
        return SPARK[3] * len(vals)
    return "".join(SPARK[min(7, int((v - lo) / (hi - lo) * 7 + 0.5))] for v in vals)


def _bin_style(i: int, bins: int, lo: float, hi: float) -> str:
    return reward_style(lo + i * (hi - lo) / max(1, bins - 1))


def render_histogram(
    counts: Sequence[int], height: int, col: int = 3, lo: float = -1.0, hi: float = 1.0
) -> Text:
    """A vertical bar chart, `height` rows tall, one `col`-wide column per bin, with an axis line."""
    peak = max(counts) if counts else 0
    text = Text()
    bins = len(counts)
    for row in range(height, 0, -1):
        for i, c in enumerate(counts):
            eighths = 0 if peak == 0 else round(c / peak * height * 8)
            level = max(0, min(8, eighths - (row - 1) * 8))
            if c and row == 1 and level == 0:
                level = 1  # a non-empty bin is never invisible
            text.append(BLOCKS[level] * (col - 1) + " ", style=_bin_style(i, bins, lo, hi))
        text.append("\n")
    axis = f"{lo:+.0f}".ljust((bins // 2) * col) + "0"
    text.append(axis.ljust((bins - 1) * col) + f"{hi:+.0f}", style="dim")
    return text


def render_scores(
    rows: Sequence[Trajectory],
    steps: Sequence[Step],
    *,
    step: int | None,
    width: int,
    height: int = 0,
    task_note: str = "",
) -> Text:
    """The whole pane as one Text: header, histogram, failure shares, part sparklines.

    Wide panes put the histogram beside the rest; narrow ones stack them (the pane scrolls)."""
    out = Text()
    rewards = [r.reward for r in rows if r.reward is not None]
    if step is None or not rows:
        out.append("no scored rollouts yet", style="dim")
        return out
    mean = sum(rewards) / len(rewards) if rewards else None
    out.append(f"step {step}", style="bold")
    out.append(f" · {len(rows)} samples")
    if mean is not None:
        out.append(" · mean ")
        out.append(f"{mean:+.2f}", style=reward_style(mean))
    if task_note:
        out.append(f" · {task_note}", style="italic")
    out.append("\n")
    shares = failure_shares(rows)
    fail = Text()
    wide = width >= 60
    for i, (label, name, style) in enumerate(
        (
            ("bad JSON", "invalid_json", "red"),
            ("wrong tool", "wrong_tool", "yellow"),
            ("wrong args", "wrong_args", "yellow"),
            ("unsafe", "unsafe", "bold red"),
        )
    ):
        share = shares.share(name)
        fail.append(f"{label} ", style="dim")
        fail.append("–" if share is None else f"{100 * share:.0f}%", style=style if share else "")
        fail.append("\n" if i == 1 and not wide else "  ")  # narrow: two to a line, always two lines
    if shares.errors:
        fail.append(f"errors {shares.errors}", style="bold red")
    if shares.unclassified:
        fail.append(f" ({shares.unclassified} stored before outcomes were kept)", style="dim")
    fail.rstrip()
    series = part_series(steps)
    spark_w = max(4, min(40, width - 26))
    parts = Text()
    for name, points in series.items():
        values = [v for _, v in points]
        parts.append(f"{name[:10]:<10} ", style="dim")
        parts.append(sparkline(values[-spark_w * 4 :], spark_w), style="cyan")
        parts.append(f" {values[-1]:+.2f}\n")
    parts.rstrip()
    if not parts:
        parts = Text("no part metrics", style="dim")
    if width >= 80:
        # side by side: histogram (30 cols) | failures + parts; the histogram takes the pane's height
        hist = render_histogram(histogram(rewards), height=max(4, min(12, height - 2)))
        right = Text("\n").join([fail, parts])
        left_lines = hist.split("\n")
        right_lines = right.split("\n")
        for i in range(max(len(left_lines), len(right_lines))):
            left = left_lines[i] if i < len(left_lines) else Text("")
            left.pad_right(36 - left.cell_len)
            out.append_text(left)
            if i < len(right_lines):
                out.append_text(right_lines[i])
            out.append("\n")
    else:
        hist = render_histogram(histogram(rewards), height=3)
        out.append_text(fail)
        out.append("\n")
        out.append_text(hist)
        out.append("\n")
        out.append_text(parts)
    out.rstrip()
    return out

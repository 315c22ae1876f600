"""What the verifier-scores pane shows, computed from plain rows: a reward histogram for one step,
failure shares derived from reward parts, and each part's mean over steps as a sparkline."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from screens.format import reward_style

PART_NAMES = ("valid_json", "tool", "args", "safe", "unsafe")
ARGS_MAX = 0.4  # the built-in verifier's full argument credit (DESIGN.md); raised if a verifier pays more
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


@dataclass
class FailureShares:
    """A funnel over one step's scored rows: each row lands in its first failure (invalid JSON, then wrong
    tool, then wrong args); `unsafe` is counted on its own since an unsafe call can be otherwise right."""

    n: int = 0
    invalid_json: int = 0
    wrong_tool: int = 0
    wrong_args: int = 0
    unsafe: int = 0
    errors: int = 0

    def share(self, name: str) -> float | None:
        return None if self.n == 0 else getattr(self, name) / self.n


def failure_shares(rows: Sequence[dict[str, Any]]) -> FailureShares:
    """Derive failures from reward_parts: valid_json < 0 invalid JSON, tool == 0 wrong tool,
    args below the max wrong args, unsafe < 0 unsafe. Rows without parts count as errors."""
    out = FailureShares()
    parts_rows = []
    for r in rows:
        parts = r.get("reward_parts")
        if r.get("error") or not isinstance(parts, dict):
            out.errors += 1
            continue
        parts_rows.append(parts)
    args_max = max([ARGS_MAX, *(float(p.get("args") or 0.0) for p in parts_rows)])
    for parts in parts_rows:
        out.n += 1
        if float(parts.get("unsafe") or 0.0) < -EPS:
            out.unsafe += 1
        if float(parts.get("valid_json") or 0.0) < -EPS:
            out.invalid_json += 1
        elif abs(float(parts.get("tool") or 0.0)) <= EPS:
            out.wrong_tool += 1
        elif float(parts.get("args") or 0.0) < args_max - EPS:
            out.wrong_args += 1
    return out


def part_series(steps: Sequence[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """{part name: [(step, mean)]} from step metrics' "parts/<name>" keys, in step order."""
    series: dict[str, list[tuple[int, float]]] = {}
    for s in steps:
        for key, value in (s.get("metrics") or {}).items():
            if key.startswith("parts/") and isinstance(value, (int, float)):
                series.setdefault(key[6:], []).append((s["step"], float(value)))
    known = [p for p in PART_NAMES if p in series]
    return {name: series[name] for name in known + sorted(set(series) - set(known))}


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
            if (chunk := vals[int(i * size): max(int(i * size) + 1, int((i + 1) * size))])
        ]
    lo, hi = min(vals), max(vals)
    if hi - lo < EPS:
        return SPARK[3] * len(vals)
    return "".join(SPARK[min(7, int((v - lo) / (hi - lo) * 7 + 0.5))] for v in vals)


def _bin_style(i: int, bins: int, lo: float, hi: float) -> str:
    return reward_style(lo + i * (hi - lo) / max(1, bins - 1))


def render_histogram(counts: Sequence[int], height: int, col: int = 3, lo: float = -1.0, hi: float = 1.0) -> Text:
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
    rows: Sequence[dict[str, Any]],
    steps: Sequence[dict[str, Any]],
    *,
    step: int | None,
    width: int,
    height: int = 0,
    task_note: str = "",
) -> Text:
    """The whole pane as one Text: header, histogram, failure shares, part sparklines.

    Wide panes put the histogram beside the rest; narrow ones stack them (the pane scrolls)."""
    out = Text()
    rewards = [r["reward"] for r in rows if r.get("reward") is not None]
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
    for i, (label, name, style) in enumerate((
        ("bad JSON", "invalid_json", "red"), ("wrong tool", "wrong_tool", "yellow"),
        ("wrong args", "wrong_args", "yellow"), ("unsafe", "unsafe", "bold red"),
    )):
        share = shares.share(name)
        fail.append(f"{label} ", style="dim")
        fail.append("–" if share is None else f"{100 * share:.0f}%", style=style if share else "")
        fail.append("\n" if i == 1 and not wide else "  ")  # narrow: two to a line, always two lines
    if shares.errors:
        fail.append(f"errors {shares.errors}", style="bold red")
    fail.rstrip()
    series = part_series(steps)
    spark_w = max(4, min(40, width - 26))
    parts = Text()
    for name, points in series.items():
        values = [v for _, v in points]
        parts.append(f"{name[:10]:<10} ", style="dim")
        parts.append(sparkline(values[-spark_w * 4:], spark_w), style="cyan")
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

"""Which training curves exist and downsampling to the plot's width (the points: workbench.view)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.view import Trajectory


@dataclass(frozen=True)
class Curve:
    key: str
    title: str
    metrics: tuple[str, ...] = ()  # step-metric keys drawn as lines; empty for the eval curve
    note: str = ""


CURVES: tuple[Curve, ...] = (
    Curve("reward", "reward (train mean)", ("reward",)),
    Curve("sft_loss", "SFT loss (warm-up)", note="x: SFT step; shown first while the warm-up runs"),
    Curve("held_out", "held-out success", note="yellow line: the baseline · grey: 95% CI"),
    Curve(
        "loss",
        "loss",
        ("loss",),
        note="≈0 is normal with num_iterations=1: the ratio is 1, the gradient is not 0",
    ),
    Curve("kl", "KL", ("kl",)),
    Curve("clip", "clip ratio", ("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean")),
    Curve("entropy", "entropy", ("entropy",)),
    Curve("length", "completion length", ("completions/mean_length",)),
)


def downsample(xs: Sequence[float], ys: Sequence[float], max_points: int) -> tuple[list[float], list[float]]:
    """Bucket means, so a 100k-step run draws as fast as a 100-step one and keeps its shape."""
    n = len(xs)
    if max_points <= 0 or n <= max_points:
        return list(xs), list(ys)
    size = n / max_points
    out_x, out_y = [], []
    for i in range(max_points):
        a, b = int(i * size), max(int(i * size) + 1, int((i + 1) * size))
        out_x.append(sum(xs[a:b]) / (b - a))
        out_y.append(sum(ys[a:b]) / (b - a))
    return out_x, out_y


def step_ticks(xs: Sequence[float], width: int, *, label_cells: int = 6) -> list[int]:
    """Whole-step tick positions for a plot `width` cells wide: 1, 2, 5, 10, 20, 50... steps apart, so the
    axis reads 0 2 4 6 and never 1.0 2.8 4.5 (plotext's own ticks split the range evenly)."""
    if not xs:
        return []
    lo, hi = math.ceil(min(xs)), math.floor(max(xs))
    if hi < lo:
        return [round(min(xs))]
    most = max(2, width // label_cells)
    gap = next(g for g in (m * 10**e for e in range(12) for m in (1, 2, 5)) if (hi - lo) / g <= most - 1)
    return list(range(math.ceil(lo / gap) * gap, hi + 1, gap))


class StepSeries:
    """Per-step mean reward of one task, kept up to date from the live feed (for a task filter)."""

    def __init__(self) -> None:
        self.sums: dict[int, tuple[float, int]] = {}

    def add(self, rows: Sequence[Trajectory]) -> None:
        for r in rows:
            if r.reward is None or r.split != "train":
                continue
            s, n = self.sums.get(r.step, (0.0, 0))
            self.sums[r.step] = (s + r.reward, n + 1)

    def points(self) -> tuple[list[float], list[float]]:
        steps = sorted(self.sums)
        return [float(s) for s in steps], [self.sums[s][0] / self.sums[s][1] for s in steps]

"""Which training curves exist, where their points come from, and downsampling to the plot's width."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Curve:
    key: str
    title: str
    metrics: tuple[str, ...] = ()  # step-metric keys drawn as lines; empty for the eval curve
    note: str = ""


CURVES: tuple[Curve, ...] = (
    Curve("reward", "reward (train mean)", ("reward",)),
    Curve("held_out", "held-out success", note="yellow line: the baseline · grey: 95% CI"),
    Curve("loss", "loss", ("loss",), note="≈0 is normal with num_iterations=1: the ratio is 1, the gradient is not 0"),
    Curve("kl", "KL", ("kl",)),
    Curve("clip", "clip ratio", ("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean")),
    Curve("entropy", "entropy", ("entropy",)),
    Curve("length", "completion length", ("completions/mean_length",)),
)


def metric_points(steps: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for s in steps:
        v = (s.get("metrics") or {}).get(key)
        if isinstance(v, (int, float)) and v == v:  # skip NaN
            xs.append(float(s["step"]))
            ys.append(float(v))
    return xs, ys


def eval_points(evals: Sequence[dict[str, Any]], key: str = "success_rate") -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for e in evals:
        v = (e.get("metrics") or {}).get(key)
        if not e.get("is_baseline") and isinstance(v, (int, float)):
            xs.append(float(e["step"]))
            ys.append(float(v))
    return xs, ys


def baseline_value(evals: Sequence[dict[str, Any]], key: str = "success_rate") -> float | None:
    for e in evals:
        v = (e.get("metrics") or {}).get(key)
        if e.get("is_baseline") and isinstance(v, (int, float)):
            return float(v)
    return None


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


class StepSeries:
    """Per-step mean reward of one task, kept up to date from the live feed (for a task filter)."""

    def __init__(self) -> None:
        self.sums: dict[int, tuple[float, int]] = {}

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        for r in rows:
            if r.get("reward") is None or r.get("split") not in (None, "train"):
                continue
            s, n = self.sums.get(r["step"], (0.0, 0))
            self.sums[r["step"]] = (s + float(r["reward"]), n + 1)

    def points(self) -> tuple[list[float], list[float]]:
        steps = sorted(self.sums)
        return [float(s) for s in steps], [self.sums[s][0] / self.sums[s][1] for s in steps]

"""Step metrics to tools a user already watches: TensorBoard event files (`log_to: tensorboard`, off by default).

The store stays the record; this is a copy for TensorBoard users, written by the trainer after each step's
metrics row (one scalar per numeric metric, tagged by its name, e.g. `reward`, `parts/valid_json`) into
`<run dir>/tensorboard`. Point TensorBoard at it: `tensorboard --logdir runs/`.

Needs the `tensorboard` package (torch's SummaryWriter writes the files); `check_log_to` fails at config check
time when it is missing, so a run never starts and then dies at its first step.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

from workbench.errors import UnavailableError

_writers: dict[Path, Any] = {}


class MetricLogUnavailable(UnavailableError, RuntimeError):
    pass


def check_log_to(cfg: Any) -> None:
    """Raise MetricLogUnavailable when `cfg.log_to` names a logger whose package is not installed."""
    if getattr(cfg, "log_to", "none") == "tensorboard":
        _require_tensorboard()


def _require_tensorboard() -> None:
    if importlib.util.find_spec("tensorboard") is None:
        raise MetricLogUnavailable(
            "log_to: tensorboard needs the tensorboard package: pip install tensorboard"
        )


def tensorboard_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "tensorboard"


def _writer(run_dir: Path) -> Any:
    path = tensorboard_dir(run_dir)
    if path not in _writers:
        _require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        _writers[path] = SummaryWriter(log_dir=str(path))
    return _writers[path]


def log_step(cfg: Any, run_dir: Path, step: int, metrics: dict[str, Any]) -> None:
    """Write the step's numeric, finite metrics as scalars at `step` (nothing when `log_to` is none)."""
    if getattr(cfg, "log_to", "none") != "tensorboard":
        return
    writer = _writer(run_dir)
    for name, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            writer.add_scalar(name, float(value), global_step=step)
    writer.flush()


def close(run_dir: Path) -> None:
    """Close the run's writer (tests, and a driver that ends a run inside a longer-lived process)."""
    writer = _writers.pop(tensorboard_dir(run_dir), None)
    if writer is not None:
        writer.close()

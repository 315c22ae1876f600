"""`log_to: tensorboard`: step metrics written as TensorBoard event files, read back with TensorBoard's reader."""

from __future__ import annotations

import pytest

from workbench import metric_log
from workbench.config import config_from_dict

pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install tensorboard)")


def scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_step_metrics_are_written_as_scalars(tmp_path):
    cfg = config_from_dict({"log_to": "tensorboard"})
    metric_log.log_step(
        cfg,
        tmp_path,
        1,
        {
            "reward": 0.25,
            "parts/args": -0.5,
            "verifier_id": 3,
            "note": "text",
            "loss": float("nan"),
            "update_skipped": True,
        },
    )
    metric_log.log_step(cfg, tmp_path, 2, {"reward": 0.75, "parts/args": 0.5})
    metric_log.close(tmp_path)
    got = scalars(metric_log.tensorboard_dir(tmp_path))
    assert got == {
        "reward": [(1, 0.25), (2, 0.75)],
        "parts/args": [(1, -0.5), (2, 0.5)],
        "verifier_id": [(1, 3.0)],
    }


def test_off_by_default_writes_nothing(tmp_path):
    metric_log.log_step(config_from_dict({}), tmp_path, 1, {"reward": 1.0})
    assert not metric_log.tensorboard_dir(tmp_path).exists()


def test_a_missing_package_is_a_clear_error_at_check_time(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a)
    )
    with pytest.raises(metric_log.MetricLogUnavailable, match="pip install tensorboard"):
        metric_log.check_log_to(config_from_dict({"log_to": "tensorboard"}))
    metric_log.check_log_to(config_from_dict({}))  # off: nothing to check

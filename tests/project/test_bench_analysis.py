"""The analysis parts of two hand-run benchmarks: recipe_seeds' pooled GRPO − SFT and time_probe's sets."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import recipe_seeds  # noqa: E402
import time_probe  # noqa: E402

from workbench.domains.calendar import single_turn_tasks as st  # noqa: E402
from workbench.skills import task_skills  # noqa: E402


def _rows(sft: dict[str, float], last: dict[str, float]) -> list[dict]:
    clusters = {t: f"tpl{int(t[1:]) % 2}" for t in sft}
    return [
        {"split": "test", "kind": "sft", "solved": sft, "clusters": clusters, "promoted": True},
        {"split": "test", "kind": "final", "solved": last, "clusters": clusters, "promoted": False},
    ]


def test_pooled_averages_each_task_over_the_seeds_before_pairing():
    # seed a: GRPO gains t1; seed b: GRPO gains t1 and loses t2 -> per task (GRPO - SFT): t1 +1, t2 -1/2, t3 0
    a = _rows({"t1": 0, "t2": 1, "t3": 1}, {"t1": 1, "t2": 1, "t3": 1})
    b = _rows({"t1": 0, "t2": 1, "t3": 0}, {"t1": 1, "t2": 0, "t3": 0})
    out = recipe_seeds.pooled([a, b], "test")
    assert out["seeds"] == 2 and out["n_tasks"] == 3
    assert out["delta"] == pytest.approx((1 - 0.5 + 0) / 3)
    assert out["ci"][0] <= out["delta"] <= out["ci"][1] and out["cluster_ci"] is not None
    assert recipe_seeds.pooled([a, b], "validation") is None  # no rows of that split


def test_time_probe_sets_use_train_phrasings_and_split_the_minutes():
    sets = time_probe.probe_sets(n=20)
    assert sets == time_probe.probe_sets(n=20)  # deterministic
    train_minutes, test_minutes = set(st.MINUTES["train"]), set(st.MINUTES["test"])
    for name, tasks in sets.items():
        minutes = {int(t.expected_args["time"][-2:]) for t in tasks}
        assert minutes <= (test_minutes if "unseen" in name else train_minutes), name
        assert all(t.expected_tool == "calendar.create_event" for t in tasks)
        kind = "time_12h" if name.startswith("12h") else "time_24h"
        assert all(kind in task_skills(t) for t in tasks), name


def test_pooled_is_none_when_a_seed_lacks_per_task_results():
    a = _rows({"t1": 0, "t2": 1}, {"t1": 1, "t2": 1})
    b = _rows({"t1": 0, "t2": 1}, {"t1": 1, "t2": 1})
    del b[1]["solved"]  # an eval stored before per-task results were kept
    assert recipe_seeds.pooled([a, b], "test") is None
    assert recipe_seeds.pooled([a], "test")["later"] == "last"

"""Runs with multi-turn episodes fix glibc's mmap threshold: a multi-turn rollout round otherwise grew past 18 GB
(session 18); single-call runs keep glibc's own (the fixed one made the demo's SFT step 1.84x as long)."""

import argparse
import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

import pytest

import store
from workbench import native_heap

ROOT = Path(__file__).resolve().parents[2]


def _glibc() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return hasattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "gnu_get_libc_version")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="mallopt is glibc's")
def test_bound_heap_sets_the_thresholds_and_is_idempotent():
    assert native_heap.bound_heap() and native_heap.bound_heap()


def _train_args(tmp_path, config: str, **kw) -> argparse.Namespace:
    base = {
        "config": config,
        "resume": None,
        "db": str(tmp_path / "wb.db"),
        "check": False,
        "max_steps": None,
    }
    return argparse.Namespace(**{**base, "nproc": None, **kw})


def test_a_headless_multi_turn_train_bounds_the_heap_before_anything_else(monkeypatch, tmp_path):
    from workbench.cli.train import cmd_train

    class First(Exception):
        pass

    def bound() -> bool:
        raise First

    monkeypatch.setattr(native_heap, "bound_heap", bound)
    with pytest.raises(First):
        cmd_train(_train_args(tmp_path, str(ROOT / "workbench/data/agent.yaml")))  # env: multi_turn
    assert not (tmp_path / "wb.db").exists()  # before the run was made


def test_a_single_call_train_keeps_glibcs_heap(monkeypatch, tmp_path):
    """The fixed threshold made the demo's SFT step 1.84x as long (bench/heap_bound.py): single calls skip it."""
    from workbench.cli.train import cmd_train

    calls: list[bool] = []
    monkeypatch.setattr(native_heap, "bound_heap", lambda: calls.append(True) or True)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert cmd_train(_train_args(tmp_path, str(ROOT / "workbench/data/demo.yaml"), check=True)) == 0
    assert calls == [] and "MALLOC_MMAP_THRESHOLD_" not in os.environ


@pytest.mark.parametrize(("env_kind", "bound"), [("multi_turn", True), ("mcp", True), ("single_turn", False)])
def test_a_worker_gets_the_thresholds_for_multi_turn_runs_and_a_users_own_values_win(
    monkeypatch, tmp_path, env_kind, bound
):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "999")
    env = native_heap.child_env()
    assert env["MALLOC_MMAP_THRESHOLD_"] == "131072" and env["MALLOC_TRIM_THRESHOLD_"] == "999"
    import workbench.launch as launch

    db = store.open_db(tmp_path / "wb.db")
    run_id = store.runs.create_run(db, name="r", model="m", config={"env": env_kind})
    db.conn.close()
    seen = {}
    monkeypatch.setattr(launch.subprocess, "Popen", lambda *a, **kw: seen.update(kw))
    launch.start_worker(tmp_path / "wb.db", run_id, log_path="/dev/null")
    assert ("MALLOC_MMAP_THRESHOLD_" in seen["env"]) is bound
    assert seen["env"]["MALLOC_TRIM_THRESHOLD_"] == "999"  # the user's, bound or not


def test_an_unreadable_run_starts_its_worker_without_the_thresholds(tmp_path):
    from workbench.launch import run_env_kind

    assert run_env_kind(tmp_path / "none.db", 1) is None  # the worker itself reports the missing store

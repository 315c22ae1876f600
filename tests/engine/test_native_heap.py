"""The trainer fixes glibc's mmap threshold: a multi-turn rollout round otherwise grew past 18 GB (session 18)."""

import ctypes
import ctypes.util
import sys

import pytest

from workbench import native_heap


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


def test_a_headless_train_bounds_the_heap_before_anything_else(monkeypatch):
    from workbench.cli.train import cmd_train

    class First(Exception):
        pass

    def bound() -> bool:
        raise First

    monkeypatch.setattr(native_heap, "bound_heap", bound)
    with pytest.raises(First):
        cmd_train(None)  # type: ignore[arg-type]  # nothing of the arguments is read before it


def test_a_worker_starts_with_the_thresholds_and_a_users_own_values_win(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "999")
    env = native_heap.child_env()
    assert env["MALLOC_MMAP_THRESHOLD_"] == "131072" and env["MALLOC_TRIM_THRESHOLD_"] == "999"
    import workbench.launch as launch

    seen = {}
    monkeypatch.setattr(launch.subprocess, "Popen", lambda *a, **kw: seen.update(kw))
    launch.start_worker("/tmp/none.db", 1, log_path="/dev/null")
    assert seen["env"]["MALLOC_MMAP_THRESHOLD_"] == "131072"

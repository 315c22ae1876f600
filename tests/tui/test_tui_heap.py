"""The app freezes its long-lived objects after a run's first load and unfreezes them before it drops a run's
screens for another's (screens/heap.py): full collections skip the ~130k objects that live as long as the app."""

from __future__ import annotations

import gc
import weakref

from screens import heap
from screens.app import WorkbenchApp
from screens.dashboard import DashboardScreen
from tests.conftest import open_dashboard
from tests.fake_run import make_fake_run, wait_until


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_frozen_garbage_waits_for_release() -> None:
    try:
        node = Node()
        ref = weakref.ref(node)
        assert heap.settle() > 0 and heap.settled()
        del node
        gc.collect()
        assert ref() is not None  # frozen: full collections skip it
        heap.release()
        assert gc.get_freeze_count() == 0 and not heap.settled()
        gc.collect()
        assert ref() is None
    finally:
        heap.release()


async def test_the_app_settles_after_a_load_and_releases_before_a_switch(tmp_path, monkeypatch):
    path = tmp_path / "two.db"
    first = make_fake_run(path, name="first", n_steps=2)
    second = make_fake_run(path, name="second", n_steps=2, seed=3)
    calls: list[str] = []
    settle, release = heap.settle, heap.release
    monkeypatch.setattr(heap, "settle", lambda: (calls.append("settle"), settle())[1])
    monkeypatch.setattr(heap, "release", lambda: (calls.append("release"), release())[1])
    app = WorkbenchApp(path, first.run_id, poll_s=0.1)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            old = await open_dashboard(pilot)
            await wait_until(pilot, lambda: gc.get_freeze_count() > 0, what="the heap frozen")
            assert gc.get_freeze_count() > 10_000  # the imports and the dashboard, not a handful
            assert calls == ["release", "settle"]  # nothing to release before the first run
            app.open_run(second.run_id)
            await wait_until(
                pilot,
                lambda: (
                    isinstance(app.screen, DashboardScreen) and app.screen is not old and app.screen.loaded
                ),
                what="the second run's dashboard",
            )
            await wait_until(pilot, lambda: calls.count("settle") == 2, timeout=20, what="settled again")
            assert calls == ["release", "settle", "release", "settle"]
            assert gc.get_freeze_count() > 10_000
    finally:
        release()
